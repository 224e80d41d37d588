"""Wide CSV: a step column plus one column per metric (our own import format, and what most
spreadsheets and ad-hoc scripts write).

Columns: ``step`` (or ``Step``, ``iteration``, ``global_step`` ...), optional ``rank`` (-1 or absent =
run level), optional ``wall_time`` (seconds since the epoch), optional ``event`` (text: ``kind`` or
``kind: label``, e.g. ``schedule_transition: warmup -> stable`` or ``data_switch: recipe v2``; each
non-empty cell becomes a ``RunEvent`` at that row's step), and metric columns under canonical or
foreign names (mapped through the alias table). Empty cells are "not logged"; ``nan`` is kept.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pyarrow as pa

from ingest.formats._common import LogBuilder
from ingest.formats._tabular import STEP_COLUMNS, WALL_COLUMNS, add_wide, csv_header, find_column, iter_csv, to_float
from ingest.formats.base import Reader

EVENT_COLUMN = "event"


class WideCsvReader(Reader):
    name = "csv_wide"
    description = "CSV with a step column and one column per metric (optional rank, wall_time, event)"

    def sniff(self, head: bytes, path: Path) -> float:
        header = csv_header(head)
        if not header or len(header) < 2:
            return 0.0
        if find_column(header, STEP_COLUMNS) is None:
            return 0.0
        return 0.6 if EVENT_COLUMN in header or "rank" in header else 0.5

    def fill(self, paths: Sequence[Path], builder: LogBuilder) -> None:
        for path in paths:
            builder.source(path)
            for table, line in iter_csv(path, builder, text_columns=(EVENT_COLUMN,)):
                step_col = find_column(table.column_names, STEP_COLUMNS)
                if step_col is None:
                    from ingest.errors import StabScopeError

                    raise StabScopeError(
                        f"expected a step column (one of {', '.join(STEP_COLUMNS)})", path=str(path), line=1
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
                    ignore=(event_col,) if event_col else (),
                    where=(path, line),
                    text_cells_are_errors=True,
                )


def _events(builder: LogBuilder, table: pa.Table, step_col: str, event_col: str) -> None:
    steps, has_step = to_float(table[step_col])
    for i, text in enumerate(table[event_col].to_pylist()):
        if not text or not has_step[i]:
            continue
        kind, _, label = str(text).partition(":")
        builder.event(int(steps[i]), kind.strip().replace(" ", "_") or "event", label.strip())
