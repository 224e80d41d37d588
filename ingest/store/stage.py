"""Staging: what a compaction or import reads, buffered per metric and written as sorted, indexed
staging files (committed by ``commit.CommitProtocol.commit_stage``, merged later), and the reading of
shard segments that feeds it.
"""

from __future__ import annotations

import json
import os
import posixpath
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from ingest.long_schema import LONG_SCHEMA, LONG_SCHEMA_DICT, PART_SCHEMA
from ingest.store.blocks import (
    INDEX_KEY,
    STAGE_ROW_GROUP,
    STAGE_WRITE_OPTIONS,
    BackgroundWriter,
    column_numpy,
)
from ingest.store.layout import RunLayout, tmp_target
from ingest.store.rewinds import SegmentSteps, StepExtents, rewind_events, step_extents
from ingest.store.shards import SegmentRead, SegmentRef, read_segment, wide_to_long_parts
from ingest.store.types import IngestReport, ProgressFn

STAGE_ROWS = 2_000_000
"""Rows buffered before a staging Parquet file is written: bounds compaction memory."""


class Stager:
    """Accumulates long rows per metric and writes them as staging Parquet files of at most
    ``STAGE_ROWS`` rows, each sorted by (metric, rank, step) with no repeated key (the last write of
    a key wins) and indexed by block in its footer, ready for the merge (see ``merge_sources``)."""

    def __init__(self, layout: RunLayout) -> None:
        self.layout = layout
        self.prefix = f"{time.time_ns():020d}-{uuid.uuid4().hex[:8]}"
        self.pending: dict[str, list[pa.Table]] = {}
        self.pending_rows = 0
        self.rows = 0
        self.files: list[str] = []
        self.written = 0
        self.blocks: list[list[Any]] = []
        self.open_file: tuple[BackgroundWriter, Path, Path] | None = None

    def add(self, table: pa.Table) -> None:
        """Add a ``LONG_SCHEMA`` table (any order)."""
        self.add_parts(parts_by_metric(table))

    def add_parts(self, parts: Sequence[tuple[str, pa.Table]]) -> None:
        """Add ``(metric, PART_SCHEMA table)`` pairs, as ``wide_to_long_parts`` makes them."""
        for metric, part in parts:
            if part.num_rows == 0:
                continue
            self.pending.setdefault(metric, []).append(part)
            self.pending_rows += part.num_rows
            self.rows += part.num_rows
        if self.pending_rows >= STAGE_ROWS:
            self._write()

    def _write(self) -> None:
        self._close_previous()
        metrics = sorted(self.pending)
        path = self.layout.staging_file(self.prefix, self.written)
        tmp = tmp_target(path)
        writer = BackgroundWriter(tmp, LONG_SCHEMA_DICT, STAGE_WRITE_OPTIONS)
        for code, metric in enumerate(metrics):
            part = sort_unique(pa.concat_tables(self.pending.pop(metric)).combine_chunks())
            self.blocks.extend(blocks_of(metric, part))
            writer.write(with_metric(part, metrics, code), STAGE_ROW_GROUP)
        # The file is finished while the caller reads the next batch; _close_previous waits for it.
        self.open_file = (writer, tmp, path)
        self.written += 1
        self.pending, self.pending_rows = {}, 0

    def _close_previous(self) -> None:
        if self.open_file is not None:
            writer, tmp, path = self.open_file
            writer.close({INDEX_KEY: json.dumps(self.blocks)})
            tmp.rename(path)
            self.files.append(str(path))
            self.open_file, self.blocks = None, []

    def finish(self) -> list[str]:
        if self.pending:
            self._write()
        self._close_previous()
        return self.files


def parts_by_metric(table: pa.Table) -> list[tuple[str, pa.Table]]:
    """A ``LONG_SCHEMA`` table as ``(metric, PART_SCHEMA table)`` pairs, rows kept in arrival order.
    Batches whose metric column is a one-name dictionary (as ``read_log`` builds them) are parts as
    they are: no hashing, sorting or copying of their rows."""
    if table.num_rows == 0:
        return []
    if pa.types.is_dictionary(table.schema.field("metric").type):
        parts: list[tuple[str, pa.Table]] = []
        for batch in table.to_batches():
            metric: Any = batch.column("metric")  # a DictionaryArray
            if len(metric.dictionary) == 1 and metric.null_count == 0:
                parts.append((str(metric.dictionary[0]), pa.Table.from_batches([batch]).select(PART_SCHEMA.names)))
            elif batch.num_rows:
                decoded = pa.Table.from_batches([batch]).set_column(
                    LONG_SCHEMA.get_field_index("metric"), "metric", metric.dictionary_decode()
                )
                parts.extend(parts_by_metric(decoded))
        return parts
    encoded = table.column("metric").combine_chunks().dictionary_encode()
    codes = encoded.indices.to_numpy(zero_copy_only=False)
    order = np.argsort(codes, kind="stable")
    cuts = np.flatnonzero(np.diff(codes[order])) + 1
    rest = table.select(PART_SCHEMA.names)
    return [
        (str(encoded.dictionary[int(codes[order[a]])]), rest.take(order[a:b]))
        for a, b in zip(np.r_[0, cuts], np.r_[cuts, codes.size], strict=True)
    ]


def sort_unique(part: pa.Table) -> pa.Table:
    """``part`` sorted by (rank, step) keeping the last arrival of a repeated key; a table already
    in strictly ascending order (the usual case) is returned as it is."""
    ranks, steps = column_numpy(part.column("rank")), column_numpy(part.column("step"))
    if strictly_ascending(ranks, steps):
        return part
    order = np.argsort(steps, kind="stable")
    order = order[np.argsort(ranks[order], kind="stable")]
    r, s = ranks[order], steps[order]
    last = np.ones(order.size, bool)
    last[:-1] = (r[1:] != r[:-1]) | (s[1:] != s[:-1])
    return part.take(order[last])


