"""A table of one series whose value column has no name of its own takes the file's name.

An exported scalar (TensorBoard's CSV download, a plotting tool's or a notebook's export) is a table
``step,value`` (with a clock column, ``Wall time,Step,Value``) in a file named for the series:
``loss.csv``, ``run-.-tag-epoch_loss.csv``. Read by a generic table reader the series would be a metric
called ``Value``, which no question of the diagnosis asks for, and the run would "log no loss". The rule,
for any such table: when the only column that is neither the step nor a clock is named ``value`` (any
case) or ``y``, it is renamed to the file's stem, the part after a ``tag-``/``tag_`` marker when the
stem has one (the tag a download names: ``run-<run>-tag-<tag>``). A table with two value columns, or a
value column with a name, is left as it is.
"""

from __future__ import annotations

from pathlib import Path
from typing import Final

import pyarrow as pa

from ingest.formats._tabular import STEP_COLUMNS, WALL_COLUMNS, find_column
from ingest.formats.tensorboard_csv import tag_of

GENERIC_VALUE_NAMES: Final = frozenset({"value", "y"})
"""Names that say a column holds values, not which."""


def series_name(path: Path) -> str:
    """The series a one-series file is named for: its stem, or the tag its name carries."""
    return tag_of(path)


def name_value_column(table: pa.Table, path: Path) -> pa.Table:
    """``table`` with its lone generically named value column renamed to the file's series name."""
    names = table.column_names
    axes = {find_column(names, STEP_COLUMNS), find_column(names, WALL_COLUMNS), find_column(names, ("epoch",))}
    values = [n for n in names if n not in axes]
    if len(values) != 1 or values[0].strip().lower() not in GENERIC_VALUE_NAMES:
        return table
    name = series_name(path).strip()
    if not name or name in names:
        return table
    return table.rename_columns([name if n == values[0] else n for n in names])
