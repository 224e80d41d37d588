"""What every reader shares: the ``ParsedLog`` result, the row builder that turns reader output into the canonical
long table (with rollback detection), time-stamp parsing and chunked file input. Numbers are parsed in
:mod:`ingest.formats.numbers`, one metric's rows ordered in :mod:`ingest.formats.log_rows`, a log's raw text (head,
launcher prefixes) read in :mod:`ingest.formats.raw_text`.

Readers append columns in file order to a :class:`LogBuilder`; ``finish`` then
1. detects restarts: within one *stream* (one independent step sequence: a text log and its continuation files,
   one TensorBoard directory, one per-metric CSV) a step that goes *down* starts a new segment that re-logs steps
   ``[s0, s1]`` already seen; it is recorded as a ``rollback`` event and every earlier row of that stream at a step
   ``>= s0`` leaves the table (the later segment wins, as TensorBoard's own loader purges orphaned steps); the
   replaced attempts' loss rows stay on the event (``log_rows.rollback_detail``: nothing is lost silently);
2. keeps the last row of each ``(rank, metric, step)`` and sorts by metric, rank, step.
"""

from __future__ import annotations

import os
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
from ingest.formats import log_rows
from ingest.formats.accounting import LineAccount, skip_reason_group
from ingest.formats.aliases import canonical_name, keep_apart, own_name, to_canonical_unit
from ingest.formats.log_rows import FloatArray, IntArray, Piece, metric_column, one_metric
from ingest.formats.numbers import utf8_or_null
from ingest.formats.raw_text import clean_text, input_size, open_error
from ingest.formats.run_settings import settings_by_run
from ingest.formats.segments import one_source_per_metric, run_of_lines, run_start_cuts, segment_cuts, segment_of
from ingest.long_schema import LONG_SCHEMA_DICT, null_floats
from stab_core.metrics import RUN_RANK
from stab_core.replay_spans import merge_spans
from stab_core.runview import RunEvent

pc: Any = _pc  # pyarrow-stubs overloads reject valid calls on generic arrays
Progress = Callable[[int, int], None]

MAX_SKIPPED_EXAMPLES: Final = 5
CHUNK_BYTES: Final = 4 * 1024 * 1024
BUILD_THREADS: Final = min(2, os.cpu_count() or 1)
PARALLEL_BUILD_ROWS: Final = 1 << 20
"""Tables of at least this many rows are built on ``BUILD_THREADS`` threads."""

TABLE_SCHEMA: Final[pa.Schema] = LONG_SCHEMA_DICT
"""The canonical long form every reader produces, metric by metric, each sorted by (rank, step). ``metric`` is
dictionary-encoded, one chunk per metric; other columns may be chunked more finely (a text log's read chunks)."""


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


