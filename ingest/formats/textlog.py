"""The engine behind every text-log reader: metric lines found by regex over big chunks.

A format is a list of :class:`LineKind` s. A kind's ``prefix`` regex recognises a metric line at its
start and captures the step (and, when the line says them, the rank, a timestamp and the planned
total of steps); its ``pairs`` regex then finds the ``key: value`` pairs in the rest of the line.

Speed: parsing every line in Python would cost microseconds per line. Instead, the first line of each
*layout* (the same keys in the same order) is parsed slowly and turned into a *skeleton*: one regex for
the whole line with a capture group per value. Each 4 MiB chunk becomes a zero-copy Arrow array of
lines; every skeleton captures the values of all its lines at once (Arrow's RE2 ``extract_regex``, or
Python's ``re`` over the chunk where that measured faster: long lines with many groups) and the
captured columns are converted by Arrow in bulk. A layout whose fields are separated by ``|``
(Megatron's ``iteration`` line) also gets a *plan* that skips the long regex: the chunk is cut at
every newline and ``|``, each field's literal text is compared exactly, the prefix regex runs on the
first field only and the values are parsed in bulk (one C pass per line in ``_fields.c`` where the
extension is built; numpy and Arrow kernels otherwise, with the same result); lines the plan does
not take fall through to the skeleton's regex, so the result is the same (see :class:`_Plan`). Only
lines no skeleton fits go through Python one by one: non-metric lines (skipped and counted) and new
layouts (which become skeletons). Memory is bounded by the chunk size plus the parsed columns.

Launcher prefixes are handled here, once, for every text format: each kind's prefix regex is put
behind :data:`~ingest.formats._common.LAUNCHER_PREFIX` (pdsh's ``host: ``, ``[defaultN]:``,
``[rankN]:``, srun's ``N: ``, a time stamp, a log level), so detection, skeletons and ``|`` plans
all see through it; ANSI codes and NUL bytes are removed from the bytes before. Where a line's
prefix names a rank, its per-rank values (memory, tokens/s of that GPU; ``PER_RANK_NAMES``) are that
rank's series, and its run-level values (loss, lr, the global grad norm) are kept from one rank
only: the lowest rank among the first block of that kind's lines (``meta['run_level_rank']``), since
every rank prints the same run-level figures; a line without a rank prefix is the run's. A block
whose lines all name one rank keeps scalar rank and stream (no per-row copies: as fast as a bare log).
"""

from __future__ import annotations

import functools
import importlib
import os
import re
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as _pc

from ingest.formats._common import (
    CHUNK_BYTES,
    LAUNCHER_LEAD,
    LAUNCHER_PREFIX,
    ConvertedValues,
    LogBuilder,
    decode_head,
    iter_whole_lines,
    looks_binary,
    parse_numbers,
    parse_timestamps,
    strip_launcher_prefixes,
)
from ingest.formats.aliases import canonical_name, to_canonical_unit
from ingest.formats.base import Reader
from stab_core.metrics import PER_RANK_METRICS, RUN_RANK

pc: Any = _pc  # pyarrow-stubs overloads reject valid calls on generic arrays

try:  # built by `pip install` where a C compiler is at hand; without it the Arrow path decides alike
    from ingest.formats import _fields
except ImportError:  # pragma: no cover - depends on the install
    _fields = None  # type: ignore[assignment]

_C_MAX_FIELDS: Final = 256
"""The most value (or fixed) fields ``_fields.c`` takes in a layout (its ``MAX_FIELDS``); wider ones use Arrow."""

KeyMap = Callable[[str], "tuple[str, str | None] | None"]

PER_RANK_NAMES: Final = PER_RANK_METRICS | {
    "gpu_mem_max_gb",
    "gpu_mem_reserved_gb",
    "gpu_mem_max_reserved_gb",
    "gpu_mem_pct",
    "tflops",
}
"""Metrics a line reports for the rank that printed it (the rest are run-level, rank -1)."""

VALUE_PATTERN: Final = rb"([^\s|,]+(?:,[0-9]{3})*)"
"""How a value token looks inside a learned skeleton (thousands separators allowed)."""

MAX_SKELETONS_PER_KIND: Final = 32

_PLAIN_VALUE: Final = r"^[^ \t\n\r\f\v|,]+(?:,[0-9]{3})*$"
"""A value token as ``VALUE_PATTERN`` takes it, for RE2 (``\\s`` differs between the engines)."""


@dataclass(frozen=True)
class LineKind:
    """One kind of metric line.

    ``prefix``: regex matched at the line start; named groups ``step`` (optional when the line has
    none: the step is then taken from the previous metric line), ``rank``, ``ts``, ``total``; no
    unnamed capturing groups. ``pairs``: regex over the rest of the line with groups ``key``/``val``
    (or ``val2``/``key2`` for value-before-key text such as ``8462.85 ms``). ``keymap`` maps a raw
    key to ``(metric, unit)`` (None drops the key); the default is the alias table. ``ignore``:
    regex for decorations that change from line to line without being metrics (z-scores).
    """

    name: str
    prefix: str
    pairs: str
    keymap: KeyMap | None = None
    all_per_rank: bool = False
    ignore: str | None = None
    ts_format: str = "%Y-%m-%d %H:%M:%S"
    sentinels: dict[str, float] = field(default_factory=dict)
    """metric -> raw value meaning 'not measured' (nanoGPT's mfu of -100 %), dropped."""
    step_offset: int = 0
    """Added to the printed step (llm.c's console prints step+1)."""
    fill_next: bool = False
    """A line without a step belongs to the *next* metric line's step (else the previous one's)."""
    per_rank_keys: frozenset[str] = frozenset()
    """Extra metrics that this kind reports per printing rank (torchtitan's per-GPU tps)."""
    run_level: bool = False
    """Every value is run-level (Megatron's iteration line reports the whole job's step time)."""

    @property
    def full_prefix(self) -> str:
        """``prefix`` behind the launcher and logger prefixes every text format may carry
        (:data:`ingest.formats._common.LAUNCHER_PREFIX`, group ``lrank``): handled here, once."""
        return LAUNCHER_PREFIX + self.prefix

    def compiled(self) -> tuple[re.Pattern[bytes], re.Pattern[bytes], list[str]]:
        """``(prefix regex, pairs regex, prefix group names in group order)``."""
        prefix = re.compile(self.full_prefix.encode())
        if prefix.groups != len(prefix.groupindex):
            raise ValueError(f"line kind {self.name}: prefix must use named groups only")
        names = sorted(prefix.groupindex, key=prefix.groupindex.__getitem__)
        return prefix, re.compile(self.pairs.encode()), names


