"""The console of timm's ``train.py`` (``train_one_epoch`` and ``validate``)::

    Train: 2 [ 450/1251 ( 36%)]  Loss: 5.812 (5.90)  Time: 0.312s,  820.51/s  (0.331s,  773.41/s)
        LR: 1.000e-03  Data: 0.012 (0.015)
    Test: [  97/97]  Time: 0.112 (0.150)  Loss:  4.1000 (4.2000)  Acc@1: 19.0000 (18.0000)  Acc@5: ...

A ``Train`` line prints the epoch (from 0) and the batch within it out of the epoch's ``N`` batches, so
the step is ``epoch * N + batch``. Each figure is followed by its running mean over the epoch in
parentheses: the first number is this step's (the loss, the step's seconds, the data wait), the mean is
left out (it is not a step's value). The samples per second after ``Time`` are left out (another unit).
``Test`` lines report evaluation after the epoch: the running means of its last line are the
evaluation's results (``val_loss``, ``val_acc@1``...; ``val_ema_...`` for ``Test (EMA)``, the weights'
moving average), at the step of the training line before it. A key may be several words (``Loss dino``).
``Current checkpoints:`` marks a checkpoint saved at that step.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import Final

from ingest.formats import swin_lines as swin
from ingest.formats._common import LogBuilder
from ingest.formats.aliases import canonical_name
from ingest.formats.base import Reader
from ingest.formats.line_console import LineResult, Record, Row, read_console
from ingest.formats.numbers import NUMBER, parse_number
from ingest.formats.raw_text import decode_head, looks_binary, read_head

_TRAIN: Final = re.compile(
    r"(?:^|[ \t])Train:[ \t]*(?P<epoch>[0-9]+)[ \t]*\[[ \t]*(?P<batch>[0-9]+)/[ \t]*(?P<n>[0-9]+)[^\]]*\]"
)
_TEST: Final = re.compile(r"(?:^|[ \t])Test(?P<ema>[ \t]*\(EMA\))?:[ \t]*\[[ \t]*[0-9]+/[ \t]*[0-9]+\]")
_PAIR: Final = re.compile(
    r"(?<![^ \t\]])(?P<key>[A-Za-z][A-Za-z0-9@_]*(?: [A-Za-z0-9@_]+)*):[ \t]*(?P<val>"
    + NUMBER
    + r")s?,?(?:[ \t]+"
    + NUMBER
    + r"/s)?"
    r"(?:[ \t]+\((?P<mean>" + NUMBER + r")s?,?[^)]*\))?"
)
_KEYS: Final = {"Loss": "loss", "Time": "step_time_s", "Data": "data_time_s", "LR": "lr"}


class TimmConsoleReader(Reader):
    name = "timm_console"
    description = "timm train.py console: 'Train: 0 [  50/1251 (  4%)]  Loss: x (x)  Time: x  LR: x'"

    def sniff(self, head: bytes, path: Path) -> float:
        if path.is_dir() or not head or looks_binary(head):
            return 0.0
        n = sum(
            1
            for line in decode_head(head).splitlines()
            if ((m := _TRAIN.search(line)) and "Loss:" in line[m.end() :])
            or ((m := swin.TRAIN.search(line)) and "loss " in line[m.end() :])
        )
        return 0.0 if n == 0 else 0.95 if n >= 2 else 0.8

    def fill(self, paths: Sequence[Path], builder: LogBuilder) -> None:
        head = decode_head(read_head(paths[0], 2 * 1024 * 1024))
        if any(swin.TRAIN.search(line) for line in head.splitlines()):
            _fill_swin(paths, builder)
            return
        last: list[int] = []
        pending: list[Row] = []  # the last Test line's means, given when the evaluation ends

        def line(text: str) -> LineResult:
            rows: list[Row] = []
            if (t := _TEST.search(text)) and last:
                # a ``Test (EMA)`` block follows the plain one: each replaces only its own kind's means
                prefix = "val_ema_" if t["ema"] else "val_"
                pending[:] = [row for row in pending if row[0].startswith("val_ema_") != bool(t["ema"])]
                for pair in _PAIR.finditer(text, t.end()):
                    value = parse_number(pair["mean"] or pair["val"])
                    if pair["key"] != "Time" and value is not None:
                        name = prefix + canonical_name(pair["key"])[0].lower()
                        pending.append((name, None, last[0], value))
                return [], "evaluation progress line (its means are read at its end)"
            rows, pending[:] = list(pending), []
            if m := _TRAIN.search(text):
                step = int(m["epoch"]) * int(m["n"]) + int(m["batch"])
                last[:] = [step]
                for pair in _PAIR.finditer(text, m.end()):
                    value = parse_number(pair["val"])
                    if value is not None:
                        metric = _KEYS.get(pair["key"]) or canonical_name(pair["key"])[0]
                        rows.append((metric, None, step, value))
                return rows, None
            if text.startswith("Current checkpoints:") and last:
                builder.event(last[0], "checkpoint", "checkpoint saved")
                return rows, "checkpoint line"
            return rows, None

        read_console(paths, builder, line, "a timm Train/Test line")


def _fill_swin(paths: Sequence[Path], builder: LogBuilder) -> None:
    """Read a Swin-Transformer console (:mod:`ingest.formats.swin_lines`): rows carry the index of their
    train line in ``points`` as a provisional step, placed once every line is read."""
    points: list[tuple[int, int, int]] = []  # (epoch, batch, batches per epoch) of each train line
    last: list[int] = []  # the provisional step of this launch's last train line

    def line(text: str) -> LineResult:
        if swin.BANNER.search(text):
            last.clear()  # an evaluation before this launch's first train line belongs to no step
            return [], "launch banner"
        if m := swin.RESUMED.search(text):
            points.append((int(m["epoch"]), -1, points[-1][2] if points else 1))  # the epoch's end
            last[:] = [len(points) - 1]
            return [], "checkpoint resumed"
        if m := swin.TRAIN.search(text):
            points.append((int(m["epoch"]), int(m["batch"]), int(m["n"])))
            last[:] = [len(points) - 1]
            return [(metric, unit, last[0], value) for metric, unit, value in swin.train_pairs(text, m.end())], None
        if swin.TEST.search(text):
            return [], "evaluation progress line (its results are the ' * ' line's)"
        if (s := swin.SUMMARY.search(text)) and last:
            rows: list[Row] = [(metric, None, last[0], value) for metric, value in swin.summary_pairs(text, s.end())]
            return rows, None if rows else "evaluation summary without a number"
        return [], None

    def place(records: list[Record]) -> list[Record]:
        per_epoch = all(batch <= 0 for _, batch, _ in points)
        steps = [epoch if per_epoch else epoch * n + (n - 1 if batch < 0 else batch) for epoch, batch, n in points]
        return [(metric, unit, steps[i], value, seq) for metric, unit, i, value, seq in records]

    read_console(
        paths,
        builder,
        line,
        "a Swin Train/Test line",
        finish=place,
        canonical=lambda metric, unit: unit is None,
        run_heading=lambda text: bool(swin.BANNER.search(text)),
    )
