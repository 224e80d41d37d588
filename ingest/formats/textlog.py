"""The base of every text-log reader: a format declares its line kinds, this reads them fast.

A text format is a :class:`TextLogReader` with a list of :class:`LineKind` s (a prefix regex that
recognises a metric line and captures its step, a pairs regex for its ``key: value`` pairs). The
reader sniffs a head for them (:meth:`TextLogReader.sniff`) and reads files chunk by chunk on a
small thread pool (:meth:`TextLogReader.fill`). The engine is split along its seams:

- :mod:`ingest.formats.textlog_patterns`: :class:`LineKind`, the *skeleton* learned from the first
  line of each layout (one regex for the whole line, a group per value), and the fixed rule that
  runs a skeleton on Arrow's RE2 (short lines) or Python's ``re`` (long ones).
  ``STABSCOPE_TEXTLOG_ENGINE=re2`` or ``=python`` forces one engine on every skeleton (the
  differential tests read the same logs with each and compare); unset, or ``auto``, the rule decides.
- :mod:`ingest.formats.textlog_pipes`: the ``|``-field plans (Megatron's ``iteration`` line cut at
  every ``|`` and checked without a regex over the line; ``_fields.c`` where it is built).
- :mod:`ingest.formats.textlog_engine`: chunks in, rows out: every skeleton captures its lines in
  bulk, the lines none fits go through Python one by one (new layouts become skeletons, the rest
  are skipped and counted), the captured columns are converted by Arrow and added to the table.
  Memory is bounded by the chunk size plus the parsed columns.

Launcher prefixes are handled once, for every text format: each kind's prefix regex is put behind
:data:`~ingest.formats._common.LAUNCHER_PREFIX` (pdsh's ``host: ``, ``[defaultN]:``, ``[rankN]:``,
srun's ``N: ``, a time stamp, a log level), so detection, skeletons and ``|`` plans all see through
it; ANSI codes and NUL bytes are removed from the bytes before. Where a line's prefix names a rank,
its per-rank values are that rank's series and its run-level values are kept from one rank only
(``meta['run_level_rank']``; see :mod:`ingest.formats.textlog_engine`).
"""

from __future__ import annotations

import functools
import os
import re
from collections import deque
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any, Final

from ingest.formats._common import CHUNK_BYTES, LogBuilder, iter_whole_lines
from ingest.formats.base import Reader
from ingest.formats.raw_text import LAUNCHER_LEAD, decode_head, looks_binary, strip_launcher_prefixes
from ingest.formats.sections import blank_lines, notes_marks
from ingest.formats.textlog_engine import PER_RANK_NAMES, EngineState, MatchedChunk
from ingest.formats.textlog_patterns import ENGINE_ENV, LineKind
from ingest.formats.wrapped_lines import is_pasted_size, join_wrapped_lines

__all__ = ["ENGINE_ENV", "PER_RANK_NAMES", "LineKind", "TextLogReader"]