@dataclass
class _Skeleton:
    kind: int
    source: bytes
    n_groups: int
    prefix_names: list[str]
    keys: tuple[str, ...]
    regex: re.Pattern[bytes]
    re2: str | None = None
    """The same pattern for Arrow's RE2 ``extract_regex`` (None when RE2 cannot express it)."""
    engine: str = ""
    """``re2`` or ``python``: the faster one for this skeleton, measured on its first chunk."""
    plan: _Plan | None = None
    """The same layout as fields between ``|`` (no regex over whole lines), where it can say so."""


@dataclass(frozen=True)
class _Plan:
    """A layout whose fields are separated by ``|``, checked and cut without a regex over the line.

    Field 0 (up to and with the first ``|``) is matched by the kind's prefix alone (RE2, anchored);
    every value field is ``before + value + after`` with the literal text exactly as on the learned
    line; the fields after the last value are literal too (the last one up to trailing blanks). A
    line with exactly ``n_pipes`` pipes that passes every check matches the skeleton with the same
    values (the regex's other characters cannot match ``|``, so each part must match its own
    field); lines that do not are left to the skeleton's regex, so the result never changes.
    """

    n_pipes: int
    prefix_re2: str
    values: tuple[tuple[bytes, bytes], ...]
    """``(before, after)`` of value field ``i + 1``; ``after`` ends with the field's ``|``."""
    literals: tuple[bytes, ...]
    """Exact text (with its ``|``) of the fields between the last value field and the last one."""
    last: bytes
    """The text after the last ``|``, trailing blanks removed."""
    head_alike: bool = False
    """The prefix cannot tell one digit from another (see :func:`_match_head`)."""


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
    """The step column parsed (-1 where a line prints none), once :meth:`_EngineState._parse_steps` ran."""


def _generalise_literal(text: bytes, ignore: re.Pattern[bytes] | None) -> bytes:
    """Regex for literal text between values: whitespace runs match any run of blanks."""
    out: list[bytes] = []
    pos = 0
    spans = [] if ignore is None else [m.span() for m in ignore.finditer(text)]
    for start, end in [*spans, (len(text), len(text))]:
        piece = text[pos:start]
        for i, word in enumerate(re.split(rb"[ \t]+", piece)):
            if i:
                out.append(rb"[ \t]*")
            out.append(re.escape(word))
        if end > start and ignore is not None:
            out.append(b"(?:" + ignore.pattern + b")")
        pos = end
    return b"".join(out)


def _strip_group_names(pattern: str) -> bytes:
    return re.sub(r"\(\?P<\w+>", "(", pattern).encode()


class TextLogReader(Reader):
    """A text-log format made of :class:`LineKind` s (see the module docstring for how it runs)."""

    kinds: Sequence[LineKind] = ()
    per_rank_default = 0
    """Rank for per-rank metrics on lines that do not say which rank printed them."""
    chunk_bytes = CHUNK_BYTES
    """Bytes read per chunk (bounds memory; tests lower it to cross chunk boundaries)."""
    workers = min(4, os.cpu_count() or 1)
    """Threads matching chunks."""
    in_flight = 0
    """Chunks matched or queued at once (0: ``workers + 1``, so no worker idles while this thread
    finishes a chunk; ``workers`` measured no lower peak RSS and no faster at 28 MB and 283 MB)."""

    def __init__(self) -> None:
        self._compiled = [k.compiled() for k in self.kinds]
        self._bare = [
            (re.compile(k.prefix.encode()), pairs) for k, (_, pairs, _) in zip(self.kinds, self._compiled, strict=True)
        ]
        """Each kind's own prefix (no launcher part) and its pairs: detection's regexes."""
        self._ignores = [None if k.ignore is None else re.compile(k.ignore.encode()) for k in self.kinds]

    # ------------------------------------------------------------------ detection
    def count_metric_lines(self, text: str) -> int:
        """Lines of ``text`` (a head: its size bounds the work) that a kind recognises at the line
        start, behind any launcher prefix, and that carry at least one value."""
        n = 0
        for raw, lead in _head_lines(text):
            for prefix, pairs in self._bare:
                m = prefix.match(raw) or (prefix.match(raw, lead) if lead else None)
                if m and pairs.search(raw, m.end()):
                    n += 1
                    break
        return n

    def near_miss(self, head: bytes) -> tuple[int, str]:
        """For a refusal: ``(lines holding a metric line of this format after text it does not
        take, why)``, the why naming how many head lines matched and the first such line."""
        lines = [line for line in decode_head(head).splitlines() if line.strip()]
        matched = self.count_metric_lines("\n".join(lines))
        anywhere = self._bare
        inside, first = 0, ""
        for line in lines:
            raw = line.encode()
            for prefix, pairs in anywhere:
                m = prefix.search(raw)
                if m and m.start() > 0 and pairs.search(raw, m.end()):
                    inside += 1
                    first = first or line.strip()
                    break
        quoted = re.search(r"'([^']+)'", self.description)
        shape = quoted.group(1) if quoted else self.kinds[0].name if self.kinds else self.name
        shape = shape if len(shape) <= 40 else shape[:37].rstrip() + "..."
        why = f"{self.name}: {matched:,} of {len(lines):,} head lines matched its {shape!r} line"
        if inside:
            why += f", {inside:,} hold it after other text (first: {first[:60]!r})"
        return inside, why

    def markers(self, text: str) -> float:
        """Confidence from tell-tale non-metric lines (banners) when no metric line is in the head."""
        return 0.0

    def sniff(self, head: bytes, path: Path) -> float:
        if path.is_dir() or not head or looks_binary(head):
            return 0.0
        text = _sniff_text(head)
        n = self.count_metric_lines(text)
        if n == 0:
            return self.markers(text)
        return self.score(n, text)

    def score(self, n_metric_lines: int, text: str) -> float:
        """Confidence given ``n_metric_lines`` recognised lines in the head."""
        return min(0.9, 0.7 + 0.05 * n_metric_lines)

    def meta_from_head(self, text: str) -> dict[str, Any]:
        """Run facts stated in the first chunk (argument dumps, banners)."""
        return {}

    # ------------------------------------------------------------------ reading
    def fill(self, paths: Sequence[Path], builder: LogBuilder) -> None:
        """Read ``paths`` in order. Chunks are matched on a small thread pool (numpy and Arrow's
        kernels release the GIL, so the bulk work runs on every core) while this thread reads
        ahead; each chunk is then finished here, in file order (new layouts learned, skipped
        lines reported, rows emitted), so the result is the same as reading one chunk at a time."""
        state = _EngineState(self)
        ahead = self.in_flight or self.workers + 1  # chunks matched or queued at once: bounds memory
        with ThreadPoolExecutor(max_workers=self.workers, thread_name_prefix="textlog") as pool:
            for path in paths:
                builder.source(path)
                line_no = 1  # of the next chunk to finish: the workers count each chunk's lines
                pending: deque[tuple[Future[_Matched], bytes]] = deque()
                for i, chunk in enumerate(iter_whole_lines(path, builder, self.chunk_bytes)):
                    if i == 0 and not builder.meta:
                        head = strip_launcher_prefixes(chunk[: 1 << 20].decode("utf-8", "replace"))
                        builder.meta.update(self.meta_from_head(head))
                    if not state.skeletons:  # nothing to match yet (pending is empty): learn now
                        line_no += state.process(chunk, line_no, path, builder)
                        continue
                    if len(pending) >= ahead:
                        line_no += state.finish(*pending.popleft(), line_no, path, builder)
                    pending.append((pool.submit(state.match, chunk, tuple(state.skeletons)), chunk))
                while pending:
                    line_no += state.finish(*pending.popleft(), line_no, path, builder)
        if state.total_steps is not None:
            builder.meta.setdefault("total_steps", state.total_steps)


