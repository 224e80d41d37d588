"""How the row builder (:class:`ingest.formats._common.LogBuilder`) turns one metric's pieces into
rows: in file order, the rows a later restart replayed purged (their ranges kept for the rollback
events), the last row of each ``(rank, step)`` kept, sorted by rank and step."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

import numpy as np
import numpy.typing as npt
import pyarrow as pa

FloatArray = npt.NDArray[np.float64]
Values = FloatArray | list[FloatArray]
"""A metric's values: one array, or its pieces in order."""
IntArray = npt.NDArray[np.int64]


@dataclass
class Piece:
    """Rows of one metric from one ``add`` call. Arrays may be shared between the pieces of one
    parsed line (steps, sequence numbers, wall times), so memory grows by ~8 bytes per value."""

    rank: int | npt.NDArray[np.int32]
    step: IntArray
    value: FloatArray
    wall_time: FloatArray | None
    stream: int
    seq: int | IntArray
    """An array, or the first of ``len(step)`` consecutive sequence numbers."""
    origin: str | None = None
    """The raw key the rows were logged under (a column, a tag), where the builder mapped it."""

    def seq_array(self) -> IntArray:
        if isinstance(self.seq, int):
            return np.arange(self.seq, self.seq + self.step.shape[0], dtype=np.int64)
        return self.seq

    def rank_array(self) -> npt.NDArray[np.int32]:
        if isinstance(self.rank, int):
            return np.full(self.step.shape[0], self.rank, dtype=np.int32)
        return self.rank


def metric_column(n: int, code: int, names: list[str]) -> Any:
    """``n`` rows of metric ``names[code]``: a one-name dictionary over zero codes. The codes are
    calloc'd (pages mapped on first touch), so the column costs no writes; ``n`` copies of the name
    as plain strings were 126 MB and ~10% of reading a 9M-row Megatron log."""
    codes: Any = np.zeros(n, dtype=np.int32)  # numpy arrays are buffers
    return pa.DictionaryArray.from_arrays(pa.array(codes), pa.array([names[code]], pa.string()))


def _ordered_series(
    pieces: list[Piece], shared: dict[Any, Any]
) -> tuple[npt.NDArray[np.int32], IntArray, Values, FloatArray | None] | None:
    """Pieces of one series (one rank, one stream) already in file order with rising steps, or None.

    Checked piece by piece (no concatenated temporaries); the concatenated step, rank and wall
    arrays are kept in ``shared`` for the next metric read from the same lines (a text log's line
    gives every metric on it the same step, sequence and wall-time arrays), so they are built once.
    The values stay in their pieces: the column is chunked, not copied (8 MB a metric a million rows).
    """
    first = pieces[0]
    if not all(isinstance(p.rank, int) and p.rank == first.rank and p.stream == first.stream for p in pieces):
        return None
    key: tuple[Any, ...] = tuple(
        (id(p.step), id(p.seq) if isinstance(p.seq, np.ndarray) else p.seq, id(p.wall_time)) for p in pieces
    )
    key += (first.rank,)
    if key not in shared:
        shared[key] = _ordered_arrays(pieces)
    found = shared[key]
    if found is None:
        return None
    _pinned, step, rank, wall = found  # the pieces' arrays stay referenced: their ids stay unique
    return rank, step, [p.value for p in pieces], wall


def _ordered_arrays(pieces: list[Piece]) -> tuple[Any, IntArray, npt.NDArray[np.int32], FloatArray | None] | None:
    last_seq = last_step = -(2**63)
    for p in pieces:
        if isinstance(p.seq, int):
            seq_first, seq_last = p.seq, p.seq + p.step.shape[0] - 1
        else:
            if p.seq.shape[0] > 1 and not np.all(p.seq[1:] > p.seq[:-1]):
                return None
            seq_first, seq_last = int(p.seq[0]), int(p.seq[-1])
        if seq_first <= last_seq or int(p.step[0]) <= last_step:
            return None
        if p.step.shape[0] > 1 and not np.all(p.step[1:] > p.step[:-1]):
            return None
        last_seq, last_step = seq_last, int(p.step[-1])
    step = np.concatenate([p.step for p in pieces])
    rank = np.full(step.shape[0], pieces[0].rank, np.int32)
    wall = None
    if any(p.wall_time is not None for p in pieces):
        wall = np.concatenate(
            [p.wall_time if p.wall_time is not None else np.full(p.step.shape[0], np.nan) for p in pieces]
        )
    pinned = [(p.step, p.seq, p.wall_time) for p in pieces]
    return pinned, step, rank, wall


