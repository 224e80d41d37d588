"""The console of PyTorch's ``examples/word_language_model`` (``main.py``) and trainers that copied
its layout::

    | epoch   1 |   200/ 2983 batches | lr 20.00 | ms/batch 11.61 | loss  7.63 | ppl  2063.37
    | end of epoch   1 | time: 35.58s | valid loss  5.83 | valid ppl   341.22
    | End of training | test loss  5.77 | test ppl   320.87

The training line counts batches within an epoch; the step is the global batch index,
``(epoch - 1) * batches_per_epoch + batch`` (``| epoch   2 |   200/ 2983 batches |`` is step 3183), and
the validation line closing epoch ``E`` is at ``E * batches_per_epoch``, the last batch of that epoch.
The test line is at the last step read (the last epoch's end). ``ms/batch`` is the mean step time
over the logging interval (stored in seconds as ``step_time_s``); ``ppl`` is ``exp(loss)`` as
printed. ``nan`` values are kept (a run that is nan from its first line imports its nans). A file
holding several runs (the epoch counter going back to 1) holds segments, which the builder splits by
the steps going back.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import Final

import numpy as np

from ingest.formats._common import LogBuilder, iter_whole_lines
from ingest.formats.base import Reader
from ingest.formats.numbers import NUMBER, parse_number
from ingest.formats.raw_text import LAUNCHER_LEAD, decode_head, looks_binary

_TRAIN: Final = re.compile(
    r"^\|[ \t]*epoch[ \t]+(?P<epoch>[0-9]+)[ \t]*\|[ \t]*(?P<batch>[0-9]+)[ \t]*/[ \t]*(?P<per_epoch>[0-9]+)"
    r"[ \t]+batches[ \t]*\|(?P<rest>.*)$"
)
_VALID: Final = re.compile(r"^\|[ \t]*end of epoch[ \t]+(?P<epoch>[0-9]+)[ \t]*\|(?P<rest>.*)$")
_TEST: Final = re.compile(r"^\|[ \t]*End of training[ \t]*\|(?P<rest>.*)$")
_PAIR: Final = re.compile(r"(?P<key>[A-Za-z][A-Za-z/ ]*?):?[ \t]+(?P<val>" + NUMBER + r")(?P<unit>s)?[ \t]*(?:\||$)")

_TRAIN_KEYS: Final[dict[str, tuple[str, str | None]]] = {
    "lr": ("lr", None),
    "ms/batch": ("step_time_s", "ms"),
    "loss": ("loss", None),
    "ppl": ("ppl", None),
}
_VALID_KEYS: Final[dict[str, tuple[str, str | None]]] = {
    "valid loss": ("val_loss", None),
    "valid ppl": ("val_ppl", None),
}
_TEST_KEYS: Final[dict[str, tuple[str, str | None]]] = {
    "test loss": ("test_loss", None),
    "test ppl": ("test_ppl", None),
}

_STREAMS: Final = {"train": 0, "valid": 1, "test": 2}
"""Validation and test lines are apart from the training lines: their steps never rewind the run."""


def _pairs(rest: str, keys: dict[str, tuple[str, str | None]]) -> dict[str, tuple[float, str | None]]:
    out: dict[str, tuple[float, str | None]] = {}
    for m in _PAIR.finditer(rest):
        known = keys.get(m["key"].strip())
        value = parse_number(m["val"])
        if known is not None and value is not None:
            out[known[0]] = (value, known[1])
    return out


class WordLanguageModelReader(Reader):
    name = "word_language_model"
    description = "PyTorch word_language_model console: '| epoch E | B/ N batches | lr x | ms/batch x | loss x |'"

    def sniff(self, head: bytes, path: Path) -> float:
        if path.is_dir() or not head or looks_binary(head):
            return 0.0
        lines = decode_head(head).splitlines()
        train = sum(1 for line in lines if _TRAIN.match(_own(line)) and "loss" in line)
        return 0.0 if train == 0 else 0.95 if train >= 2 else 0.8

    def fill(self, paths: Sequence[Path], builder: LogBuilder) -> None:
        rows: dict[tuple[str, str | None, int], tuple[list[int], list[float], list[int]]] = {}
        for path in paths:
            builder.source(path)
            line_no, per_epoch, last_step = 1, 0, 0
            for chunk in iter_whole_lines(path, builder):
                lines = chunk.decode("utf-8", "replace").split("\n")[:-1]
                builder.mark_lines(line_no)  # seq -> line: the run's lines, and segments cut by seq
                base = builder.reserve(len(lines))
                for i, line in enumerate(lines):
                    own = _own(line).rstrip("\r")
                    found: dict[str, tuple[float, str | None]] = {}
                    kind = "train"
                    if m := _TRAIN.match(own):
                        per_epoch = int(m["per_epoch"])
                        last_step = (int(m["epoch"]) - 1) * per_epoch + int(m["batch"])
                        step, found = last_step, _pairs(m["rest"], _TRAIN_KEYS)
                    elif (m := _VALID.match(own)) and per_epoch:
                        step, found, kind = int(m["epoch"]) * per_epoch, _pairs(m["rest"], _VALID_KEYS), "valid"
                        last_step = max(last_step, step)
                    elif (m := _TEST.match(own)) and last_step:
                        step, found, kind = last_step, _pairs(m["rest"], _TEST_KEYS), "test"
                    for metric, (value, unit) in found.items():
                        col = rows.setdefault((metric, unit, _STREAMS[kind]), ([], [], []))
                        col[0].append(step)
                        col[1].append(value)
                        col[2].append(base + i)
                    if found or not line.strip():
                        builder.account.text_line(str(path), line_no, line, parsed=bool(found))
                    else:
                        builder.skip(path, line_no, f"not a word_language_model line: {line.strip()[-80:]}")
                        builder.account.text_line(str(path), line_no, line, parsed=False)
                    line_no += 1
        for (metric, unit, stream), (steps, values, seq) in rows.items():
            builder.add(
                metric,
                np.asarray(steps, np.int64),
                np.asarray(values),
                unit=unit,
                stream=stream,
                seq=np.asarray(seq, np.int64),
                canonical=True,
            )


def _own(line: str) -> str:
    """The line behind any launcher prefix (`host: `, `[rankN]:`)."""
    lead = LAUNCHER_LEAD.match(line.encode())
    return line.encode()[lead.end() :].decode("utf-8", "replace") if lead else line