@functools.lru_cache(maxsize=4)
def _sniff_text(head: bytes) -> str:
    """A head as the readers' ``sniff`` reads it (every reader is handed the same head)."""
    return strip_launcher_prefixes(decode_head(head))


@functools.lru_cache(maxsize=4)
def _head_lines(text: str) -> tuple[tuple[bytes, int], ...]:
    """Each line of a head and where its own text starts behind a launcher prefix (0: none)."""
    out = []
    for line in text.splitlines():
        raw = line.encode()
        lead = LAUNCHER_LEAD.match(raw)
        out.append((raw, lead.end() if lead else 0))
    return tuple(out)


@dataclass
class _Matched:
    """One chunk matched against the skeletons known when it was queued (no builder, no learning:
    safe on a worker thread)."""

    skeletons: int
    """How many skeletons it was matched against: fewer than now means a stale match."""
    lines: Any
    """The chunk's lines, a binary Arrow array (see :func:`_lines_array`)."""
    blocks: list[_Block]
    rest: npt.NDArray[np.int64]
    """Non-blank lines no skeleton took (line numbers in the chunk)."""


class _EngineState:
    """Skeletons learned so far and the step carried between chunks."""

    def __init__(self, reader: TextLogReader) -> None:
        self.reader = reader
        self.kinds = reader.kinds
        self.compiled = reader._compiled
        self.skeletons: list[_Skeleton] = []
        self.last_step: int | None = None
        self.total_steps: int | None = None
        self.run_ranks: dict[int, int] = {}
        """kind -> the launcher rank whose lines give that kind's run-level rows."""
        self._keymaps: dict[tuple[int, str], tuple[str, str | None] | None] = {}

    # -- skeletons
    def learn(self, kind_i: int, line: bytes, m: re.Match[bytes], pairs: list[re.Match[bytes]]) -> None:
        if sum(1 for s in self.skeletons if s.kind == kind_i) >= MAX_SKELETONS_PER_KIND:
            return
        kind = self.kinds[kind_i]
        names = self.compiled[kind_i][2]
        parts = [_strip_group_names(kind.full_prefix)]
        pos = m.end()
        keys: list[str] = []
        values: list[bytes] = []
        for pm in pairs:
            vg = _value_group(pm)
            start, end = pm.span(vg)
            parts.append(_generalise_literal(line[pos:start], self.reader._ignores[kind_i]))
            parts.append(VALUE_PATTERN)
            pos = end
            keys.append(_key_of(pm))
            values.append(pm.group(vg))
        parts.append(_generalise_literal(line[pos:].rstrip(b" \t\r"), self.reader._ignores[kind_i]))
        parts.append(rb"[ \t\r]*$")
        source = b"".join(parts)
        try:
            regex = re.compile(b"^" + source, re.M)
        except re.error:
            return
        check = regex.match(line)
        n_prefix = len(names)
        if check is None or list(check.groups()[n_prefix:]) != values:
            return  # values with blanks inside: this layout stays on the slow path
        sk = _Skeleton(kind_i, source, n_prefix + len(values), names, tuple(keys), regex)
        sk.re2 = _re2_pattern(sk)
        sk.plan = _plan(kind, line, m, [pm.span(_value_group(pm)) for pm in pairs])
        self.skeletons.append(sk)

    # -- chunks
    def process(self, chunk: bytes, first_line: int, path: Path, builder: LogBuilder) -> int:
        """Parse one chunk now, on this thread (see :meth:`match` and :meth:`finish`)."""
        return self.finish(self.match(chunk, tuple(self.skeletons)), chunk, first_line, path, builder)

    def finish(
        self, matched: Future[_Matched] | _Matched, chunk: bytes, first_line: int, path: Path, builder: LogBuilder
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
        if found.rest.shape[0]:
            texts = [t.rstrip(b"\n") for t in found.lines.take(found.rest).to_pylist()]
            blocks = blocks + self._slow(texts, found.rest, first_line, path, builder)
        self._emit(blocks, len(found.lines), builder)
        return len(found.lines)

    def match(self, chunk: bytes, skeletons: tuple[_Skeleton, ...]) -> _Matched:
        """Parse one chunk: each skeleton captures its lines' values in bulk, with Arrow's RE2
        ``extract_regex`` over a zero-copy array of the lines or with Python's ``re`` over the
        chunk, whichever measured faster for that skeleton on its first chunk (RE2 wins on short
        lines, Python's backtracking engine on long ones with many groups). The remaining
        non-blank lines are left to :meth:`finish`. Reads the state, never changes it (but for
        a skeleton's engine, chosen once): safe on a worker thread."""
        split = _Split(chunk) if any(sk.plan is not None for sk in skeletons) else None
        lines: Any = _lines_array(chunk) if split is None else split.lines
        n = len(lines)
        if n == 0:
            return _Matched(len(skeletons), lines, [], np.zeros(0, np.int64))
        offsets = np.frombuffer(lines.buffers()[1], dtype=np.int32, count=n + 1)
        unmatched = np.diff(offsets) > 1  # a blank line is just its b"\n"
        blocks: list[_Block] = []
        for sk in skeletons:
            if not sk.keys or not unmatched.any():
                continue
            planned = None
            if sk.plan is not None and split is not None:
                planned = self._match_plan(sk, sk.plan, split, unmatched)
                if planned is not None:
                    unmatched[planned.rows] = False
                    blocks.append(planned)
                    if not unmatched.any():
                        continue
            if sk.engine == "":
                sk.engine = _fastest_engine(sk, chunk)
            if sk.engine == "re2":
                found = self._match_re2(sk, lines, unmatched)
            else:
                found = self._match_python(sk, chunk, offsets[:-1], unmatched)
            if found is not None:
                rows, fields = found
                unmatched[rows] = False
                blocks.append(self._block_from_columns(sk, fields, rows))
                if planned is not None:
                    _decide_together(planned, blocks[-1])
        for block in blocks:  # the last bulk conversion, while on the worker thread
            block.steps = self._parse_steps(block)
        return _Matched(len(skeletons), lines, blocks, np.flatnonzero(unmatched))

    def _match_plan(self, sk: _Skeleton, plan: _Plan, split: _Split, unmatched: npt.NDArray[np.bool_]) -> _Block | None:
        """The lines of ``sk`` that its plan recognises, as a block (values already floats where
        every one of a column is a plain number)."""
        lines = np.flatnonzero(unmatched & (split.pipes_per_line == plan.n_pipes))
        if lines.shape[0] == 0:
            return None
        prefix = _match_head(plan, split, lines)
        if _fields is not None and max(len(plan.values), len(plan.literals)) <= _C_MAX_FIELDS:
            ok, raw = _plan_fields_c(plan, split, lines, _bools(prefix.is_valid()))
        else:
            ok, raw = _plan_fields_arrow(plan, split, lines)
            ok &= _bools(prefix.is_valid())
        if not ok.any():
            return None
        if not ok.all():
            keep = pa.array(ok)
            prefix = prefix.filter(keep)
            raw = [v[ok] if isinstance(v, np.ndarray) else v.filter(keep) for v in raw]
            lines = lines[ok]
            ok = ok[ok]
        values: list[Any] = []
        for v in raw:
            if isinstance(v, np.ndarray):
                values.append(v)
                continue
            try:
                values.append(np.asarray(pc.cast(v, pa.float64()).to_numpy(zero_copy_only=False), np.float64))
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
                ok &= _bools(pc.match_substring_regex(v, _PLAIN_VALUE))  # units, 1,234: parsed later
                values.append(v)
        if not ok.any():
            return None
        cols = [prefix.field(name) for name in sk.prefix_names] + values
        if not ok.all():
            keep = pa.array(ok)
            cols = [c[ok] if isinstance(c, np.ndarray) else c.filter(keep) for c in cols]
            lines = lines[ok]
        return self._block_from_columns(sk, cols, lines)

    @staticmethod
    def _match_re2(
        sk: _Skeleton, lines: Any, unmatched: npt.NDArray[np.bool_]
    ) -> tuple[npt.NDArray[np.int64], list[Any]] | None:
        idx = np.flatnonzero(unmatched)
        subset = lines if idx.shape[0] == len(lines) else lines.take(idx)
        found = pc.extract_regex(subset, sk.re2)
        valid = np.asarray(found.is_valid().to_numpy(zero_copy_only=False), dtype=bool)
        if not valid.any():
            return None
        every = bool(valid.all())
        return idx[valid], [found.field(i) if every else found.field(i).filter(valid) for i in range(sk.n_groups)]

    @staticmethod
    def _match_python(
        sk: _Skeleton, chunk: bytes, line_starts: npt.NDArray[np.int32], unmatched: npt.NDArray[np.bool_]
    ) -> tuple[npt.NDArray[np.int64], list[Any]] | None:
        starts: list[int] = []
        groups: list[tuple[bytes, ...]] = []
        for m in sk.regex.finditer(chunk):
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

    def _block_from_columns(self, sk: _Skeleton, cols: list[Any], rows: Any) -> _Block:
        n = len(cols[0]) if cols else 0
        block = _Block(sk.kind, sk.keys, rows=list(range(n)) if rows is None else rows)
        by_name = dict(zip(sk.prefix_names, cols[: len(sk.prefix_names)], strict=True))
        block.step = by_name.get("step", [])
        block.rank = by_name.get("rank", [])
        block.lrank = by_name.get("lrank", [])
        block.ts = by_name.get("ts", [])
        total = by_name.get("total")
        block.total = [total[0].as_py()] if total is not None and len(total) else []
        block.values = list(cols[len(sk.prefix_names) :])
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
        """Lines no skeleton matched: parse each, learn its layout; count the non-metric ones."""
        blocks: dict[tuple[int, tuple[str, ...]], _Block] = {}
        for row, line in zip(rows.tolist(), texts, strict=True):
            if not line.strip(b" \t\r") or _BARE_PREFIX.fullmatch(line):
                continue
            found = self._match_kind(line)
            if found is None:
                builder.skip(path, first_line + row, _reason(line))
                continue
            kind_i, m = found
            keys: tuple[str, ...]
            values: list[bytes]
            for sk in self.skeletons:
                mm = sk.regex.match(line) if sk.kind == kind_i else None
                if mm is not None:
                    keys, values = sk.keys, list(mm.groups()[len(sk.prefix_names) :])
                    break
            else:
                pairs = list(self.compiled[kind_i][1].finditer(line, m.end()))
                self.learn(kind_i, line, m, pairs)
                keys = tuple(_key_of(pm) for pm in pairs)
                values = [pm.group(_value_group(pm)) for pm in pairs]
            if not keys:
                builder.skip(path, first_line + row, "metric line without values: " + _reason(line))
                continue
            block = blocks.get((kind_i, keys))
            if block is None:
                block = blocks[(kind_i, keys)] = _Block(kind_i, keys, values=[[] for _ in keys])
            gd = m.groupdict()
            block.rows.append(row)
            block.step.append(gd.get("step") or b"")
            if "rank" in gd:
                block.rank.append(gd.get("rank") or b"")
            block.lrank.append(gd.get("lrank") or b"")
            if "ts" in gd:
                block.ts.append(gd.get("ts") or b"")
            if gd.get("total") and not block.total:
                block.total.append(gd["total"])
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

    def _emit(self, blocks: list[_Block], n_rows: int, builder: LogBuilder) -> None:
        base = builder.reserve(n_rows)
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
                rows, steps = rows[valid], steps[valid]
                block = _filter_block(block, valid)
            if steps.shape[0] == 0:
                continue
            self._emit_block(block, rows + base, steps, builder)
        if known_steps.shape[0]:
            self.last_step = int(known_steps[-1])

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
        if _all_present(block.step):
            arr = _arrow(block.step).cast(pa.string()).cast(pa.int64()).to_numpy()
            return np.asarray(arr, np.int64) + offset
        steps = _arrow(block.step).to_pylist()
        return np.array([int(s) + offset if s else -1 for s in steps], dtype=np.int64)

    def _emit_block(
        self, block: _Block, seq: npt.NDArray[np.int64], steps: npt.NDArray[np.int64], builder: LogBuilder
    ) -> None:
        kind = self.kinds[block.kind]
        line_rank: npt.NDArray[np.int32] | None = None
        if len(block.rank) and (_all_present(block.rank) if block.rank_ok is None else block.rank_ok):
            line_rank = np.asarray(_arrow(block.rank).cast(pa.string()).cast(pa.int32()).to_numpy(), np.int32)
        wall = None
        if len(block.ts) and (_all_present(block.ts) if block.ts_ok is None else block.ts_ok):
            wall = parse_timestamps(_arrow(block.ts).cast(pa.string()), kind.ts_format)
            builder.meta.setdefault("wall_time_zone", "UTC assumed: the log prints local time without a zone")
        stream: Any = 0 if line_rank is None else line_rank + 1
        run_stream = stream
        rank_of_line: Any = line_rank
        launcher = _launcher_ranks(block.lrank)
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
                    rank_of_line = self.reader.per_rank_default if lowest < 0 else lowest
                else:
                    rank_of_line = np.where(named, launcher, self.reader.per_rank_default).astype(np.int32)
                stream, run_stream = rank_of_line + 1, 0
        for key, raw in zip(block.keys, block.values, strict=True):
            mapped = self._keymap(block.kind, key)
            if mapped is None:
                continue
            name, key_unit = mapped
            if isinstance(raw, np.ndarray):  # parsed by the plan: plain numbers, none missing
                conv = ConvertedValues(raw, np.ones(raw.shape[0], dtype=bool), [], None)
            else:
                conv = parse_numbers(_arrow(raw))
            sentinel = kind.sentinels.get(name)
            if sentinel is not None:
                conv.ok &= conv.values != sentinel
            per_rank = kind.all_per_rank or (
                not kind.run_level and (name in PER_RANK_NAMES or name in kind.per_rank_keys)
            )
            line_stream = stream
            if per_rank:
                rank: Any = self.reader.per_rank_default if rank_of_line is None else rank_of_line
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
                # every value kept (the usual case): no copy, which on the main thread cost ~20%
                # of a Megatron read (72 MB of fresh pages for a 9M-value log)
                kept = conv.values if mask.all() else conv.values[mask]
                out_name, out_values = to_canonical_unit(name, unit, kept)
                _add_masked(builder, out_name, steps, out_values, mask, rank, wall, line_stream, seq)
            if conv.pct is not None:
                pmask = conv.ok & ~np.isnan(conv.pct)
                pct_name = out_pct_name(name)
                _add_masked(builder, pct_name, steps, conv.pct[pmask], pmask, rank, wall, line_stream, seq)


class _Split:
    """A chunk cut after every newline and every ``|`` (by ``_fields.c`` where built, else numpy; text
    after the last newline is in no line): ``lines`` as for
    :func:`_lines_array`, and one zero-copy binary array of ``segments``; line ``i``'s fields are
    segments ``first_segment[i] + 0..pipes_per_line[i]``, each ending with its ``|`` (the last one
    with the newline)."""

    def __init__(self, chunk: bytes) -> None:
        if _fields is not None:
            bounds, self.first_segment, self.pipes_per_line, offsets = _split_c(chunk)
        else:
            bounds, self.first_segment, self.pipes_per_line, offsets = _split_numpy(chunk)
        n = self.first_segment.shape[0]
        buffers: Any = (bounds, offsets)  # numpy arrays are buffers (the stubs do not say so)
        self.segments = pa.Array.from_buffers(
            pa.binary(), bounds.shape[0] - 1, [None, pa.py_buffer(buffers[0]), pa.py_buffer(chunk)]
        )
        self.offsets: npt.NDArray[np.int32] = offsets
        self.lines: Any = pa.Array.from_buffers(pa.binary(), n, [None, pa.py_buffer(buffers[1]), pa.py_buffer(chunk)])
        self.bounds: npt.NDArray[np.int32] = bounds
        self.chunk = chunk


_SplitArrays = tuple[npt.NDArray[np.int32], npt.NDArray[np.int64], npt.NDArray[np.int64], npt.NDArray[np.int32]]


def _split_c(chunk: bytes) -> _SplitArrays:
    """``(bounds, first_segment, pipes_per_line, offsets)`` of :class:`_Split`, by ``_fields.c``."""
    assert _fields is not None
    n_segments, n_lines = _fields.count_separators(chunk)
    bounds = np.empty(n_segments + 1, dtype=np.int32)
    first = np.empty(n_lines, dtype=np.int64)
    pipes = np.empty(n_lines, dtype=np.int64)
    offsets = np.empty(n_lines + 1, dtype=np.int32)
    _fields.split_fields(chunk, bounds, first, pipes, offsets)
    return bounds, first, pipes, offsets


def _split_numpy(chunk: bytes) -> _SplitArrays:
    """What :func:`_split_c` gives, with numpy (when the extension is not built)."""
    data = np.frombuffer(chunk, dtype=np.uint8)
    newline, pipe = _scratch_masks(data.shape[0])
    np.equal(data, 10, out=newline)
    np.equal(data, 124, out=pipe)
    seps = np.flatnonzero(np.bitwise_or(newline, pipe, out=newline))
    ends = np.flatnonzero(data[seps] == 10)  # the separators that end a line
    n = ends.shape[0]
    first = np.empty(n, dtype=np.int64)
    first[:1] = 0
    first[1:] = ends[:-1] + 1
    bounds: Any = np.empty(seps.shape[0] + 1, dtype=np.int32)
    bounds[0] = 0
    bounds[1:] = seps + 1
    offsets: Any = np.empty(n + 1, dtype=np.int32)
    offsets[0] = 0
    offsets[1:] = bounds[1:][ends]
    return bounds, first, ends - first, offsets


_scratch = threading.local()


def _scratch_masks(size: int) -> tuple[npt.NDArray[np.bool_], npt.NDArray[np.bool_]]:
    """Two byte masks of ``size``, this thread's own and reused from chunk to chunk: fresh 4 MiB
    temporaries are handed back to the OS by malloc and faulted in again for every chunk, which
    cost more than the comparisons themselves (10 against 0.7 ms a chunk on a VM where a page fault
    takes ~7 us)."""
    masks = getattr(_scratch, "masks", None)
    if masks is None or masks[0].shape[0] < size:
        masks = _scratch.masks = (np.empty(size, dtype=np.bool_), np.empty(size, dtype=np.bool_))
    return masks[0][:size], masks[1][:size]


def _plan_fields_arrow(
    plan: _Plan, split: _Split, lines: npt.NDArray[np.int64]
) -> tuple[npt.NDArray[np.bool_], list[Any]]:
    """``(ok, raw)`` of the planned ``lines`` with Arrow kernels: whether each line's fixed text
    (field 0 aside) is as planned, and each value field's text (a binary array per field)."""
    n = lines.shape[0]
    index = (split.first_segment[lines][None, :] + np.arange(1, plan.n_pipes + 1)[:, None]).ravel()
    fields = split.segments.take(pa.array(index))  # every field but the first in one take, field by field

    def field(j: int) -> Any:
        return fields.slice((j - 1) * n, n)

    checks: list[Any] = []
    raw: list[Any] = []
    for i, (before, after) in enumerate(plan.values):
        f = field(i + 1)
        checks += [pc.starts_with(f, before), pc.ends_with(f, after)]
        raw.append(pc.binary_slice(f, len(before), -len(after)))  # empty or overlapping: cast fails
    for j, literal in enumerate(plan.literals, start=len(plan.values) + 1):
        checks.append(pc.equal(field(j), literal))
    last = pc.cast(field(plan.n_pipes), options=pc.CastOptions(pa.string(), allow_invalid_utf8=True))
    checks.append(pc.equal(pc.ascii_rtrim(last, characters=" \t\r\n").cast(pa.binary()), plan.last))
    return _bools(functools.reduce(pc.and_, checks)), raw


def _plan_fields_c(
    plan: _Plan, split: _Split, lines: npt.NDArray[np.int64], head_ok: npt.NDArray[np.bool_]
) -> tuple[npt.NDArray[np.bool_], list[Any]]:
    """What :func:`_plan_fields_arrow` decides, in one C pass over the lines (``_fields.c``), with
    the values of plain numbers already parsed, and ``head_ok`` folded into ``ok``. A field where a
    line kept by ``ok`` holds anything else is cut out and left to Arrow's cast as on that path."""
    assert _fields is not None
    n, nv = lines.shape[0], len(plan.values)
    first = np.ascontiguousarray(split.first_segment[lines])
    ok = np.empty(n, dtype=np.bool_)
    values = np.empty((nv, n), dtype=np.float64)
    slow = np.empty((nv, n), dtype=np.bool_)
    befores = tuple(b for b, _ in plan.values)
    afters = tuple(a for _, a in plan.values)
    _fields.match_fields(
        split.chunk, split.bounds, first, plan.n_pipes, befores, afters, plan.literals, plan.last, ok, values, slow
    )
    ok &= head_ok
    raw: list[Any] = list(values)
    for j in np.flatnonzero(np.any(slow & ok, axis=1)):
        before, after = plan.values[j]
        f = split.segments.take(first + (j + 1))
        raw[j] = pc.binary_slice(f, len(before), -len(after))
    return ok, raw


def _plan(kind: LineKind, line: bytes, m: re.Match[bytes], spans: list[tuple[int, int]]) -> _Plan | None:
    """The ``|``-field plan of a layout learned from ``line`` (None where it cannot be one: a prefix
    that does not end at the first ``|``, values not one per field right after it, ignored text)."""
    if kind.ignore is not None or not spans or not _ends_with_pipe(kind.prefix):
        return None
    pipes = [i for i, c in enumerate(line) if c == 124]
    if len(pipes) < len(spans) + 1 or m.end() != pipes[0] + 1:
        return None
    values: list[tuple[bytes, bytes]] = []
    for i, (start, end) in enumerate(spans):
        lo, hi = pipes[i] + 1, pipes[i + 1]
        if not lo <= start < end <= hi:
            return None
        values.append((line[lo:start], line[end : hi + 1]))
    literals = tuple(line[pipes[j - 1] + 1 : pipes[j] + 1] for j in range(len(spans) + 1, len(pipes)))
    prefix = "^(?:" + kind.full_prefix + ")$"
    try:
        pc.extract_regex(pa.array([], pa.binary()), prefix)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return None
    last = line[pipes[-1] + 1 :].rstrip(b" \t\r")
    # an ASCII pattern means the same to Python's bytes regex (shapes) and to RE2 (other lines)
    return _Plan(len(pipes), prefix, tuple(values), literals, last, prefix.isascii() and _digits_alike(prefix))


_ZERO_DIGITS: Final = bytes.maketrans(b"123456789", b"000000000")
_DIGIT_CATEGORIES: Final = {"DIGIT": True, "WORD": True, "NOT_SPACE": True, "NOT_LINEBREAK": True}
_NO_DIGIT_CATEGORIES: Final = {"NOT_DIGIT", "NOT_WORD", "SPACE", "LINEBREAK"}
_sre_parser: Any = importlib.import_module("re._parser")


def _digits_alike(pattern: str) -> bool:
    """True when ``pattern`` cannot tell one ASCII digit from another (no digit literal, no class
    holding some digits but not all, no back-reference): it then matches a text exactly as it
    matches the text with every digit made ``0``, with the same group spans."""
    try:
        return _alike(_sre_parser.parse(pattern))
    except (re.error, TypeError, ValueError):
        return False


def _alike(items: Any) -> bool:
    for op, av in items:
        name = str(op)
        if name in ("LITERAL", "NOT_LITERAL"):
            if 48 <= av <= 57:
                return False
        elif name == "IN":
            if _class_digits(av) not in (0, 10):
                return False
        elif name in ("ANY", "AT"):
            continue
        elif name == "SUBPATTERN":
            if not _alike(av[3]):
                return False
        elif name in ("MAX_REPEAT", "MIN_REPEAT", "POSSESSIVE_REPEAT"):
            if not _alike(av[2]):
                return False
        elif name == "BRANCH":
            if not all(_alike(branch) for branch in av[1]):
                return False
        elif name == "ATOMIC_GROUP":
            if not _alike(av):
                return False
        else:  # back-references, look-arounds, anything else: not proven alike
            return False
    return True


def _class_digits(items: Any) -> int:
    """How many of the ten digits a character class holds (-1: not known)."""
    count = 0
    for digit in range(48, 58):
        hit, negate = False, False
        for op, av in items:
            name = str(op)
            if name == "NEGATE":
                negate = True
            elif name == "LITERAL":
                hit |= av == digit
            elif name == "RANGE":
                hit |= av[0] <= digit <= av[1]
            elif name == "CATEGORY":
                cat = str(av).removeprefix("CATEGORY_").removeprefix("UNI_")
                if cat in _DIGIT_CATEGORIES:
                    hit = True
                elif cat not in _NO_DIGIT_CATEGORIES:
                    return -1
            else:
                return -1
        count += hit != negate
    return count


def _match_head(plan: _Plan, split: _Split, lines: npt.NDArray[np.int64]) -> Any:
    """The prefix matched on field 0 of ``lines``, as ``extract_regex`` gives it.

    Where the prefix treats all digits alike (:func:`_digits_alike`), fields of one *shape* (the
    same bytes once every digit is made ``0``: Megatron pads its counters to a fixed width, so a
    chunk holds one or two) match or fail together, with their groups at the same places: the
    prefix runs once on the shape (lines are sorted by shape in ``_fields.c``, or numpy without it),
    and each group is cut from a numpy gather of fixed-width rows.
    Fields of other shapes (a few tried per chunk) go through the regex."""
    first = split.first_segment[lines]
    if not plan.head_alike or lines.shape[0] < 64:
        return pc.extract_regex(split.segments.take(first), plan.prefix_re2)
    starts = split.bounds[first]
    widths = split.bounds[first + 1] - starts
    left = np.ones(lines.shape[0], dtype=bool)
    regex = np.zeros(lines.shape[0], dtype=bool)  # lines left to the regex
    found: list[tuple[npt.NDArray[np.int64], tuple[tuple[int, int], ...]]] = []
    for _ in range(_MAX_SHAPES):
        todo = np.flatnonzero(left)
        if todo.shape[0] == 0:
            break
        width = int(widths[todo[0]])
        todo = todo[widths[todo] == width]
        start = int(starts[todo[0]])
        shape = split.chunk[start : start + width].translate(_ZERO_DIGITS)
        members = todo[_same_shape(split, first[todo], starts[todo], shape)]
        left[members] = False
        spans = _shape_spans(plan.prefix_re2, shape)
        if spans is not None:
            found.append((members, spans))
        else:
            regex[members] = True
    if not found:
        return pc.extract_regex(split.segments.take(first), plan.prefix_re2)
    names = [f.name for f in pc.extract_regex(pa.array([], pa.binary()), plan.prefix_re2).type]
    parts: list[list[Any]] = [[] for _ in names]
    order: list[npt.NDArray[np.int64]] = []
    for members, spans in found:
        m = members.shape[0]
        order.append(members)
        for part, (a, b) in zip(parts, spans, strict=True):
            w = max(b - a, 0)
            values: Any = _fixed_width_rows(split.chunk, starts[members] + a, w) if w else np.zeros(0, np.uint8)
            offsets: Any = np.arange(0, (m + 1) * w, w, dtype=np.int32) if w else np.zeros(m + 1, np.int32)
            part.append(pa.Array.from_buffers(pa.binary(), m, [None, pa.py_buffer(offsets), pa.py_buffer(values)]))
    valid = [np.ones(members.shape[0], dtype=bool) for members, _ in found]
    rest = np.flatnonzero(regex | left)
    if rest.shape[0]:
        slow = pc.extract_regex(split.segments.take(first[rest]), plan.prefix_re2)
        order.append(rest)
        valid.append(_bools(slow.is_valid()))
        for i, part in enumerate(parts):
            part.append(slow.field(i))
    cols = [pa.concat_arrays(part) if len(part) > 1 else part[0] for part in parts]
    ok = np.concatenate(valid)
    if len(order) > 1:  # back to line order
        inverse = np.empty(lines.shape[0], dtype=np.int64)
        inverse[np.concatenate(order)] = np.arange(lines.shape[0])
        take = pa.array(inverse)
        cols = [c.take(take) for c in cols]
        ok = ok[inverse]
    if ok.all():
        return pa.StructArray.from_arrays(cols, names=names)
    return pa.StructArray.from_arrays(cols, names=names, mask=pa.array(~ok))


_MAX_SHAPES: Final = 4


def _same_shape(
    split: _Split, first: npt.NDArray[np.int64], starts: npt.NDArray[np.int32], shape: bytes
) -> npt.NDArray[np.bool_]:
    """Which of these lines' field 0 (all ``len(shape)`` bytes long) has ``shape`` once its digits
    are made ``0``."""
    same = np.empty(first.shape[0], dtype=np.bool_)
    if _fields is not None:
        _fields.match_shape(split.chunk, split.bounds, np.ascontiguousarray(first), shape, same)
        return same
    grid = _fixed_width_rows(split.chunk, starts, len(shape))
    shapes = grid.tobytes().translate(_ZERO_DIGITS)
    if shapes == shape * first.shape[0]:  # one shape (the usual case): one comparison
        same[:] = True
    else:
        same[:] = np.frombuffer(shapes, dtype=f"V{len(shape)}") == np.void(shape)
    return same


def _fixed_width_rows(chunk: bytes, starts: npt.NDArray[Any], width: int) -> npt.NDArray[np.uint8]:
    """The ``width`` bytes at each of ``starts`` (all within the chunk), one row each, contiguous."""
    every_start = np.ndarray(buffer=chunk, dtype=f"V{width}", shape=(len(chunk) - width + 1,), strides=(1,))
    rows: npt.NDArray[np.uint8] = every_start[starts].view(np.uint8).reshape(-1, width)
    return rows


@functools.lru_cache(maxsize=256)
def _shape_spans(prefix_re2: str, shape: bytes) -> tuple[tuple[int, int], ...] | None:
    """Where each group of the prefix (``^(?:...)$``) falls in ``shape``, None when it does not
    match (or the engines disagree on the groups: then the regex decides, line by line)."""
    try:
        found = re.fullmatch(prefix_re2.encode(), shape)
    except re.error:
        return None
    if found is None:
        return None
    names = sorted(found.re.groupindex, key=found.re.groupindex.__getitem__)
    spans = tuple(found.span(name) for name in names)
    re2 = pc.extract_regex(pa.array([shape], pa.binary()), prefix_re2)
    if not re2[0].is_valid or [re2.field(n)[0].as_py() for n in names] != [shape[a:b] for a, b in spans]:
        return None
    return spans


def _ends_with_pipe(pattern: str) -> bool:
    """True when a regex ends with a literal ``\\|`` that every match ends with (no ``|``
    alternative at the top level)."""
    depth, i, in_class, last = 0, 0, False, ""
    while i < len(pattern):
        c = pattern[i]
        token = pattern[i : i + 2] if c == "\\" else c
        i += len(token)
        if in_class:
            in_class = c != "]"
        elif c == "[":
            in_class = True
            if pattern.startswith("^", i):
                i += 1
            if pattern.startswith("]", i):
                i += 1
        elif c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
        elif c == "|" and depth == 0:
            return False
        last = token
    return last == "\\|" and depth == 0 and not in_class


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


def _bools(mask: Any) -> npt.NDArray[np.bool_]:
    return np.asarray(mask.fill_null(False).to_numpy(zero_copy_only=False), dtype=bool)


def _fastest_engine(sk: _Skeleton, chunk: bytes) -> str:
    """Time both engines once on a chunk (at most its first 256 KiB) and keep the faster."""
    if sk.re2 is None:
        return "python"
    sample_end = chunk.rfind(b"\n", 0, 256 * 1024) + 1 or len(chunk)
    sample = chunk[:sample_end]
    sample_lines = _lines_array(sample)
    t0 = time.perf_counter()
    pc.extract_regex(sample_lines, sk.re2)
    t1 = time.perf_counter()
    found = [m.groups() for m in sk.regex.finditer(sample)]
    _ = [pa.array(c, pa.binary()) for c in zip(*found, strict=True)]
    t2 = time.perf_counter()
    return "re2" if t1 - t0 <= t2 - t1 else "python"


def _lines_array(chunk: bytes) -> Any:
    """The chunk's lines (each with its newline) as an Arrow binary array over the chunk's bytes."""
    data = np.frombuffer(chunk, dtype=np.uint8)
    ends = np.flatnonzero(data == 10) + 1
    offsets: Any = np.empty(ends.shape[0] + 1, dtype=np.int32)  # numpy arrays are buffers
    offsets[0] = 0
    offsets[1:] = ends
    return pa.Array.from_buffers(pa.binary(), ends.shape[0], [None, pa.py_buffer(offsets), pa.py_buffer(chunk)])


def _re2_pattern(sk: _Skeleton) -> str | None:
    """The skeleton for RE2 (anchored, groups named ``g0..``), or None if RE2 rejects it."""
    source = sk.source.decode("utf-8", "surrogateescape")
    if not source.endswith("$"):
        return None
    body = source[:-1]
    out: list[str] = []
    group = 0
    i = 0
    while i < len(body):  # name every capturing group: extract_regex returns named groups only
        if body[i] == "\\":
            out.append(body[i : i + 2])
            i += 2
            continue
        if body[i] == "(" and not body.startswith("(?", i):
            out.append(f"(?P<g{group}>")
            group += 1
        else:
            out.append(body[i])
        i += 1
    if group != sk.n_groups:
        return None
    pattern = "^" + "".join(out) + r"\n?$"
    try:
        pc.extract_regex(pa.array([], pa.binary()), pattern)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, UnicodeEncodeError):
        return None  # UnicodeEncodeError: a learned literal that is not UTF-8
    return pattern


