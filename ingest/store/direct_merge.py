"""The direct planner: a run's first generation written in one pass over its shard segments, without
staging, when its records arrive in order (each (metric, rank) strictly ascending in steps, ranks in
ascending order). Anything else raises ``NotAppendOnly`` and the compaction stages and merges instead.
"""

from __future__ import annotations

import contextlib
from pathlib import Path

import numpy as np
import pyarrow as pa

from ingest.store.blocks import (
    RANK_BUCKETS_ROW_GROUP,
    BackgroundWriter,
    column_numpy,
)
from ingest.store.generation import (
    DENSE_SPAN_MAX,
    RANK_BUCKETS_SCHEMA,
    TAIL_STEPS,
    Chunk,
    GenerationFiles,
    GenerationWriter,
    RankBuckets,
    RollupAccumulator,
    TailBlock,
    bucket_width,
    tail_start,
)
from ingest.store.layout import RunLayout, tmp_target


class NotAppendOnly(Exception):
    """The input is not in order for a one-pass first generation (see ``Store.compact``)."""


ROLLUP_MEMORY_MAX = 512 * 2**20
"""Bytes of rollup accumulators a one-pass compaction may hold (it holds every metric's at once)."""


class DirectMerger:
    """Writes a run's first generation in one pass over its segments' parts: each (metric, rank)
    goes to the long file as it arrives, so the file is ordered by blocks of (rank, metric), which
    its block index records; rollups of every metric grow as steps arrive; rank buckets are closed
    rank by rank and sorted by metric at the end. Anything that would need sorting or de-duplicating
    raises ``NotAppendOnly`` instead."""

    def __init__(self, layout: RunLayout, gen: int) -> None:
        self.result = GenerationFiles.of_generation(
            layout, gen, [], tail=True, first=None, last=None, n_steps=0, n_rows=0, width=1
        )
        self.writer = GenerationWriter(self.result, [])
        # Rank buckets arrive rank by rank; they are kept as Arrow IPC batches (no encoding) and
        # copied metric by metric at the end, one metric's rows in memory at a time.
        self.unsorted_buckets = tmp_target(layout.unsorted_rank_buckets(gen))
        self.unsorted_sink = pa.OSFile(str(self.unsorted_buckets), "wb")
        self.unsorted_writer = pa.ipc.new_file(self.unsorted_sink, RANK_BUCKETS_SCHEMA)
        self.unsorted_metrics: list[str] = []
        self.rollups: dict[str, RollupAccumulator] = {}
        self.buckets: dict[tuple[str, int], RankBuckets] = {}
        self.last_step: dict[tuple[str, int], int] = {}
        self.tails: dict[tuple[str, int], pa.Table] = {}
        self.steps = _StepSet()
        self.rank: int | None = None
        self.width: int | None = None

    def add(self, parts: list[tuple[str, pa.Table]]) -> None:
        """One segment's parts (``wide_to_long_parts``)."""
        parts = [(metric, part.combine_chunks()) for metric, part in parts]
        if self.width is None and parts:
            # The heatmap's bucket width depends on the run's step span: the first segment (a whole
            # rank's history, as a rule) tells it; finish() checks and gives up if it was wrong.
            lo = min(int(column_numpy(t.column("step")).min()) for _, t in parts)
            hi = max(int(column_numpy(t.column("step")).max()) for _, t in parts)
            self.width = bucket_width(hi - lo + 1)
        for metric, part in parts:
            for rank, table in _split_by_rank(part):
                self._add_block(metric, rank, table)

    def _add_block(self, metric: str, rank: int, table: pa.Table) -> None:
        chunk = Chunk.of(table)
        steps, key = chunk.steps, (metric, rank)
        if steps[0] <= self.last_step.get(key, steps[0] - 1) or (steps.size > 1 and not (np.diff(steps) > 0).all()):
            raise NotAppendOnly(f"{metric} of rank {rank}: steps repeat or go back")
        if rank >= 0 and self.rank is not None and rank < self.rank:
            raise NotAppendOnly(f"rank {rank} after rank {self.rank}")
        if rank >= 0 and rank != self.rank:
            self._close_buckets()
            self.rank = rank
        self.last_step[key] = int(steps[-1])
        self.writer.add_rows(metric, rank, table)
        self.writer.end_block(metric, rank, int(steps.size), int(steps[0]), int(steps[-1]))
        self.steps.add(steps)
        if rank >= 0:
            accumulator = self.rollups.get(metric)
            if accumulator is None:
                accumulator = self.rollups[metric] = RollupAccumulator(int(steps[0]), int(steps[-1]))
            accumulator.cover(int(steps[0]), int(steps[-1]))
            if sum(a.nbytes for a in self.rollups.values()) > ROLLUP_MEMORY_MAX:
                raise NotAppendOnly("rollups too wide for one pass")
            accumulator.add(rank, chunk)
            assert self.width is not None
            self.buckets.setdefault(key, RankBuckets(self.width)).add(chunk)
            self._keep_tail(key, table, self.width + TAIL_STEPS)

    def _keep_tail(self, key: tuple[str, int], table: pa.Table, keep: int) -> None:
        """Hold the last ``keep`` rows of each (metric, rank), copied (a slice would pin the
        segment's buffers): they hold every row the tail file needs (``tail_start``)."""
        held = self.tails.get(key)
        table = table if held is None else pa.concat_tables([held, table])
        n = table.num_rows
        self.tails[key] = table.take(np.arange(max(0, n - keep), n))

    def _close_buckets(self) -> None:
        for (metric, rank), buckets in self.buckets.items():
            buckets.finish_block(metric, rank)
            for table in buckets.tables:
                for batch in table.cast(RANK_BUCKETS_SCHEMA).to_batches():
                    self.unsorted_writer.write_batch(batch)
                    self.unsorted_metrics.append(metric)
        self.buckets = {}

    def finish(self) -> GenerationFiles:
        self._close_buckets()
        self.writer.finish_long_files()
        self.unsorted_writer.close()
        self.unsorted_sink.close()
        r = self.result
        r.first, r.last, r.n_steps = self.steps.first, self.steps.last, self.steps.count
        r.width = bucket_width(0 if r.first is None or r.last is None else r.last - r.first + 1)
        if self.width is not None and r.width != self.width:
            raise NotAppendOnly("the first segment did not span the run")
        keys = self.last_step
        metrics = sorted({m for m, _ in keys})
        r.metric_rows = [(m, m in self.rollups) for m in metrics]
        r.ranks = len({rank for _, rank in keys if rank >= 0})
        for metric in sorted(self.rollups):
            self.writer.write_rollup(self.rollups.pop(metric).table(metric))
        _group_by_metric(self.unsorted_buckets, self.unsorted_metrics, self.writer.rank_buckets, metrics)
        self.unsorted_buckets.unlink()
        for metric, rank in sorted(self.tails):
            block = TailBlock(metric, rank, tail_start(keys[(metric, rank)], r))
            block.add(Chunk.of(self.tails.pop((metric, rank))))
            self.writer.write_tail(block)
        return self.writer.close()

    def abort(self) -> None:
        """Stop the writers and remove what was written (nothing of it is committed)."""
        for writer in (self.unsorted_writer, self.unsorted_sink):
            with contextlib.suppress(Exception):
                writer.close()
        self.writer.abort(self.unsorted_buckets)


