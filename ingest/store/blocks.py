"""The store's Parquet files, block by block: the block index in a file's footer, reading row ranges,
writing in the background, and reading one metric's row groups.

Staged files and every generation's long file are sorted by (metric, rank, step) without repeated
keys (a one-pass first generation: by (rank, metric, step)), and carry in their footer an index of
their (metric, rank) blocks: rows, first and last step. A merge is then a k-way merge of sorted runs,
one block at a time (see ``full_merge``), and a read of one (metric, rank) reads its row ranges only.
"""

from __future__ import annotations

import itertools
import json
import queue
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from ingest.errors import StabScopeError
from ingest.long_schema import LONG_SCHEMA, LONG_SCHEMA_DICT, null_floats

INDEX_KEY = "stabscope_index"
"""Footer key of the block index: a JSON list of ``[metric, rank, rows, first_step, last_step]``."""

STAGE_ROW_GROUP = 65_536
LONG_ROW_GROUP = 122_880
"""Rows per row group of the long file: a 5,000-step window of one rank decodes one or two groups."""
RUN_LEVEL_ROW_GROUP = 65_536
"""Row groups of the run-level extract (rank -1 rows only), which the overview reads."""
RANK_BUCKETS_ROW_GROUP = 65_536
"""Row groups of the rank buckets: a heatmap reads the groups of its metric only."""

Block = tuple[str, int, int, int, int]
"""``(metric, rank, rows, first_step, last_step)``: one sorted run of a (metric, rank) in a file."""

READ_SCHEMA = pa.schema([LONG_SCHEMA.field(name) for name in ("step", "value", "wall_time")])
"""The columns a merge reads from a source (the block index gives metric and rank)."""
# The long file is read for years: zstd, with the steps delta-encoded and the floats split by byte
# for it. Staged files live for one merge: the same encodings (they cost nothing to write) and a fast codec.
LONG_WRITE_OPTIONS: dict[str, Any] = {
    "compression": "zstd",
    "use_dictionary": ["rank", "metric"],
    "write_statistics": ["rank", "step", "metric"],
    "column_encoding": {"step": "DELTA_BINARY_PACKED", "value": "BYTE_STREAM_SPLIT", "wall_time": "BYTE_STREAM_SPLIT"},
    "store_schema": False,
}
STAGE_WRITE_OPTIONS: dict[str, Any] = {**LONG_WRITE_OPTIONS, "compression": "lz4"}
ROLLUP_WRITE_OPTIONS: dict[str, Any] = {
    "compression": "zstd",
    "use_dictionary": ["metric"],
    "write_statistics": ["metric", "step"],
    "store_schema": False,
}
RANK_BUCKETS_WRITE_OPTIONS: dict[str, Any] = {
    "compression": "zstd",
    "use_dictionary": ["metric", "rank"],
    "write_statistics": ["metric", "rank", "first_step"],
    "store_schema": False,
}


def column_numpy(column: pa.ChunkedArray[Any], nulls_as: type | None = None) -> np.ndarray:
    """A column as one numpy array (``ChunkedArray.to_numpy`` is slow on many chunks); a column
    with nulls needs ``nulls_as=float`` (nulls become NaN)."""
    chunks: list[np.ndarray]
    if nulls_as is not None:
        chunks = [c.to_numpy(zero_copy_only=False).astype(nulls_as, copy=False) for c in column.chunks]
    else:
        chunks = [c.to_numpy() for c in column.chunks]
    if len(chunks) == 1:
        return chunks[0]
    return np.concatenate(chunks) if chunks else np.zeros(0)


class Piece(NamedTuple):
    """Rows ``[start, end)`` of source ``source``: one block, first and last step ``lo``/``hi``.

    A named tuple: opening a window builds one per block of the long file's index (thousands for
    hundreds of ranks), and a frozen dataclass costs several times as much to construct."""

    source: int
    start: int
    end: int
    lo: int
    hi: int