def one_metric(
    pieces: list[Piece],
    spans: dict[int, list[tuple[int, int]]],
    shared: dict[Any, Any] | None = None,
    abandoned: list[tuple[IntArray, FloatArray]] | None = None,
) -> tuple[npt.NDArray[np.int32], IntArray, Values, FloatArray | None]:
    """``(rank, step, value, wall)`` of one metric, replayed rows purged, de-duplicated, sorted.
    ``shared``: arrays built for earlier metrics of the same table (see :func:`_ordered_series`).
    ``abandoned``: where given, the purged rows of a one-rank metric (steps, values in file order) are
    appended to it, so the attempt a resume replaced is kept, not silently overwritten (issue #31)."""
    if len(pieces) == 1 and isinstance(pieces[0].rank, int):
        only = pieces[0]
        if only.step.shape[0] < 2 or np.all(only.step[1:] > only.step[:-1]):
            # one ordered series as read: no copies beyond the rank column
            n = only.step.shape[0]
            return np.full(n, only.rank, np.int32), only.step, only.value, only.wall_time
    if shared is not None:
        ordered = _ordered_series(pieces, shared)
        if ordered is not None:
            return ordered
    step = np.concatenate([p.step for p in pieces])
    value = np.concatenate([p.value for p in pieces])
    same_rank = all(isinstance(p.rank, int) and p.rank == pieces[0].rank for p in pieces)
    rank = (
        np.full(step.shape[0], pieces[0].rank, np.int32)
        if same_rank
        else np.concatenate([p.rank_array() for p in pieces])
    )
    has_wall = any(p.wall_time is not None for p in pieces)
    wall = (
        np.concatenate([p.wall_time if p.wall_time is not None else np.full(p.step.shape[0], np.nan) for p in pieces])
        if has_wall
        else None
    )
    seq = np.concatenate([p.seq_array() for p in pieces])
    streams = {p.stream for p in pieces}
    single_series = same_rank and len(streams) == 1
    if single_series:
        if not np.all(seq[1:] > seq[:-1]):
            order = np.argsort(seq, kind="stable")
            step, value, rank, seq = step[order], value[order], rank[order], seq[order]
            wall = None if wall is None else wall[order]
        if np.all(step[1:] > step[:-1]):
            return rank, step, value, wall  # the common case: nothing replayed, nothing repeated
        stream = np.full(step.shape[0], next(iter(streams)), np.int64)
    else:
        stream = np.concatenate([np.full(p.step.shape[0], p.stream, np.int64) for p in pieces])
    keep = _purge_replayed(stream, rank, seq, step, spans)
    if not keep.all():
        if abandoned is not None and same_rank:
            dropped = np.flatnonzero(~keep)
            dropped = dropped[np.argsort(seq[dropped], kind="stable")]
            abandoned.append((step[dropped], value[dropped]))
        step, value, rank, seq, stream = step[keep], value[keep], rank[keep], seq[keep], stream[keep]
        wall = None if wall is None else wall[keep]
    # last row wins per (rank, step): order by seq, then stably by (rank, step)
    order = np.argsort(seq, kind="stable")
    order = order[np.lexsort((step[order], rank[order]))]
    r, st = rank[order], step[order]
    last = np.ones(order.shape[0], dtype=bool)
    last[:-1] = (st[1:] != st[:-1]) | (r[1:] != r[:-1])
    order = order[last]
    return rank[order], step[order], value[order], None if wall is None else wall[order]


