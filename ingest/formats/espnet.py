"""ESPnet2's trainer console (``espnet2.train.trainer``, its ``Reporter``'s messages)::

    [gpu01] 2026-12-06 05:01:11,555 (trainer:762) INFO: 3epoch:train:401-500batch: iter_time=1.2e-04,
        forward_time=0.150, loss_ctc=98.1, loss_att=70.3, acc=0.61, loss=80.2, backward_time=0.130,
        grad_norm=41.3, clip=100.000, loss_scale=1.000, optim_step_time=0.050, optim0_lr0=1.0e-03, train_time=0.456
    [gpu01] 2026-12-06 05:30:00,000 (trainer:338) INFO: 3epoch results: [train] ... loss=..., [valid] loss=...

A training line reports the mean over the batches ``A-B`` of epoch ``E`` (from 1): its step is batch ``B``
of that epoch on one axis, ``(E - 1) * per_epoch + B``, where ``per_epoch`` is the largest batch number any
epoch printed (the batch count of an epoch; the runner counts epochs from 1). ``loss`` is the weighted sum
the optimizer stepped on (``loss_ctc``, ``loss_att`` are its parts, under their own names); ``optim0_lr0``
is the first optimizer's first parameter group's learning rate; ``train_time`` is seconds per iteration
(the step time), ``iter_time`` the wait for the batch (``data_time_s``); the other ``*_time`` are the
step's phases, in seconds. The epoch results line repeats the training means (left out) and gives the
validation means after ``[valid]``: ``loss`` becomes ``val_loss``, the rest ``val_<key>``, at the epoch's
last step (its duration, batch count and memory left out). Values that are not numbers
(``time=8 minutes and 5.1 seconds``) are skipped.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import Final

from ingest.formats._common import LogBuilder
from ingest.formats.aliases import canonical_name
from ingest.formats.base import Reader
from ingest.formats.line_console import LineResult, Record, Row, read_console
from ingest.formats.numbers import NUMBER, parse_number
from ingest.formats.raw_text import decode_head, looks_binary

_TRAIN: Final = re.compile(r"(?:^|[ \t])(?P<epoch>[0-9]+)epoch:train:(?P<a>[0-9]+)-(?P<b>[0-9]+)batch:[ \t]*")
_RESULTS: Final = re.compile(r"(?:^|[ \t])(?P<epoch>[0-9]+)epoch results:[ \t]*")
_PAIR: Final = re.compile(r"(?<![^ \t,\]])(?P<key>[A-Za-z_][A-Za-z0-9_/.\-]*)=(?P<val>" + NUMBER + r")(?=,|[ \t]*$)")
_SECTION: Final = re.compile(r"\[(?P<name>[A-Za-z_0-9]+)\]")
_NOT_VALIDATION: Final = frozenset({"time", "total_count", "gpu_max_cached_mem_GB"})
"""What the ``[valid]`` part says of the validation pass itself (its duration, batches, memory)."""
_KEYS: Final = {
    "optim0_lr0": "lr",
    "train_time": "step_time_s",
    "iter_time": "data_time_s",
    "forward_time": "forward_time_s",
    "backward_time": "backward_time_s",
    "optim_step_time": "optim_step_time_s",
}


class EspnetReader(Reader):
    name = "espnet"
    description = "ESPnet2 trainer console: '3epoch:train:401-500batch: loss=x, grad_norm=x, optim0_lr0=x'"

    def sniff(self, head: bytes, path: Path) -> float:
        if path.is_dir() or not head or looks_binary(head):
            return 0.0
        n = sum(1 for line in decode_head(head).splitlines() if (m := _TRAIN.search(line)) and "=" in line[m.end() :])
        return 0.0 if n == 0 else 0.95 if n >= 2 else 0.8

    def fill(self, paths: Sequence[Path], builder: LogBuilder) -> None:
        # a row's provisional step indexes ``at``: its (epoch, batch or -1 for the epoch's end); steps are
        # placed once the batch count of an epoch is known (the largest batch number printed)
        at: list[tuple[int, int]] = []

        def line(text: str) -> LineResult:
            rows: list[Row] = []
            if m := _TRAIN.search(text):
                at.append((int(m["epoch"]), int(m["b"])))
                for pair in _PAIR.finditer(text, m.end()):
                    value = parse_number(pair["val"])
                    if value is not None:
                        metric = _KEYS.get(pair["key"]) or canonical_name(pair["key"])[0]
                        rows.append((metric, None, len(at) - 1, value))
            elif m := _RESULTS.search(text):
                valid = re.search(r"\[valid\]", text[m.end() :])
                if valid:
                    at.append((int(m["epoch"]), -1))
                    start = m.end() + valid.end()
                    end = _SECTION.search(text, start)
                    for pair in _PAIR.finditer(text[: end.start() if end else len(text)], start):
                        value = parse_number(pair["val"])
                        if value is not None and pair["key"] not in _NOT_VALIDATION:
                            rows.append(("val_" + pair["key"], None, len(at) - 1, value))
            return rows, None

        def place(records: list[Record]) -> list[Record]:
            per_epoch = max((at[r[2]][1] for r in records), default=0)
            return [
                (m, u, (at[s][0] - 1) * per_epoch + (per_epoch if at[s][1] < 0 else at[s][1]), v, q)
                for m, u, s, v, q in records
            ]

        read_console(paths, builder, line, "an ESPnet trainer line", whole=True, finish=place)