class SourceReader:
    """Reads row ranges of a sorted source, in ascending order, a row group at a time; keeps the
    group it is in until it is used up (the next block of the file usually starts there)."""

    def __init__(self, path: str, columns: Sequence[str] = READ_SCHEMA.names, source: Any = None) -> None:
        """``source``: a file object to read instead of the file at ``path`` (an object read by ranges)."""
        self.file = pq.ParquetFile(path if source is None else source)
        self.schema = pa.schema([READ_SCHEMA.field(c) for c in columns])
        meta = self.file.metadata
        sizes = [meta.row_group(i).num_rows for i in range(meta.num_row_groups)]
        self.starts = np.concatenate([[0], np.cumsum(sizes, dtype=np.int64)])
        self._cached: tuple[int, pa.Table] | None = None

    def rows(self, start: int, end: int) -> Iterator[pa.Table]:
        group = int(np.searchsorted(self.starts, start, side="right")) - 1
        while start < end:
            table = self._group(group)
            first, stop = int(self.starts[group]), min(end, int(self.starts[group + 1]))
            yield table.slice(start - first, stop - start)
            if stop == int(self.starts[group + 1]):
                self._cached = None
            start, group = stop, group + 1

    def range(self, start: int, end: int) -> pa.Table:
        """Rows [start, end) as one table, the row groups decoded in parallel (for reads, where
        nothing else runs: the merge uses ``rows``)."""
        first = int(np.searchsorted(self.starts, start, side="right")) - 1
        last = int(np.searchsorted(self.starts, end, side="left"))
        table = self.file.read_row_groups(list(range(first, last)), columns=self.schema.names, use_threads=True)
        table = table if table.schema == self.schema else table.cast(self.schema)
        return table.slice(start - int(self.starts[first]), end - start)

    def _group(self, group: int) -> pa.Table:
        cached = self._cached
        if cached is not None and cached[0] == group:
            return cached[1]
        # One thread: groups are small, and the merge's writer threads use the other core.
        table = self.file.read_row_group(group, columns=self.schema.names, use_threads=False)
        table = table if table.schema == self.schema else table.cast(self.schema)
        self._cached = (group, table)
        return table


def block_chunks(readers: list[SourceReader], pieces: list[Piece]) -> Iterator[pa.Table]:
    """The rows of one (metric, rank) in step order, one key once (the highest source wins)."""
    if all(a.hi < b.lo for a, b in itertools.pairwise(pieces)):
        for p in pieces:
            yield from readers[p.source].rows(p.start, p.end)
        return
    table = pa.concat_tables([t for p in pieces for t in readers[p.source].rows(p.start, p.end)]).combine_chunks()
    steps = table.column("step").to_numpy()
    order = np.argsort(steps, kind="stable")
    ordered = steps[order]
    last = np.ones(order.size, bool)
    last[:-1] = ordered[1:] != ordered[:-1]
    yield table.take(order[last])


class BackgroundWriter:
    """A Parquet file written by a worker thread: encoding and compression (which release the GIL)
    overlap the caller's reading and arithmetic; at most two tables wait in the queue."""

    def __init__(self, path: Path, schema: pa.Schema, options: dict[str, Any]) -> None:
        self._writer = pq.ParquetWriter(path, schema, **options)
        self._queue: queue.Queue[tuple[pa.Table, int | None] | None] = queue.Queue(maxsize=2)
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name=f"write {path.name}", daemon=True)
        self._thread.start()

    def write(self, table: pa.Table, row_group_size: int | None = None) -> None:
        if self._error is not None:
            raise self._error
        self._queue.put((table, row_group_size))

    def _run(self) -> None:
        while (item := self._queue.get()) is not None:
            if self._error is None:
                try:
                    self._writer.write_table(item[0], row_group_size=item[1])
                except BaseException as exc:  # handed to the caller in close()
                    self._error = exc

    def close(self, metadata: dict[str, str] | None = None) -> None:
        """Wait for the queued tables, add footer ``metadata`` and close; re-raises a write error."""
        self._queue.put(None)
        self._thread.join()
        if self._error is not None:
            self._writer.close()
            raise self._error
        if metadata:
            self._writer.add_key_value_metadata(metadata)
        self._writer.close()


