"""Generic JSON Lines: one object per logged step, ``{"step": 100, "loss": 2.31, "lr": 3e-4, ...}``.

The step comes from ``step``/``global_step``/``iteration``/``_step``...; without one, the line
index (0-based) is the step. Nested objects become ``parent/child`` metrics; strings such as
``"nan"`` are parsed; other strings, lists and booleans are not metrics and are ignored.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pyarrow as pa

from ingest.formats._common import LogBuilder
from ingest.formats._tabular import STEP_COLUMNS, WALL_COLUMNS, add_wide, find_column, iter_jsonl
from ingest.formats.aliases import KeyMap
from ingest.formats.base import Reader
from ingest.formats.raw_text import decode_head


def first_object(head: bytes) -> dict[str, object] | None:
    """The first JSON object of a JSON Lines head (None when the first line is not one)."""
    for line in decode_head(head).splitlines()[:5]:
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except (ValueError, RecursionError):  # RecursionError: a line nested too deeply is no step's object
            return None
        return obj if isinstance(obj, dict) else None
    return None


def read_jsonl(
    paths: Sequence[Path],
    builder: LogBuilder,
    *,
    step_candidates: Sequence[str] = STEP_COLUMNS,
    keymap: KeyMap | None = None,
    ignore: Sequence[str] = (),
    wall_candidates: Sequence[str] = WALL_COLUMNS,
) -> None:
    """Read JSON Lines files (one stream, in the order given) into ``builder``."""
    row_index = 0
    for path in paths:
        builder.source(path)
        for table, line in iter_jsonl(path, builder):
            if table.num_rows == 0:
                continue
            step_col = find_column(table.column_names, step_candidates)
            if step_col is None:
                steps = pa.array(np.arange(row_index, row_index + table.num_rows, dtype=np.float64))
                table = table.append_column("__row_step", steps)
                step_col = "__row_step"
            else:
                table = _coalesce_steps(table, step_col, step_candidates)
            row_index += table.num_rows
            add_wide(
                builder,
                table,
                step_col=step_col,
                wall_col=find_column(table.column_names, wall_candidates),
                ignore=[c for c in table.column_names if c in ignore or c in step_candidates],
                keymap=keymap,
                where=(path, line),
            )


def _coalesce_steps(table: pa.Table, step_col: str, candidates: Sequence[str]) -> pa.Table:
    """Rows missing the preferred step key take the next candidate present (W&B's ``_step``)."""
    col = table[step_col]
    if col.null_count == 0:
        return table
    import pyarrow.compute as pc

    for other in candidates:
        if other != step_col and other in table.column_names:
            col = pc.coalesce(col, table[other].cast(col.type))
    return table.set_column(table.column_names.index(step_col), step_col, col)


class JsonlReader(Reader):
    name = "jsonl"
    description = "JSON Lines, one object per step: {'step': N, 'loss': x, ...}"

    def sniff(self, head: bytes, path: Path) -> float:
        obj = first_object(head)
        if obj is None:
            return 0.0
        numeric = [v for v in obj.values() if isinstance(v, (int, float)) and not isinstance(v, bool)]
        if not numeric:
            return 0.0
        return 0.55 if find_column(obj, STEP_COLUMNS) else 0.35

    def fill(self, paths: Sequence[Path], builder: LogBuilder) -> None:
        read_jsonl(paths, builder)
