"""What every reader shares: the ``ParsedLog`` result, the row builder that turns reader output into
the canonical long table (with rollback detection), vectorised value parsing and chunked file input.

Readers append columns in file order to a :class:`LogBuilder`; ``finish`` then
1. detects restarts: within one *stream* (one independent step sequence: a text log and its
   continuation files, one TensorBoard directory, one per-metric CSV) a step that goes *down* starts
   a new segment that re-logs steps ``[s0, s1]`` already seen; it is recorded as a ``rollback``
   event and every earlier row of that stream at a step ``>= s0`` is dropped (the later segment
   wins, as TensorBoard's own loader purges orphaned steps);
2. keeps the last row of each ``(rank, metric, step)``;
3. sorts by metric, rank, step.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Final

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as _pc

from ingest.errors import StabScopeError
from ingest.formats.accounting import LineAccount, skip_reason_group
from ingest.formats.aliases import canonical_name, keep_apart, own_name, to_canonical_unit
from ingest.formats.numbers import utf8_or_null
from ingest.formats.segments import one_source_per_metric, segment_cuts, segment_of
from ingest.long_schema import LONG_SCHEMA_DICT
from ingest.shards import null_floats
from stab_core.metrics import RUN_RANK
from stab_core.runview import RunEvent

pc: Any = _pc  # pyarrow-stubs overloads reject valid calls on generic arrays

FloatArray = npt.NDArray[np.float64]
Values = FloatArray | list[FloatArray]
"""A metric's values: one array, or its pieces in order."""
IntArray = npt.NDArray[np.int64]
Progress = Callable[[int, int], None]

MAX_SKIPPED_EXAMPLES: Final = 5
CHUNK_BYTES: Final = 4 * 1024 * 1024
BUILD_THREADS: Final = min(2, os.cpu_count() or 1)
PARALLEL_BUILD_ROWS: Final = 1 << 20
"""Tables of at least this many rows are built on ``BUILD_THREADS`` threads."""

TABLE_SCHEMA: Final[pa.Schema] = LONG_SCHEMA_DICT
"""The canonical long form every reader produces, metric by metric, each sorted by (rank, step).
``metric`` is dictionary-encoded, one chunk per metric (each chunk's dictionary holds its one name);
the other columns may be chunked more finely (a text log's values stay in their read chunks)."""


@dataclass
class ParsedLog:
    """One run read from a log: the canonical long table plus what the log says about the run.

    ``table``: ``rank`` int32 (-1 = run level), ``step`` int64, ``metric`` string (canonical name or
    the sanitised foreign one), ``value`` float64 (NaN/Inf kept), ``wall_time`` float64 (seconds since
    the epoch; null when unknown). ``skipped``: input lines (or records) that carried no metric;
    ``skipped_examples``: the first few as ``(file, line number or byte offset, reason)``.
    """

    format: str
    table: pa.Table
    events: list[RunEvent] = field(default_factory=list)
    meta: dict[str, Any] = field(default_factory=dict)
    skipped: int = 0
    skipped_examples: list[tuple[str, int, str]] = field(default_factory=list)
    source_files: list[str] = field(default_factory=list)
    kept_over: list[dict[str, str]] = field(default_factory=list)
    """Metrics two line layouts gave: which was kept, over which, by what rule (``ingest.formats.segments``)."""
    segments: list[ParsedLog] = field(default_factory=list)
    """Further runs the same input held (its steps started again at the first step), in file order."""
    lines: tuple[int, int] | None = None
    """First and last line (1-based, in the file that holds it) of a text log's rows."""
    account: LineAccount | None = None
    """Where every line (or record) of the input went (:mod:`ingest.formats.accounting`); on the
    first run of an input only, since it describes the whole input."""

    @property
    def metrics(self) -> list[str]:
        """Distinct metric names, sorted."""
        return sorted(pc.unique(self.table["metric"]).to_pylist())

    @property
    def step_range(self) -> tuple[int, int] | None:
        """``(first, last)`` step over all rows, None for an empty table."""
        if self.table.num_rows == 0:
            return None
        mm = pc.min_max(self.table["step"])
        return int(mm["min"].as_py()), int(mm["max"].as_py())

    def series(self, metric: str, rank: int = RUN_RANK) -> tuple[IntArray, FloatArray]:
        """``(steps, values)`` of one metric and rank, sorted by step (numpy, for callers and tests)."""
        t = self.table
        mask = pc.and_(pc.equal(t["metric"], metric), pc.equal(t["rank"], rank))
        sub = t.filter(mask)
        steps = sub["step"].to_numpy()
        values = sub["value"].to_numpy()
        order = np.argsort(steps, kind="stable")
        return steps[order].astype(np.int64), values[order].astype(np.float64)


