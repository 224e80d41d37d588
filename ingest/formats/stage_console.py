"""Stage consoles of the ``Stage | Epoch E | B/N | speed | Key value | ...`` shape (Demucs' and
AudioCraft's ``LogProgress`` logger, each line often behind a ``- `` bullet)::

    - Train | Epoch 2 | 143/573 | 1.47 it/sec | Loss 0.1825 | Reco 0.1803 | Grad 0.0848 | Penalty 214.215
    - Train Summary | Epoch 2 | Loss=0.1751 | Reco=0.1728 | Grad=0.0860 | Penalty=231.2989
    - Valid | Epoch 2 | 1/3 | 0.32 it/sec | Loss 0.1967 | Reco 0.1967 | Nsdr 4.522
    - Valid Summary | Epoch 2 | Loss=0.2093 | Reco=0.2093 | Nsdr=3.261 | Best=0.2016 | Bname=main

A training progress line is a record at step ``(E - 1) * N + B`` (``N`` batches an epoch, as printed); its
values are running means over the epoch so far. The training summary repeats the epoch's last running
mean: no record of its own. Another stage's progress lines are partial passes (not read); its summary is
the stage's record at the end of epoch ``E`` (step ``E * N``), its metrics ``val_*`` (``test_*`` for a
test stage). ``Loss`` is ``loss`` and ``Grad`` the gradient norm. A cell that is not one ``Key value`` /
``Key=value`` pair (``Bname=main nalty=221.57``, ``Penal69.46``: two redraws glued by the terminal) is
skipped and counted, never a metric; a text value (``Bname=main``) is no metric.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import Final

from ingest.formats._common import LogBuilder
from ingest.formats.aliases import canonical_name
from ingest.formats.base import Reader
from ingest.formats.line_console import LineResult, Row, Where, read_console
from ingest.formats.numbers import NUMBER, parse_number
from ingest.formats.raw_text import decode_head, looks_binary

_PROGRESS: Final = re.compile(
    r"^[ \t]*(?:-[ \t]+)?(?P<stage>[A-Z][A-Za-z]*)[ \t]*\|[ \t]*Epoch[ \t]+(?P<epoch>[0-9]+)[ \t]*\|"
    r"[ \t]*(?P<batch>[0-9]+)/(?P<per>[0-9]+)[ \t]*\|(?P<cells>.*)$"
)
_SUMMARY: Final = re.compile(
    r"^[ \t]*(?:-[ \t]+)?(?P<stage>[A-Z][A-Za-z]*)[ \t]+Summary[ \t]*\|"
    r"[ \t]*Epoch[ \t]+(?P<epoch>[0-9]+)[ \t]*\|(?P<cells>.*)$"
)
_CELL: Final = re.compile(r"^[ \t]*(?P<key>[A-Za-z_][A-Za-z0-9_]*)(?:=|[ \t]+)(?P<value>\S+)[ \t]*$")
_SPEED: Final = re.compile(r"^[ \t]*" + NUMBER + r"[ \t]*(?:it|s|batch(?:es)?)/(?:sec|s|it)[ \t]*$")
_TRAIN: Final = ("train", "training")
_ROLES: Final = {"grad": "grad_norm"}
"""Short names the logger gives a canonical metric (``Loss`` is ``loss`` already)."""


def _metric(stage: str, key: str) -> str:
    name = _ROLES.get(key.lower()) or canonical_name(key)[0]
    if stage.lower() in _TRAIN:
        return name
    return ("test_" if stage.lower().startswith("test") else "val_") + name


class StageConsoleReader(Reader):
    name = "stage_console"
    description = "stage console (Demucs / AudioCraft LogProgress): 'Train | Epoch E | B/N | Loss x | ...' lines"

    def sniff(self, head: bytes, path: Path) -> float:
        if path.is_dir() or not head or looks_binary(head):
            return 0.0
        lines = decode_head(head).splitlines()
        progress = sum(1 for line in lines if _PROGRESS.match(line))
        summaries = sum(1 for line in lines if _SUMMARY.match(line))
        return 0.9 if progress >= 2 and summaries else 0.7 if progress >= 3 else 0.0

    def fill(self, paths: Sequence[Path], builder: LogBuilder) -> None:
        where = Where()
        per: int | None = None

        def line(text: str) -> LineResult:
            nonlocal per
            if where.line == 1:
                per = None  # each file counts its own batches
            step: int | None = None
            if (m := _PROGRESS.match(text)) is not None:
                if m["stage"].lower() not in _TRAIN:  # an evaluation pass counts its own batches
                    return [], "partial evaluation pass"
                per = int(m["per"])
                step = (int(m["epoch"]) - 1) * per + int(m["batch"])
            elif (m := _SUMMARY.match(text)) is not None:
                if m["stage"].lower() in _TRAIN:
                    return [], "epoch summary (the last progress line's means)"
                if per is None:
                    return [], "values without a step"
                step = int(m["epoch"]) * per
            if m is None or step is None:
                return [], None
            rows: list[Row] = []
            for cell in m["cells"].split("|"):
                if not cell.strip() or _SPEED.match(cell):
                    continue
                c = _CELL.match(cell)
                if c is None:
                    builder.skip(where.path, where.line, f"garbled cell: {cell.strip()[:60]}")
                    continue
                if (value := parse_number(c["value"])) is None:
                    continue  # a text value: a name, not a metric
                rows.append((_metric(m["stage"], c["key"]), None, step, value))
            return rows, None

        read_console(paths, builder, line, "a stage console line", where=where)
