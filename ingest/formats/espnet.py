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

import numpy as np

from ingest.formats._common import LogBuilder, iter_whole_lines
from ingest.formats.aliases import canonical_name
from ingest.formats.base import Reader
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
        # (metric, epoch, batch or -1 for the epoch's end, value, seq): steps are placed once the
        # batch count of an epoch is known (the largest batch number printed)
        rows: list[tuple[str, int, int, float, int]] = []
        for path in paths:
            builder.source(path)
            line_no = 1
            for chunk in iter_whole_lines(path, builder):
                lines = chunk.decode("utf-8", "replace").split("\n")[:-1]
                builder.mark_lines(line_no)
                base = builder.reserve(len(lines))
                for i, line in enumerate(lines):
                    n = len(rows)
                    if m := _TRAIN.search(line):
                        epoch, batch = int(m["epoch"]), int(m["b"])
                        for pair in _PAIR.finditer(line, m.end()):
                            value = parse_number(pair["val"])
                            if value is not None:
                                metric = _KEYS.get(pair["key"]) or canonical_name(pair["key"])[0]
                                rows.append((metric, epoch, batch, value, base + i))
                    elif m := _RESULTS.search(line):
                        valid = re.search(r"\[valid\]", line[m.end() :])
                        if valid:
                            start = m.end() + valid.end()
                            end = _SECTION.search(line, start)
                            for pair in _PAIR.finditer(line[: end.start() if end else len(line)], start):
                                value = parse_number(pair["val"])
                                if value is not None and pair["key"] not in _NOT_VALIDATION:
                                    rows.append(("val_" + pair["key"], int(m["epoch"]), -1, value, base + i))
                    parsed = len(rows) > n
                    if not parsed and line.strip():
                        builder.skip(path, line_no, f"not an ESPnet trainer line: {line.strip()[-80:]}")
                    builder.account.text_line(str(path), line_no, line, parsed=parsed)
                    line_no += 1
        per_epoch = max((r[2] for r in rows), default=0)
        cols: dict[str, tuple[list[int], list[float], list[int]]] = {}
        for metric, epoch, batch, value, seq in rows:
            col = cols.setdefault(metric, ([], [], []))
            col[0].append((epoch - 1) * per_epoch + (per_epoch if batch < 0 else batch))
            col[1].append(value)
            col[2].append(seq)
        for metric, (steps, values, seqs) in cols.items():
            builder.add(
                metric, np.asarray(steps, np.int64), np.asarray(values), seq=np.asarray(seqs, np.int64), canonical=True
            )
