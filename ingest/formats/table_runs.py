"""Runs back to back in one metrics table (issue #31, round 15: t21d).

A table's step or epoch axis that goes back down to its first value starts a fresh run: a Keras
``CSVLogger`` in append mode (two ``fit()`` calls: epochs ``0, 1, 0, 1, 2, ...`` under one header), a
TensorBoard export of a log directory whose trainer was relaunched (steps ``..., 2454, 41, ...``). A
step that goes down to a later step is a resume from a checkpoint and stays in the run (the builder
records a rollback). The rule is :func:`ingest.formats.segments.fresh_starts`' for text logs (down to
the smallest step seen so far, or to 0 or 1), applied where the rows are read: the reader hands each
run's rows to the builder in turn and :meth:`TableRuns.split` notes the sequence number each later run
starts at, so series the reader derives from a run's rows (a clock's step time, a summed loss) fall in
that run however they are numbered.
"""

from __future__ import annotations

from collections.abc import Iterator
from itertools import pairwise

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from ingest.formats._common import LogBuilder
from ingest.formats._tabular import to_float


class TableRuns:
    """Cuts one stream's tables (read in file order, chunk by chunk) into runs."""

    def __init__(self, builder: LogBuilder, stream: int = 0) -> None:
        self.builder = builder
        self.stream = stream
        self.lowest = np.inf
        self.last = np.nan

    def starts(self, steps: npt.NDArray[np.float64]) -> list[int]:
        """Positions in ``steps`` (this chunk, file order; NaN = no step) where a fresh run starts."""
        found: list[int] = []
        at = np.flatnonzero(np.isfinite(steps))
        if at.shape[0] == 0:
            return found
        shown = steps[at]
        prev = np.concatenate([[self.last], shown[:-1]])
        lowest = np.minimum.accumulate(np.concatenate([[self.lowest], shown[:-1]]))
        fresh = (shown < prev) & ((shown <= lowest) | (shown <= 1))
        self.last, self.lowest = float(shown[-1]), float(min(self.lowest, shown.min()))
        return [int(i) for i in at[fresh]]

    def split(self, table: pa.Table, step_col: str) -> Iterator[pa.Table]:
        """``table`` run by run: the rows before the first fresh start, then each run's rows; the builder
        learns where each later run starts (``run_starts``) as its rows are handed over."""
        steps, has = to_float(table[step_col])
        for run in self.split_steps(np.where(has, steps, np.nan)):
            yield table.slice(run.start, run.stop - run.start)

    def split_steps(self, steps: npt.NDArray[np.float64]) -> Iterator[slice]:
        """:meth:`split` for a reader that adds rows from arrays: each run's slice of ``steps``."""
        bounds = [0, *self.starts(steps), steps.shape[0]]
        for i, (lo, hi) in enumerate(pairwise(bounds)):
            if i > 0:
                self.builder.run_starts.setdefault(self.stream, []).append(self.builder.reserve(0))
            if hi > lo:
                yield slice(lo, hi)
