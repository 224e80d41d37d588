"""The text-log engine: chunks of a log in, rows of the long table out.

Each chunk becomes a zero-copy Arrow array of lines (:func:`lines_array`). Every learned skeleton
(:mod:`ingest.formats.textlog_patterns`) captures the values of all its lines at once, with its
``|``-field plan first where it has one (:mod:`ingest.formats.textlog_pipes`), then with its regex
on RE2 or Python's ``re`` (the engine fixed when it was learned), and the captured columns are
converted by Arrow in bulk. Only lines no skeleton fits go through Python one by one: non-metric
lines (skipped and counted) and new layouts (which become skeletons). :meth:`EngineState.match` is
the half of a chunk that may run on a worker thread (it reads the state, never changes it);
:meth:`EngineState.finish` the half that runs in file order (learning, skipped lines, rows).

Launcher prefixes: where a line's prefix names a rank, its per-rank values (``PER_RANK_NAMES``) are
that rank's series, and its run-level values are kept from one rank only: the lowest rank among the
first block of that kind's lines (``meta['run_level_rank']``), since every rank prints the same
run-level figures; a line without a rank prefix is the run's. A block whose lines all name one rank
keeps scalar rank and stream (no per-row copies: as fast as a bare log).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as _pc

from ingest.formats._common import LogBuilder, parse_timestamps
from ingest.formats.accounting import FIRST_LINES, looks_like_metric_line
from ingest.formats.aliases import canonical_name, keep_apart, to_canonical_unit
from ingest.formats.numbers import ConvertedValues, parse_numbers
from ingest.formats.raw_text import BARE_PREFIX, LAUNCHER_MESSAGE, is_shell_command, own_start, own_text
from ingest.formats.segments import kind_stream
from ingest.formats.textlog_patterns import (
    MAX_SKELETONS_PER_KIND,
    LineKind,
    Skeleton,
    engine_override,
    key_of,
    learn_skeleton,
    value_group,
)
from ingest.formats.textlog_pipes import Split, match_plan
from ingest.formats.textlog_rows import add_masked, epoch_batch_steps, launcher_ranks, note_unread, out_pct_name
from stab_core.metrics import PER_RANK_METRICS, RUN_RANK

pc: Any = _pc  # pyarrow-stubs overloads reject valid calls on generic arrays


PER_RANK_NAMES: Final = PER_RANK_METRICS | {
    "gpu_mem_max_gb",
    "gpu_mem_reserved_gb",
    "gpu_mem_max_reserved_gb",
    "gpu_mem_pct",
    "tflops",
}
"""Metrics a line reports for the rank that printed it (the rest are run-level, rank -1)."""


@dataclass
class _Block:
    """Rows of one layout in one chunk, as raw captured strings."""

    kind: int
    keys: tuple[str, ...]
    rows: Any = field(default_factory=list)
    """line numbers in the chunk: a list (slow path) or an int64 array"""
    step: Any = field(default_factory=list)
    """list of bytes (slow path) or a binary Arrow array (fast path); same for the columns below"""
    rank: Any = field(default_factory=list)
    ts: Any = field(default_factory=list)
    total: list[Any] = field(default_factory=list)
    values: list[Any] = field(default_factory=list)
    """raw strings per key, or float64 arrays already parsed (plain numbers only)"""
    lrank: Any = field(default_factory=list)
    """The rank a launcher prefix names (``[default3]:``), empty where a line has none."""
    rank_ok: bool | None = None
    ts_ok: bool | None = None
    """Whether every line of the block says its rank / time (None: look at this block alone)."""
    steps: npt.NDArray[np.int64] | None = None
    """The step column parsed (-1 where a line prints none), once :meth:`EngineState._parse_steps` ran."""


@dataclass
class MatchedChunk:
    """One chunk matched against the skeletons known when it was queued (no builder, no learning:
    safe on a worker thread)."""

    skeletons: int
    """How many skeletons it was matched against: fewer than now means a stale match."""
    lines: Any
    """The chunk's lines, a binary Arrow array (see :func:`lines_array`)."""
    blocks: list[_Block]
    rest: npt.NDArray[np.int64]
    """Non-blank lines no skeleton took (line numbers in the chunk)."""
    blank: int = 0
    """Empty lines (just their newline), counted for the import report."""
    first_blank: npt.NDArray[np.int64] = field(default_factory=lambda: np.zeros(0, np.int64))
    """The first few of them (line numbers in the chunk)."""