NEAR_MISS_LINE_CHARS: Final = 1000
"""Characters of a head line a refusal looks for a format's metric line in (after other text)."""
NEAR_MISS_BUDGET_CHARS: Final = 64 * 1024
"""Characters of head lines, in all, a refusal searches so: enough to say which format came close."""
_OUTER_EPOCH: Final = re.compile(rb"\bepoch\b[ \t]*[:=]?[ \t]*\[?[ \t]*[0-9]", re.IGNORECASE)
"""An epoch counter before a format's step (PaddleVideo's ``epoch:[  1/25 ] train step:0  loss: x``): the
step's outer counter, part of one epoch-and-step record the generic reader reads, not a prefix in the way."""
_LAZY_LEAD: Final = re.compile(rb"^(?:\(\?:\[\^\\n\]\*\\r\)\?)?\[\^\\n(?:\\r)?\]\*\?")
"""A prefix that opens with a lazy run of any line characters (``[^\\n]*?``, ``[^\\n\\r]*?``, after an
optional ``(?:[^\\n]*\\r)?``): it matches at a line's start whenever it matches on the line."""


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
    finishes a chunk; ``workers`` measured no lower peak RSS and no faster on logs of tens and
    hundreds of MB)."""
    joins_wrapped_lines = False
    """Join iteration lines wrapped over several lines (:mod:`ingest.formats.wrapped_lines`)."""
    settings_when_constant: frozenset[str] = frozenset()
    """Metrics that are run metadata where constant over a run (:attr:`LogBuilder.settings_when_constant`)."""

    def __init__(self) -> None:
        self._compiled = [k.compiled() for k in self.kinds]
        self._bare = [
            (re.compile(k.prefix.encode()), pairs)
            for k, (_, pairs, _) in zip(self.kinds, self._compiled, strict=True)
            if k.evidence
        ]
        """Each kind's own prefix (no launcher part) and its pairs: detection's regexes (a kind that is no
        evidence of the format, :attr:`LineKind.evidence`, is left out)."""
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
        # a kind whose prefix may start anywhere on the line already matches at 0 when it matches at
        # all, so only the others can sit after other text; and ``search`` retries the prefix at
        # every position of the line, so each line is searched up to NEAR_MISS_LINE_CHARS and the
        # head up to NEAR_MISS_BUDGET_CHARS (a 10^6-character line made the search quadratic in it)
        # only a kind that carries its own step is evidence of this format behind other text: a value
        # line that takes the step of the line before (llm.c's `val loss x`) also fits inside a
        # custom trainer's `step N: train loss x, val loss y` line, which the generic reader reads
        anywhere = [
            (prefix, pairs)
            for prefix, pairs in self._bare
            if not _LAZY_LEAD.match(prefix.pattern) and "step" in prefix.groupindex
        ]
        inside, first, budget = 0, "", NEAR_MISS_BUDGET_CHARS if anywhere else 0
        for line in lines:
            if budget <= 0:
                break
            raw = line[:NEAR_MISS_LINE_CHARS].encode()
            budget -= len(raw)
            for prefix, pairs in anywhere:
                m = prefix.search(raw)
                # in the line's first half: a prefix in the way, not a `name=value` at a shell
                # command's end (which the generic reader would otherwise be refused for)
                if (
                    m
                    and 0 < m.start() <= len(raw) // 2
                    and pairs.search(raw, m.end())
                    and not _OUTER_EPOCH.search(raw, 0, m.start())
                ):
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
        builder.settings_when_constant = self.settings_when_constant
        state = EngineState(self.kinds, self._compiled, self._ignores, per_rank_default=self.per_rank_default)
        ahead = self.in_flight or self.workers + 1  # chunks matched or queued at once: bounds memory
        with ThreadPoolExecutor(max_workers=self.workers, thread_name_prefix="textlog") as pool:
            for path in paths:
                builder.source(path)
                line_no = 1  # of the next chunk to finish: the workers count each chunk's lines
                pending: deque[tuple[Future[MatchedChunk], bytes]] = deque()
                joins = self.joins_wrapped_lines and is_pasted_size(path)
                # each line reserves one seq, in file order: line n of this file is seq first + n - 1
                first = builder.reserve(0)
                marks = notes_marks(path)
                builder.run_headings += [first + n - 1 for n in marks.run_headings]
                builder.config_headings += [first + n - 1 for n in marks.config_headings]
                builder.excerpt_starts += [first + n - 1 for n in marks.excerpt_starts]
                builder.stated_settings += [(first + n - 1, key, value) for n, key, value in marks.settings]
                chunk_line = 1  # the first line of the next chunk read
                for i, whole in enumerate(iter_whole_lines(path, builder, self.chunk_bytes)):
                    chunk = join_wrapped_lines(whole) if joins else whole
                    if marks.quoted_lines:
                        chunk = blank_lines(chunk, chunk_line, marks.quoted_lines)
                        chunk_line += chunk.count(b"\n")
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
