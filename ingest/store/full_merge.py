"""The full planner: merge sorted sources (the current base, its delta parts, the staged batches) into a
new base generation.

Every source is sorted by (metric, rank, step) without repeated keys and carries its block index
(``blocks``). A merge is then a k-way merge of sorted runs, one block at a time: the blocks of one
(metric, rank) from several sources are streamed in priority order when their step ranges are
disjoint and ascending (the append-only case: no sort, no hash table), else concatenated and
de-duplicated (the last write wins). The cross-rank rollup and the rank buckets are computed on the
way, one metric at a time, so memory is bounded by a row group per source plus one metric's step span.
"""

from __future__ import annotations

import duckdb
import numpy as np

from ingest.store import queries
from ingest.store.blocks import Piece, SourceReader, block_chunks, plan_blocks, source_blocks
from ingest.store.catalog import fetch_one
from ingest.store.generation import (
    DENSE_SPAN_MAX,
    Chunk,
    GenerationFiles,
    GenerationWriter,
    RankBuckets,
    RollupAccumulator,
    TailBlock,
    bucket_width,
    tail_start,
)
from ingest.store.layout import RunLayout


def merge_sources(
    engine: duckdb.DuckDBPyConnection, sources: list[str], layout: RunLayout, gen: int
) -> GenerationFiles:
    """Merge sorted sources (lowest priority first) into the files of full generation ``gen``."""
    plan = plan_blocks([source_blocks(path) for path in sources])
    keys = sorted(plan)
    pieces = [p for ps in plan.values() for p in ps]
    first = min((p.lo for p in pieces), default=None)
    last = max((p.hi for p in pieces), default=None)
    span = 0 if first is None or last is None else last - first + 1
    files = GenerationFiles.of_generation(
        layout, gen, keys, tail=True, first=first, last=last, n_steps=0, n_rows=0, width=bucket_width(span)
    )
    merger = _FullMerger(sources, plan, files, span)
    try:
        for metric in sorted({m for m, _ in keys}):
            merger.merge_metric(metric, [r for m, r in keys if m == metric])
        merger.close(engine)
    except BaseException:
        merger.writer.abort()
        raise
    return files


class _FullMerger:
    """Streams every block of a plan into the new generation's files (see ``merge_sources``)."""

    def __init__(
        self, sources: list[str], plan: dict[tuple[str, int], list[Piece]], files: GenerationFiles, span: int
    ) -> None:
        self.readers = [SourceReader(path) for path in sources]
        self.plan = plan
        self.files = files
        self.steps_seen = np.zeros(span if span <= DENSE_SPAN_MAX else 0, bool)
        self.writer = GenerationWriter(files, sorted({m for m, _ in plan}))
        self.rank_buckets = RankBuckets(files.width)
        self.wide_metrics: list[str] = []

    def merge_metric(self, metric: str, ranks: list[int]) -> None:
        rank_pieces = [p for r in ranks if r >= 0 for p in self.plan[(metric, r)]]
        accumulator = None
        if rank_pieces:
            lo, hi = min(p.lo for p in rank_pieces), max(p.hi for p in rank_pieces)
            if hi - lo + 1 <= DENSE_SPAN_MAX:
                accumulator = RollupAccumulator(lo, hi)
            else:
                self.wide_metrics.append(metric)
        for rank in ranks:
            self._merge_block(metric, rank, accumulator)
        if accumulator is not None:
            self.writer.write_rollup(accumulator.table(metric))
        self.writer.write_rank_buckets(self.rank_buckets.tables)
        self.rank_buckets.tables = []

    def _merge_block(self, metric: str, rank: int, accumulator: RollupAccumulator | None) -> None:
        rows, lo, hi = 0, 0, 0
        pieces = self.plan[(metric, rank)]
        tail = TailBlock(metric, rank, tail_start(max(p.hi for p in pieces), self.files)) if rank >= 0 else None
        for table in block_chunks(self.readers, pieces):
            chunk = Chunk.of(table)
            if tail is not None:
                tail.add(chunk)
            self.writer.add_rows(metric, rank, table)
            if self.steps_seen.size and self.files.first is not None:
                self.steps_seen[chunk.steps - self.files.first] = True
            if rank >= 0:
                if accumulator is not None:
                    accumulator.add(rank, chunk)
                self.rank_buckets.add(chunk)
            lo = int(chunk.steps[0]) if rows == 0 else lo
            hi = int(chunk.steps[-1])
            rows += chunk.steps.size
        if rank >= 0:
            self.rank_buckets.finish_block(metric, rank)
        if tail is not None:
            self.writer.write_tail(tail)
        self.writer.end_block(metric, rank, rows, lo, hi)

    def close(self, engine: duckdb.DuckDBPyConnection) -> None:
        """Finish the files; metrics too wide for the in-memory rollup are rolled up by DuckDB (which
        works out of core: the better tool there)."""
        self.writer.close_rows()
        long_files = [str(self.files.long_path)]
        for metric in self.wide_metrics:
            table = engine.sql(queries.BUILD_ROLLUP, params={"files": long_files, "metric": metric}).to_arrow_table()
            self.writer.write_rollup(table)
        self.writer.close()
        if self.steps_seen.size:
            self.files.n_steps = int(np.count_nonzero(self.steps_seen))
        elif self.files.n_rows:
            row = fetch_one(engine.execute(queries.COUNT_STEPS, {"files": long_files}))
            self.files.n_steps = int(row[0]) if row else 0
