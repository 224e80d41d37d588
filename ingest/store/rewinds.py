"""Restarts found in shard segments, for both compaction engines.

A job that resumes from a checkpoint with a plain ``ShardWriter`` opens a new segment whose steps for
a rank go back below the steps already written for that rank. The compaction keeps the later rows
(last write wins); this module turns the rewind into one ``rollback`` event, labelled as the log
importer labels a replay (``replayed_from``: the first replayed step, ``replayed_to``: the last step
logged before the restart). ``StabilityMonitor`` logs its own ``rollback`` when a job resumes, so a
rewind whose span already holds a carried ``rollback`` event adds nothing.

Pure: per-segment step extents in, event rows (``{"step", "kind", "label", "detail"}``) out.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from stab_core.replay_spans import merge_spans

StepExtents = dict[int, tuple[int, int]]
"""Per rank: (its first step in arrival order, its largest step) in one segment's new frames."""


@dataclass(frozen=True)
class SegmentSteps:
    """One segment's new frames as the rewind check sees them. ``writer``: the segment's rank
    directory (a writer's segments are in time order there; run-level rows, ``rank = -1``, may come
    from several writers at the same steps, which is no rewind). ``continues``: read from a byte
    offset past 0, i.e. the rest of a segment an earlier compaction began (whose own start was
    checked then), so its first steps are not compared with what is stored."""

    writer: str
    continues: bool
    extents: StepExtents


def step_extents(wide_tables: Sequence[pa.Table]) -> StepExtents:
    """Each rank's first step (in arrival order) and largest step in a segment's wide metric tables
    (``SegmentRead.metrics``: ``rank`` and ``step`` columns)."""
    if not wide_tables:
        return {}
    ranks = np.concatenate([t.column("rank").to_numpy().astype(np.int64, copy=False) for t in wide_tables])
    steps = np.concatenate([t.column("step").to_numpy().astype(np.int64, copy=False) for t in wide_tables])
    if ranks.size == 0:
        return {}
    extents: StepExtents = {}
    for rank in np.unique(ranks).tolist():
        of_rank = steps[ranks == rank]
        extents[int(rank)] = (int(of_rank[0]), int(of_rank.max()))
    return extents


def rewind_events(
    segments: Sequence[SegmentSteps],
    stored_last: Mapping[int, int],
    carried_events: Sequence[Mapping[str, Any]] = (),
) -> list[dict[str, Any]]:
    """The ``rollback`` events of the rewinds in ``segments`` (in segment order).

    ``stored_last``: each rank's last step already stored in the run before this compaction.
    A segment that starts a rank's steps below the largest step its writer logged for that rank so
    far (or, for the writer's first segment here, below ``stored_last``) replays ``[first, largest]``;
    replays overlapping across ranks or segments (one job restart seen on
    every rank) are one event, as the importer merges them. A replayed span that holds a
    ``rollback`` event of ``carried_events`` (the monitor's, in the same frames) is left out.
    """
    seen: dict[tuple[str, int], int] = {}
    spans: list[tuple[int, int]] = []
    for segment in segments:
        for rank, (first, last) in segment.extents.items():
            before = seen.get((segment.writer, rank), stored_last.get(rank))
            if before is not None and not segment.continues and first < before:
                spans.append((first, before))
            seen[segment.writer, rank] = last if before is None else max(before, last)
    logged = [int(e["step"]) for e in carried_events if e.get("kind") == "rollback"]
    return [
        {
            "step": s0,
            "kind": "rollback",
            "label": f"restart replayed steps {s0}-{s1}",
            "detail": {"replayed_from": s0, "replayed_to": s1},
        }
        for s0, s1 in merge_spans(spans)
        if not any(s0 <= step <= s1 for step in logged)
    ]