class EngineState:
    """Skeletons learned so far and the step carried between chunks."""

    def __init__(
        self,
        kinds: Sequence[LineKind],
        compiled: Sequence[tuple[re.Pattern[bytes], re.Pattern[bytes], list[str]]],
        ignores: Sequence[re.Pattern[bytes] | None],
        *,
        per_rank_default: int,
    ) -> None:
        self.kinds = kinds
        self.compiled = compiled
        """Each kind's :meth:`LineKind.compiled`."""
        self.ignores = ignores
        """Each kind's ``ignore`` regex, compiled."""
        self.per_rank_default = per_rank_default
        """Rank for per-rank metrics on lines that do not say which rank printed them."""
        self.skeletons: list[Skeleton] = []
        self.last_step: int | None = None
        self.total_steps: int | None = None
        self.run_ranks: dict[int, int] = {}
        """kind -> the launcher rank whose lines give that kind's run-level rows."""
        self._keymaps: dict[tuple[int, str], tuple[str, str | None] | None] = {}
        self._line_maps: dict[tuple[int, tuple[str, ...]], list[tuple[str, str | None] | None]] = {}
        self.forced_engine = engine_override()
        """The regex engine :data:`~ingest.formats.textlog_patterns.ENGINE_ENV` forces on every
        skeleton (None: each skeleton's by the rule)."""

    # -- skeletons
    def learn(self, kind_i: int, line: bytes, m: re.Match[bytes], pairs: list[re.Match[bytes]]) -> None:
        """Add the skeleton of ``line`` (see :func:`~ingest.formats.textlog_patterns.learn_skeleton`),
        up to ``MAX_SKELETONS_PER_KIND`` per kind."""
        if sum(1 for s in self.skeletons if s.kind == kind_i) >= MAX_SKELETONS_PER_KIND:
            return
        names = self.compiled[kind_i][2]
        skeleton = learn_skeleton(
            kind_i, self.kinds[kind_i], names, self.ignores[kind_i], line, m, pairs, forced_engine=self.forced_engine
        )
        if skeleton is not None:
            self.skeletons.append(skeleton)

    # -- chunks
    def process(self, chunk: bytes, first_line: int, path: Path, builder: LogBuilder) -> int:
        """Parse one chunk now, on this thread (see :meth:`match` and :meth:`finish`)."""
        return self.finish(self.match(chunk, tuple(self.skeletons)), chunk, first_line, path, builder)

    def finish(
        self,
        matched: Future[MatchedChunk] | MatchedChunk,
        chunk: bytes,
        first_line: int,
        path: Path,
        builder: LogBuilder,
    ) -> int:
        """The in-order half of a chunk: lines no skeleton took go one by one (new layouts become
        skeletons; other lines are skipped and reported with their line number), then the rows are
        emitted. A match made before the skeletons of earlier chunks were learned is redone.
        Returns the chunk's number of lines (the next chunk's first line number follows)."""
        found = matched.result() if isinstance(matched, Future) else matched
        if found.skeletons != len(self.skeletons):
            found = self.match(chunk, tuple(self.skeletons))
        if len(found.lines) == 0:
            return 0
        blocks = found.blocks
        account = builder.account
        account.unit = "lines"
        if found.blank:
            for row in found.first_blank.tolist():  # the first few with their line numbers, then the rest
                account.ignore("blank", first_line + row)
            account.ignore("blank", 0, found.blank - found.first_blank.shape[0])
        if found.rest.shape[0]:
            texts = [t.rstrip(b"\n") for t in found.lines.take(found.rest).to_pylist()]
            blocks = blocks + self._slow(texts, found.rest, first_line, path, builder)
        builder.mark_lines(first_line)
        parsed = self._emit(blocks, len(found.lines), builder, first_line)
        account.add_read(len(found.lines), parsed)
        return len(found.lines)

    def match(self, chunk: bytes, skeletons: tuple[Skeleton, ...]) -> MatchedChunk:
        """Parse one chunk: each skeleton captures its lines' values in bulk, with Arrow's RE2
        ``extract_regex`` over a zero-copy array of the lines or with Python's ``re`` over the
        chunk, as the skeleton's ``engine`` says (chosen when it was learned:
        :func:`~ingest.formats.textlog_patterns.engine_for`).
        The remaining non-blank lines are left to :meth:`finish`. Reads the state, never changes
        it: safe on a worker thread."""
        split = Split(chunk) if any(skeleton.plan is not None for skeleton in skeletons) else None
        lines: Any = lines_array(chunk) if split is None else split.lines
        n = len(lines)
        if n == 0:
            return MatchedChunk(len(skeletons), lines, [], np.zeros(0, np.int64))
        offsets = np.frombuffer(lines.buffers()[1], dtype=np.int32, count=n + 1)
        unmatched = np.diff(offsets) > 1  # a blank line is just its b"\n"
        blank = n - int(np.count_nonzero(unmatched))
        first_blank = np.flatnonzero(~unmatched)[:FIRST_LINES] if blank else np.zeros(0, np.int64)
        blocks: list[_Block] = []
        for skeleton in skeletons:
            if not skeleton.keys or not unmatched.any():
                continue
            planned = None
            if skeleton.plan is not None and split is not None:
                planned = self._match_plan(skeleton, split, unmatched)
                if planned is not None:
                    unmatched[planned.rows] = False
                    blocks.append(planned)
                    if not unmatched.any():
                        continue
            if skeleton.engine == "re2":
                found = self._match_re2(skeleton, lines, unmatched)
            else:
                found = self._match_python(skeleton, chunk, offsets[:-1], unmatched)
            if found is not None:
                rows, fields = found
                unmatched[rows] = False
                blocks.append(self._block_from_columns(skeleton, fields, rows))
                if planned is not None:
                    _decide_together(planned, blocks[-1])
        for block in blocks:  # the last bulk conversion, while on the worker thread
            block.steps = self._parse_steps(block)
        return MatchedChunk(len(skeletons), lines, blocks, np.flatnonzero(unmatched), blank, first_blank)

    def _match_plan(self, skeleton: Skeleton, split: Split, unmatched: npt.NDArray[np.bool_]) -> _Block | None:
        """The lines of ``skeleton`` that its plan recognises, as a block (values already floats
        where every one of a column is a plain number)."""
        assert skeleton.plan is not None
        found = match_plan(skeleton.plan, skeleton.prefix_names, split, unmatched)
        return None if found is None else self._block_from_columns(skeleton, found[1], found[0])

    @staticmethod
    def _match_re2(
        skeleton: Skeleton, lines: Any, unmatched: npt.NDArray[np.bool_]
    ) -> tuple[npt.NDArray[np.int64], list[Any]] | None:
        idx = np.flatnonzero(unmatched)
        subset = lines if idx.shape[0] == len(lines) else lines.take(idx)
        found = pc.extract_regex(subset, skeleton.re2)
        valid = np.asarray(found.is_valid().to_numpy(zero_copy_only=False), dtype=bool)
        if not valid.any():
            return None
        every = bool(valid.all())
        return idx[valid], [found.field(i) if every else found.field(i).filter(valid) for i in range(skeleton.n_groups)]

    @staticmethod
    def _match_python(
        skeleton: Skeleton, chunk: bytes, line_starts: npt.NDArray[np.int32], unmatched: npt.NDArray[np.bool_]
    ) -> tuple[npt.NDArray[np.int64], list[Any]] | None:
        starts: list[int] = []
        groups: list[tuple[bytes, ...]] = []
        for m in skeleton.regex.finditer(chunk):
            starts.append(m.start())
            groups.append(m.groups())
        if not starts:
            return None
        rows = np.searchsorted(line_starts, np.asarray(starts, dtype=np.int64)).astype(np.int64)
        keep = unmatched[rows]
        cols = [pa.array(c, pa.binary()) for c in zip(*groups, strict=True)]
        if not keep.all():
            rows = rows[keep]
            cols = [c.filter(pa.array(keep)) for c in cols]
        return (rows, cols) if rows.shape[0] else None

    def _block_from_columns(self, skeleton: Skeleton, cols: list[Any], rows: Any) -> _Block:
        n = len(cols[0]) if cols else 0
        block = _Block(skeleton.kind, skeleton.keys, rows=list(range(n)) if rows is None else rows)
        by_name = dict(zip(skeleton.prefix_names, cols[: len(skeleton.prefix_names)], strict=True))
        block.step = by_name.get("step", [])
        block.rank = by_name.get("rank", [])
        block.lrank = by_name.get("lrank", [])
        block.ts = by_name.get("ts", [])
        total = by_name.get("total")
        block.total = [total[0].as_py()] if total is not None and len(total) else []
        block.values = list(cols[len(skeleton.prefix_names) :])
        return block

    def _match_kind(self, line: bytes) -> tuple[int, re.Match[bytes]] | None:
        for kind_i, (prefix, _, _) in enumerate(self.compiled):
            m = prefix.match(line)
            if m:
                return kind_i, m
        return None

    def _slow(
        self,
        texts: list[bytes],
        rows: npt.NDArray[np.int64],
        first_line: int,
        path: Path,
        builder: LogBuilder,
    ) -> list[_Block]:
        """Lines no skeleton matched: parse each, learn its layout; count the non-metric ones, and
        account for every line that gives no record (blank, ignored by reason, or suspect)."""
        blocks: dict[tuple[int, tuple[str, ...]], _Block] = {}
        account = builder.account
        for row, line in zip(rows.tolist(), texts, strict=True):
            if not line.strip(b" \t\r") or BARE_PREFIX.fullmatch(line):
                account.ignore("blank", first_line + row)
                continue
            if is_shell_command(line):
                builder.skip(path, first_line + row, _reason(line, "a shell command, not a metric line"))
                account.ignore("shell/launcher", first_line + row)
                continue
            found = self._match_kind(line)
            if found is None:
                builder.skip(path, first_line + row, _reason(line))
                if LAUNCHER_MESSAGE.match(line, own_start(line)):
                    account.ignore("shell/launcher", first_line + row)
                else:
                    account.note_line(str(path), first_line + row, own_text(line))
                continue
            kind_i, m = found
            keys: tuple[str, ...]
            values: list[bytes]
            for skeleton in self.skeletons:
                whole = skeleton.regex.match(line) if skeleton.kind == kind_i else None
                if whole is not None:
                    keys, values = skeleton.keys, list(whole.groups()[len(skeleton.prefix_names) :])
                    break
            else:
                junk = LAUNCHER_MESSAGE.search(line, m.end())
                pairs = list(self.compiled[kind_i][1].finditer(line, m.end(), junk.start() if junk else len(line)))
                self.learn(kind_i, line, m, pairs)
                keys = tuple(key_of(pair) for pair in pairs)
                values = [pair.group(value_group(pair)) for pair in pairs]
            if not keys:
                builder.skip(path, first_line + row, "metric line without values: " + _reason(line))
                own = own_text(line)
                if looks_like_metric_line(own):
                    account.flag(str(path), first_line + row, own)
                else:
                    account.ignore("format line without values", first_line + row)
                continue
            block = blocks.get((kind_i, keys))
            if block is None:
                block = blocks[(kind_i, keys)] = _Block(kind_i, keys, values=[[] for _ in keys])
            groups = m.groupdict()
            block.rows.append(row)
            block.step.append(groups.get("step") or b"")
            if "rank" in groups:
                block.rank.append(groups.get("rank") or b"")
            block.lrank.append(groups.get("lrank") or b"")
            if "ts" in groups:
                block.ts.append(groups.get("ts") or b"")
            if groups.get("total") and not block.total:
                block.total.append(groups["total"])
            for col, v in zip(block.values, values, strict=True):
                col.append(v)
        return list(blocks.values())

    # -- conversion
    def _keymap(self, kind_i: int, key: str) -> tuple[str, str | None] | None:
        cache_key = (kind_i, key)
        if cache_key not in self._keymaps:
            km = self.kinds[kind_i].keymap
            self._keymaps[cache_key] = km(key) if km is not None else canonical_name(key)
        return self._keymaps[cache_key]

    def _line_names(self, kind_i: int, keys: tuple[str, ...]) -> list[tuple[str, str | None] | None]:
        """Each key's ``(metric, unit)`` on one layout's line, no two on one metric (see
        :func:`~ingest.formats.aliases.keep_apart`: MaxText's DPO line prints ``loss: 0.693`` and
        ``lm_loss: 0.000``, and the second replaced the first)."""
        cache_key = (kind_i, keys)
        if cache_key not in self._line_maps:
            self._line_maps[cache_key] = keep_apart(keys, [self._keymap(kind_i, key) for key in keys])
        return self._line_maps[cache_key]

    def _emit(self, blocks: list[_Block], n_rows: int, builder: LogBuilder, first_line: int) -> int:
        """Add the blocks' rows to ``builder``; returns the lines that gave rows (a line that prints no
        step and follows none is counted as ignored instead)."""
        base = builder.reserve(n_rows)
        parsed = 0
        steps_by_block = [self._steps(b) for b in blocks]
        # lines without a step take the previous metric line's step (in file order)
        known_rows = np.concatenate(
            [np.asarray(b.rows, np.int64)[s >= 0] for b, s in zip(blocks, steps_by_block, strict=True)]
            or [np.zeros(0, np.int64)]
        )
        known_steps = np.concatenate([s[s >= 0] for s in steps_by_block] or [np.zeros(0, np.int64)])
        order = np.argsort(known_rows, kind="stable")
        known_rows, known_steps = known_rows[order], known_steps[order]
        for block, steps in zip(blocks, steps_by_block, strict=True):
            rows = np.asarray(block.rows, dtype=np.int64)
            missing = steps < 0
            if missing.any():
                steps = steps.copy()
                steps[missing] = self._fill(rows[missing], known_rows, known_steps, self.kinds[block.kind])
            valid = steps >= 0
            if not valid.all():
                for row in rows[~valid][:FIRST_LINES].tolist():
                    builder.account.ignore("metric line without step", first_line + row)
                builder.account.ignore("metric line without step", 0, max(0, int((~valid).sum()) - FIRST_LINES))
                rows, steps = rows[valid], steps[valid]
                block = _filter_block(block, valid)
            parsed += steps.shape[0]
            if steps.shape[0] == 0:
                continue
            self._emit_block(block, rows + base, steps, builder, rows + first_line)
        if known_steps.shape[0]:
            self.last_step = int(known_steps[-1])
        return parsed

    def _fill(
        self,
        rows: npt.NDArray[np.int64],
        known_rows: npt.NDArray[np.int64],
        known_steps: npt.NDArray[np.int64],
        kind: LineKind,
    ) -> npt.NDArray[np.int64]:
        """Steps for lines that print none: the previous (or next) metric line's step."""
        pos = np.searchsorted(known_rows, rows) - 1
        prev = np.where(pos >= 0, known_steps[np.maximum(pos, 0)] if known_steps.size else -1, -1)
        if self.last_step is not None:
            prev = np.where(prev < 0, self.last_step, prev)
        elif kind.step_before_first is not None:
            prev = np.where(prev < 0, kind.step_before_first, prev)
        if not kind.fill_next:
            return np.asarray(prev, np.int64)
        nxt = np.searchsorted(known_rows, rows, side="right")
        has_next = nxt < known_rows.shape[0]
        after = np.where(prev >= 0, prev + 1, -1)
        if known_steps.size:
            return np.asarray(
                np.where(has_next, known_steps[np.minimum(nxt, known_rows.shape[0] - 1)], after), np.int64
            )
        return np.asarray(after, np.int64)

    def _steps(self, block: _Block) -> npt.NDArray[np.int64]:
        n = len(block.rows)
        if len(block.step) == 0:
            return np.full(n, -1, dtype=np.int64)
        if block.total and self.total_steps is None:
            total = block.total[0]
            text = total.decode() if isinstance(total, bytes) else str(total)
            if text.isdigit():
                self.total_steps = int(text)
        return block.steps if block.steps is not None else self._parse_steps(block)

    def _parse_steps(self, block: _Block) -> npt.NDArray[np.int64]:
        """The block's steps as printed plus the kind's offset, -1 where a line prints none."""
        if len(block.step) == 0:
            return np.full(len(block.rows), -1, dtype=np.int64)
        offset = self.kinds[block.kind].step_offset
        if self.kinds[block.kind].epoch_batches:
            return epoch_batch_steps(_arrow(block.step).to_pylist()) + offset
        if _all_present(block.step):
            arr = _arrow(block.step).cast(pa.string()).cast(pa.int64()).to_numpy()
            return np.asarray(arr, np.int64) + offset
        steps = _arrow(block.step).to_pylist()
        return np.array([int(s) + offset if s else -1 for s in steps], dtype=np.int64)

    def _emit_block(
        self,
        block: _Block,
        seq: npt.NDArray[np.int64],
        steps: npt.NDArray[np.int64],
        builder: LogBuilder,
        line_numbers: npt.NDArray[np.int64],
    ) -> None:
        kind = self.kinds[block.kind]
        if kind.step_offset:  # the status quotes the step as the log prints it beside the stored one
            builder.meta.setdefault("printed_step_offset", -kind.step_offset)
        line_rank: npt.NDArray[np.int32] | None = None
        if len(block.rank) and (_all_present(block.rank) if block.rank_ok is None else block.rank_ok):
            line_rank = np.asarray(_arrow(block.rank).cast(pa.string()).cast(pa.int32()).to_numpy(), np.int32)
        wall = None
        if len(block.ts) and (_all_present(block.ts) if block.ts_ok is None else block.ts_ok):
            wall = parse_timestamps(_arrow(block.ts).cast(pa.string()), kind.ts_format)
            builder.meta.setdefault("wall_time_zone", "UTC assumed: the log prints local time without a zone")
        # each layout its own streams: interleaved layouts (or ranks) are not a restart
        stream: Any = kind_stream(block.kind, 0 if line_rank is None else line_rank + 1)
        run_stream = stream
        rank_of_line: Any = line_rank
        launcher = launcher_ranks(block.lrank)
        run_rows: npt.NDArray[np.bool_] | None = None
        if launcher is not None:
            # one log of every rank's lines: each line's per-rank values are its rank's; the
            # run-level values come from one rank only (the lowest that printed this kind first),
            # since the other ranks print the same run-level figures again
            lowest, highest = int(launcher.min()), int(launcher.max())
            named = launcher >= 0
            run_rank = self.run_ranks.setdefault(block.kind, int(launcher[named].min()))
            builder.meta.setdefault("run_level_rank", run_rank)
            if lowest != highest or lowest != run_rank:  # else every line is the run rank's: all kept
                run_rows = ~named | (launcher == run_rank)
            if line_rank is None:
                if lowest == highest:  # one rank's lines (the usual file): scalars, no per-row copies
                    rank_of_line = self.per_rank_default if lowest < 0 else lowest
                else:
                    rank_of_line = np.where(named, launcher, self.per_rank_default).astype(np.int32)
                stream, run_stream = kind_stream(block.kind, rank_of_line + 1), kind_stream(block.kind, 0)
        names = self._line_names(block.kind, block.keys)
        for key, mapped, raw in zip(block.keys, names, block.values, strict=True):
            if mapped is None:
                continue
            name, key_unit = mapped
            if isinstance(raw, np.ndarray):  # parsed by the plan: plain numbers, none missing
                conv = ConvertedValues(raw, np.ones(raw.shape[0], dtype=bool), [], None)
            else:
                conv = parse_numbers(_arrow(raw))
                if not conv.ok.all():
                    note_unread(builder, key, _arrow(raw), conv.ok, line_numbers)
            sentinel = kind.sentinels.get(name)
            if sentinel is not None:
                conv.ok &= conv.values != sentinel
            per_rank = kind.all_per_rank or (
                not kind.run_level and (name in PER_RANK_NAMES or name in kind.per_rank_keys)
            )
            line_stream = stream
            if per_rank:
                rank: Any = self.per_rank_default if rank_of_line is None else rank_of_line
            else:
                rank, line_stream = RUN_RANK, run_stream
                if run_rows is not None:
                    conv.ok = conv.ok & run_rows
            groups: list[tuple[str | None, npt.NDArray[np.bool_]]] = [(u, m & conv.ok) for u, m in conv.units]
            unit_rows = np.zeros(len(conv.values), dtype=bool)
            for _, m in groups:
                unit_rows |= m
            groups.append((key_unit, conv.ok & ~unit_rows))
            for unit, mask in groups:
                if not mask.any():
                    continue
                # every value kept (the usual case): no copy, which on the main thread was a large
                # share of a Megatron read (fresh pages for every value of the log)
                kept = conv.values if mask.all() else conv.values[mask]
                out_name, out_values = to_canonical_unit(name, unit, kept)
                builder.note_source(block.kind, out_name, kind.name, key)
                add_masked(builder, out_name, steps, out_values, mask, rank, wall, line_stream, seq)
            if conv.pct is not None:
                pmask = conv.ok & ~np.isnan(conv.pct)
                pct_name = out_pct_name(name)
                add_masked(builder, pct_name, steps, conv.pct[pmask], pmask, rank, wall, line_stream, seq)


