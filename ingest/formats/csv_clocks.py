"""The clock columns of a metrics CSV (issue #31; docs/diagnosis.md, "Import: step times and clocks"): a clock times the
run, it is no metric of it.

- **An elapsed clock** (seconds since the run began: baselines' ``total/duration``, ``total_time``,
  ``time/time_elapsed``, and a ``time`` column whose numbers rise from under :data:`MAX_ELAPSED_S`, as
  YOLO11's ``results.csv`` writes it; a larger rising ``time`` is a Unix time, the rows' wall clock) is
  no series: its increase between two rows over the steps between them is ``step_time_s`` on the later
  row (seconds per step of the table's axis; the first row has no interval, a clock that goes back
  gives none), as Chainer's ``elapsed_time`` in JSON Lines (:mod:`ingest.formats.jsonl_roles`).
  W&B's ``_runtime`` is one; so is a ``time`` column of date-time stamps on some rows (``2025-05-14 14:25:38``,
  ``-`` on the others: a TRL log history's time of each epoch's first step), read as the rows' wall clock.
- **A duration column**: a ``time`` column of ``[h:]mm:ss`` cells (fastai's ``CSVLogger``: how long each
  epoch took, its training and validation passes) is each row's ``step_time_s``, in seconds per step of
  the table's axis (the epoch): the cost views price a run from it, and it is what the log measured.

- **An epoch-time column** (``epoch_time_s``, ``epoch_duration``, ``time_per_epoch (ms)``: seconds, or
  the unit its name gives) where the epoch is the table's step axis (one row per epoch) is each row's
  ``step_time_s`` as it stands (docs/diagnosis.md, "Import: step times and clocks"); with a step column beside it, an
  epoch's time is no step's.

- **A per-row time** (docs/diagnosis.md, "Import: step times and clocks"): a plain-number ``time`` column that is
  neither rising (no clock) nor ``mm:ss`` cells, in a table with one row per epoch or per row (the epoch is the axis, or
  there is no counter at all), is how long each row took: its ``step_time_s`` as it stands. A clock never goes back,
  so a ``time`` that falls from one row to the next measures the row, not the run.

None gives a step time when a column the alias table reads as the step time is there already; neither
is a metric or the rows' wall clock either way.
"""

from __future__ import annotations

import re
from typing import Final

import numpy as np
import pyarrow as pa

from ingest.formats._common import LogBuilder, parse_timestamps
from ingest.formats._tabular import to_float
from ingest.formats.aliases import canonical_name
from ingest.formats.csv_counters import is_elapsed_clock

STEP_TIME: Final = "step_time_s"
MAX_ELAPSED_S: Final = 1e8
"""Seconds below which a rising ``time`` counts from the run's start (three years): a Unix time is above."""
_EPOCH_TIME: Final = re.compile(
    r"^(?:train(?:ing)?[_ ])?(?:epoch[_ ]?(?:time|duration|secs?)|time[_ ]per[_ ]epoch)"
    r"(?:[_ ]?\(?(?P<unit>s|sec|secs|seconds|ms|min|mins|minutes)\)?)?$",
    re.IGNORECASE,
)
_EPOCH_TIME_SCALE: Final = {"ms": 1e-3, "min": 60.0, "mins": 60.0, "minutes": 60.0}
_DURATION: Final = re.compile(r"^[ \t]*(?:(?P<h>[0-9]+):)?(?P<m>[0-9]{1,2}):(?P<s>[0-9]{2}(?:\.[0-9]+)?)[ \t]*$")


WANDB_RUNTIME: Final = "_runtime"
"""W&B's system column of a run history: seconds since the run started (its ``_timestamp`` is the Unix time), an elapsed
clock however it is exported (#31)."""


def _time_column(names: list[str]) -> str | None:
    return next((c for c in names if c.strip().lower() == "time"), None)


def elapsed_clock(table: pa.Table) -> str | None:
    """The table's elapsed-clock column (see the module), or None."""
    names = table.column_names
    named = next((c for c in names if is_elapsed_clock(c) or c.strip() == WANDB_RUNTIME), None)
    if named is not None:
        return named
    time = _time_column(names)
    if time is None:
        return None
    values, present = to_float(table[time])
    values = values[present & np.isfinite(values)]
    rises = values.size > 1 and bool(np.all(np.diff(values) >= 0)) and values[-1] > values[0]
    return time if rises and values[0] >= 0 and values[-1] < MAX_ELAPSED_S else None


_PLACEHOLDERS: Final = frozenset({"", "-", "--", "nan", "none", "null", "n/a"})