class LongWriter:
    """Writes the long file in row groups of ``LONG_ROW_GROUP`` rows and its block index."""

    def __init__(self, path: Path, metrics: list[str], row_group: int = LONG_ROW_GROUP) -> None:
        self.dictionary = pa.array(metrics, pa.string())
        self.codes = {m: i for i, m in enumerate(metrics)}
        self.writer = BackgroundWriter(path, LONG_SCHEMA_DICT, LONG_WRITE_OPTIONS)
        self.row_group = row_group
        self.buffer: list[pa.Table] = []
        self.buffered = 0
        self.blocks: list[list[Any]] = []

    def add(self, metric: str, rank: int, chunk: pa.Table) -> None:
        n = chunk.num_rows
        self.buffer.append(
            pa.Table.from_arrays(
                [
                    pa.array(np.full(n, rank, np.int32)),
                    chunk.column("step"),
                    pa.DictionaryArray.from_arrays(np.full(n, self._code(metric), np.int32), self.dictionary),
                    chunk.column("value"),
                    chunk.column("wall_time"),
                ],
                schema=LONG_SCHEMA_DICT,
            )
        )
        self.buffered += n
        if self.buffered >= self.row_group:
            self._flush(final=False)

    def _code(self, metric: str) -> int:
        """The metric's index in the dictionary, which grows as metrics appear (older codes stay)."""
        code = self.codes.get(metric)
        if code is None:
            code = self.codes[metric] = len(self.codes)
            self.dictionary = pa.array(list(self.codes), pa.string())
        return code

    def _flush(self, *, final: bool) -> None:
        table = pa.concat_tables(self.buffer)
        keep = table.num_rows if final else table.num_rows - table.num_rows % self.row_group
        self.writer.write(table.slice(0, keep), self.row_group)
        rest = table.slice(keep)
        self.buffer, self.buffered = ([rest] if rest.num_rows else []), rest.num_rows

    def close(self) -> None:
        """Finish the file with the index of the blocks added (``add_block`` after each block)."""
        if self.buffered:
            self._flush(final=True)
        self.writer.close({INDEX_KEY: json.dumps(self.blocks)})


def source_blocks(path: str) -> list[Block]:
    """A merge source's block index (see ``file_blocks``); a staged file must carry one."""
    if footer_index(path) is None and Path(path).parent.name == "staging":
        raise StabScopeError(
            f"{path}: staged file without a block index (written by an older StabScope): finish the "
            "compaction with that version, or delete the run and compact it again"
        )
    return file_blocks(path)


def file_blocks(path: str, file: pq.ParquetFile | None = None) -> list[Block]:
    """A file's block index: from its footer, else computed from its rows: a long file written before
    files carried their index, or a derived file, sorted by metric, rank, step all the same (the one
    route for files of older versions: every read and merge then goes through the index)."""
    raw = footer_index(path, file)
    if raw is not None:
        return parse_blocks(raw)
    return blocks_of_sorted(pq.read_table(path, columns=["metric", "rank", "step"]))


def blocks_of_sorted(table: pa.Table) -> list[Block]:
    """The block index of a table sorted by (metric, rank, step): one entry per run of equal (metric, rank)."""
    if table.num_rows == 0:
        return []
    metric = table.column("metric").combine_chunks()
    if pa.types.is_dictionary(metric.type):
        metric = metric.cast(metric.type.value_type)
    codes = column_numpy(pa.chunked_array([metric.dictionary_encode().indices]))
    ranks, steps = column_numpy(table.column("rank")), column_numpy(table.column("step"))
    starts = np.flatnonzero(np.r_[True, (codes[1:] != codes[:-1]) | (ranks[1:] != ranks[:-1])])
    ends = np.r_[starts[1:], ranks.size]
    names = metric.take(starts).to_pylist()
    return [
        (str(name), int(ranks[a]), int(b - a), int(steps[a]), int(steps[b - 1]))
        for name, a, b in zip(names, starts.tolist(), ends.tolist(), strict=True)
    ]


def parse_blocks(raw: bytes) -> list[Block]:
    """The footer's block index (JSON written by :class:`LongWriter`: names and integers already)."""
    return [(m, r, n, lo, hi) for m, r, n, lo, hi in json.loads(raw)]