def _decide_together(a: _Block, b: _Block) -> None:
    """One skeleton's lines of a chunk, split between its plan and its regex: decide as the regex
    alone would on all of them (wall times and ranks only where every line has one; the planned
    total of the first line)."""
    if len(a.rank) and len(b.rank):
        a.rank_ok = b.rank_ok = _all_present(a.rank) and _all_present(b.rank)
    if len(a.ts) and len(b.ts):
        a.ts_ok = b.ts_ok = _all_present(a.ts) and _all_present(b.ts)
    if len(a.rows) and len(b.rows):
        a.total = b.total = a.total if a.rows[0] < b.rows[0] else b.total


def lines_array(chunk: bytes) -> Any:
    """The chunk's lines (each with its newline) as an Arrow binary array over the chunk's bytes."""
    data = np.frombuffer(chunk, dtype=np.uint8)
    ends = np.flatnonzero(data == 10) + 1
    offsets: Any = np.empty(ends.shape[0] + 1, dtype=np.int32)  # numpy arrays are buffers
    offsets[0] = 0
    offsets[1:] = ends
    return pa.Array.from_buffers(pa.binary(), ends.shape[0], [None, pa.py_buffer(offsets), pa.py_buffer(chunk)])


def _filter_block(block: _Block, valid: npt.NDArray[np.bool_]) -> _Block:
    keep = np.flatnonzero(valid)

    def pick(col: Any) -> Any:
        if isinstance(col, np.ndarray):
            return col[keep]
        return _arrow(col).take(keep) if len(col) else col

    return _Block(
        block.kind,
        block.keys,
        rows=np.asarray(block.rows, dtype=np.int64)[keep],
        step=pick(block.step),
        rank=pick(block.rank),
        lrank=pick(block.lrank),
        ts=pick(block.ts),
        total=block.total,
        values=[pick(col) for col in block.values],
        rank_ok=block.rank_ok,
        ts_ok=block.ts_ok,
    )


def _arrow(col: Any) -> Any:
    return col if isinstance(col, pa.Array) else pa.array(col, pa.binary())


def _all_present(col: Any) -> bool:
    if isinstance(col, pa.Array):
        return len(col) > 0 and col.null_count == 0 and pc.min(pc.binary_length(col)).as_py() > 0
    return len(col) > 0 and all(col)


def _reason(line: bytes, why: str = "not a metric line") -> str:
    text = line.decode("utf-8", "replace").strip()
    return f"{why}: " + (text[:80] + ("..." if len(text) > 80 else ""))
