"""A sweep table: a CSV with one run per column and no step column, every header cell one setting's
name with a different value (``learning_rate_0.005,learning_rate_0.01,...``, ``lr=0.1,lr=0.3``,
``seed_1,seed_2``), one row per logged step.

Each column is a run of its own (the first is the run, the others its further runs, in column
order); the step is the 1-based data-row number (nothing else counts it). The header names the
setting swept, not the quantity logged: the metric is named by the file's stem less the setting's
name (``learning_rate_error.csv`` -> ``error``), through the alias table; a bare ``error`` (or
``err``) whose values go above 1 is no error rate (a rate is at most 1) but the loss the trainer
calls its error, and is stored as ``loss``. A stem that names nothing more is stored as ``value``.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from ingest.errors import StabScopeError
from ingest.formats._common import LogBuilder, ParsedLog, Progress
from ingest.formats._tabular import csv_header, iter_csv, to_float
from ingest.formats.aliases import canonical_name, normalise_key
from ingest.formats.base import Reader
from ingest.formats.numbers import NUMBER
from ingest.formats.table_axes import is_axis_counter

_CELL = re.compile(r"^(?P<name>[A-Za-z][A-Za-z_ .-]*?)[_=: -]?(?P<value>" + NUMBER + ")$")


def sweep_setting(header: Sequence[str]) -> str | None:
    """The setting a sweep header varies (``learning_rate``), or None when ``header`` is not one:
    two or more cells, each the same name with a different value, none of them a step counter."""
    if len(header) < 2 or any(is_axis_counter(c) for c in header):
        return None
    cells = [_CELL.match(c.strip()) for c in header]
    if any(m is None for m in cells):
        return None
    names = {m["name"].rstrip("_=: -") for m in cells if m}
    values = [m["value"] for m in cells if m]
    if len(names) != 1 or len(set(values)) != len(values):
        return None
    return names.pop()


def metric_of(path: Path, setting: str, values: np.ndarray) -> str:
    """The stored metric name of a sweep file (see the module docstring)."""
    stem = normalise_key(path.stem)
    rest = stem.replace(normalise_key(setting), " ").strip() if normalise_key(setting) in stem else stem
    if not rest:
        return "value"
    name, _ = canonical_name(rest)
    finite = values[np.isfinite(values)]
    if name in ("error", "err") and finite.size and float(np.max(finite)) > 1.0:
        return "loss"
    return name


class SweepCsvReader(Reader):
    name = "csv_sweep"
    description = "sweep CSV: one run per column ('learning_rate_0.01,learning_rate_0.1'), one row per step"

    def sniff(self, head: bytes, path: Path) -> float:
        header = csv_header(head)
        return 0.6 if header and sweep_setting(header) else 0.0

    def fill(self, paths: Sequence[Path], builder: LogBuilder) -> None:
        raise NotImplementedError  # read() builds one run per column

    def read(self, paths: Sequence[Path], progress: Progress | None = None) -> ParsedLog:
        files = [f for p in paths for f in self.expand(Path(p))]
        runs: list[ParsedLog] = []
        scratch = LogBuilder(files, progress)
        for path in files:
            tables = list(iter_csv(path, scratch))
            columns = tables[0][0].column_names if tables else []
            setting = sweep_setting(columns) or ""
            every = np.concatenate([to_float(t[c])[0] for t, _ in tables for c in columns]) if tables else np.zeros(0)
            metric = metric_of(path, setting, every)
            for column in columns:
                builder = LogBuilder([path], progress)
                builder.source(path)
                row = 1
                for table, line in tables:
                    values, present = to_float(table[column])
                    text = np.asarray(table[column].is_valid(), dtype=bool) & ~present
                    if text.any():  # a cell that is no number: counted, as every CSV reader does
                        first_bad = int(np.flatnonzero(text)[0])
                        builder.skip(path, line + first_bad, f"column {column!r}: not a number", int(text.sum()))
                    steps = np.arange(row, row + table.num_rows, dtype=np.int64)
                    builder.add(metric, steps[present], values[present], canonical=True, origin=column)
                    row += table.num_rows
                builder.meta["run_label"] = column
                builder.meta["sweep_setting"] = setting
                if builder.row_count:
                    builder.account_records()
                    runs.append(builder.finish(self.name))
        if not runs:
            raise StabScopeError(
                "no metrics found: no number in any column of the sweep table",
                path=str(files[0]) if files else None,
                line=1,
            )
        first = runs[0]
        first.skipped += scratch.skipped  # rows the CSV parser could not split (too long, too many cells)
        first.skipped_examples = [*scratch.skipped_examples, *first.skipped_examples]
        first.segments = [*first.segments, *runs[1:]]
        return first
