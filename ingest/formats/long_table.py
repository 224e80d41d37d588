"""A metrics table in long form: one row per (series, step, value) (issue #31, round 22: f28a).

TensorBoard's scalars exported with a script (``filename,tag,step,value``: the event file, the tag,
the step, the value), an MLflow or W&B history dumped as ``key,step,value``: one column names the series
of each row, one holds its value. Read as a wide table it is one metric called ``value`` whose steps go
back to the first one at each new tag (two runs, no loss). The rule, for any table:

- a table is long when it has a step column, exactly one value column (``value``, any case) and a
  series column (``tag``, ``metric``, ``key``, ``name``, ``series``, any case) whose cells are text;
- it is pivoted: each distinct series is a column of its own, holding its rows' values at their steps,
  its rows' other text columns (the event file's name) dropped; a row repeated exactly (the same
  series, step and value again: an export of overlapping event files) is one record;
- the pivoted table has one row per distinct step, in step order, so every series is one run unless a
  series' own steps go back (a relaunch logging into the same directory): then the rows are left as
  they are, in file order (the table's usual restart rule reads them).

A table of more than ``CSV_BLOCK_BYTES`` is read in blocks; a long one is pivoted whole, all its blocks
together (:func:`pivoted_blocks`), so a series whose rows cross a block boundary stays one series. A series
that gives one step two different values is a relaunch too, read in file order: only an exact repeat is
one record, so no value is dropped.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Any, Final

import numpy as np
import pyarrow as pa

from ingest.formats._tabular import STEP_COLUMNS, WALL_COLUMNS, find_column, to_float

SERIES_COLUMNS: Final = ("tag", "metric", "key", "name", "series")
"""Names of the column that says which series a row's value belongs to."""
VALUE_COLUMNS: Final = ("value",)


def _named(columns: list[str], names: tuple[str, ...]) -> str | None:
    found = [c for c in columns if c.strip().lower() in names]
    return found[0] if len(found) == 1 else None


def long_columns(table: pa.Table) -> tuple[str, str, str] | None:
    """``(step, series, value)`` columns of a long table (module docstring), or None."""
    cols = table.column_names
    step, series, value = find_column(cols, STEP_COLUMNS), _named(cols, SERIES_COLUMNS), _named(cols, VALUE_COLUMNS)
    if step is None or series is None or value is None:
        return None
    col = table[series]
    if not (pa.types.is_string(col.type) or pa.types.is_large_string(col.type)):
        return None
    if to_float(col)[1].any():  # a numeric 'name' column is a value, not a series name
        return None
    return step, series, value


def _pivot(tables: Sequence[pa.Table], columns_of: tuple[str, str, str]) -> pa.Table | None:
    """The long ``tables`` (one file's blocks, in file order) as one wide table (module docstring), or None
    when a series' rows go back in step or give one step two different values (a relaunch: the rows are
    read in file order)."""
    step_col, series_col, value_col = columns_of
    wall_col = find_column(tables[0].column_names, WALL_COLUMNS)
    per: dict[str, dict[float, float]] = {}
    walls: dict[float, float] = {}
    last: dict[str, float] = {}
    for table in tables:
        steps, has_step = to_float(table[step_col])
        values, has_value = to_float(table[value_col])
        wall, has_wall = to_float(table[wall_col]) if wall_col in table.column_names else (steps, has_step & False)
        names = [str(v).strip() if v is not None else "" for v in table[series_col].to_pylist()]
        for i, name in enumerate(names):
            if not name or not has_step[i]:
                continue
            seen = per.setdefault(name, {})
            step, value = float(steps[i]), float(values[i]) if has_value[i] else np.nan
            if step < last.get(name, -np.inf):
                return None  # a series whose steps go back: a relaunch
            before = seen.get(step)
            if before is not None and not (before == value or (np.isnan(before) and np.isnan(value))):
                return None  # one step, two values: a relaunch logging the step again, not a repeated row
            last[name] = step
            seen.setdefault(step, value)
            if has_wall[i]:
                walls.setdefault(step, float(wall[i]))
    axis = sorted({s for seen in per.values() for s in seen})
    columns: dict[str, Any] = {step_col: pa.array(axis, pa.float64())}
    if wall_col and walls:
        columns[wall_col] = pa.array([walls.get(s) for s in axis], pa.float64())
    for name, seen in per.items():
        if name in columns:
            continue
        columns[name] = pa.array([seen.get(s) for s in axis], pa.float64())
    return pa.table(columns)


def pivoted_blocks(blocks: Iterable[tuple[pa.Table, int]]) -> Iterator[tuple[pa.Table, int]]:
    """A CSV file's ``(block, first line)`` pairs as they are, unless its first block is a long table: then
    every block is read and the whole file pivoted as one table (a series' rows cross block boundaries;
    pivoted block by block, each block would start the series again), or, when the pivot finds a relaunch,
    the blocks are given back as they are, in file order."""
    it = iter(blocks)
    first = next(it, None)
    if first is None:
        return
    found = long_columns(first[0])
    if found is None:
        yield first
        yield from it
        return
    held = [first, *it]
    wide = _pivot([table for table, _ in held], found)
    if wide is None:
        yield from held
    else:
        yield wide, first[1]