def _purge_replayed(
    stream: IntArray,
    rank: npt.NDArray[np.int32],
    seq: IntArray,
    step: IntArray,
    spans: dict[int, list[tuple[int, int]]],
) -> npt.NDArray[np.bool_]:
    """Rows of one metric to keep after purging what later restarts replayed.

    A series is the metric on one rank in one stream, in file order. Where its step goes down
    (to ``s0``) a restart replays steps; the series' earlier rows at steps ``>= s0`` are dropped
    (TensorBoard purges the same way, per tag). Each restart's ``(s0, s1)`` (``s1``: the last step
    logged before it) is added to ``spans[stream]``; restarts seen through several metrics of a
    stream are merged into one event by the caller.
    """
    keep = np.ones(step.shape[0], dtype=bool)
    group = stream * (1 << 24) + (rank.astype(np.int64) + 1)
    order = np.lexsort((seq, group))
    g, st = group[order], step[order]
    same = g[1:] == g[:-1]
    down = np.flatnonzero(same & (st[1:] < st[:-1])) + 1
    if down.shape[0] == 0:
        return keep
    bounds = np.flatnonzero(~same) + 1
    starts = np.concatenate([[0], bounds])
    ends = np.concatenate([bounds, [g.shape[0]]])
    for gi in np.unique(np.searchsorted(starts, down, side="right") - 1):
        lo, hi = int(starts[gi]), int(ends[gi])
        seg = st[lo:hi]
        local_down = _restarts(seg, down[(down >= lo) & (down < hi)] - lo)
        if local_down.shape[0] == 0:
            continue
        restart_at = np.full(seg.shape[0], np.iinfo(np.int64).max, dtype=np.int64)
        restart_at[local_down] = seg[local_down]
        later_min = np.minimum.accumulate(restart_at[::-1])[::-1]
        later_min = np.concatenate([later_min[1:], [np.iinfo(np.int64).max]])
        keep[order[lo:hi][seg >= later_min]] = False
        running_max = np.maximum.accumulate(seg)
        s_id = int(stream[order[lo]])
        for i in local_down.tolist():
            spans.setdefault(s_id, []).append((int(seg[i]), int(running_max[i - 1])))
    return keep


MIN_WRITER_DIPS = 3
"""Short dips (a log interval or two) in one series from which a second writer's copy is recognised."""


def _restarts(seg: IntArray, local_down: IntArray) -> IntArray:
    """The steps down in ``seg`` (one series in file order) that are restarts. A restart from a checkpoint
    re-logs the steps it replays in order, up to the last step logged before it (``s1``), before it logs
    any later step. Two processes writing one log (every rank of a job printing the same lines, a
    trainer launched twice by ``srun``) interleave with a lag of a line or two instead: ``1020 1010 1030
    1020 1040``; the step goes down, but the next step at or above ``s1`` is above it. That is a second
    writer's copy of steps already logged, not a rewind: no rows are purged, the last row of each step
    is kept as for any repeated step. A restart the log ends in (``s1`` never reached) stays a restart; so
    does a single short rewind in a series without a second writer."""
    running_max = np.maximum.accumulate(seg)
    at_max = np.flatnonzero(seg == running_max)  # where the series reaches or passes its maximum so far
    nxt = np.searchsorted(at_max, local_down, side="right")  # the first at-max position after each down
    has_next = nxt < at_max.shape[0]
    s1 = running_max[local_down - 1]
    passed = np.zeros(local_down.shape[0], dtype=bool)
    passed[has_next] = seg[at_max[nxt[has_next]]] > s1[has_next]
    # where the lag shrinks the copy catches up at s1 (1040 1030 1050 1040 1050 1060): a dip of a log
    # interval or two that recurs (three times or more) is the same second writer; a restart rewinds once
    rises = np.diff(seg)
    interval = float(np.median(rises[rises > 0])) if (rises > 0).any() else 0.0
    short = (s1 - seg[local_down]) <= 2 * interval
    if np.count_nonzero(short & ~passed) + np.count_nonzero(passed) >= MIN_WRITER_DIPS:
        passed |= short
    return local_down[~passed]


