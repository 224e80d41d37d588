"""The ``|``-field plans of the text-log engine: a layout whose fields are separated by ``|``
(Megatron's ``iteration`` line) is cut and checked without a regex over the whole line.

A chunk is cut at every newline and ``|`` (:class:`Split`); each field's literal text is compared
exactly, the prefix regex runs on the first field only (once per *shape* of it where the prefix
cannot tell digits apart: :func:`match_head`) and the values are parsed in bulk: one C pass per line
in ``_fields.c`` where the extension is built, numpy and Arrow kernels otherwise, with the same
result (the tests run both; monkeypatch this module's ``_fields`` to None for the second). Lines a
plan does not take fall through to the skeleton's regex (:mod:`ingest.formats.textlog_engine`), so
the rows never depend on whether a plan exists.
"""

from __future__ import annotations

import functools
import importlib
import re
import threading
from dataclasses import dataclass
from typing import Any, Final

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as _pc

pc: Any = _pc  # pyarrow-stubs overloads reject valid calls on generic arrays

try:  # built by `pip install` where a C compiler is at hand; without it the Arrow path decides alike
    from ingest.formats import _fields
except ImportError:  # pragma: no cover - depends on the install
    _fields = None  # type: ignore[assignment]

C_EXTENSION_BUILT: Final = _fields is not None
"""Whether ``_fields.c`` was built at install time (what the benchmark reports; the tests set
``_fields`` to None to run the numpy and Arrow path)."""

C_MAX_FIELDS: Final = 256
"""The most value (or fixed) fields ``_fields.c`` takes in a layout (its ``MAX_FIELDS``); wider ones use Arrow."""

_PLAIN_VALUE: Final = r"^[^ \t\n\r\f\v|,]+(?:,[0-9]{3})*$"
"""A value token as ``VALUE_PATTERN`` takes it, for RE2 (``\\s`` differs between the engines)."""


@dataclass(frozen=True)
class Plan:
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
    """The prefix cannot tell one digit from another (see :func:`match_head`)."""


class Split:
    """A chunk cut after every newline and every ``|`` (by ``_fields.c`` where built, else numpy; text
    after the last newline is in no line): ``lines`` as
    :func:`~ingest.formats.textlog_engine.lines_array` gives them, and one zero-copy binary array of
    ``segments``; line ``i``'s fields are segments ``first_segment[i] + 0..pipes_per_line[i]``, each
    ending with its ``|`` (the last one with the newline)."""

    def __init__(self, chunk: bytes) -> None:
        if _fields is not None:
            bounds, self.first_segment, self.pipes_per_line, offsets = split_c(chunk)
        else:
            bounds, self.first_segment, self.pipes_per_line, offsets = split_numpy(chunk)
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


def split_c(chunk: bytes) -> _SplitArrays:
    """``(bounds, first_segment, pipes_per_line, offsets)`` of :class:`Split`, by ``_fields.c``."""
    assert _fields is not None
    n_segments, n_lines = _fields.count_separators(chunk)
    bounds = np.empty(n_segments + 1, dtype=np.int32)
    first = np.empty(n_lines, dtype=np.int64)
    pipes = np.empty(n_lines, dtype=np.int64)
    offsets = np.empty(n_lines + 1, dtype=np.int32)
    _fields.split_fields(chunk, bounds, first, pipes, offsets)
    return bounds, first, pipes, offsets


def split_numpy(chunk: bytes) -> _SplitArrays:
    """What :func:`split_c` gives, with numpy (when the extension is not built)."""
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
    costs more than the comparisons themselves where page faults are slow (virtual machines)."""
    masks = getattr(_scratch, "masks", None)
    if masks is None or masks[0].shape[0] < size:
        masks = _scratch.masks = (np.empty(size, dtype=np.bool_), np.empty(size, dtype=np.bool_))
    return masks[0][:size], masks[1][:size]


def _plan_fields_arrow(
    plan: Plan, split: Split, lines: npt.NDArray[np.int64]
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
    plan: Plan, split: Split, lines: npt.NDArray[np.int64], head_ok: npt.NDArray[np.bool_]
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


def plan_for(
    prefix: str, full_prefix: str, line: bytes, m: re.Match[bytes], spans: list[tuple[int, int]]
) -> Plan | None:
    """The ``|``-field plan of a layout learned from ``line`` (None where it cannot be one: a prefix
    that does not end at the first ``|``, values not one per field right after it). ``prefix`` is
    the line kind's own prefix regex, ``full_prefix`` the same behind the launcher prefixes; ``m`` is
    ``full_prefix`` matched on ``line`` and ``spans`` where each value is. A kind with ignored text
    (:attr:`~ingest.formats.textlog_patterns.LineKind.ignore`) gets no plan: its caller asks none."""
    if not spans or not ends_with_pipe(prefix):
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
    anchored = "^(?:" + full_prefix + ")$"
    try:
        pc.extract_regex(pa.array([], pa.binary()), anchored)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return None
    last = line[pipes[-1] + 1 :].rstrip(b" \t\r")
    # an ASCII pattern means the same to Python's bytes regex (shapes) and to RE2 (other lines)
    return Plan(len(pipes), anchored, tuple(values), literals, last, anchored.isascii() and digits_alike(anchored))


_ZERO_DIGITS: Final = bytes.maketrans(b"123456789", b"000000000")

_DIGIT_CATEGORIES: Final = {"DIGIT": True, "WORD": True, "NOT_SPACE": True, "NOT_LINEBREAK": True}

_NO_DIGIT_CATEGORIES: Final = {"NOT_DIGIT", "NOT_WORD", "SPACE", "LINEBREAK"}

_sre_parser: Any = importlib.import_module("re._parser")


def digits_alike(pattern: str) -> bool:
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


def match_head(plan: Plan, split: Split, lines: npt.NDArray[np.int64]) -> Any:
    """The prefix matched on field 0 of ``lines``, as ``extract_regex`` gives it.

    Where the prefix treats all digits alike (:func:`digits_alike`), fields of one *shape* (the
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
    split: Split, first: npt.NDArray[np.int64], starts: npt.NDArray[np.int32], shape: bytes
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


def ends_with_pipe(pattern: str) -> bool:
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


def _bools(mask: Any) -> npt.NDArray[np.bool_]:
    return np.asarray(mask.fill_null(False).to_numpy(zero_copy_only=False), dtype=bool)


def match_plan(
    plan: Plan, prefix_names: list[str], split: Split, unmatched: npt.NDArray[np.bool_]
) -> tuple[npt.NDArray[np.int64], list[Any]] | None:
    """The ``unmatched`` lines of ``split`` that ``plan`` recognises: ``(line numbers, columns)``,
    the columns the prefix's groups ``prefix_names`` then the values (float64 arrays where every
    one of a column is a plain number, else the raw text), as a skeleton's regex captures them."""
    lines = np.flatnonzero(unmatched & (split.pipes_per_line == plan.n_pipes))
    if lines.shape[0] == 0:
        return None
    prefix = match_head(plan, split, lines)
    if _fields is not None and max(len(plan.values), len(plan.literals)) <= C_MAX_FIELDS:
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
    cols = [prefix.field(name) for name in prefix_names] + values
    if not ok.all():
        keep = pa.array(ok)
        cols = [c[ok] if isinstance(c, np.ndarray) else c.filter(keep) for c in cols]
        lines = lines[ok]
    return lines, cols
