"""A trainer console that logs each interval as one line of ``key: value`` pairs joined by commas, behind a
logger prefix (PaddleNLP's Trainer, ANSI colours and all)::

    [2026-12-06 05:00:10,000] [    INFO] - loss: 1.2, learning_rate: 3e-05, global_step: 10, interval_runtime: 5.6,
        interval_samples_per_second: 11.4, interval_steps_per_second: 1.79, epoch: 0.0016
    [2026-12-06 05:01:05,000] [    INFO] - eval_loss: 0.81, eval_accuracy: 0.63, eval_runtime: 54.9, epoch: 0.0163

A training line names its step (``global_step``); an evaluation line (its keys ``eval_``/``val_``/``dev_``
prefixed) names none and belongs to the step of the training line before it, where the evaluation ran.
``interval_runtime`` (s) times the whole logging interval: the step time (``step_time_s``) is it over the
steps since the previous training line (the step itself for the first). An evaluation's own timings
(``eval_runtime``, its rates) and its ``epoch`` repeat what the training lines say and are not kept; the
run summary (``train_runtime: ..., train_loss: ...``, no step) and ``test_`` lines after training are no
step's record.

An argument dump before a run (``task_name          :cmnli``, ``model_name_or_path :ernie-base``) states
the run's task and model: runs of one file that train different tasks or models are no siblings, and
one's step time says nothing of another's (``run_settings``, :mod:`ingest.services.run_findings`).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import Final

from ingest.formats._common import LogBuilder
from ingest.formats.aliases import canonical_name
from ingest.formats.base import Reader
from ingest.formats.line_console import LineResult, Row, read_console
from ingest.formats.numbers import NUMBER, parse_number
from ingest.formats.raw_text import decode_head, looks_binary

_ANSI: Final = re.compile(r"\x1b\[[0-9;]*m")
_PAIR: Final = re.compile(r"(?<![^\s,])(?P<key>[A-Za-z_][A-Za-z0-9_]*):[ \t]*(?P<val>" + NUMBER + r")(?=[ \t]*(?:,|$))")
_STEP_KEY: Final = "global_step"
_EVAL: Final = re.compile(r"^(?:eval|val|dev)_")
_INTERVAL: Final = re.compile(r"^interval_(?:runtime|time)(?:_s)?$")
"""The seconds one logging interval took (all its steps)."""
_EVAL_TIMING: Final = re.compile(r"_(?:runtime|samples_per_second|steps_per_second)$")
MIN_PAIRS: Final = 3
_SETTING: Final = re.compile(
    r"(?:^|[ \t]-[ \t]+)(?P<key>task_name|dataset_name|dataset|model_name_or_path|model_name)"
    r"[ \t]*:[ \t]*(?P<val>\S+)[ \t]*$"
)
"""An argument dump's line naming the run's task or model."""
_SETTING_NAME: Final = {"task_name": "task", "dataset_name": "task", "dataset": "task"}


def _pairs(text: str) -> list[tuple[str, str]]:
    return [(m["key"], m["val"]) for m in _PAIR.finditer(_ANSI.sub("", text).rstrip())]


class KeyValueConsoleReader(Reader):
    name = "kv_console"
    description = (
        "key-value console (PaddleNLP Trainer): 'loss: x, learning_rate: x, global_step: N, interval_runtime: s'"
    )

    def sniff(self, head: bytes, path: Path) -> float:
        if path.is_dir() or not head or looks_binary(head):
            return 0.0
        n = 0
        for line in decode_head(head).splitlines():
            if _STEP_KEY + ":" in line:
                pairs = _pairs(line)
                n += len(pairs) >= MIN_PAIRS and any(k == _STEP_KEY for k, _ in pairs)
        return 0.0 if n == 0 else 0.95 if n >= 2 else 0.8

    def fill(self, paths: Sequence[Path], builder: LogBuilder) -> None:
        last: list[int] = []  # the step of the last training line
        seq = [builder.reserve(0)]  # the sequence number of the next line handed over (file order)

        def line(text: str) -> LineResult:
            seq[0] += 1
            if setting := _SETTING.search(_ANSI.sub("", text).rstrip()):
                name = _SETTING_NAME.get(setting["key"], "model name")
                builder.stated_settings.append((seq[0] - 1, name, setting["val"]))
                return [], "argument dump"
            pairs = _pairs(text)
            if len(pairs) < 2:
                return [], None
            values = {k: v for k, v in ((k, parse_number(v)) for k, v in pairs) if v is not None}
            rows: list[Row] = []
            if _STEP_KEY in values:
                raw_step = values.pop(_STEP_KEY)
                if not 0 <= raw_step < 2**62 or raw_step != int(raw_step):  # NaN and inf fail too: no step
                    return [], None
                step = int(raw_step)
                for key, value in values.items():
                    if _INTERVAL.match(key):
                        since = step - last[-1] if last and step > last[-1] else step
                        if since > 0:
                            rows.append(("step_time_s", None, step, value / since))
                    rows.append((canonical_name(key)[0], None, step, value))
                last.append(step)
                return rows, None
            if last and _EVAL.match(pairs[0][0]):
                for key, value in values.items():
                    if _EVAL.match(key) and not _EVAL_TIMING.search(key):
                        rows.append((canonical_name(key)[0], None, last[-1], value))
                return rows, None if rows else "evaluation timings"
            return [], "run summary"

        read_console(paths, builder, line, "a key-value training line", whole=True)
