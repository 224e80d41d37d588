"""W&B panel export (CSV): an x column (``Step``, ``_step``, ``trainer/global_step`` ...) and, per
run, ``<run> - <metric>`` with its ``<run> - <metric>__MIN`` / ``__MAX`` companions (the range of
the points W&B bucketed together). The companions are no metrics (a bucket's range, not a logged
value) and are skipped. An export of several runs gives one run per run name, in column order."""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

from ingest.errors import StabScopeError
from ingest.formats._common import LogBuilder, ParsedLog, Progress
from ingest.formats._tabular import STEP_COLUMNS, add_wide, csv_header, find_column, iter_csv
from ingest.formats.aliases import canonical_name
from ingest.formats.base import Reader
from ingest.formats.raw_text import read_head

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

    def read(self, paths: Sequence[Path], progress: Progress | None = None) -> ParsedLog:
        """One run per run name the columns carry (the first is the run, the others its further runs,
        in column order)."""
        files = [f for p in paths for f in self.expand(Path(p))]
        names = list(dict.fromkeys(s[0] for f in files for c in csv_header(read_head(f)) or [] if (s := _split(c))))
        if len(names) < 2:
            return super().read(paths, progress)
        logs = []
        for run in names:
            builder = LogBuilder(files, progress)
            self._fill_run(files, builder, run)
            if builder.row_count:
                builder.account_records()
                logs.append(builder.finish(self.name))
        if not logs:
            return super().read(paths, progress)
        logs[0].segments = [*logs[0].segments, *logs[1:]]
        return logs[0]

    def fill(self, paths: Sequence[Path], builder: LogBuilder) -> None:
        self._fill_run(paths, builder, None)

    def _fill_run(self, paths: Sequence[Path], builder: LogBuilder, run: str | None) -> None:
        """Add the columns of ``run`` (None: the only run the export holds); the ``__MIN``/``__MAX``
        companions are the range of the points W&B bucketed into one, not metrics, and are skipped."""
        for stream, path in enumerate(paths):
            builder.source(path)
            for table, line in iter_csv(path, builder):
                step_col = find_column(table.column_names, STEP_COLUMNS)
                if step_col is None:
                    raise StabScopeError("expected a 'Step' column", path=str(path), line=1)
                names = {s[0] for c in table.column_names if (s := _split(c))}
                builder.meta["wandb_run"] = run if run is not None else (min(names) if names else None)

                def keymap(column: str) -> tuple[str, str | None] | None:
                    parts = _split(column)
                    if parts is None:
                        return canonical_name(column)
                    if parts[2] or (run is not None and parts[0] != run):
                        return None
                    return canonical_name(parts[1])

                add_wide(
                    builder,
                    table,
                    step_col=step_col,
                    stream=stream,
                    keymap=keymap,
                    where=(path, line),
                    text_cells_are_errors=True,
                )
