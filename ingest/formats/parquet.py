"""Parquet: our canonical long table (``rank, step, metric, value[, wall_time]``) or a wide one
(``step`` + one column per metric, optional ``rank``/``wall_time``), read in row-group batches."""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from ingest.errors import StabScopeError
from ingest.formats._common import LogBuilder
from ingest.formats._tabular import STEP_COLUMNS, WALL_COLUMNS, add_wide, find_column, to_float
from ingest.formats.base import Reader
from ingest.formats.numbers import parse_numbers
from stab_core.metrics import RUN_RANK

LONG_COLUMNS = {"step", "metric", "value"}
DECODED_BUDGET_ENV = "STABSCOPE_PARQUET_MAX_BYTES"
"""Environment variable overriding :data:`DEFAULT_DECODED_BUDGET` (bytes)."""
DEFAULT_DECODED_BUDGET = 2 * 1024**3
"""Most memory (bytes) a Parquet file may take once decoded and stored as rows: a small file of
constant columns (run-length encoded, compressed) can otherwise decode into gigabytes."""
STORED_BYTES_PER_VALUE = 72
"""Memory (bytes) one value takes once read: its row (rank, step, metric code, value, wall time, order)
and the builder's copies while it sorts and merges (measured: 98 bytes a row, in all, for a long table)."""
_KEY_COLUMNS = frozenset({"rank", "metric", *STEP_COLUMNS, *WALL_COLUMNS})
"""Columns that say where a value belongs (no row of their own); the others hold values."""
_FIXED_WIDTHS = {"BOOLEAN": 1, "INT32": 4, "FLOAT": 4, "INT64": 8, "DOUBLE": 8, "INT96": 12}


class ParquetReader(Reader):
    name = "parquet"
    description = "Parquet: canonical long (rank, step, metric, value, wall_time) or wide (step + metrics)"

    def sniff(self, head: bytes, path: Path) -> float:
        return 0.97 if head.startswith(b"PAR1") else 0.0

    def fill(self, paths: Sequence[Path], builder: LogBuilder) -> None:
        for stream, path in enumerate(paths):
            builder.source(path)
            try:
                pf = pq.ParquetFile(path)
                names = pf.schema_arrow.names
            except (pa.ArrowException, OSError, UnicodeDecodeError) as exc:
                raise StabScopeError(f"not a readable Parquet file ({_first_line(exc)})", path=str(path)) from exc
            _check_decoded_size(pf, path)
            long_form = set(names) >= LONG_COLUMNS
            step_col = "step" if long_form else find_column(names, STEP_COLUMNS)
            if step_col is None:
                raise StabScopeError(
                    f"expected a long table (step, metric, value) or a step column; columns: {', '.join(names[:10])}",
                    path=str(path),
                )
            row = 0
            for batch in _batches(pf, path):
                table = pa.Table.from_batches([batch])
                if long_form:
                    _add_long(builder, table, stream)
                else:
                    add_wide(
                        builder,
                        table,
                        step_col=step_col,
                        rank_col="rank" if "rank" in names else None,
                        wall_col=find_column(names, WALL_COLUMNS),
                        stream=stream,
                    )
                row += table.num_rows
            builder.advance(path.stat().st_size)


def decoded_budget() -> int:
    """The largest decoded size (bytes) accepted: ``$STABSCOPE_PARQUET_MAX_BYTES`` or 2 GiB."""
    text = os.environ.get(DECODED_BUDGET_ENV, "").strip()
    try:
        return int(float(text)) if text else DEFAULT_DECODED_BUDGET
    except ValueError:
        raise StabScopeError(
            f"${DECODED_BUDGET_ENV} is {text!r}: expected a number of bytes (e.g. 4e9), or unset for 2 GiB"
        ) from None


def decoded_size(pf: pq.ParquetFile) -> int:
    """Bytes ``pf`` takes once read (from its footer alone, before a page is decoded): per column
    chunk, the larger of its uncompressed size and its values at their decoded width (a run-length
    encoded column is small on disk at any size), plus :data:`STORED_BYTES_PER_VALUE` per value of
    a value column (not step, rank, metric or wall time)."""
    meta = pf.metadata
    total = 0
    for group in range(meta.num_row_groups):
        rows = meta.row_group(group)
        for c in range(rows.num_columns):
            chunk = rows.column(c)
            width = _FIXED_WIDTHS.get(chunk.physical_type, 0)
            if not width:  # text: an offset per value, and at least the longest value seen per value
                stats = chunk.statistics if chunk.is_stats_set else None
                if stats is not None and stats.has_min_max:
                    width = max(len(str(stats.min)), len(str(stats.max)))
                width += 4
            total += max(chunk.total_uncompressed_size, chunk.num_values * width)
            if chunk.path_in_schema not in _KEY_COLUMNS:  # a value column: each of its cells becomes a row
                total += chunk.num_values * STORED_BYTES_PER_VALUE
    return total