# --------------------------------------------------------------------------- time parsing


def parse_timestamps(raw: Any, fmt: str = "%Y-%m-%d %H:%M:%S") -> FloatArray:
    """Seconds since the epoch (NaN when unparseable) of strings like ``2026-05-20 02:22:56,141``.

    The first 19 characters are parsed with ``fmt``; a ``,mmm`` or ``.ffffff`` fraction after them is
    added. Logs print local time without a zone: it is read as UTC (the offset is unknowable).
    """
    strings = utf8_or_null(raw)
    head = pc.utf8_slice_codeunits(strings, 0, 19)
    ts = pc.strptime(head, format=fmt, unit="s", error_is_null=True)
    seconds = pc.cast(ts, pa.int64()).to_numpy(zero_copy_only=False).astype(np.float64)
    seconds = np.where(np.asarray(ts.is_valid().to_numpy(zero_copy_only=False)), seconds, np.nan)
    frac = pc.extract_regex(strings, r"^.{19}[,.](?P<f>[0-9]{1,9})")
    if frac.null_count < len(frac):
        digits = frac.field("f")
        valid = np.asarray(frac.is_valid().to_numpy(zero_copy_only=False), dtype=bool)
        fvals = np.zeros(len(strings))
        if valid.any():
            d = digits.filter(pa.array(valid))
            num = pc.cast(d, pa.float64()).to_numpy(zero_copy_only=False)
            scale = np.power(10.0, pc.utf8_length(d).to_numpy(zero_copy_only=False).astype(np.float64))
            fvals[valid] = num / scale
        seconds = seconds + fvals
    return seconds.astype(np.float64)


# --------------------------------------------------------------------------- the builder


@dataclass
class _Piece:
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


