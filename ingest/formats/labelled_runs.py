"""Several runs in one wide table, told apart by a run label in each column's name.

A chart or dashboard export of several runs (a W&B panel's CSV, a comparison table a script writes)
has one step column and, per run, ``<label> - <metric>`` columns; a band around each point may come
as ``<column>__MIN`` / ``<column>__MAX`` companions. The rule, for any wide table:

- a column whose name is ``<label> - <metric>`` (a spaced dash between two non-empty parts, the
  metric part not a number) is labelled; when two or more labels carry the same metric, each label
  is a run of its own (the first label the run, the others its further runs, in column order), holding
  the table's unlabelled columns (the step, a clock) and its own columns named by their metric part;
- one label only: the label is the run's name and its columns are named by their metric part;
- a column named as another column plus a ``__min``/``__max``/``__std`` suffix (any case) is the
  band around that column's points, not a metric of its own: dropped.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Final

import pyarrow as pa

_LABELLED: Final = re.compile(r"^(?P<label>\S.*?) - (?P<metric>\S.*)$")
_BAND: Final = re.compile(r"^(?P<base>.+)__(?:min|max|std)$", re.IGNORECASE)
_NUMBER: Final = re.compile(r"^[-+]?\d+(?:\.\d*)?(?:e[-+]?\d+)?$", re.IGNORECASE)


def _is_band(column: str, present: set[str]) -> bool:
    m = _BAND.match(column)
    return m is not None and m["base"] in present


def _split(column: str) -> tuple[str, str] | None:
    m = _LABELLED.match(column.strip())
    if m is None or _NUMBER.match(m["metric"].strip()):
        return None
    return m["label"].strip(), m["metric"].strip()


def run_labels(header: Sequence[str], axes: Sequence[str | None] = ()) -> list[str]:
    """The run labels of a table whose columns are labelled (module docstring), in column order;
    [] when the header labels no column. ``axes``: the step and clock columns; one label names the run
    only when every other column carries it (a lone ``train - val gap`` among plain metrics is a name)."""
    present = set(header)
    metrics: dict[str, set[str]] = {}
    plain = 0
    for column in header:
        if _is_band(column, present) or column in axes:
            continue
        if (parts := _split(column)) is None:
            plain += 1
            continue
        metrics.setdefault(parts[0], set()).add(parts[1])
    if len(metrics) == 1:
        return list(metrics) if plain == 0 else []
    shared = [label for label, names in metrics.items() if any(names & m for o, m in metrics.items() if o != label)]
    return shared if len(shared) >= 2 else []


def run_table(table: pa.Table, label: str) -> pa.Table:
    """``table``'s columns of run ``label`` named by their metric part, with the unlabelled columns;
    band companions and other runs' columns left out."""
    present = set(table.column_names)
    keep: list[str] = []
    names: list[str] = []
    for column in table.column_names:
        if _is_band(column, present):
            continue
        parts = _split(column)
        if parts is None:
            keep.append(column)
            names.append(column)
        elif parts[0] == label and parts[1] not in names:
            keep.append(column)
            names.append(parts[1])
    return table.select(keep).rename_columns(names)
