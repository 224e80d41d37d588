"""The delta planner: a live run grows at its end, and a fold that only extends each (metric, rank) is
written as a delta part on the current base instead of rewriting the whole run.

Each fold usually brings, for every (metric, rank), steps after the last one stored. A delta part
(long, run-level, rollup and rank-bucket files of the new generation) holds just what changes:

- long / run-level: the staged rows (no (metric, rank, step) of a part repeats one of another part);
- rollup: for each metric, every step from the first staged step of a rank >= 0 on, recomputed from
  all ranks' rows (the older rows of those steps read back from the parts): these rows replace the
  earlier parts' rows of the same and later steps;
- rank buckets: each staged (metric, rank)'s buckets, the one it shares with the older rows
  recomputed from them: these rows replace the earlier parts' rows of the same (rank, bucket).

Older rows are read from the part that holds them: a full generation's tail file (the last rows of
each (metric, rank >= 0): its last bucket and the last ``TAIL_STEPS`` steps of the run) when it
covers them, else its long file. Reads combine the parts (see ``read``). Whether a fold may be a
delta is decided by ``delta_refusal``, a pure function of the catalog row and the block indexes.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from ingest.store.blocks import (
    Block,
    Piece,
    SourceReader,
    block_chunks,
    column_numpy,
    footer_index,
    parse_blocks,
    plan_blocks,
    source_blocks,
)
from ingest.store.generation import (
    DENSE_SPAN_MAX,
    Chunk,
    GenerationFiles,
    GenerationWriter,
    RankBuckets,
    RollupAccumulator,
    bucket_width,
)
from ingest.store.layout import ROLLUP, RUN_LEVEL, RunLayout, same_generation
from ingest.store.run_info import RunInfo
from stab_core.metrics import RUN_RANK

DELTA_PARTS_MAX = 24
"""Delta parts on one base before a fold consolidates them into a full generation (reads open every part)."""

DELTA_ROWS_FRACTION = 0.25
"""Rows in delta parts, as a fraction of the base's, before a fold consolidates them."""


def delta_refusal(
    info: RunInfo,
    part_blocks: Sequence[list[Block] | None],
    staged_blocks: Sequence[list[Block]],
    *,
    parts_max: int | None = None,
    rows_fraction: float = DELTA_ROWS_FRACTION,
    dense_span_max: int = DENSE_SPAN_MAX,
) -> str | None:
    """Why the staged batches (their block indexes) cannot be written as a delta part on the current
    parts (the block index of each, base first; None for a part without one), or None when they can.
    ``parts_max`` defaults to ``DELTA_PARTS_MAX`` as it is when called."""
    parts_max = DELTA_PARTS_MAX if parts_max is None else parts_max
    if info.first_step is None or info.last_step is None or not part_blocks:
        return "the run has no rows yet"
    if len(part_blocks) > parts_max:
        return f"{len(part_blocks) - 1} delta parts on the base already (a full merge consolidates them)"
    known = [blocks for blocks in part_blocks if blocks is not None]
    if len(known) < len(part_blocks):
        return "a part has no block index (written by an older StabScope)"
    base_rows = sum(n for _, _, n, _, _ in known[0])
    staged_rows = sum(n for blocks in staged_blocks for _, _, n, _, _ in blocks)
    if info.n_rows - base_rows + staged_rows > rows_fraction * base_rows:
        return f"the delta parts would hold over {rows_fraction:.0%} of the base's rows"
    old_plan, new_plan = plan_blocks(known), plan_blocks(list(staged_blocks))
    if not new_plan:
        return "nothing staged"
    if any(rank < RUN_RANK for _, rank in (*old_plan, *new_plan)):
        return "a rank below -1"
    old_last = {key: max(p.hi for p in pieces) for key, pieces in old_plan.items()}
    if any(key in old_last and min(p.lo for p in pieces) <= old_last[key] for key, pieces in new_plan.items()):
        return "a staged (metric, rank) reaches back to or before its last stored step"
    first = min(info.first_step, *(p.lo for pieces in new_plan.values() for p in pieces))
    last = max(info.last_step, *(p.hi for pieces in new_plan.values() for p in pieces))
    if bucket_width(last - first + 1) != info.heat_bucket:
        return "the heatmap's bucket width changes"
    span: dict[str, tuple[int, int]] = {}
    for (metric, rank), pieces in (*old_plan.items(), *new_plan.items()):
        if rank >= 0:
            lo, hi = span.get(metric, (pieces[0].lo, pieces[0].hi))
            span[metric] = (min(lo, *(p.lo for p in pieces)), max(hi, *(p.hi for p in pieces)))
    if any(hi - lo + 1 > dense_span_max for lo, hi in span.values()):
        return "a metric's rollup is too wide for memory (the full merge rolls it up with DuckDB)"
    return None