ABANDONED_KEPT: Final = ("loss",)
"""Metrics whose purged rows (an attempt a resume replaced) ride on the ``rollback`` event, so the detector
can look at the abandoned attempt too: the incident there is why the job restarted (issue #31)."""


def rollback_detail(abandoned: dict[str, list[tuple[Any, Any]]], s0: int, s1: int) -> dict[str, Any]:
    """A rollback event's detail: ``replayed_from`` ``s0``, ``replayed_to`` ``s1`` and, where any,
    ``abandoned``: ``{metric: [[steps, values], ...]}``, the purged rows at steps ``[s0, s1]`` (a restart's replayed
    span), one ``[steps, values]`` per abandoned attempt in file order (a new attempt starts where the step
    goes down: the same checkpoint may be resumed several times); JSON-ready lists."""
    out: dict[str, list[list[list[float | None]]]] = {}
    for metric, parts in abandoned.items():
        if not parts:
            continue
        step = np.concatenate([p[0] for p in parts])
        value = np.concatenate([p[1] for p in parts])
        inside = (step >= s0) & (step <= s1)
        step, value = step[inside], value[inside]
        if step.shape[0] == 0:
            continue
        # a step printed twice in a row (a line and its repeat) is one row, the last: only a step that
        # goes down starts a new attempt
        last = np.append(step[1:] != step[:-1], True)
        step, value = step[last], value[last]
        cuts = np.flatnonzero(step[1:] < step[:-1]) + 1
        out[metric] = [
            [[float(x) for x in st], [None if not np.isfinite(v) else float(v) for v in va]]
            for st, va in zip(np.split(step, cuts), np.split(value, cuts), strict=True)
        ]
    span: dict[str, Any] = {"replayed_from": s0, "replayed_to": s1}
    return {**span, "abandoned": out} if out else span


REPLAY_RTOL: Final = 1e-3
"""Relative difference within which a replayed loss is the value the first pass logged (a deterministic
data order and seed reproduce a step's loss to the 4th-6th significant digit after a resume)."""


def built_series(chunks: Sequence[Sequence[Any]]) -> tuple[IntArray, FloatArray]:
    """``(steps, values)`` of one metric as ``LogBuilder._build_table`` built it (its columns' chunks, in
    ``TABLE_SCHEMA`` order: rank, step, metric, value, wall time), sorted by step."""
    step = np.concatenate([np.asarray(c) for c in chunks[1]])
    value = np.concatenate([np.asarray(c) for c in chunks[3]])
    order = np.argsort(step, kind="stable")
    return step[order], value[order]


def replay_unchanged(detail: Mapping[str, Any], kept: Mapping[str, tuple[Any, Any]]) -> bool:
    """Whether a restart's replayed span (``detail``: :func:`rollback_detail`'s) only logged again what the
    kept rows hold (round 22, f28a): every abandoned loss row, at every step it shares with the kept loss
    (``kept``: ``{metric: (steps, values)}``, sorted by step), equal to it within :data:`REPLAY_RTOL`, and at
    least one shared. A resume whose data order and seed reproduce the first pass changed nothing in the
    run: its repeated lines are copies of records (one each), not an attempt the resume replaced, and no
    rollback is told. A span with no abandoned loss (nothing to compare) keeps its rollback."""
    attempts = detail.get("abandoned") or {}
    if not attempts:
        return False
    shared = 0
    for metric, parts in attempts.items():
        if metric not in kept:
            return False
        steps, values = (np.asarray(a, np.float64) for a in kept[metric])
        for part_steps, part_values in parts:
            at = np.searchsorted(steps, np.asarray(part_steps, np.float64))
            inside = at < steps.shape[0]
            inside[inside] &= steps[at[inside]] == np.asarray(part_steps, np.float64)[inside]
            old = np.asarray([np.nan if v is None else v for v in part_values], np.float64)[inside]
            new = values[at[inside]]
            same = np.isclose(old, new, rtol=REPLAY_RTOL, atol=0.0) | (np.isnan(old) & np.isnan(new))
            if not same.all():
                return False
            shared += int(inside.sum())
    return shared > 0