def _check_decoded_size(pf: pq.ParquetFile, path: Path) -> None:
    """Refuse, before reading a row, a file that would take more memory than :func:`decoded_budget`."""
    need, budget = decoded_size(pf), decoded_budget()
    if need > budget:
        raise StabScopeError(
            f"this {path.stat().st_size:,}-byte Parquet file holds {pf.metadata.num_rows:,} rows that would take "
            f"about {_in_words(need)} of memory once read; the limit is {_in_words(budget)} "
            f"(set ${DECODED_BUDGET_ENV} to a number of bytes to raise it, on a machine with that memory)",
            path=str(path),
        )


def _in_words(size: int) -> str:
    """A byte count as GiB (one decimal), or as MiB below a GiB."""
    return f"{size / 1024**3:.1f} GiB" if size >= 1024**3 else f"{size / 1024**2:.1f} MiB"


def _batches(pf: pq.ParquetFile, path: Path) -> Iterator[pa.RecordBatch]:
    """``pf``'s rows in batches, row group by row group; a row group whose pages do not decode (a
    file cut or damaged after its footer was written) is refused by its number and byte offset."""
    for group in range(pf.num_row_groups):
        try:
            yield from pf.iter_batches(batch_size=1 << 20, row_groups=[group])
        except (pa.ArrowException, OSError) as exc:
            offset = _row_group_offset(pf, group)
            raise StabScopeError(
                f"row group {group} (from byte {offset:,}) does not decode: {_first_line(exc)}; "
                "expected a Parquet file as written (the file is damaged: export it again)",
                path=str(path),
            ) from exc


def _first_line(exc: BaseException) -> str:
    """Arrow's message, its first line (it may hold a second, a blank one): the refusal is one line."""
    text = " ".join(str(exc).split("\n", 1)[0].split())
    return text[:200].rstrip(".") or type(exc).__name__


def _row_group_offset(pf: pq.ParquetFile, group: int) -> int:
    """The byte offset of row group ``group``'s first page (its first column chunk's)."""
    meta = pf.metadata.row_group(group)
    offsets = []
    for c in range(meta.num_columns):
        chunk = meta.column(c)
        first = chunk.dictionary_page_offset if chunk.has_dictionary_page else None
        offsets.append(first if first else chunk.data_page_offset)
    return min(offsets, default=0)


def _add_long(builder: LogBuilder, table: pa.Table, stream: int) -> None:
    n = table.num_rows
    seq = np.arange(builder.reserve(n), builder.reserve(0), dtype=np.int64)
    steps, has_step = to_float(table["step"])
    ranks = (
        np.where(to_float(table["rank"])[1], to_float(table["rank"])[0], RUN_RANK).astype(np.int32)
        if "rank" in table.column_names
        else np.full(n, RUN_RANK, np.int32)
    )
    value_col = table["value"].combine_chunks()
    if pa.types.is_string(value_col.type):
        conv = parse_numbers(value_col)
        values, has_value = conv.values, conv.ok
    else:
        values, has_value = to_float(value_col)
    wall = to_float(table["wall_time"])[0] if "wall_time" in table.column_names else None
    metric: Any = table["metric"].combine_chunks()
    if not pa.types.is_dictionary(metric.type):
        metric = metric.dictionary_encode()
    ok = has_step & has_value & np.asarray(metric.is_valid().to_numpy(zero_copy_only=False), bool)
    codes = metric.indices.to_numpy(zero_copy_only=False)
    for code, name in enumerate(metric.dictionary.to_pylist()):
        sel = ok & (codes == code)
        if not sel.any():
            continue
        # one stream per (metric, rank): a long table is sorted by metric, so steps restart per metric
        for r in np.unique(ranks[sel]):
            rs = sel & (ranks == r)
            builder.add(
                str(name),
                steps[rs].astype(np.int64),
                values[rs],
                rank=int(r),
                wall_time=None if wall is None else wall[rs],
                stream=stream * 1_000_000 + code * 1000 + int(r) + 1,
                seq=seq[rs],
            )
