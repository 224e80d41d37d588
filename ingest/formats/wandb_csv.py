"""W&B panel export (CSV): an x column (``Step``, ``_step``, ``trainer/global_step`` ...) and, per
run, ``<run> - <metric>`` with its ``<run> - <metric>__MIN`` / ``__MAX`` companions (the range of
the points W&B bucketed together). The companions are kept as ``<metric>__min`` / ``<metric>__max``.
One run per import: an export that holds several runs is refused with their names."""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

from ingest.errors import StabScopeError
from ingest.formats._common import LogBuilder
from ingest.formats._tabular import STEP_COLUMNS, add_wide, csv_header, find_column, iter_csv
from ingest.formats.aliases import canonical_name
from ingest.formats.base import Reader

_COLUMN = re.compile(r"^(?P<run>.+?) - (?P<metric>.+?)(?P<agg>__MIN|__MAX)?$")


def _split(column: str) -> tuple[str, str, str] | None:
    m = _COLUMN.match(column)
    if not m:
        return None
    return m["run"], m["metric"], (m["agg"] or "").lower()


class WandbCsvReader(Reader):
    name = "wandb_csv"
    description = "W&B panel export CSV: 'Step,<run> - <metric>,<run> - <metric>__MIN,...__MAX'"

    def sniff(self, head: bytes, path: Path) -> float:
        header = csv_header(head)
        if not header or len(header) < 2:
            return 0.0
        step = find_column(header, STEP_COLUMNS)
        if step is None:
            return 0.0
        others = [c for c in header if c != step]
        matched = [c for c in others if _split(c)]
        if not matched:
            return 0.0
        return 0.95 if len(matched) == len(others) else 0.55

    def fill(self, paths: Sequence[Path], builder: LogBuilder) -> None:
        for stream, path in enumerate(paths):
            builder.source(path)
            for table, line in iter_csv(path, builder):
                step_col = find_column(table.column_names, STEP_COLUMNS)
                if step_col is None:
                    raise StabScopeError("expected a 'Step' column", path=str(path), line=1)
                runs = sorted({s[0] for c in table.column_names if (s := _split(c))})
                if len(runs) > 1:
                    raise StabScopeError(
                        f"the export holds {len(runs)} runs ({', '.join(runs[:5])}); "
                        "export one run per file to import it",
                        path=str(path),
                        line=1,
                    )
                builder.meta.setdefault("wandb_run", runs[0] if runs else None)

                def keymap(column: str) -> tuple[str, str | None] | None:
                    parts = _split(column)
                    if parts is None:
                        return canonical_name(column)
                    name, unit = canonical_name(parts[1])
                    return (name + ("__" + parts[2][2:] if parts[2] else ""), unit)

                add_wide(
                    builder,
                    table,
                    step_col=step_col,
                    stream=stream,
                    keymap=keymap,
                    where=(path, line),
                    text_cells_are_errors=True,
                )