def out_pct_name(name: str) -> str:
    """Name of a ``(NN%)`` companion value: ``gpu_mem_gb`` -> ``gpu_mem_pct``."""
    return (name[:-3] if name.endswith("_gb") else name) + "_pct"


def _add_masked(
    builder: LogBuilder,
    name: str,
    steps: npt.NDArray[np.int64],
    values: npt.NDArray[np.float64],
    mask: npt.NDArray[np.bool_],
    rank: Any,
    wall: npt.NDArray[np.float64] | None,
    stream: Any,
    seq: npt.NDArray[np.int64],
) -> None:
    if mask.all():  # share the block's arrays between its metrics: no copies
        if isinstance(stream, np.ndarray):
            mask = np.ones(steps.shape[0], dtype=bool)
        else:
            builder.add(name, steps, values, rank=rank, wall_time=wall, stream=int(stream), seq=seq, canonical=True)
            return
    r = rank[mask] if isinstance(rank, np.ndarray) else rank
    st = stream[mask] if isinstance(stream, np.ndarray) else stream
    if isinstance(st, np.ndarray):
        # one stream per printing rank: split so each keeps its own step sequence
        for s in np.unique(st):
            sel = st == s
            builder.add(
                name,
                steps[mask][sel],
                values[sel],
                rank=r[sel] if isinstance(r, np.ndarray) else r,
                wall_time=None if wall is None else wall[mask][sel],
                stream=int(s),
                seq=seq[mask][sel],
                canonical=True,
            )
        return
    builder.add(
        name,
        steps[mask],
        values,
        rank=r,
        wall_time=None if wall is None else wall[mask],
        stream=int(st),
        seq=seq[mask],
        canonical=True,
    )