def _group_by_metric(source: Path, batch_metrics: list[str], writer: BackgroundWriter, metrics: list[str]) -> None:
    """Copy rank buckets kept rank by rank (Arrow IPC batches, ``batch_metrics[i]`` the metric of
    batch i) metric by metric, so that a metric's rows lie together, ranks ascending."""
    by_metric: dict[str, list[int]] = {}
    for i, metric in enumerate(batch_metrics):
        by_metric.setdefault(metric, []).append(i)
    with pa.OSFile(str(source), "rb") as f:
        reader = pa.ipc.open_file(f)
        for metric in metrics:
            if by_metric.get(metric):
                batches = [reader.get_batch(i) for i in by_metric[metric]]
                writer.write(pa.Table.from_batches(batches, RANK_BUCKETS_SCHEMA), RANK_BUCKETS_ROW_GROUP)


class _StepSet:
    """The distinct steps seen, as a growing bitmap from the first step seen."""

    def __init__(self) -> None:
        self.base = 0
        self.seen = np.zeros(0, bool)

    def add(self, steps: np.ndarray) -> None:
        lo, hi = int(steps[0]), int(steps[-1])
        if self.seen.size == 0:
            self.base, self.seen = lo, np.zeros(hi - lo + 1, bool)
        elif lo < self.base or hi >= self.base + self.seen.size:
            base = min(lo, self.base)
            size = max(hi + 1, self.base + self.seen.size) - base
            if size > 8 * DENSE_SPAN_MAX:
                raise NotAppendOnly("step span too wide for one pass")
            grown = np.zeros(size + size // 2 if hi >= self.base + self.seen.size else size, bool)
            grown[self.base - base : self.base - base + self.seen.size] = self.seen
            self.base, self.seen = base, grown
        dense = hi - lo + 1 == steps.size
        self.seen[slice(lo - self.base, hi - self.base + 1) if dense else steps - self.base] = True

    @property
    def count(self) -> int:
        return int(np.count_nonzero(self.seen))

    @property
    def first(self) -> int | None:
        hits = np.flatnonzero(self.seen)
        return int(hits[0]) + self.base if hits.size else None

    @property
    def last(self) -> int | None:
        hits = np.flatnonzero(self.seen)
        return int(hits[-1]) + self.base if hits.size else None


def _split_by_rank(part: pa.Table) -> list[tuple[int, pa.Table]]:
    """A part's rows by rank, in ascending rank order, each rank's rows in arrival order."""
    ranks = column_numpy(part.column("rank"))
    if ranks.size == 0:
        return []
    if ranks[0] == ranks[-1] and bool((ranks == ranks[0]).all()):
        return [(int(ranks[0]), part)]
    order = np.argsort(ranks, kind="stable")
    ordered = ranks[order]
    cuts = np.flatnonzero(np.diff(ordered)) + 1
    return [
        (int(ordered[a]), part.take(order[a:b]))
        for a, b in zip(np.r_[0, cuts].tolist(), np.r_[cuts, ordered.size].tolist(), strict=True)
    ]
