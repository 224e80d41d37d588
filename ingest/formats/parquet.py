"""Parquet: our canonical long table (``rank, step, metric, value[, wall_time]``) or a wide one
(``step`` + one column per metric, optional ``rank``/``wall_time``), read in row-group batches."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from ingest.errors import StabScopeError
from ingest.formats._common import LogBuilder, parse_numbers
from ingest.formats._tabular import STEP_COLUMNS, WALL_COLUMNS, add_wide, find_column, to_float
from ingest.formats.base import Reader
from stab_core.metrics import RUN_RANK

LONG_COLUMNS = {"step", "metric", "value"}


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
