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

from ingest.formats._common import LogBuilder, iter_whole_lines
from ingest.formats.base import Reader
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
        # (metric, unit, epoch, batch, value, seq): steps are placed once an epoch's batch count is known
        rows: list[tuple[str, str | None, int, int, float, int]] = []
        checkpoints: list[tuple[int, int]] = []
        at: tuple[int, int] | None = None  # (epoch, batch) of the last training line
        for path in paths:
            builder.source(path)
            line_no = 1
            for chunk in iter_whole_lines(path, builder):
                lines = chunk.decode("utf-8", "replace").split("\n")[:-1]
                builder.mark_lines(line_no)
                base = builder.reserve(len(lines))
                for i, line in enumerate(lines):
                    n, reason = len(rows), None
                    found: list[tuple[str, str | None, str]] = []
                    if m := _TRAIN.search(line):
                        at = (int(m["epoch"]), int(m["batch"]))
                        for group in _GROUP.finditer(line, m.end()):
                            lead = "" if group["name"] == "loss" else "tot_"
                            found += [(lead + p["key"], None, p["val"]) for p in _EQ.finditer(group["body"])]
                        found += [(p["key"], None, p["val"]) for p in _COLON.finditer(line, m.end())]
                    elif at is not None and (m := _VALID.search(line)):
                        found = [("val_" + p["key"], None, p["val"]) for p in _EQ.finditer(line, m.end())]
                    elif at is not None and (mem := _MEMORY.search(line)):
                        found = [("gpu_mem_max_gb", "MB", mem["mb"])]
                    elif at is not None and _SAVE.search(line):
                        checkpoints.append(at)
                        reason = "checkpoint line"
                    for key, unit, text in found:
                        value = parse_number(text)
                        if value is not None and at is not None and _BARE.sub("", key) not in _BATCH_SIZE:
                            rows.append((key, unit, at[0], at[1], value, base + i))
                    parsed = len(rows) > n
                    if not parsed and reason is None and line.strip():
                        builder.skip(path, line_no, f"not an icefall training line: {line.strip()[-80:]}")
                    builder.account.text_line(str(path), line_no, line, parsed=parsed, reason=reason)
                    line_no += 1
        batches = np.unique([r[3] for r in rows]) if rows else np.zeros(0, np.int64)
        gap = int(np.min(np.diff(batches))) if batches.size > 1 else 1
        per_epoch = int(batches.max()) + gap if batches.size else 0
        for epoch, batch in checkpoints:
            builder.event((epoch - 1) * per_epoch + batch, "checkpoint", "checkpoint saved")
        cols: dict[tuple[str, str | None], tuple[list[int], list[float], list[int]]] = {}
        for metric, unit, epoch, batch, value, seq in rows:
            col = cols.setdefault((metric, unit), ([], [], []))
            col[0].append((epoch - 1) * per_epoch + batch)
            col[1].append(value)
            col[2].append(seq)
        for (metric, unit), (steps, values, seqs) in cols.items():
            builder.add(
                metric,
                np.asarray(steps, np.int64),
                np.asarray(values),
                seq=np.asarray(seqs, np.int64),
                unit=unit,
                canonical=True,
            )