class LogBuilder:
    """Collects rows (one metric per ``add`` call, in file order) and builds the ``ParsedLog``."""

    def __init__(self, paths: Sequence[Path], progress: Progress | None = None) -> None:
        self.paths = [Path(p) for p in paths]
        self.total_bytes = sum(_size(p) for p in self.paths)
        self.done_bytes = 0
        self._progress = progress
        self._pieces: dict[str, list[_Piece]] = {}
        self._seq_next = 0
        self.events: list[RunEvent] = []
        self.meta: dict[str, Any] = {}
        self.skipped = 0
        self.skipped_examples: list[tuple[str, int, str]] = []
        self.source_files: list[str] = []
        self.sources: dict[tuple[int, str], tuple[str, str]] = {}
        """``(layout index, metric) -> (layout name, key as printed)`` as text readers note them."""
        self.line_marks: list[tuple[int, int]] = []
        """``(first sequence number, its line number)`` of each text chunk: ``seq`` -> input line."""
        self.run_headings: list[int] = []
        """Sequence numbers of the lines whose heading starts another run (``ingest.formats.sections``)."""
        self.account = LineAccount()
        """Where every line went: text readers fill it as they read; for other readers
        :meth:`account_records` fills it from the rows and the skips once they have read."""
        self._skip_groups = LineAccount(unit="records")
        """The skips reported through :meth:`skip`, grouped by reason (for :meth:`account_records`)."""

    # -- progress and bookkeeping
    def advance(self, nbytes: int) -> None:
        """Report ``nbytes`` more input consumed to the progress callback."""
        self.done_bytes += nbytes
        if self._progress is not None:
            self._progress(min(self.done_bytes, self.total_bytes), self.total_bytes)

    def source(self, path: Path) -> None:
        """Record a file the log was read from."""
        s = str(path)
        if s not in self.source_files:
            self.source_files.append(s)

    def skip(self, path: Path | str, where: int, reason: str, count: int = 1) -> None:
        """Count ``count`` skipped lines/records; keep the first few as examples."""
        self.skipped += count
        self._skip_groups.ignore(skip_reason_group(reason), where, count)
        if len(self.skipped_examples) < MAX_SKIPPED_EXAMPLES:
            self.skipped_examples.append((str(path), int(where), reason))

    def account_records(self) -> None:
        """Fill the account of a reader that reads records, not text lines (CSV and JSON-lines rows,
        TensorBoard scalar events, Parquet rows): ``parsed`` the records that gave a value (distinct
        sequence numbers), ``ignored`` the records reported to :meth:`skip` by reason, and the
        records with a step and no metric (:meth:`note_empty`) as ``record without values``."""
        seqs = [p.seq_array() for pieces in self._pieces.values() for p in pieces]
        parsed = int(np.unique(np.concatenate(seqs)).shape[0]) if seqs else 0
        account = self._skip_groups
        account.add_read(parsed + account.ignored_total, parsed)
        self.account = account

    def note_empty(self, where: int, count: int) -> None:
        """``count`` records that hold a step and no metric value, the first at line ``where``: not
        an error (a row of another logger's columns), but the import report counts them."""
        self._skip_groups.ignore("record without values", where, count)

    def want_examples(self) -> bool:
        """True while more skipped-line examples would be kept."""
        return len(self.skipped_examples) < MAX_SKIPPED_EXAMPLES

    def reserve(self, n: int) -> int:
        """Reserve ``n`` sequence numbers (file order) and return the first."""
        base = self._seq_next
        self._seq_next += n
        return base

    def event(self, step: int, kind: str, label: str = "", **detail: Any) -> None:
        """Record a run event read from the log."""
        self.events.append(RunEvent(step=int(step), kind=kind, label=label, detail=dict(detail)))

    def note_source(self, layout_index: int, metric: str, layout: str, key: str) -> None:
        """Record that rows of ``metric`` in layout ``layout_index``'s streams were printed as ``key``."""
        self.sources.setdefault((layout_index, metric), (layout, key))

    def mark_lines(self, first_line: int) -> None:
        """The next reserved sequence number is input line ``first_line`` (text readers, per chunk)."""
        if not self.line_marks or self.line_marks[-1][0] != self._seq_next:
            self.line_marks.append((self._seq_next, first_line))
        else:
            self.line_marks[-1] = (self._seq_next, first_line)

    # -- rows
    def add(
        self,
        metric: str,
        steps: Any,
        values: Any,
        *,
        rank: int | Any = RUN_RANK,
        wall_time: Any = None,
        stream: int = 0,
        seq: Any = None,
        unit: str | None = None,
        canonical: bool = False,
        origin: str | None = None,
    ) -> None:
        """Append one metric's rows. ``metric`` is a raw key unless ``canonical``; ``unit`` scales
        values to the canonical unit. ``seq`` (file order) defaults to fresh sequence numbers.
        ``origin``: the raw key of already mapped rows (``metric`` itself when not ``canonical``);
        keys of one stream that map to one metric are kept apart (:meth:`_keep_keys_apart`)."""
        if not canonical:
            origin = metric
        step_arr = np.asarray(steps, dtype=np.int64)
        n = step_arr.shape[0]
        if n == 0:
            return
        value_arr = np.asarray(values, dtype=np.float64)
        if canonical:
            name = metric
        else:
            name, key_unit = canonical_name(metric)
            unit = unit or key_unit
        name, value_arr = to_canonical_unit(name, unit, value_arr)
        rank_val: int | npt.NDArray[np.int32] = (
            int(rank) if isinstance(rank, (int, np.integer)) else np.asarray(rank, dtype=np.int32)
        )
        wall = None if wall_time is None else np.asarray(wall_time, dtype=np.float64)
        if wall is not None and wall.ndim == 0:
            wall = np.full(n, float(wall))
        seq_val: int | IntArray
        if seq is None:
            seq_val = self.reserve(n)
        elif isinstance(seq, (int, np.integer)):
            seq_val = int(seq)  # the first of n consecutive sequence numbers
        else:
            seq_val = np.asarray(seq, dtype=np.int64)
        piece = _Piece(rank_val, step_arr, value_arr, wall, int(stream), seq_val, origin)
        self._pieces.setdefault(name, []).append(piece)

    def rows_of(self, metric: str) -> tuple[IntArray, FloatArray, IntArray]:
        """``(steps, values, sequence numbers)`` of every row added so far under the canonical
        ``metric``, in file order (before restarts are purged): for a reader that derives one
        metric from another once its lines are read."""
        pieces = self._pieces.get(metric, [])
        if not pieces:
            return np.zeros(0, np.int64), np.zeros(0), np.zeros(0, np.int64)
        seq = np.concatenate([p.seq_array() for p in pieces])
        order = np.argsort(seq, kind="stable")
        steps = np.concatenate([p.step for p in pieces])[order]
        values = np.concatenate([p.value for p in pieces])[order]
        return steps, values, seq[order]

    @property
    def row_count(self) -> int:
        """Rows added so far (before de-duplication)."""
        return sum(p.step.shape[0] for pieces in self._pieces.values() for p in pieces)

    # -- result
    def finish(self, format_name: str) -> ParsedLog:
        """Keep one source per metric, split fresh runs into ``segments``, then per run detect
        rollbacks, keep the later segment, de-duplicate and sort: the ``ParsedLog`` (see
        :mod:`ingest.formats.segments`). Keys of one stream mapped to one metric are first kept apart
        (:meth:`_keep_keys_apart`): they are two metrics, not two sources of one."""
        self._keep_keys_apart()
        kept_over = one_source_per_metric(self._pieces, self.sources, format_name) if self.sources else []
        cuts = segment_cuts(self._pieces, self.run_headings) if self.line_marks else {}
        parts = self._split(cuts) if cuts else [self]
        logs = [part._finish_one(format_name) for part in parts]
        for log in logs:
            log.kept_over = kept_over
        first = logs[0]
        first.account = self.account
        first.segments = logs[1:]
        return first

    def _split(self, cuts: dict[int, IntArray]) -> list[LogBuilder]:
        """One builder per segment: each piece's rows go to the segment their ``seq`` falls in."""
        parts: list[LogBuilder] = []

        def part(i: int) -> LogBuilder:
            while len(parts) <= i:
                b = LogBuilder([])
                b.paths, b.meta, b.source_files, b.line_marks = self.paths, dict(self.meta), self.source_files, []
                parts.append(b)
            return parts[i]

        for metric, pieces in self._pieces.items():
            for p in pieces:
                seq = p.seq_array()
                seg = segment_of(seq, cuts.get(p.stream, np.zeros(0, np.int64)))
                for i in np.unique(seg):
                    sel = seg == i
                    rank = p.rank if isinstance(p.rank, int) else p.rank[sel]
                    wall = None if p.wall_time is None else p.wall_time[sel]
                    # replace(): any other field of the piece goes with its rows
                    piece = replace(p, rank=rank, step=p.step[sel], value=p.value[sel], wall_time=wall, seq=seq[sel])
                    part(int(i))._pieces.setdefault(metric, []).append(piece)
        self._pieces = {}
        ranges = [_step_range(b) for b in parts]
        for event in self.events:  # the reader's own events: the first run whose steps hold them
            owner = next((b for b, (lo, hi) in zip(parts, ranges, strict=True) if lo <= event.step <= hi), parts[0])
            owner.events.append(event)
        parts[0].skipped, parts[0].skipped_examples = self.skipped, self.skipped_examples
        for b in parts:
            b.line_marks = self.line_marks
        return parts

    def _input_lines(self) -> tuple[int, int] | None:
        """First and last input line of the rows (text readers), from the chunks' line marks."""
        if not self.line_marks or not self._pieces:
            return None
        seqs = [p.seq_array() for pieces in self._pieces.values() for p in pieces]
        lo, hi = min(int(s.min()) for s in seqs), max(int(s.max()) for s in seqs)
        return self._line_of(lo), self._line_of(hi)

    def _line_of(self, seq: int) -> int:
        marks = [m for m in self.line_marks if m[0] <= seq]
        base, line = marks[-1] if marks else self.line_marks[0]
        return line + seq - base

    def _finish_one(self, format_name: str) -> ParsedLog:
        lines = self._input_lines()
        table = self._build_table()
        return ParsedLog(
            format=format_name,
            table=table,
            events=sorted(self.events, key=lambda e: (e.step, e.kind)),
            meta=self.meta,
            skipped=self.skipped,
            skipped_examples=list(self.skipped_examples),
            source_files=list(self.source_files),
            lines=lines,
        )

    def _keep_keys_apart(self) -> None:
        """Where two raw keys of one stream (columns of one file, tags of one writer) were mapped to
        one metric, the key that is the metric's own name keeps it and the other keeps its own
        (:func:`~ingest.formats.aliases.keep_apart`): ``loss`` and ``lm_loss`` columns are two
        series, and merging them kept one value a step and dropped the other."""
        for name in list(self._pieces):
            pieces = self._pieces[name]
            origins: dict[int, dict[str, None]] = {}  # stream -> its keys, in the order first added
            for p in pieces:
                if p.origin is not None:
                    origins.setdefault(p.stream, {})[p.origin] = None
            moved: dict[tuple[int, str], str] = {}
            for stream, keys in origins.items():
                if len(keys) < 2:
                    continue
                listed = list(keys)
                for key, found in zip(listed, keep_apart(listed, [(name, None)] * len(listed)), strict=True):
                    if found is not None and found[0] != name:
                        own, unit = own_name(key)
                        target = to_canonical_unit(own, unit, np.zeros(0))[0]
                        if target != name:  # 'loss ' beside 'loss': one name, merged as before
                            moved[(stream, key)] = target
            if not moved:
                continue
            kept: list[_Piece] = []
            for p in pieces:
                moved_to = moved.get((p.stream, p.origin)) if p.origin is not None else None
                if moved_to is None:
                    kept.append(p)
                else:
                    self._pieces.setdefault(moved_to, []).append(p)
            self._pieces[name] = kept

    def _build_table(self) -> pa.Table:
        """Metric by metric (bounded temporaries): purge replayed rows, keep the last row of each
        (rank, step), sort by (rank, step); columns are chunked per metric, never re-copied. Big
        tables build two metrics at a time (numpy and Arrow copy without the GIL); the result, the
        rollback spans included, is gathered in metric order, so it does not depend on timing."""
        names = sorted(self._pieces)
        if not names:
            return TABLE_SCHEMA.empty_table()
        shared: dict[Any, Any] = {}

        def build(code: int) -> tuple[list[list[Any]], dict[int, list[tuple[int, int]]]]:
            spans_of_metric: dict[int, list[tuple[int, int]]] = {}
            pieces = self._pieces.pop(names[code])
            rank, step, value, wall = _one_metric(pieces, spans_of_metric, shared)
            n = step.shape[0]
            chunks: list[list[Any]] = [  # per column: its chunks for this metric
                [pa.array(rank, pa.int32())],
                [pa.array(step, pa.int64())],
                [_metric_column(n, code, names)],
                [pa.array(v, pa.float64()) for v in (value if isinstance(value, list) else [value])],
                [null_floats(n) if wall is None else pa.array(wall, pa.float64(), mask=np.isnan(wall))],
            ]
            return chunks, spans_of_metric

        codes = range(len(names))
        if self.row_count >= PARALLEL_BUILD_ROWS and len(names) > 1 and BUILD_THREADS > 1:
            with ThreadPoolExecutor(max_workers=BUILD_THREADS, thread_name_prefix="build") as pool:
                built = list(pool.map(build, codes))
        else:
            built = [build(code) for code in codes]
        spans: dict[int, list[tuple[int, int]]] = {}
        for _, spans_of_metric in built:  # in metric order: as one thread would have found them
            for stream, found in spans_of_metric.items():
                spans.setdefault(stream, []).extend(found)
        for spans_of_stream in spans.values():
            for s0, s1 in merge_spans(spans_of_stream):
                self.event(s0, "rollback", f"restart replayed steps {s0}-{s1}", replayed_from=s0, replayed_to=s1)
        return pa.Table.from_arrays(
            [
                pa.chunked_array([ch for chunks, _ in built for ch in chunks[i]], TABLE_SCHEMA.field(c).type)
                for i, c in enumerate(TABLE_SCHEMA.names)
            ],
            schema=TABLE_SCHEMA,
        )