class StoredRows:
    """Rows of the current generation's parts, by (metric, rank) from a given step on (the end of a
    block, as a delta needs them): from a part's tail file when it covers them, else its long file."""

    def __init__(self, parts: list[tuple[str, str | None]], blocks: Sequence[list[Block]]) -> None:
        self.parts = parts
        self.plan = plan_blocks(list(blocks))
        self.tails: list[dict[tuple[str, int], list[Piece]]] = [
            plan_blocks([parse_blocks(footer_index(tail) or b"[]")]) if tail else {} for _, tail in parts
        ]
        self.readers: dict[str, SourceReader] = {}

    def _range(self, path: str, start: int, end: int) -> pa.Table:
        """Rows [start, end) of ``path``; the row group last decoded is kept (blocks are asked for in
        file order, and a small part holds many in one group)."""
        reader = self.readers.get(path)
        if reader is None:
            reader = self.readers[path] = SourceReader(path)
        return pa.concat_tables(list(reader.rows(start, end)))

    def rows_from(self, metric: str, rank: int, step: int) -> list[pa.Table]:
        out: list[pa.Table] = []
        pieces = [p for p in self.plan.get((metric, rank), []) if p.hi >= step]
        for source in sorted({p.source for p in pieces}):
            in_part = [p for p in pieces if p.source == source]
            tail = self.tails[source].get((metric, rank), [])
            if len(tail) == 1 and tail[0].lo <= max(step, in_part[0].lo) and tail[0].hi == in_part[-1].hi:
                path, in_part = self.parts[source][1], tail
            else:
                path = self.parts[source][0]
            assert path is not None
            for p in in_part:
                start = p.start
                if p.end - p.start == p.hi - p.lo + 1:  # one row per step: the first row wanted is known
                    start += max(0, step - p.lo)
                table = self._range(path, start, p.end)
                table = table.slice(int(np.searchsorted(table.column("step").to_numpy(), step)))
                if table.num_rows:
                    out.append(table)
        return out


def write_delta(
    info: RunInfo,
    parts: list[tuple[str, str | None]],
    staged: list[str],
    layout: RunLayout,
    gen: int,
) -> GenerationFiles | None:
    """Write the staged rows as delta part ``gen`` on the current parts (``(long file, tail file)``,
    base first), or return None (nothing written) when ``delta_refusal`` gives a reason to merge
    everything instead."""
    raw = [footer_index(long) for long, _ in parts]
    part_blocks = [None if r is None else parse_blocks(r) for r in raw]
    new_blocks = [source_blocks(path) for path in staged]
    if delta_refusal(info, part_blocks, new_blocks) is not None:
        return None
    assert info.first_step is not None and info.last_step is not None
    old = StoredRows(parts, [b for b in part_blocks if b is not None])
    new_plan = plan_blocks(new_blocks)
    old_hi = {k: max(p.hi for p in ps) for k, ps in old.plan.items()}
    new_lo = {k: min(p.lo for p in ps) for k, ps in new_plan.items()}
    new_hi = {k: max(p.hi for p in ps) for k, ps in new_plan.items()}
    first, last = min(info.first_step, *new_lo.values()), max(info.last_step, *new_hi.values())
    width = info.heat_bucket
    keys = sorted(set(old.plan) | set(new_plan))
    files = GenerationFiles.of_generation(
        layout, gen, keys, tail=False, first=first, last=last, n_steps=info.n_steps, n_rows=info.n_rows, width=width
    )
    readers = [SourceReader(path) for path in staged]
    writer = GenerationWriter(files, sorted({m for m, _ in keys}))
    new_steps: list[np.ndarray] = []
    try:
        for metric in sorted({m for m, _ in new_plan}):
            ranks = sorted(r for m, r in new_plan if m == metric)
            chunks: dict[int, list[Chunk]] = {}
            for rank in ranks:
                chunks[rank] = [Chunk.of(t) for t in block_chunks(readers, new_plan[(metric, rank)]) if t.num_rows]
                for c in chunks[rank]:
                    writer.add_rows(metric, rank, c.table)
                rows = sum(c.steps.size for c in chunks[rank])
                writer.end_block(metric, rank, rows, int(chunks[rank][0].steps[0]), int(chunks[rank][-1].steps[-1]))
                new_steps.extend(c.steps for c in chunks[rank])
            per_rank = [r for r in ranks if r >= 0]
            if not per_rank:
                continue
            # Rollup: every step from the first new one on, from all ranks' rows, rank by rank.
            cut = min(new_lo[(metric, r)] for r in per_rank)
            behind = {r for m, r in old.plan if m == metric and r >= 0 and old_hi[(m, r)] >= cut}
            accumulator = RollupAccumulator(cut, cut)
            for rank in sorted(behind | set(per_rank)):
                held = [Chunk.of(t) for t in old.rows_from(metric, rank, cut)] if rank in behind else []
                for c in (*held, *chunks.get(rank, [])):
                    accumulator.cover(int(c.steps[0]), int(c.steps[-1]))
                    accumulator.add(rank, c)
            writer.write_rollup(accumulator.table(metric))
            # Rank buckets: each new block's, the bucket it shares with the older rows recomputed.
            buckets = RankBuckets(width)
            for rank in per_rank:
                prev = old_hi.get((metric, rank))
                if prev is not None and prev // width == new_lo[(metric, rank)] // width:
                    for t in old.rows_from(metric, rank, prev // width * width):
                        buckets.add(Chunk.of(t))
                for c in chunks[rank]:
                    buckets.add(c)
                buckets.finish_block(metric, rank)
            writer.write_rank_buckets(buckets.tables)
        writer.close()
    except BaseException:
        writer.abort()
        raise
    steps = np.unique(np.concatenate(new_steps))
    known = steps[steps <= info.last_step]
    if known.size:  # steps up to the old last step may be there already (another rank's, or run-level)
        stored = [str(same_generation(long, kind)) for long, _ in parts for kind in (ROLLUP, RUN_LEVEL)]
        old_steps = [
            column_numpy(pq.read_table(path, columns=["step"], filters=[("step", ">=", int(known[0]))]).column("step"))
            for path in stored
            if Path(path).exists()
        ]
        known = known[np.isin(known, np.concatenate([np.zeros(0, np.int64), *old_steps]), invert=True)]
    files.n_steps += int(known.size + np.count_nonzero(steps > info.last_step))
    return files