def stamped_clock(table: pa.Table) -> tuple[str, np.ndarray] | None:
    """A ``time`` column of date-time cells (``2025-05-14 14:25:38``), stamped on some rows and a
    placeholder (``-``, empty) on the others, as ``(column, seconds since the epoch per row, NaN where
    unstamped)``: the rows' wall clock (a TRL log history saved with the time of each epoch's first
    step), whose increase between two stamped rows over the steps between them is the step time, as an
    elapsed clock's (#31). None unless two cells are stamps and every other cell is a placeholder."""
    time = _time_column(table.column_names)
    if time is None or not (pa.types.is_string(table[time].type) or pa.types.is_large_string(table[time].type)):
        return None
    cells = [str(c).strip() if c is not None else "" for c in table[time].to_pylist()]
    seconds = parse_timestamps(pa.array(cells, type=pa.string()))
    stamped = np.isfinite(seconds)
    if int(stamped.sum()) < 2 or any(
        not ok and c.lower() not in _PLACEHOLDERS for c, ok in zip(cells, stamped, strict=True)
    ):
        return None
    return time, seconds


def duration_column(table: pa.Table) -> tuple[str, np.ndarray] | None:
    """A ``time`` column of ``[h:]mm:ss`` cells and its seconds per row (NaN where empty), or None."""
    time = _time_column(table.column_names)
    if time is None:
        return None
    cells = table[time].to_pylist()
    seconds = np.full(len(cells), np.nan)
    for i, cell in enumerate(cells):
        if cell is None or str(cell).strip() == "":
            continue
        m = _DURATION.match(str(cell))
        if m is None:
            return None  # not a duration column: one cell that is no duration says so
        seconds[i] = 3600.0 * int(m["h"] or 0) + 60.0 * int(m["m"]) + float(m["s"])
    return (time, seconds) if np.isfinite(seconds).any() else None


def _epoch_time(table: pa.Table, step_col: str) -> tuple[str, np.ndarray] | None:
    """An epoch-time column of ``table`` and its seconds per row (NaN where not logged), or None; only
    where the epoch is the step axis."""
    if step_col.strip().lower() != "epoch":
        return None
    for name in table.column_names:
        m = _EPOCH_TIME.match(name.strip())
        if m:
            values, present = to_float(table[name])
            scale = _EPOCH_TIME_SCALE.get((m["unit"] or "s").lower(), 1.0)
            return name, np.where(present & (values >= 0), values * scale, np.nan)
    return None


_ROW_AXES: Final = frozenset({"epoch", "__row__"})
"""Step columns of one row per epoch, or the row number a table with no counter gets (csv_wide)."""


def _row_time(table: pa.Table, step_col: str) -> tuple[str, np.ndarray] | None:
    """A per-row ``time`` column (see the module) and its seconds per row (NaN where not logged), or
    None; only where the axis is the epoch or the row number."""
    time = _time_column(table.column_names)
    if time is None or step_col.strip().lower() not in _ROW_AXES:
        return None
    values, present = to_float(table[time])
    ok = present & np.isfinite(values)
    if ok.sum() < 2 or bool(np.any(values[ok] < 0)) or bool(np.all(np.diff(values[ok]) >= 0)):
        return None  # too few, a negative one, or a rising column: a clock (elapsed_clock), no duration
    return time, np.where(ok, values, np.nan)


def add_clock_step_time(builder: LogBuilder, table: pa.Table, step_col: str) -> str | None:
    """Store the step time an elapsed clock or a duration column of ``table`` gives (see the module) at
    its rows' steps; return that column (no metric, no wall clock), or None when there is none."""
    steps, has_step = to_float(table[step_col])
    clock, stamps = elapsed_clock(table), None
    if clock is None and (found_stamps := stamped_clock(table)) is not None:
        clock, stamps = found_stamps
    if clock is not None:
        wall, has_wall = to_float(table[clock]) if stamps is None else (stamps, np.isfinite(stamps))
        rows = np.flatnonzero(has_wall & has_step & np.isfinite(wall))
        per_step = np.full(table.num_rows, np.nan)
        if rows.size > 1:
            d_wall, d_step = np.diff(wall[rows]), np.diff(steps[rows])
            ok = (d_step > 0) & (d_wall > 0)
            per_step[rows[1:]] = np.where(ok, d_wall / np.where(ok, d_step, 1), np.nan)
        column = clock
    elif (found := duration_column(table) or _epoch_time(table, step_col) or _row_time(table, step_col)) is not None:
        column, per_step = found
    else:
        return None
    keep = has_step & np.isfinite(per_step)
    if keep.any() and not any(canonical_name(c)[0] == STEP_TIME for c in table.column_names):
        builder.add(STEP_TIME, steps[keep].astype(np.int64), per_step[keep], canonical=True, origin=column)
    return column