def plan_blocks(blocks_by_source: list[list[Block]]) -> dict[tuple[str, int], list[Piece]]:
    plan: dict[tuple[str, int], list[Piece]] = {}
    for source, blocks in enumerate(blocks_by_source):
        offset = 0
        for metric, rank, n, lo, hi in blocks:
            end = offset + n
            plan.setdefault((metric, rank), []).append(Piece(source, offset, end, lo, hi))
            offset = end
    return plan


def footer_index(path: str, file: pq.ParquetFile | None = None) -> bytes | None:
    """The raw block index in the footer of ``path`` (whose ``ParquetFile`` may be open already)."""
    metadata = file.metadata if file is not None else pq.read_metadata(path)
    raw: bytes | None = (metadata.metadata or {}).get(INDEX_KEY.encode())
    return raw


def stats_range(group: Any, column: str) -> tuple[Any, Any] | None:
    """``(min, max)`` of ``column`` in a row group's statistics, None without them."""
    for i in range(group.num_columns):
        chunk = group.column(i)
        if chunk.path_in_schema == column:
            stats = chunk.statistics
            return (stats.min, stats.max) if stats is not None and stats.has_min_max else None
    return None


def read_metric(file: pq.ParquetFile, metric: str, columns: list[str], *, threads: bool = False) -> pa.Table:
    """``columns`` of the rows of ``metric`` of a file sorted by metric, in file order: row groups
    holding only it are read without the metric column, groups it shares are read and filtered."""
    meta = file.metadata
    parts: list[pa.Table] = []
    pure: list[int] = []
    for g in range(meta.num_row_groups + 1):
        bounds = stats_range(meta.row_group(g), "metric") if g < meta.num_row_groups else None
        if g < meta.num_row_groups and bounds is not None and bounds[0] == bounds[1] == metric:
            pure.append(g)
            continue
        if pure:  # a run of groups of this metric alone ends here
            parts.append(file.read_row_groups(pure, columns=columns, use_threads=threads))
            pure = []
        if g < meta.num_row_groups and (bounds is None or bounds[0] <= metric <= bounds[1]):
            mixed = file.read_row_group(g, columns=["metric", *columns], use_threads=False)
            parts.append(mixed.filter(pc.equal(mixed.column("metric"), pa.scalar(metric))).select(columns))
    if not parts:
        return file.schema_arrow.empty_table().select(columns)
    return pa.concat_tables(parts)


def write_by_metric(table: pa.Table, path: Path) -> None:
    """A long table sorted by metric and step, written one metric per row group (of at most 65,536
    rows), so a reader of one metric reads its groups only and the metrics are in the statistics."""
    table = table.sort_by([("metric", "ascending"), ("rank", "ascending"), ("step", "ascending")])
    metrics = table.column("metric").to_numpy(zero_copy_only=False)
    cuts = np.flatnonzero(metrics[1:] != metrics[:-1]) + 1 if metrics.size else np.zeros(0, np.int64)
    with pq.ParquetWriter(path, LONG_SCHEMA, **LONG_WRITE_OPTIONS) as writer:
        writer.add_key_value_metadata({INDEX_KEY: json.dumps(blocks_of_sorted(table))})
        for a, b in zip(np.r_[0, cuts].tolist(), np.r_[cuts, metrics.size].tolist(), strict=True):
            if b > a:
                writer.write_table(table.slice(a, b - a), row_group_size=RUN_LEVEL_ROW_GROUP)
        if not metrics.size:
            writer.write_table(table)


def conform_long(table: pa.Table) -> pa.Table:
    missing = [c for c in ("rank", "step", "metric", "value") if c not in table.column_names]
    if missing:
        raise StabScopeError(f"table lacks the long-form columns {missing} (expected {LONG_SCHEMA.names})")
    if "wall_time" not in table.column_names:
        table = table.append_column("wall_time", null_floats(table.num_rows))
    schema = LONG_SCHEMA
    metric_type = table.schema.field("metric").type
    if pa.types.is_dictionary(metric_type) and pa.types.is_string(metric_type.value_type):
        # read_log's dictionary column stays one (see parts_by_metric): no string per row
        schema = schema.set(schema.get_field_index("metric"), pa.field("metric", LONG_SCHEMA_DICT.field("metric").type))
    return table.select(LONG_SCHEMA.names).cast(schema)
