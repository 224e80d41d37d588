"""A CSV file that every launch appends to, its header line included (issue #31; docs/diagnosis.md, "Import: steps,
epochs and runs").

A script that opens its log in append mode and writes the header whenever it starts (``csv.writer`` after a
``writeheader()`` at every launch) leaves the header line again in the file before each launch's rows::

    epoch,train_loss,val_loss
    0,0.0618,0.0663
    1,0.0543,0.0670
    epoch,train_loss,val_loss      <- a second launch
    0,0.0598,0.0630

The header line again is where a launch began: the rows after it are the next run's, whatever their step (a
launch that resumes at the epoch the last one ended at, ``19`` after ``19``, is a launch too: its rows are
not a rewind of the run before it). The line itself is no record: it is skipped and counted.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from ingest.formats._common import LogBuilder

HEADER_AGAIN = "the header line again: a launch appended to the file starts here"


def header_rows(table: pa.Table) -> npt.NDArray[np.bool_]:
    """Rows of ``table`` whose every cell is its column's name (the header line read as a row: its cells are
    text only where a column was read as text)."""
    names = table.column_names
    if table.num_rows == 0 or not names or not all(pa.types.is_string(t) for t in table.schema.types):
        return np.zeros(table.num_rows, dtype=bool)
    out = np.ones(table.num_rows, dtype=bool)
    for name in names:  # compared in Arrow, column by column, stopping once no row can be the header
        same = pc.equal(pc.utf8_trim_whitespace(table[name]), pa.scalar(name.strip()))
        out &= np.array(same.to_pylist(), dtype=np.bool_)  # an empty cell (None) is no header's
        if not out.any():
            break
    return out


def launches(
    blocks: Iterable[tuple[pa.Table, int]], path: Path, builder: LogBuilder
) -> Iterator[tuple[pa.Table, int, bool]]:
    """``(rows, line of the first, whether a launch starts at them)`` of a CSV file's ``(block, first line)``
    pairs: each block cut at its header lines again, which are skipped (counted at their line)."""
    for table, line in blocks:
        again = header_rows(table)
        if not again.any():
            yield table, line, False
            continue
        start, fresh = 0, False
        for row in map(int, np.flatnonzero(again)):
            builder.skip(path, line + row, HEADER_AGAIN)
            if row > start:
                yield table.slice(start, row - start), line + start, fresh
            start, fresh = row + 1, True
        if start < table.num_rows:
            yield table.slice(start), line + start, fresh
