"""Runs told apart by a label column: blocks of rows of one table (issue #31, round 22: f28a).

A pipeline that trains several models in turn and appends each one's epochs to one CSV writes a text
column naming the model or phase (``phase``: ``phase1_event`` x 40 rows, ``phase2_tactical`` x 15, ...,
then the whole pipeline again). Each block of rows under one label is a run of its own: its epochs
count that model's training, and a block that resumes an earlier run of the same label (epochs 25-64
after 1-40) is still a later launch, not steps of the block before it. Read without the label, the
blocks' epochs fall into one axis: a restart to 1 cuts some of them, a count that goes on (phase4's
epoch 5, then phase1's epoch 25) glues two models into one run, a step back to a later epoch is taken
for a resume from a checkpoint.

The rule, for any table with a step (or epoch) axis:

- a **label column** is a column that is not the axis and whose every cell is text (non-empty, not a
  number), with two or more distinct values, that changes value between maximal blocks of at least
  :data:`MIN_BLOCK_ROWS` rows each (a timestamp or a free-text note changes on every row, or has empty
  cells: no label), with fewer distinct values than blocks or the same number (a label may recur);
- the column cuts the table into runs only when the axis does not rise at one of its changes (a block
  starts back at or below where the block before it ended): a schedule-phase column (``warmup``,
  ``stable``, ``decay``) over rising steps labels parts of one run, and stays one run;
- then every change of label starts a run, the axis's own restarts within a block still counting
  (:class:`~ingest.formats.table_runs.TableRuns`).

The table is read in chunks: the column is chosen on the first chunk that has one and kept, and a
block that goes on into the next chunk is not cut there.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Final

import numpy as np
import pyarrow as pa

from ingest.formats._tabular import to_float
from ingest.formats.table_runs import TableRuns

MIN_BLOCK_ROWS: Final = 2
"""The fewest rows a block of one label holds (the table's last block excepted: a run cut short):
a label that changes on nearly every row (train and val rows interleaved) marks rows, not runs."""


def _blocks(labels: Sequence[object]) -> list[int]:
    """The positions where ``labels`` changes value (0 included)."""
    return [i for i in range(len(labels)) if i == 0 or labels[i] != labels[i - 1]]


def label_column(table: pa.Table, step_col: str, ignore: Sequence[str] = ()) -> str | None:
    """The column of ``table`` whose labels cut it into runs (module docstring), or None."""
    steps, has = to_float(table[step_col])
    steps = np.where(has, steps, np.nan)
    for name in table.column_names:
        if name == step_col or name in ignore:
            continue
        col = table[name]
        if not (pa.types.is_string(col.type) or pa.types.is_large_string(col.type)) or col.null_count:
            continue
        _, numeric = to_float(col)
        labels = [str(v).strip() for v in col.to_pylist()]
        if numeric.any() or not all(labels) or len(set(labels)) < 2:
            continue
        starts = _blocks(labels)
        sizes = np.diff([*starts, len(labels)])
        if (sizes[:-1] < MIN_BLOCK_ROWS).any() or len(set(labels)) > len(starts):
            continue
        # a change where the axis does not rise: a block that starts back (np.nan compares False)
        if any(steps[i] <= steps[i - 1] for i in starts[1:]):
            return name
    return None


class LabelBlocks:
    """Cuts one stream's tables (file order, chunk by chunk) at each change of its label column."""

    def __init__(self, runs: TableRuns, ignore: Sequence[str] = ()) -> None:
        self.runs = runs
        self.ignore = tuple(ignore)
        self.column: str | None = None
        self.last: object = None  # the label of the last row handed over (None: no row yet)

    def split(self, table: pa.Table, step_col: str) -> Iterator[pa.Table]:
        """``table`` block by block; the run splitter learns that each block after the table's first starts a run."""
        if self.column is None:
            self.column = label_column(table, step_col, self.ignore)
        if self.column is None or self.column not in table.column_names:
            yield table
            return
        labels = [str(v).strip() for v in table[self.column].to_pylist()]
        starts = _blocks(labels)
        for lo, hi in zip(starts, [*starts[1:], len(labels)], strict=True):
            if self.last is not None and labels[lo] != self.last:
                self.runs.fresh_run()
            self.last = labels[lo]
            yield table.slice(lo, hi - lo)
