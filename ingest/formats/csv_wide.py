"""Wide CSV: a step column plus one column per metric (our own import format, and what most
spreadsheets and ad-hoc scripts write).

Columns: ``step`` (or ``Step``, ``iteration``, ``global_step`` ...), optional ``rank`` (-1 or absent =
run level), optional ``wall_time`` (seconds since the epoch), optional ``event`` (text: ``kind`` or
``kind: label``, e.g. ``schedule_transition: warmup -> stable`` or ``data_switch: recipe v2``; each
non-empty cell becomes a ``RunEvent`` at that row's step), and metric columns under canonical or
foreign names (mapped through the alias table). Empty cells are "not logged"; ``nan`` is kept.

With no step column, an ``epoch`` column is the step axis (Keras ``CSVLogger``: ``epoch,loss,...``, one
row per epoch). With both, a step column that restarts when the epoch grows counts batches within
the epoch: the step is then global, ``(epoch - base) * period + step``
(:class:`~ingest.formats.epoch_steps.EpochSteps`).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pyarrow as pa

from ingest.formats._common import LogBuilder
from ingest.formats._tabular import (
    STEP_COLUMNS,
    WALL_COLUMNS,
    add_wide,
    csv_header,
    find_column,
    iter_csv,
    to_float,
)
from ingest.formats.base import Reader
from ingest.formats.epoch_steps import EpochSteps

EVENT_COLUMN = "event"
EPOCH_COLUMNS = ("epoch",)
_PARAM_COUNT = re.compile(r"(?:num_?|n_|total_|trainable_)?param(?:eter)?s?(?:_count)?", re.IGNORECASE)
"""A column of the model's parameter count (``num_params``): a property of the model, not a metric."""


class WideCsvReader(Reader):
    name = "csv_wide"
    description = "CSV with a step column and one column per metric (optional rank, wall_time, event)"

    def sniff(self, head: bytes, path: Path) -> float:
        header = csv_header(head)
        if not header or len(header) < 2:
            return 0.0
        if (find_column(header, STEP_COLUMNS) or find_column(header, EPOCH_COLUMNS)) is None:
            return 0.0
        return 0.6 if EVENT_COLUMN in header or "rank" in header else 0.5

    def fill(self, paths: Sequence[Path], builder: LogBuilder) -> None:
        for path in paths:
            builder.source(path)
            epochs = EpochSteps()
            for table, line in iter_csv(path, builder, text_columns=(EVENT_COLUMN,)):
                step_col = find_column(table.column_names, STEP_COLUMNS)
                epoch_col = find_column(table.column_names, EPOCH_COLUMNS)
                if step_col is None and epoch_col is not None and _whole(table, epoch_col):
                    step_col = epoch_col  # one row per epoch: the epoch is the step axis
                elif step_col is not None and epoch_col is not None:
                    table = epochs.global_steps(table, step_col, epoch_col)
                if step_col is None:
                    from ingest.errors import StabScopeError

                    raise StabScopeError(
                        f"expected a step column (one of {', '.join(STEP_COLUMNS + EPOCH_COLUMNS)})",
                        path=str(path),
                        line=1,
                    )
                event_col = EVENT_COLUMN if EVENT_COLUMN in table.column_names else None
                if event_col is not None:
                    _events(builder, table, step_col, event_col)
                add_wide(
                    builder,
                    table,
                    step_col=step_col,
                    rank_col="rank" if "rank" in table.column_names else None,
                    wall_col=find_column(table.column_names, WALL_COLUMNS),
                    ignore=(
                        *((event_col,) if event_col else ()),
                        *(c for c in table.column_names if _PARAM_COUNT.fullmatch(c)),
                    ),
                    where=(path, line),
                    text_cells_are_errors=True,
                )


def _whole(table: pa.Table, col: str) -> bool:
    """Whether every value of ``col`` is a whole number: an epoch column is a step axis only so (a
    fractional epoch, ``0.25``, is the share of the data seen, rows within an epoch, not one per epoch)."""
    values, has = to_float(table[col])
    shown = values[has & np.isfinite(values)]
    return bool(np.all(shown == np.round(shown)))


def _events(builder: LogBuilder, table: pa.Table, step_col: str, event_col: str) -> None:
    steps, has_step = to_float(table[step_col])
    for i, text in enumerate(table[event_col].to_pylist()):
        if not text or not has_step[i]:
            continue
        kind, _, label = str(text).partition(":")
        builder.event(int(steps[i]), kind.strip().replace(" ", "_") or "event", label.strip())
