"""What the text-log engine matches: the line kinds a format declares and the skeletons learned from
its lines, with the rule that picks each skeleton's regex engine.

A format is a list of :class:`LineKind` s. A kind's ``prefix`` regex recognises a metric line at its
start and captures the step (and, when the line says them, the rank, a timestamp and the planned
total of steps); its ``pairs`` regex then finds the ``key: value`` pairs in the rest of the line.
The first line of each *layout* (the same keys in the same order) becomes a :class:`Skeleton`: one
regex for the whole line with a capture group per value (:func:`learn_skeleton`), which the engine
(:mod:`ingest.formats.textlog_engine`) runs over whole chunks at once.

A skeleton's lines are captured by Arrow's RE2 ``extract_regex`` or by Python's ``re``: which one
is fixed when the skeleton is learned, by the length of its line (:func:`engine_for`), never by a
clock, so a read gives the same rows the same way on any machine. ``STABSCOPE_TEXTLOG_ENGINE=re2``
or ``=python`` (:data:`ENGINE_ENV`) forces one engine on every skeleton: the differential tests read
the same logs with each and compare the tables.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from typing import Any, Final

import pyarrow as pa
import pyarrow.compute as _pc

from ingest.errors import StabScopeError
from ingest.formats.aliases import KeyMap
from ingest.formats.raw_text import LAUNCHER_PREFIX
from ingest.formats.textlog_pipes import Plan, plan_for

pc: Any = _pc  # pyarrow-stubs overloads reject valid calls on generic arrays


VALUE_PATTERN: Final = rb"([^\s|,]+(?:,[0-9]{3})*)"
"""How a value token looks inside a learned skeleton (thousands separators allowed)."""


MAX_SKELETONS_PER_KIND: Final = 32


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
    epoch_batches: bool = False
    """The ``step`` group captures ``E][ i/N`` (pytorch's imagenet example's ``Epoch: [E][ i/N]``):
    the step is ``E * N + i``, batches counted over the run."""
    evidence: bool = True
    """Whether a line of this kind tells the format when sniffing; a line any console may print (a lone
    ``Learning Rate: 0.001``, :mod:`ingest.formats.lone_lines`) is read, but never makes a reader claim a file."""
    step_before_first: int | None = None
    """The step of a line that comes before any metric line (an evaluation before training: step 0);
    None: such a line is counted as a metric line without step."""

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
class Skeleton:
    """A layout learned from one metric line: one regex for the whole line, a group per value."""

    kind: int
    source: bytes
    n_groups: int
    prefix_names: list[str]
    keys: tuple[str, ...]
    regex: re.Pattern[bytes]
    re2: str | None = None
    """The same pattern for Arrow's RE2 ``extract_regex`` (None when RE2 cannot express it)."""
    engine: str = "python"
    """``re2`` or ``python``: the engine that captures this skeleton's lines (see :func:`engine_for`)."""
    plan: Plan | None = None
    """The same layout as fields between ``|`` (no regex over whole lines), where it can say so."""


ENGINE_ENV: Final = "STABSCOPE_TEXTLOG_ENGINE"
"""Environment variable that forces the skeletons' regex engine: ``re2`` or ``python``; unset (or
``auto``) leaves the choice to :func:`engine_for`. The differential tests set it to read the same
logs with each engine and compare the tables."""


RE2_MAX_LINE_BYTES: Final = 96
"""A skeleton learned from a line up to this long runs on RE2, a longer one on Python's ``re``.

RE2's ``extract_regex`` costs in proportion to the bytes it scans (times the groups it tracks),
Python's in proportion to the matches it builds (a groups tuple per line, then a list per column):
so RE2 is the faster on short lines and Python's engine on long ones. Measured over lines of 1 to 32
values, the two break even between 80 and 130 bytes a line, whatever the number of values; either
engine gives the same rows (the differential tests force each)."""


def engine_override() -> str | None:
    """The engine :data:`ENGINE_ENV` forces (None: the rule decides)."""
    value = os.environ.get(ENGINE_ENV, "").strip().lower()
    if value in ("", "auto"):
        return None
    if value not in ("re2", "python"):
        raise StabScopeError(f"{ENGINE_ENV}={value!r}: expected re2, python or auto")
    return value


def engine_for(re2: str | None, line: bytes, forced: str | None) -> str:
    """``re2`` or ``python`` for a skeleton learned from ``line``: the one ``forced`` names, else by
    the line's length (:data:`RE2_MAX_LINE_BYTES`); Python's wherever RE2 cannot express the skeleton."""
    if re2 is None:
        return "python"
    if forced is not None:
        return forced
    return "re2" if len(line) <= RE2_MAX_LINE_BYTES else "python"


def learn_skeleton(
    kind_i: int,
    kind: LineKind,
    prefix_names: list[str],
    ignore: re.Pattern[bytes] | None,
    line: bytes,
    m: re.Match[bytes],
    pairs: list[re.Match[bytes]],
    *,
    forced_engine: str | None,
) -> Skeleton | None:
    """The skeleton of ``line``, a line of kind ``kind_i`` whose prefix ``m`` matched (groups
    ``prefix_names``) and whose ``key: value`` pairs are ``pairs``: the literal text between the
    values generalised (blank runs, the kind's ``ignore`` decorations), each value a group. None
    where no regex of the whole line gives back the same values (values with blanks inside): such a
    layout stays on the line-by-line path."""
    parts = [_strip_group_names(kind.full_prefix)]
    pos = m.end()
    keys: list[str] = []
    values: list[bytes] = []
    for pair in pairs:
        group = value_group(pair)
        start, end = pair.span(group)
        parts.append(_generalise_literal(line[pos:start], ignore))
        parts.append(VALUE_PATTERN)
        pos = end
        keys.append(key_of(pair))
        values.append(pair.group(group))
    parts.append(_generalise_literal(line[pos:].rstrip(b" \t\r"), ignore))
    parts.append(rb"[ \t\r]*$")
    source = b"".join(parts)
    try:
        regex = re.compile(b"^" + source, re.M)
    except re.error:
        return None
    check = regex.match(line)
    n_prefix = len(prefix_names)
    if check is None or list(check.groups()[n_prefix:]) != values:
        return None
    skeleton = Skeleton(kind_i, source, n_prefix + len(values), prefix_names, tuple(keys), regex)
    skeleton.re2 = _re2_pattern(skeleton)
    skeleton.engine = engine_for(skeleton.re2, line, forced_engine)
    if kind.ignore is None:
        spans = [pair.span(value_group(pair)) for pair in pairs]
        skeleton.plan = plan_for(kind.prefix, kind.full_prefix, line, m, spans)
    return skeleton


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


def _re2_pattern(skeleton: Skeleton) -> str | None:
    """The skeleton for RE2 (anchored, groups named ``g0..``), or None if RE2 rejects it."""
    source = skeleton.source.decode("utf-8", "surrogateescape")
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
    if group != skeleton.n_groups:
        return None
    pattern = "^" + "".join(out) + r"\n?$"
    try:
        pc.extract_regex(pa.array([], pa.binary()), pattern)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, UnicodeEncodeError):
        return None  # UnicodeEncodeError: a learned literal that is not UTF-8
    return pattern


def value_group(pair: re.Match[bytes]) -> str:
    return "val" if pair.groupdict().get("val") is not None else "val2"


def key_of(pair: re.Match[bytes]) -> str:
    groups = pair.groupdict()
    key = groups.get("key") if groups.get("key") is not None else groups.get("key2")
    return (key or b"").decode("utf-8", "replace").strip()
