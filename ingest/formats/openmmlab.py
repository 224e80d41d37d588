"""The training console of OpenMMLab's runners: mmengine's ``LogProcessor`` (MMDetection 3, MMPretrain,
MMSegmentation 1, ...) and the older mmcv ``TextLoggerHook`` (MMDetection 2 and its siblings)::

    12/06 05:00:11 - mmengine - INFO - Epoch(train)  [1][ 50/800]  base_lr: 1.0000e-02 lr: 2.0e-03  eta: 1:21:11
        time: 0.4120  data_time: 0.0123  memory: 3512  grad_norm: 5.12  loss: 1.8  loss_cls: 1.1  loss_bbox: 0.7
    12/06 05:00:11 - mmengine - INFO - Iter(train) [  50/2000]  lr: 9.9e-03  eta: 0:32:11  time: 0.41  loss: 1.8
    2026-12-06 05:00:11,555 - mmdet - INFO - Epoch [1][50/800]\tlr: 2.000e-03, eta: 1:02:11, time: 0.412, ...
    2026-12-06 05:00:11,555 - mmseg - INFO - Iter [50/2000]\tlr: 9.9e-03, eta: 0:32:11, time: 0.412, loss: 1.8

The step is the iteration: ``Iter [I/N]`` prints it; ``Epoch [E][I/N]`` prints the iteration within the
epoch out of the epoch's ``N``, so the global step is ``(E - 1) * N + I`` (the runners count epochs from 1).
``loss`` is the summed loss the optimizer stepped on; ``loss_cls``, ``decode.loss_ce`` ... are its parts and
keep their names. ``time`` is the mean seconds per iteration over the logging window (a step time);
``data_time`` the part of it spent waiting for data; ``memory`` the peak CUDA memory allocated, in MB;
``eta`` a clock reading, not a metric. Evaluation lines (``Epoch(val)``, ``Iter(val)``, the old
``Epoch(val) [E][N]``) report at the step of the training line before them: their metrics keep their
names (a loss becomes ``val_loss``); their ``time``/``data_time``/``memory`` are evaluation's, not a
training step's, and are left out, as are the progress lines of evaluation that carry only those.
``Saving checkpoint at N epochs`` / ``at N iterations`` is a checkpoint event at the step it was written.
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

_HEAD: Final = re.compile(
    r"(?:^|[ \t])(?P<unit>Epoch|Iter)(?:\((?P<mode>train|val|test)\))?[ \t]*"
    r"(?:\[[ \t]*(?P<epoch>[0-9]+)\][ \t]*)?"  # an iteration-based runner prints no epoch
    r"\[[ \t]*(?P<i>[0-9]+)(?:/[ \t]*(?P<n>[0-9]+))?[ \t]*\][ \t,]*"
)
_PAIR: Final = re.compile(
    r"(?:^|(?<=[ \t,]))(?P<key>[A-Za-z_][A-Za-z0-9_./\-]*):[ \t]*(?P<val>" + NUMBER + r")(?=[ \t,]|$)(?![ \t]+[-+0-9.])"
)
_SAVE: Final = re.compile(r"Saving checkpoint at (?P<n>[0-9]+) (?P<unit>epochs?|iterations?)")
_KEYS: Final = {
    "time": ("step_time_s", None),
    "data_time": ("data_time_s", None),
    "memory": ("gpu_mem_max_gb", "MB"),
}
_EVAL_RUNTIME: Final = frozenset({"time", "data_time", "memory", "eta"})
"""What an evaluation line prints about the evaluation itself, not about the model."""


def _key(key: str, train: bool) -> tuple[str, str | None]:
    if train:
        return _KEYS.get(key) or canonical_name(key)
    return ("val_" + key, None) if key.startswith("loss") else (key, None)


def _is_train(m: re.Match[str], line: str) -> bool:
    """A training line: mmengine's ``Epoch(train)``/``Iter(train)``, mmcv's ``Epoch [E][I/N]``, or mmcv's
    ``Iter [I/N]`` followed by its tab or its ``lr``. A bare ``Epoch [1/10]`` is another trainer's
    epoch counter (the PyTorch tutorials' ``Epoch [1/10], Step [100/600]``), not this runner's line."""
    if m["n"] is None or m["mode"] not in (None, "train"):
        return False
    if m["mode"] == "train" or (m["unit"] == "Epoch" and m["epoch"] is not None):
        return True
    return m["unit"] == "Iter" and ("\t" in m.group(0) or line[m.end() :].startswith("lr:"))


class OpenMMLabReader(Reader):
    name = "openmmlab"
    description = "mmengine/mmcv runner console: 'Epoch(train) [1][ 50/800]  lr: x  time: x  loss: x'"

    def sniff(self, head: bytes, path: Path) -> float:
        if path.is_dir() or not head or looks_binary(head):
            return 0.0
        n = 0
        for line in decode_head(head).splitlines():
            m = _HEAD.search(line)
            if m and _is_train(m, line) and _PAIR.search(line, m.end()):
                n += 1
        return 0.0 if n == 0 else 0.95 if n >= 2 else 0.8

    def fill(self, paths: Sequence[Path], builder: LogBuilder) -> None:
        step: int | None = None  # the step of the last training line

        def line(text: str) -> LineResult:
            nonlocal step
            m = _HEAD.search(text)
            train = m is not None and _is_train(m, text)
            if m is not None and train:
                it = int(m["i"])
                if m["epoch"] is not None:
                    step = (int(m["epoch"]) - 1) * int(m["n"]) + it
                else:
                    step = it
                    builder.meta.setdefault("total_steps", int(m["n"]))
            if m is not None and step is not None:
                rows: list[Row] = []
                for pair in _PAIR.finditer(text, m.end()):
                    if not train and pair["key"] in _EVAL_RUNTIME:
                        continue
                    if (value := parse_number(pair["val"])) is not None:
                        rows.append((*_key(pair["key"], train), step, value))
                if not rows and not train:
                    return [], "evaluation progress line (its time is evaluation's)"
                return rows, None
            if (s := _SAVE.search(text)) and step is not None:
                at = int(s["n"]) if s["unit"].startswith("iter") else step
                builder.event(at, "checkpoint", f"checkpoint saved at {s['n']} {s['unit']}")
                return [], "checkpoint line"
            return [], None

        read_console(paths, builder, line, "a runner metric line")
