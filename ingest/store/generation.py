"""A new generation's files and the one writer that owns them.

A generation has five outputs, whichever planner (``full_merge``, ``direct_merge``, ``delta``) feeds
them: the long file (every row, in blocks of one (metric, rank), with its block index), the run-level
file (the rank -1 blocks), the cross-rank rollup per step, the per-rank step buckets of the heatmap,
and, for a full generation, the tail file (each (metric, rank >= 0)'s last rows, which a later delta
reads back instead of the long file). ``GenerationWriter`` owns them; the accumulators here compute
the rollup and buckets from chunks of rows.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pyarrow as pa

from ingest.store.blocks import (
    RANK_BUCKETS_ROW_GROUP,
    RANK_BUCKETS_WRITE_OPTIONS,
    ROLLUP_WRITE_OPTIONS,
    RUN_LEVEL_ROW_GROUP,
    BackgroundWriter,
    LongWriter,
)
from ingest.store.layout import LONG, RANK_BUCKETS, ROLLUP, RUN_LEVEL, TAIL, RunLayout, tmp_target
from stab_core.metrics import RUN_RANK

HEATMAP_MAX_BUCKETS = 4096
"""Per-rank buckets materialised at compaction; a heatmap of up to this many columns needs no raw scan."""


DENSE_SPAN_MAX = 1 << 22
"""Largest step span (last - first + 1) of one metric whose rollup is accumulated in memory
(dense arrays of about 60 bytes a step); wider metrics are rolled up by DuckDB."""


class RollupAccumulator:
    """Cross-rank statistics of one metric per step over ``[lo, hi]``, fed one rank at a time
    (each rank's steps strictly ascending). Mean and variance by Welford's update (Welford 1962;
    Chan, Golub & LeVeque 1983), stable when the mean dwarfs the spread; ties of min/max go to
    the lowest rank."""

    def __init__(self, lo: int, hi: int) -> None:
        span = hi - lo + 1
        self.lo = lo
        self.n = np.zeros(span, np.int64)
        self.n_nonfinite = np.zeros(span, np.int64)
        self.count = np.zeros(span, np.int64)
        self.mean = np.zeros(span)
        self.m2 = np.zeros(span)
        self.min = np.full(span, np.inf)
        self.max = np.full(span, -np.inf)
        self.argmin = np.zeros(span, np.int32)
        self.argmax = np.zeros(span, np.int32)

    _FIELDS = ("n", "n_nonfinite", "count", "mean", "m2", "min", "max", "argmin", "argmax")
    _FILL: ClassVar[dict[str, float]] = {"min": np.inf, "max": -np.inf}

    @property
    def nbytes(self) -> int:
        return sum(getattr(self, f).nbytes for f in self._FIELDS)

    def cover(self, lo: int, hi: int) -> None:
        """Grow the step range to hold [lo, hi] (by half as much again when it grows upwards)."""
        end = self.lo + self.n.size
        if lo >= self.lo and hi < end:
            return
        base = min(lo, self.lo)
        size = max(hi + 1, end) - base
        size += size // 2 if hi >= end else 0
        for name in self._FIELDS:
            old = getattr(self, name)
            grown = np.full(size, self._FILL.get(name, 0), old.dtype)
            grown[self.lo - base : self.lo - base + old.size] = old
            setattr(self, name, grown)
        self.lo = base

    def add(self, rank: int, chunk: Chunk) -> None:
        idx = chunk.steps - self.lo
        dense = int(idx[-1]) - int(idx[0]) + 1 == idx.size
        where: slice | np.ndarray = slice(int(idx[0]), int(idx[-1]) + 1) if dense else idx
        self.n[where] += 1
        values = chunk.values
        if not chunk.all_finite:
            self.n_nonfinite[where] += chunk.nonfinite
            where, values = idx[chunk.finite], values[chunk.finite]
            if values.size == 0:
                return
        count = self.count[where] + 1
        mean = self.mean[where]
        delta = values - mean
        mean = mean + delta / count
        self.m2[where] += delta * (values - mean)
        self.mean[where] = mean
        self.count[where] = count
        low = self.min[where]
        lower = values < low
        self.min[where] = np.where(lower, values, low)
        self.argmin[where] = np.where(lower, rank, self.argmin[where])
        high = self.max[where]
        higher = values > high
        self.max[where] = np.where(higher, values, high)
        self.argmax[where] = np.where(higher, rank, self.argmax[where])

    def table(self, metric: str) -> pa.Table:
        """Rows for the steps some rank logged, as ``BUILD_ROLLUP`` defines them."""
        at = np.flatnonzero(self.n > 0)
        count = self.count[at]
        none = count == 0

        def col(values: np.ndarray) -> pa.Array[Any]:
            array: pa.Array[Any] = pa.array(values, mask=none if none.any() else None)
            return array

        return pa.table(
            {
                "metric": pa.repeat(pa.scalar(metric), at.size),
                "step": pa.array(at + self.lo),
                "n": pa.array(self.n[at]),
                "n_nonfinite": pa.array(self.n_nonfinite[at]),
                "mean": col(self.mean[at]),
                "min": col(self.min[at]),
                "max": col(self.max[at]),
                "std": col(np.sqrt(self.m2[at] / np.maximum(count, 1))),
                "argmin_rank": col(self.argmin[at]),
                "argmax_rank": col(self.argmax[at]),
            }
        )


@dataclass
class Chunk:
    """Consecutive rows of one (metric, rank) as numpy arrays (``nonfinite`` is meaningful only
    when not ``all_finite``)."""

    table: pa.Table
    steps: np.ndarray
    values: np.ndarray
    all_finite: bool
    finite: np.ndarray
    nonfinite: np.ndarray

    @classmethod
    def of(cls, table: pa.Table) -> Chunk:
        values_col = table.column("value")
        values = values_col.to_numpy()
        finite = np.isfinite(values)
        if finite.all():
            return cls(table, table.column("step").to_numpy(), values, True, finite, finite)
        # NULL (a value-less record) is neither finite nor non-finite, as in SQL.
        nonfinite = ~finite & values_col.is_valid().to_numpy() if values_col.null_count else ~finite
        return cls(table, table.column("step").to_numpy(), values, False, finite, nonfinite)


class RankBuckets:
    """Per-rank step buckets of width ``width`` for the heatmap: per (metric, rank, step // width)
    the first and last step, the mean and max of the finite values and the count of the others."""

    def __init__(self, width: int) -> None:
        self.width = width
        self.tables: list[pa.Table] = []
        self._parts: list[tuple[np.ndarray, ...]] = []

    def add(self, chunk: Chunk) -> None:
        buckets = np.floor_divide(chunk.steps, self.width)
        starts = np.r_[0, np.flatnonzero(np.diff(buckets)) + 1]
        ends = np.r_[starts[1:], buckets.size]
        if chunk.all_finite:
            finite_values, highs = chunk.values, chunk.values
            counts = ends - starts
            nonfinite = np.zeros(starts.size, np.int64)
        else:
            finite_values = np.where(chunk.finite, chunk.values, 0.0)
            highs = np.where(chunk.finite, chunk.values, -np.inf)
            counts = np.add.reduceat(chunk.finite.astype(np.int64), starts)
            nonfinite = np.add.reduceat(chunk.nonfinite.astype(np.int64), starts)
        self._parts.append(
            (
                buckets[starts],
                chunk.steps[starts],
                chunk.steps[ends - 1],
                np.add.reduceat(finite_values, starts),
                counts,
                np.maximum.reduceat(highs, starts),
                nonfinite,
            )
        )

    def finish_block(self, metric: str, rank: int) -> None:
        """Close the block of (metric, rank): join buckets split across chunks into one row."""
        if not self._parts:
            return
        bucket, first, last, total, count, high, nonfinite = (np.concatenate(c) for c in zip(*self._parts, strict=True))
        self._parts = []
        starts = np.r_[0, np.flatnonzero(np.diff(bucket)) + 1]
        if starts.size < bucket.size:
            ends = np.r_[starts[1:], bucket.size]
            bucket, first, last = bucket[starts], first[starts], last[ends - 1]
            total, count = np.add.reduceat(total, starts), np.add.reduceat(count, starts)
            high, nonfinite = np.maximum.reduceat(high, starts), np.add.reduceat(nonfinite, starts)
        none = count == 0
        mask = none if none.any() else None
        self.tables.append(
            pa.table(
                {
                    "metric": pa.repeat(pa.scalar(metric), bucket.size),
                    "rank": pa.array(np.full(bucket.size, rank, np.int32)),
                    "bucket": pa.array(bucket),
                    "first_step": pa.array(first),
                    "last_step": pa.array(last),
                    "mean": pa.array(total / np.maximum(count, 1), mask=mask),
                    "max": pa.array(high, mask=mask),
                    "n_nonfinite": pa.array(nonfinite),
                }
            )
        )


@dataclass
class GenerationFiles:
    """What a planner wrote (temporary paths) and the catalog figures of the new generation."""

    long_path: Path
    run_level_path: Path
    rollup_path: Path
    rank_buckets_path: Path
    first: int | None
    last: int | None
    n_steps: int
    n_rows: int
    ranks: int
    metric_rows: list[tuple[str, bool]]
    width: int
    tail_path: Path | None = None

    @classmethod
    def of_generation(
        cls,
        layout: RunLayout,
        gen: int,
        keys: Sequence[tuple[str, int]],
        *,
        first: int | None,
        last: int | None,
        n_steps: int,
        n_rows: int,
        width: int,
        tail: bool,
    ) -> GenerationFiles:
        """Temporary paths of generation ``gen``'s files (and its tail file with ``tail``), with ranks and
        metric rows counted from the merged (metric, rank) ``keys``."""

        def target(kind: str) -> Path:
            return tmp_target(layout.file(kind, gen))

        metrics = sorted({m for m, _ in keys})
        return cls(
            long_path=target(LONG),
            run_level_path=target(RUN_LEVEL),
            rollup_path=target(ROLLUP),
            rank_buckets_path=target(RANK_BUCKETS),
            ranks=len({r for _, r in keys if r >= 0}),
            metric_rows=[(m, any(k == m and r >= 0 for k, r in keys)) for m in metrics],
            first=first,
            last=last,
            n_steps=n_steps,
            n_rows=n_rows,
            width=width,
            tail_path=target(TAIL) if tail else None,
        )

    def paths(self) -> tuple[Path, ...]:
        tail = () if self.tail_path is None else (self.tail_path,)
        return (self.long_path, self.run_level_path, self.rollup_path, self.rank_buckets_path, *tail)


_ROLLUP_SCHEMA_FIELDS: dict[str, pa.DataType] = {
    "metric": pa.string(),
    "step": pa.int64(),
    "n": pa.int64(),
    "n_nonfinite": pa.int64(),
    "mean": pa.float64(),
    "min": pa.float64(),
    "max": pa.float64(),
    "std": pa.float64(),
    "argmin_rank": pa.int32(),
    "argmax_rank": pa.int32(),
}
ROLLUP_SCHEMA = pa.schema(_ROLLUP_SCHEMA_FIELDS)
_RANK_BUCKETS_SCHEMA_FIELDS: dict[str, pa.DataType] = {
    "metric": pa.string(),
    "rank": pa.int32(),
    "bucket": pa.int64(),
    "first_step": pa.int64(),
    "last_step": pa.int64(),
    "mean": pa.float64(),
    "max": pa.float64(),
    "n_nonfinite": pa.int64(),
}
RANK_BUCKETS_SCHEMA = pa.schema(_RANK_BUCKETS_SCHEMA_FIELDS)


TAIL_STEPS = 128
"""Steps at the end of the run whose rows a full generation also keeps in its small tail file: a
rank up to this far behind the others catches up without reading the long file back."""


def tail_start(hi: int, result: GenerationFiles) -> int:
    """First step of a (metric, rank)'s rows (last step ``hi``) that a full generation's tail keeps."""
    assert result.last is not None
    return min(hi // result.width * result.width, result.last - TAIL_STEPS + 1)


class TailBlock:
    """The rows of one (metric, rank) from step ``start`` on, collected chunk by chunk for the tail file."""

    def __init__(self, metric: str, rank: int, start: int) -> None:
        self.metric, self.rank, self.start = metric, rank, start
        self.tables: list[pa.Table] = []
        self.steps: list[np.ndarray] = []

    def add(self, chunk: Chunk) -> None:
        i = int(np.searchsorted(chunk.steps, self.start))
        if i < chunk.steps.size:  # copied: a slice would hold the whole row group until the tail is written
            self.tables.append(chunk.table.take(np.arange(i, chunk.steps.size)))
            self.steps.append(chunk.steps[i:].copy())

    def write(self, writer: LongWriter) -> None:
        if not self.tables:
            return
        for table in self.tables:
            writer.add(self.metric, self.rank, table)
        rows = sum(s.size for s in self.steps)
        writer.blocks.append([self.metric, self.rank, rows, int(self.steps[0][0]), int(self.steps[-1][-1])])


def bucket_width(span: int) -> int:
    """Steps per rank bucket for a run spanning ``span`` steps (at most ``HEATMAP_MAX_BUCKETS``)."""
    return max(1, -(-span // HEATMAP_MAX_BUCKETS))


class GenerationWriter:
    """Writes the five files of ``files`` as a planner feeds them (``metrics``: the names known up front,
    the long files' dictionary; more may appear). Rows go in block by block (``add_rows`` then
    ``end_block``), rollup and rank-bucket tables as each metric is done, tail blocks at the end."""

    def __init__(self, files: GenerationFiles, metrics: list[str]) -> None:
        self.files = files
        self.long = LongWriter(files.long_path, metrics)
        self.run_level = LongWriter(files.run_level_path, metrics, RUN_LEVEL_ROW_GROUP)
        self.rollup = BackgroundWriter(files.rollup_path, ROLLUP_SCHEMA, ROLLUP_WRITE_OPTIONS)
        self.rank_buckets = BackgroundWriter(files.rank_buckets_path, RANK_BUCKETS_SCHEMA, RANK_BUCKETS_WRITE_OPTIONS)
        self.tail = None if files.tail_path is None else LongWriter(files.tail_path, metrics, RUN_LEVEL_ROW_GROUP)
        self._open_row_files = [w for w in (self.long, self.run_level, self.tail) if w is not None]

    def add_rows(self, metric: str, rank: int, table: pa.Table) -> None:
        """Rows of (metric, rank) in step order: to the long file, and the run-level file for rank -1."""
        self.long.add(metric, rank, table)
        if rank == RUN_RANK:
            self.run_level.add(metric, rank, table)

    def end_block(self, metric: str, rank: int, rows: int, first: int, last: int) -> None:
        """Close the block of (metric, rank) added since the last one: its index entry, its rows counted."""
        block = [metric, rank, rows, first, last]
        self.long.blocks.append(block)
        if rank == RUN_RANK:
            self.run_level.blocks.append(block)
        self.files.n_rows += rows

    def write_rollup(self, table: pa.Table) -> None:
        self.rollup.write(table.cast(ROLLUP_SCHEMA) if table.schema != ROLLUP_SCHEMA else table)

    def write_rank_buckets(self, tables: list[pa.Table]) -> None:
        """One metric's rank buckets (``RankBuckets.tables``), in one write."""
        if tables:
            self.rank_buckets.write(pa.concat_tables(tables).cast(RANK_BUCKETS_SCHEMA), RANK_BUCKETS_ROW_GROUP)

    def write_tail(self, block: TailBlock) -> None:
        assert self.tail is not None
        block.write(self.tail)

    def finish_long_files(self) -> None:
        """Finish the long and run-level files (with their block index) once every row is in: their
        writers' buffers are freed before a planner builds the rollup and rank buckets."""
        self._finish(self.long, self.run_level)

    def close_rows(self) -> None:
        """Finish the long, run-level and tail files, e.g. to query the long file before the rollup
        is complete."""
        self._finish(*self._open_row_files)

    def _finish(self, *writers: LongWriter) -> None:
        for writer in writers:
            if writer in self._open_row_files:
                self._open_row_files.remove(writer)
                writer.close()

    def close(self) -> GenerationFiles:
        self.close_rows()
        self.rollup.close()
        self.rank_buckets.close()
        return self.files

    def abort(self, *extra: Path) -> None:
        """Stop the writers and remove what was written (nothing of it is committed), and ``extra`` files."""
        for writer in (self.long.writer, self.run_level.writer, self.rollup, self.rank_buckets):
            with contextlib.suppress(Exception):
                writer.close()
        if self.tail is not None:
            with contextlib.suppress(Exception):
                self.tail.writer.close()
        for path in (*self.files.paths(), *extra):
            path.unlink(missing_ok=True)