class LogBuilder:
    """Collects rows (one metric per ``add`` call, in file order) and builds the ``ParsedLog``."""

    def __init__(self, paths: Sequence[Path], progress: Progress | None = None) -> None:
        self.paths = [Path(p) for p in paths]
        self.total_bytes = sum(input_size(p) for p in self.paths)
        self.done_bytes = 0
        self._progress = progress
        self._pieces: dict[str, list[Piece]] = {}
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
        self.run_starts: dict[int, list[int]] = {}
        """Per stream, the sequence numbers at which a table's later runs start (``ingest.formats.table_runs``)."""
        self.run_headings: list[int] = []
        """Sequence numbers of the lines whose heading starts another run (``ingest.formats.sections``)."""
        self.config_headings: list[int] = []
        """Sequence numbers of the headings of markdown notes that state a configuration (idem)."""
        self.line_runs: tuple[IntArray, IntArray] | None = None
        """``(seq, run)`` of each line whose run the reader chose (``segments.run_of_lines``), else cuts."""
        self.excerpt_starts: list[int] = []
        """Sequence numbers of the lines opening a fenced block of markdown notes (``ingest.formats.sections``)."""
        self.stated_settings: list[tuple[int, str, str]] = []
        """``(seq, setting, value)``: the run settings markdown notes state (``ingest.formats.run_settings``)."""
        self.settings_when_constant: frozenset[str] = frozenset()
        """Metrics a trainer prints on every step line that are a setting of the run where they hold one value
        over the run (Megatron's ``global batch size``): run metadata then, a series only where they change
        (a batch-size rampup). Decided per run, after the file is split into runs."""
        self.moved: dict[str, str] = {}
        """Fields moved out of the series, and why (:mod:`ingest.formats.field_roles`), over every run."""
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
        piece = Piece(rank_val, step_arr, value_arr, wall, int(stream), seq_val, origin)
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

    def drop(self, metric: str) -> None:
        """Forget every row of the canonical ``metric`` (a reader that found it is no series)."""
        self._pieces.pop(metric, None)

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
        if (line_runs := self.line_runs) is not None:  # the reader's own runs: ingest.formats.writer_runs
            parts = self._split(lambda _p, seq: run_of_lines(line_runs, seq))
        elif cuts := (
            segment_cuts(self._pieces, self.run_headings, self.excerpt_starts, self.config_headings)
            if self.line_marks
            else run_start_cuts(self.run_starts)
        ):
            parts = self._split(lambda p, seq: segment_of(seq, cuts.get(p.stream, np.zeros(0, np.int64))))
        else:
            parts = [self]
        logs = [part._finish_one(format_name) for part in parts]
        for log in logs:
            log.kept_over = kept_over
        first = logs[0]
        self.account.moved.update(self.moved)
        first.account = self.account
        first.segments = logs[1:]
        return first

    def _split(self, segment: Callable[[Piece, IntArray], IntArray]) -> list[LogBuilder]:
        """One builder per segment: each piece's rows go to the segment ``segment(piece, seq)`` gives them."""
        parts: list[LogBuilder] = []

        def part(i: int) -> LogBuilder:
            while len(parts) <= i:
                b = LogBuilder([])
                b.paths, b.meta, b.source_files, b.line_marks = self.paths, dict(self.meta), self.source_files, []
                b.settings_when_constant = self.settings_when_constant
                b.moved = self.moved
                parts.append(b)
            return parts[i]

        for metric, pieces in self._pieces.items():
            for p in pieces:
                seq = p.seq_array()
                seg = segment(p, seq)
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
        by_run = settings_by_run(self.stated_settings, [_seq_span(b) for b in parts]) if self.stated_settings else []
        if any(by_run):  # the notes state some run's settings: a run they state none for is unknown
            for b, settings in zip(parts, by_run, strict=True):
                b.meta["run_settings"] = settings  # what a sibling comparison checks (run_findings)
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
        self._constant_settings_to_meta()
        self._fields_to_settings()
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

    def _fields_to_settings(self) -> None:
        """The fields that are no metric series by :mod:`ingest.formats.field_roles` (a field that never
        changes over the run, an evaluation pass's timing; a wide record's per-layer diagnostics): moved from
        the series to ``meta`` (:func:`~ingest.formats.field_roles.move_fields`), each listed in :attr:`moved`."""
        from ingest.formats.field_roles import move_fields

        move_fields(self._pieces, self.meta, self.moved)

    def _constant_settings_to_meta(self) -> None:
        """Each of :attr:`settings_when_constant` whose rows in this run hold one finite value: moved from the
        series to ``meta`` (a value the header already stated is kept)."""
        for name in self.settings_when_constant:
            pieces = self._pieces.get(name)
            if not pieces:
                continue
            values = np.concatenate([p.value for p in pieces])
            if not (np.isfinite(values).all() and (values == values[0]).all()):
                continue  # it changes over the run (a rampup): a series of its own
            value = float(values[0])
            self.meta.setdefault(name, int(value) if value.is_integer() else value)
            del self._pieces[name]

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
            kept: list[Piece] = []
            for p in pieces:
                moved_to = moved.get((p.stream, p.origin)) if p.origin is not None else None
                if moved_to is None:
                    kept.append(p)
                else:
                    self._pieces.setdefault(moved_to, []).append(p)
            self._pieces[name] = kept

    def _build_table(self) -> pa.Table:
        """Metric by metric (bounded temporaries): purge replayed rows, keep the last row of each (rank, step), sort;
        columns are chunked per metric, never re-copied. Big tables build two metrics at a time (numpy and Arrow copy
        without the GIL); the result (rollbacks, abandoned rows) is gathered in metric order: timing plays no part."""
        names = sorted(self._pieces)
        if not names:
            return TABLE_SCHEMA.empty_table()
        shared: dict[Any, Any] = {}
        abandoned: dict[str, list[tuple[Any, Any]]] = {m: [] for m in log_rows.ABANDONED_KEPT if m in self._pieces}

        def build(code: int) -> tuple[list[list[Any]], dict[int, list[tuple[int, int]]]]:
            spans_of_metric: dict[int, list[tuple[int, int]]] = {}
            pieces = self._pieces.pop(names[code])
            rank, step, value, wall = one_metric(pieces, spans_of_metric, shared, abandoned.get(names[code]))
            n = step.shape[0]
            chunks: list[list[Any]] = [  # per column: its chunks for this metric
                [pa.array(rank, pa.int32())],
                [pa.array(step, pa.int64())],
                [metric_column(n, code, names)],
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
        # one restart seen the same in two streams (a reader's second pass over the same lines) is one event
        found_spans = {span for spans_of_stream in spans.values() for span in merge_spans(spans_of_stream)}
        kept = {m: log_rows.built_series(built[names.index(m)][0]) for m in abandoned} if found_spans else {}
        for s0, s1 in sorted(found_spans):
            detail = log_rows.rollback_detail(abandoned, s0, s1)
            if log_rows.replay_unchanged(detail, kept):
                continue  # the resume logged the same values again: copies of records, no rollback
            self.event(s0, "rollback", f"restart replayed steps {s0}-{s1}", **detail)
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


def _seq_span(builder: LogBuilder) -> tuple[int, int]:
    """The first and last sequence number (file order) of a segment's rows."""
    seqs = [p.seq_array() for pieces in builder._pieces.values() for p in pieces if p.step.shape[0]]
    if not seqs:
        return (0, -1)
    return min(int(s.min()) for s in seqs), max(int(s.max()) for s in seqs)


# --------------------------------------------------------------------------- file input


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