_BARE_PREFIX: Final = re.compile(LAUNCHER_PREFIX.encode() + rb"[ \t\r]*")
"""A line that is a launcher prefix alone (an empty line of the trainer's): blank, not skipped."""


def _launcher_ranks(col: Any) -> npt.NDArray[np.int32] | None:
    """The rank each line's launcher prefix names (-1: none), or None when no line names one."""
    if len(col) == 0:
        return None
    if isinstance(col, pa.Array):
        lengths = pc.binary_length(col).fill_null(0)
        if (pc.max(lengths).as_py() or 0) == 0:
            return None
        text = pc.if_else(pc.equal(lengths, 0), pa.scalar(b"-1", pa.binary()), col.fill_null(b"-1"))
        return np.asarray(text.cast(pa.string()).cast(pa.int32()).to_numpy(zero_copy_only=False), np.int32)
    if not any(col):
        return None
    return np.array([int(r) if r else -1 for r in col], dtype=np.int32)


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


def _value_group(pm: re.Match[bytes]) -> str:
    return "val" if pm.groupdict().get("val") is not None else "val2"


def _key_of(pm: re.Match[bytes]) -> str:
    gd = pm.groupdict()
    key = gd.get("key") if gd.get("key") is not None else gd.get("key2")
    return (key or b"").decode("utf-8", "replace").strip()


def _arrow(col: Any) -> Any:
    return col if isinstance(col, pa.Array) else pa.array(col, pa.binary())


def _all_present(col: Any) -> bool:
    if isinstance(col, pa.Array):
        return len(col) > 0 and col.null_count == 0 and pc.min(pc.binary_length(col)).as_py() > 0
    return len(col) > 0 and all(col)


def _reason(line: bytes) -> str:
    text = line.decode("utf-8", "replace").strip()
    return "not a metric line: " + (text[:80] + ("..." if len(text) > 80 else ""))