def strictly_ascending(ranks: np.ndarray, steps: np.ndarray) -> bool:
    if ranks.size < 2:
        return True
    d_rank, d_step = np.diff(ranks), np.diff(steps)
    return bool(np.all((d_rank > 0) | ((d_rank == 0) & (d_step > 0))))


def blocks_of(metric: str, part: pa.Table) -> list[list[Any]]:
    """The index entries of a part sorted by (rank, step)."""
    ranks, steps = column_numpy(part.column("rank")), column_numpy(part.column("step"))
    if ranks.size == 0:
        return []
    cuts = np.flatnonzero(ranks[1:] != ranks[:-1]) + 1
    starts, ends = np.r_[0, cuts], np.r_[cuts, ranks.size]
    return [
        [metric, int(ranks[a]), int(b - a), int(steps[a]), int(steps[b - 1])]
        for a, b in zip(starts.tolist(), ends.tolist(), strict=True)
    ]


def with_metric(part: pa.Table, metrics: list[str], code: int) -> pa.Table:
    n = part.num_rows
    metric = pa.DictionaryArray.from_arrays(np.full(n, code, np.int32), pa.array(metrics, pa.string()))
    rank, step, value, wall_time = part.columns
    return pa.Table.from_arrays([rank, step, metric, value, wall_time], schema=LONG_SCHEMA_DICT)


@dataclass
class SegmentExtras:
    """What a compaction read besides metric rows: new byte offsets per segment, events, metadata,
    and each segment's step extents per rank (for ``add_rollbacks``). ``user_meta`` and
    ``user_removals``: metadata the user set (and keys removed) with the import, committed with it so
    that the analyses run once, on the metadata the user gave (``Store.update_meta``'s rules)."""

    offsets: dict[str, int] = field(default_factory=dict)
    events: list[dict[str, Any]] = field(default_factory=list)
    meta: dict[str, Any] = field(default_factory=dict)
    user_meta: dict[str, Any] = field(default_factory=dict)
    user_removals: tuple[str, ...] = ()
    segment_steps: list[SegmentSteps] = field(default_factory=list)

    def add_rollbacks(self, stored_last: dict[int, int]) -> None:
        """Add a ``rollback`` event for each restart that rewound a rank's steps in the segments read
        (``rewinds.rewind_events``); ``stored_last``: each rank's last step stored before this pass."""
        self.events.extend(rewind_events(self.segment_steps, stored_last, self.events))


SegmentTodo = Sequence[tuple[Any, str, int]]
PartsReader = Callable[
    [SegmentTodo, IngestReport, SegmentExtras, ProgressFn | None], Iterator[list[tuple[str, pa.Table]]]
]
"""How a compaction reads its new frames (``segment_parts``, or ``ingest.store.engines.spark_engine``'s Spark engine):
``(segment, catalog key, byte offset)`` of each segment with new bytes in, lists of ``(metric,
PART_SCHEMA rows)`` out, the rest recorded in the report and extras (``record_segment``)."""


def segment_parts(
    todo: Sequence[tuple[SegmentRef, str, int]],
    report: IngestReport,
    extras: SegmentExtras,
    progress: ProgressFn | None,
) -> Iterator[list[tuple[str, pa.Table]]]:
    """Each new segment's metric rows as ``wide_to_long_parts``; its frames, rejected records, torn
    tail, events, metadata and end offset are recorded in ``report`` and ``extras`` on the way."""
    total = sum(segment.size - start for segment, _, start in todo)
    done = 0
    for (path, key, start), seg in zip(todo, read_ahead(todo), strict=True):
        if seg.metrics:
            yield wide_to_long_parts(pa.concat_tables(seg.metrics, promote_options="default"))
        record_segment(path, key, seg, report, extras, start, step_extents(seg.metrics))
        done += seg.end_offset - start
        if progress:
            progress(done, max(total, done))


def record_segment(
    path: object,
    key: str,
    seg: SegmentRead,
    report: IngestReport,
    extras: SegmentExtras,
    start: int,
    extents: StepExtents,
) -> None:
    """Record what a segment's read from byte ``start`` gave besides its rows (frames, rejected
    records, torn tail, events, metadata, end offset under catalog ``key``, each rank's ``extents``
    of steps): one bookkeeping for every compaction engine."""
    extras.events.extend(seg.events)
    writer = posixpath.dirname(key.replace(os.sep, "/"))  # the rank directory, local or on object storage
    extras.segment_steps.append(SegmentSteps(writer, continues=start > 0, extents=extents))
    extras.meta.update(seg.meta)
    report.frames += seg.frames
    report.rejected += len(seg.errors)
    report.rejected_examples.extend(str(e) for e in seg.errors[:5])
    if seg.torn_tail:
        report.torn.append(f"{path}: byte {seg.end_offset}: unfinished last frame (kept for later)")
    extras.offsets[key] = seg.end_offset


def read_ahead(todo: Sequence[tuple[SegmentRef, str, int]]) -> Iterator[SegmentRead]:
    """``read_segment`` of each ``(path, key, offset)``, the next one read by a worker thread while the
    caller processes the current one (file reads and CRCs release the GIL): two segments in memory."""
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="read-ahead") as pool:
        pending = pool.submit(read_segment, todo[0][0], todo[0][2]) if todo else None
        for i in range(len(todo)):
            assert pending is not None
            current = pending.result()
            pending = pool.submit(read_segment, todo[i + 1][0], todo[i + 1][2]) if i + 1 < len(todo) else None
            yield current