def _step_range(builder: LogBuilder) -> tuple[int, int]:
    steps = [p.step for pieces in builder._pieces.values() for p in pieces if p.step.shape[0]]
    if not steps:
        return (0, -1)
    return min(int(s.min()) for s in steps), max(int(s.max()) for s in steps)


def _metric_column(n: int, code: int, names: list[str]) -> Any:
    """``n`` rows of metric ``names[code]``: a one-name dictionary over zero codes. The codes are
    calloc'd (pages mapped on first touch), so the column costs no writes; ``n`` copies of the name
    as plain strings were 126 MB and ~10% of reading a 9M-row Megatron log."""
    codes: Any = np.zeros(n, dtype=np.int32)  # numpy arrays are buffers
    return pa.DictionaryArray.from_arrays(pa.array(codes), pa.array([names[code]], pa.string()))


def _ordered_series(
    pieces: list[_Piece], shared: dict[Any, Any]
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


def _ordered_arrays(pieces: list[_Piece]) -> tuple[Any, IntArray, npt.NDArray[np.int32], FloatArray | None] | None:
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


def _one_metric(
    pieces: list[_Piece], spans: dict[int, list[tuple[int, int]]], shared: dict[Any, Any] | None = None
) -> tuple[npt.NDArray[np.int32], IntArray, Values, FloatArray | None]:
    """``(rank, step, value, wall)`` of one metric, replayed rows purged, de-duplicated, sorted.
    ``shared``: arrays built for earlier metrics of the same table (see :func:`_ordered_series`)."""
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
        local_down = down[(down >= lo) & (down < hi)] - lo
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


def merge_spans(spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Overlapping replayed ranges (one restart seen through several metrics) merged into one."""
    merged: list[tuple[int, int]] = []
    for s0, s1 in sorted(spans):
        if merged and s0 <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], s1))
        else:
            merged.append((s0, s1))
    return merged


# --------------------------------------------------------------------------- file input


def _size(path: Path) -> int:
    if path.is_dir():
        return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())
    try:
        return path.stat().st_size
    except OSError:
        return 0


def read_head(path: Path, nbytes: int = 256 * 1024) -> bytes:
    """The first ``nbytes`` of a file (b'' for a directory or an unreadable file)."""
    if path.is_dir():
        return b""
    try:
        with open(path, "rb") as f:
            return f.read(nbytes)
    except OSError:
        return b""


def open_error(path: Path, exc: OSError) -> StabScopeError:
    """The error for a file that cannot be opened at all."""
    return StabScopeError(f"cannot read file: {exc.strerror or exc}", path=str(path))


_ANSI: Final = re.compile(rb"\x1b\[[0-9;?]*[A-Za-z]")

_HOST_NAME: Final = (
    r"(?:[A-Za-z][A-Za-z0-9_.-]*"  # node017, gpu-a100-017.cluster.local, localhost
    r"|[0-9]{1,3}(?:\.[0-9]{1,3}){3}"  # 192.168.205.202
    r"|[0-9A-Fa-f]{0,4}(?::[0-9A-Fa-f]{0,4}){2,7}"  # fe80::1 (two colons at least: srun's ``7: `` is a rank)
    r"|\[[0-9A-Fa-f.]*:[0-9A-Fa-f:.]*\])"  # [2001:db8::1]
)
"""A host as pdsh writes it before a remote node's lines: a host name, an IPv4 or IPv6 address."""
_LAUNCHER_HOST: Final = r"(?:" + _HOST_NAME + r":[ \t]+)?"
"""pdsh / DeepSpeed's multi-node runner: ``node017: ``, ``192.168.205.202: `` (a host names no rank)."""
_LAUNCHER_RANK: Final = r"(?:(?:[ \t]*\[(?:default|rank)|[ \t]*)(?P<lrank>[0-9]+)(?:\]:[ \t]?|:[ \t]))?"
"""``torchrun --tee 3``'s ``[default7]:``, newer torchrun's ``[rank7]:`` (a blank before it where a log was pasted
into a note), ``srun -l``'s ``7: ``."""
_LAUNCHER_TIME: Final = (
    r"(?:\[?[0-9]{4}-[0-9]{2}-[0-9]{2}[ T][0-9]{2}:[0-9]{2}:[0-9]{2}(?:[.,][0-9]+)?Z?\]?[ \t]*(?:-[ \t]*)?)??"
)
"""A time stamp before the trainer's text (lazy: a reader that captures it itself still does)."""
_LAUNCHER_LEVEL: Final = (
    r"(?:(?:[A-Za-z_][A-Za-z0-9_.]*[ \t]+-[ \t]+)?\[?(?:DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL)\]?"
    r"(?::[A-Za-z0-9_.]*)*[ \t]*(?:-[ \t]*)?)??"
)
"""A log level (``INFO``, ``[INFO]``, Python logging's ``INFO:root:`` or ``name - INFO - ``)."""
LAUNCHER_PREFIX: Final = _LAUNCHER_HOST + _LAUNCHER_RANK + _LAUNCHER_TIME + _LAUNCHER_LEVEL
"""What launchers and loggers put before a trainer's own text, as one regex matched at the line
start: host, rank (named group ``lrank``), time stamp, log level, each optional, in that order. The
text engine (:mod:`ingest.formats.textlog`) puts it before every line kind of every text format, so
detection and reading see through it alike. ANSI codes and NUL bytes are removed from the bytes
before (:func:`clean_text`)."""


LAUNCHER_LEAD: Final = re.compile(
    (_LAUNCHER_HOST + _LAUNCHER_RANK + _LAUNCHER_TIME + _LAUNCHER_LEVEL).replace(")??", ")?").encode()
)
"""``LAUNCHER_PREFIX`` taking all it can (bytes): where a line's own text starts at the latest.
Detection tries a format's line there and at the line start (which, with what is between, the
reader's lazy ``LAUNCHER_PREFIX`` also finds), instead of every way of splitting the prefix."""
_LAUNCHER_LEAD: Final = re.compile("^" + _LAUNCHER_HOST + _LAUNCHER_RANK, re.M)
_RANK_LEAD: Final = re.compile("^" + _LAUNCHER_RANK, re.M)
_HOST_LEAD: Final = re.compile("^" + _HOST_NAME + r":[ \t]+", re.M)


def strip_launcher_prefixes(text: str) -> str:
    """``text`` with each line's rank prefix removed, and its host prefix where most lines carry
    one (``Overriding: max_iters = 3`` alone is text, not a host): what a reader's banner and
    argument-dump parsing (``meta_from_head``, ``markers``) sees, so that their line-anchored
    patterns fit a ``[default0]:``-prefixed log as they fit a bare one."""
    lines = text.count("\n") + 1
    if len(_HOST_LEAD.findall(text)) * 2 > lines - text.count("\n\n"):
        return _LAUNCHER_LEAD.sub("", text)
    return _RANK_LEAD.sub("", text)


def clean_text(chunk: bytes) -> bytes:
    """``chunk`` without ANSI colour codes and NUL bytes (a node's log cut by a crash is padded with
    NULs where the file system had allocated blocks not yet written)."""
    if b"\x1b" in chunk:
        chunk = _ANSI.sub(b"", chunk)
    if b"\x00" in chunk:
        chunk = chunk.replace(b"\x00", b"")
    return chunk


def iter_line_chunks(
    path: Path, builder: LogBuilder, chunk_bytes: int = CHUNK_BYTES, first_chunk_bytes: int = 64 * 1024
) -> Iterator[tuple[bytes, int]]:
    """``(chunk, number of its first line)``: whole lines, about ``chunk_bytes`` at a time.

    Memory stays bounded by the chunk size whatever the file size; ANSI colour codes are removed.
    The first chunk is small: text readers learn a log's line layouts there, line by line. Readers
    that count each chunk's lines anyway use :func:`iter_whole_lines` (no second count).
    """
    line_no = 1
    for chunk in iter_whole_lines(path, builder, chunk_bytes, first_chunk_bytes):
        yield chunk, line_no
        line_no += int(np.count_nonzero(np.frombuffer(chunk, dtype=np.uint8) == 10))


def iter_whole_lines(
    path: Path, builder: LogBuilder, chunk_bytes: int = CHUNK_BYTES, first_chunk_bytes: int = 64 * 1024
) -> Iterator[bytes]:
    """The chunks of :func:`iter_line_chunks` without their line numbers: each ends with a newline,
    so a chunk's first line number is 1 + the newlines of the chunks before it.

    Each chunk is read at its exact size: from where the last one ended to the first newline at or
    after ``chunk_bytes`` further (found by a small read there). A block cut at its last newline
    and joined to the partial line before it cost a copy of every chunk, holding the GIL: ~10% of
    reading a Megatron log on the threaded path."""
    try:
        f = open(path, "rb")  # noqa: SIM115 - closed in the finally below
    except OSError as exc:
        raise open_error(path, exc) from exc
    fd = f.fileno()
    pos = 0
    size = min(chunk_bytes, first_chunk_bytes)
    try:
        while True:
            chunk = os.pread(fd, _line_end(fd, pos + size) - pos, pos)
            size = chunk_bytes
            if not chunk:
                break
            pos += len(chunk)
            builder.advance(len(chunk))
            while not chunk.endswith(b"\n"):  # the end of the file, mid-line: a writer may be adding to it
                rest = os.pread(fd, _line_end(fd, pos + 1) - pos, pos)
                if not rest:  # the file's last line has no newline
                    chunk += b"\n"
                    break
                chunk += rest
                pos += len(rest)
                builder.advance(len(rest))
            yield clean_text(chunk)
    except OSError as exc:
        raise StabScopeError(f"cannot read file: {exc.strerror or exc}", path=str(path)) from exc
    finally:
        f.close()


_PROBE_BYTES: Final = 64 * 1024


def _line_end(fd: int, at: int) -> int:
    """The offset just past the first newline at or after byte ``at - 1`` of ``fd`` (a chunk that
    ends at ``at`` ends on a whole line when byte ``at - 1`` is one), or the end of the file."""
    pos = at - 1
    while True:
        probe = os.pread(fd, _PROBE_BYTES, pos)
        if not probe:
            return pos
        found = probe.find(b"\n")
        if found >= 0:
            return pos + found + 1
        pos += len(probe)


def decode_head(head: bytes) -> str:
    """Head bytes as text (invalid UTF-8 replaced); a partial last line is dropped."""
    cut = head.rfind(b"\n")
    if 0 < cut < len(head) - 1:
        head = head[: cut + 1]
    return clean_text(head).decode("utf-8", errors="replace")


_TEXT_CONTROLS: Final = bytes(range(32)).translate(None, b"\t\n\r\x0c\x1b")
"""Control bytes a text log does not hold (NUL aside: see :func:`looks_binary`)."""


def looks_binary(head: bytes) -> bool:
    """True when the head is not text: NUL bytes, unless they are only the padding of a cut log
    (then the rest holds no other control byte)."""
    sample = head[:4096]
    if b"\x00" not in sample:
        return False
    rest = head.replace(b"\x00", b"")[:4096]
    return not rest or len(rest.translate(None, _TEXT_CONTROLS)) < len(rest)
