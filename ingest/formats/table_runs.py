"""Runs back to back in one metrics table (issue #31; docs/diagnosis.md, "Import: steps, epochs and runs").

A table's step or epoch axis that goes back down to its first value starts a fresh run: a Keras
``CSVLogger`` in append mode (two ``fit()`` calls: epochs ``0, 1, 0, 1, 2, ...`` under one header), a
TensorBoard export of a log directory whose trainer was relaunched (steps ``..., 2454, 41, ...``). A
step that goes down to a later step is a resume from a checkpoint and stays in the run (the builder
records a rollback). The rule is :func:`ingest.formats.segments.fresh_starts`' for text logs (down to
the smallest step seen so far, or to 0 or 1), applied where the rows are read: the reader hands each
run's rows to the builder in turn and :meth:`TableRuns.split` notes the sequence number each later run
starts at, so series the reader derives from a run's rows (a clock's step time, a summed loss) fall in
that run however they are numbered.

A line that repeats an earlier line of the table exactly (every key, every value: a launch's lines
written twice, two processes appending the same record) is one record, not a step that goes down: it is
dropped before the rule looks at the steps (docs/diagnosis.md, "Import: steps, epochs and runs"). Looked for only where
a step goes down, so a table whose steps only rise costs nothing more.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from itertools import pairwise
from pathlib import Path
from typing import Final

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from ingest.formats._common import LogBuilder
from ingest.formats._tabular import to_float
from ingest.formats.launch_ends import LaunchState, time_left

APPENDED_HISTORY_RULE: Final = (
    "a history each launch appends to (JSON Lines): a step back to 0 or 1 starts a run; a step back to any"
    " later step, the first one the file logged included, is a resume from a checkpoint (one run, a rollback)"
)
"""A trainer's JSON Lines history is appended to by every launch. A launch from scratch counts from 0
or 1; a step back to a later step cannot be told from a resume (a checkpoint saved before the first
logged step, a relaunch that re-logs from it), and a resume kept as one run loses nothing (the replaced
rows stay on the rollback event), where a run cut in two would be a run that never happened."""


class TableRuns:
    """Cuts one stream's tables (read in file order, chunk by chunk) into runs."""

    def __init__(self, builder: LogBuilder, stream: int = 0, *, at_lowest: bool = True) -> None:
        """``at_lowest``: a step back to the smallest step seen so far starts a run too, not only one
        back to 0 or 1 (False for an appended history: see :data:`APPENDED_HISTORY_RULE`)."""
        self.builder = builder
        self.stream = stream
        self.at_lowest = at_lowest
        self.lowest = np.inf
        self.last = np.nan
        self.launch = LaunchState()  # ingest.formats.launch_ends

    def starts(
        self, steps: npt.NDArray[np.float64], ends: tuple[npt.NDArray[np.bool_], npt.NDArray[np.bool_]] | None = None
    ) -> list[int]:
        """Positions in ``steps`` (this chunk, file order; NaN = no step) where a fresh run starts;
        ``ends``: which rows end their launch and which print the time left (:mod:`ingest.formats.launch_ends`)."""
        found: list[int] = []
        at = np.flatnonzero(np.isfinite(steps))
        if at.shape[0] == 0:
            return found
        shown = steps[at]
        prev = np.concatenate([[self.last], shown[:-1]])
        lowest = np.minimum.accumulate(np.concatenate([[self.lowest], shown[:-1]]))
        fresh = (shown < prev) & (((shown <= lowest) & self.at_lowest) | (shown <= 1))
        self.last, self.lowest = float(shown[-1]), float(min(self.lowest, shown.min()))
        finished, says = ends if ends is not None else (np.zeros(steps.shape, bool), np.zeros(steps.shape, bool))
        finished, says = finished[at], says[at]
        if not (np.any(shown < prev) or finished.any() or self.launch.finished):
            self.launch.rising(shown)  # no launch ended in the chunk: its state only
            return [int(i) for i in at[fresh]]
        for i in range(shown.shape[0]):
            fresh[i] = self.launch.fresh(float(shown[i]), bool(says[i]), bool(fresh[i]))
            self.launch.advance(float(shown[i]), bool(fresh[i]), bool(finished[i]))
        return [int(i) for i in at[fresh]]

    def fresh_run(self) -> None:
        """A run starts at the next row, whatever its step (a label's change: :mod:`ingest.formats.label_blocks`)."""
        self.builder.run_starts.setdefault(self.stream, []).append(self.builder.reserve(0))
        self.lowest, self.last = np.inf, np.nan
        self.launch = LaunchState()

    def split(self, table: pa.Table, step_col: str, where: tuple[Path, int] | None = None) -> Iterator[pa.Table]:
        """``table`` run by run: the rows before the first fresh start, then each run's rows; the builder
        learns where each later run starts (``run_starts``) as its rows are handed over. Where a step
        goes down, rows repeating an earlier row exactly are dropped first (counted as skipped at
        ``where``: the file and the line of the table's first row)."""
        steps, has = to_float(table[step_col])
        repeats = repeated_rows(table, np.where(has, steps, np.nan), self.last)
        if repeats.any():
            if where is not None:
                for row in np.flatnonzero(repeats):
                    self.builder.skip(where[0], where[1] + int(row), "duplicate record (the same line again)")
            table = table.filter(pa.array(~repeats))
            steps, has = steps[~repeats], has[~repeats]
        for run in self.split_steps(np.where(has, steps, np.nan), time_left(table)):
            yield table.slice(run.start, run.stop - run.start)

    def split_steps(
        self, steps: npt.NDArray[np.float64], ends: tuple[npt.NDArray[np.bool_], npt.NDArray[np.bool_]] | None = None
    ) -> Iterator[slice]:
        """:meth:`split` for a reader that adds rows from arrays: each run's slice of ``steps``."""
        bounds = [0, *self.starts(steps, ends), steps.shape[0]]
        for i, (lo, hi) in enumerate(pairwise(bounds)):
            if i > 0:
                self.builder.run_starts.setdefault(self.stream, []).append(self.builder.reserve(0))
            if hi > lo:
                yield slice(lo, hi)


def repeated_rows(table: pa.Table, steps: npt.NDArray[np.float64], before: float = math.nan) -> npt.NDArray[np.bool_]:
    """Rows of ``table`` equal in every column to an earlier row of it; all False (and nothing
    compared) when ``steps`` (NaN = none; ``before``: the step of the row before the table) never go
    down. A NaN cell equals a NaN cell (the same text in the file)."""
    shown = steps[np.isfinite(steps)]
    if shown.shape[0] == 0 or not (np.any(shown[1:] < shown[:-1]) or shown[0] < before):
        return np.zeros(table.num_rows, dtype=bool)
    columns = [[_cell(v) for v in table[name].to_pylist()] for name in table.column_names]
    seen: set[tuple[object, ...]] = set()
    repeats = np.zeros(table.num_rows, dtype=bool)
    for i, row in enumerate(zip(*columns, strict=True)):
        try:
            if row in seen:
                repeats[i] = True
            else:
                seen.add(row)
        except TypeError:  # a list or dict cell: the row is kept
            continue
    return repeats


def _cell(value: object) -> object:
    return "nan" if isinstance(value, float) and math.isnan(value) else value
