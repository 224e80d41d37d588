"""The training console of icefall (k2's speech recipes, ``train.py``'s ``train_one_epoch``)::

    2026-12-06 05:01:11,555 INFO [train.py:1030] (0/4) Epoch 3, batch 450, loss[loss=0.2112, simple_loss=0.41,
        pruned_loss=0.061, over 5432.00 frames. ], tot_loss[loss=0.2231, ..., over 1098765.43 frames. ],
        batch size: 45, lr: 3.15e-03, grad_scale: 16.0
    2026-12-06 05:20:30,000 INFO [train.py:1070] (0/4) Epoch 3, validation: loss=0.2301, simple_loss=0.45, ...

``batch`` counts the batches of epoch ``E`` (from 1) from 0, so the step is ``(E - 1) * per_epoch + batch``
with ``per_epoch`` the largest batch number printed plus the logging interval (the gap between printed
batches): an epoch's batches are not printed to its end. ``loss[...]`` is this batch's loss and its parts
(per frame): ``loss`` is the step's loss; ``tot_loss[...]`` is a decaying running mean over recent batches
(kept as ``tot_loss``, ``tot_simple_loss``...; not the step's value). ``over N frames``, ``utt_*`` and
``batch size`` say how big the batch was (not metrics). ``lr`` is the learning rate, ``grad_scale`` the fp16
loss scale. A validation line gives ``val_<key>`` at the step of the training line before it;
``Maximum memory allocated so far is NMB`` the peak memory there; ``Saving checkpoint to`` a checkpoint event.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import Final

import numpy as np

from ingest.formats._common import LogBuilder
from ingest.formats.base import Reader
from ingest.formats.line_console import LineResult, Record, Row, read_console
from ingest.formats.numbers import NUMBER, parse_number
from ingest.formats.raw_text import decode_head, looks_binary

_TRAIN: Final = re.compile(r"(?:^|[ \t])Epoch[ \t]+(?P<epoch>[0-9]+),[ \t]*batch[ \t]+(?P<batch>[0-9]+),[ \t]*")
_VALID: Final = re.compile(r"(?:^|[ \t])Epoch[ \t]+[0-9]+,[ \t]*validation:[ \t]*")
_GROUP: Final = re.compile(r"(?P<name>tot_loss|loss)\[(?P<body>[^\]]*)\]")
_EQ: Final = re.compile(r"(?<![^ \t,\[])(?P<key>[A-Za-z_][A-Za-z0-9_]*)=(?P<val>" + NUMBER + r")(?=[, \t\]]|$)")
_COLON: Final = re.compile(r"(?<![^ \t,])(?P<key>lr|grad_scale):[ \t]*(?P<val>" + NUMBER + r")")
_MEMORY: Final = re.compile(r"Maximum memory allocated so far is (?P<mb>[0-9]+)MB")
_SAVE: Final = re.compile(r"Saving checkpoint to \S+")
_BARE: Final = re.compile(r"^(?:val_|tot_)")
_BATCH_SIZE: Final = frozenset({"utt_duration", "utt_pad_proportion"})


class IcefallReader(Reader):
    name = "icefall"
    description = "icefall (k2) console: 'Epoch 3, batch 450, loss[loss=x, ...], tot_loss[...], batch size: N, lr: x'"

    def sniff(self, head: bytes, path: Path) -> float:
        if path.is_dir() or not head or looks_binary(head):
            return 0.0
        n = sum(
            1 for line in decode_head(head).splitlines() if (m := _TRAIN.search(line)) and "loss[" in line[m.end() :]
        )
        return 0.0 if n == 0 else 0.95 if n >= 2 else 0.8

    def fill(self, paths: Sequence[Path], builder: LogBuilder) -> None:
        # a row's provisional step indexes ``at``: its (epoch, batch); steps are placed once an epoch's
        # batch count is known
        at: list[tuple[int, int]] = []  # (epoch, batch) of each training line
        checkpoints: list[tuple[int, int]] = []

        def line(text: str) -> LineResult:
            found: list[tuple[str, str | None, str]] = []
            if m := _TRAIN.search(text):
                at.append((int(m["epoch"]), int(m["batch"])))
                for group in _GROUP.finditer(text, m.end()):
                    lead = "" if group["name"] == "loss" else "tot_"
                    found += [(lead + p["key"], None, p["val"]) for p in _EQ.finditer(group["body"])]
                found += [(p["key"], None, p["val"]) for p in _COLON.finditer(text, m.end())]
            elif at and (m := _VALID.search(text)):
                found = [("val_" + p["key"], None, p["val"]) for p in _EQ.finditer(text, m.end())]
            elif at and (mem := _MEMORY.search(text)):
                found = [("gpu_mem_max_gb", "MB", mem["mb"])]
            elif at and _SAVE.search(text):
                checkpoints.append(at[-1])
                return [], "checkpoint line"
            rows: list[Row] = []
            for key, unit, number in found:
                value = parse_number(number)
                if value is not None and _BARE.sub("", key) not in _BATCH_SIZE:
                    rows.append((key, unit, len(at) - 1, value))
            return rows, None

        def place(records: list[Record]) -> list[Record]:
            batches = np.unique([at[r[2]][1] for r in records]) if records else np.zeros(0, np.int64)
            gap = int(np.min(np.diff(batches))) if batches.size > 1 else 1
            per_epoch = int(batches.max()) + gap if batches.size else 0
            for epoch, batch in checkpoints:
                builder.event((epoch - 1) * per_epoch + batch, "checkpoint", "checkpoint saved")
            return [(m, u, (at[s][0] - 1) * per_epoch + at[s][1], v, q) for m, u, s, v, q in records]

        read_console(paths, builder, line, "an icefall training line", whole=True, finish=place)
