"""An ``Epoch e/E`` header line over step lines that count batches within the epoch (docs/diagnosis.md,
"Import: steps, epochs and runs"; issue #31), for the generic reader (:mod:`ingest.formats.generic`).

A Python-logging trainer prints ``Epoch 2/10`` alone on a line, then ``Batch 10/1827 | Batch Loss: ...`` lines
whose counter restarts every epoch. A step line that prints its step ``S/N`` and no epoch of its own takes the epoch
of the last header line (a line holding nothing but an epoch counter; an epoch's summary, ``Epoch 2/10 | Train
Energy: 2.3``, opens nothing), so that :func:`~ingest.formats.epoch_steps.epoch_steps` makes the step global,
``(E - 1) * N + S``, where the counter restarts as the epoch grows (a counter that runs on is kept). Without it every
epoch's return to its first batch read as a fresh run.
"""

from __future__ import annotations

import math
from typing import Protocol

from ingest.formats.aliases import normalise_key
from ingest.formats.epoch_steps import step_of_n
from ingest.formats.line_pairs import line_pairs
from ingest.formats.record_lines import rewrite


class _StepLine(Protocol):
    step: int
    epoch: int | None
    per_epoch: int | None


def header_epoch(text: str) -> int | None:
    """The epoch the line ``text`` opens when it holds nothing but an epoch counter (a logger's prefix before
    it), else None."""
    pairs = line_pairs(text)
    if len(pairs) != 1:
        return None
    key, value, unit = pairs[0]
    whole = unit is None and math.isfinite(value) and value == int(value) and value >= 0
    return int(value) if whole and normalise_key(key) in ("epoch", "epochs") else None


class EpochHeaders:
    """The epoch the last header line opened, given to the step lines under it (:meth:`see`, line by line)."""

    def __init__(self, step_keys: tuple[str, ...]) -> None:
        self.step_keys = step_keys
        self.opened: int | None = None

    def see(self, text: str, step_line: _StepLine | None) -> None:
        """Note line ``text``, read as ``step_line`` (None: no step line)."""
        if step_line is None:
            header = header_epoch(text)
            self.opened = header if header is not None else self.opened
        elif self.opened is not None and step_line.epoch is None and step_line.step >= 0:
            of_n = step_of_n(self.step_keys, rewrite(text))
            if of_n is not None:
                step_line.epoch, step_line.per_epoch = self.opened, of_n
