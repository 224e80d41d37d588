"""The one number grammar of every text format: how a value looks in a log line and how it becomes a float.

Every reader that finds values in text builds its line patterns from :data:`NUMBER` and converts
what it captured with :func:`parse_number` (one string) or :func:`parse_numbers` (a column), so a
value that parses in one format parses in every other (issue #34 item 4; a test greps the readers
for private number patterns).

What a number is (``tests/test_formats_numbers.py`` holds the table):

- an optional sign, then digits with an optional fraction (``12``, ``1.``, ``0.5``), a bare fraction
  (``.5``), each with an optional exponent (``3e-5``, ``1.121008E+01``);
- thousands separators in groups of exactly three (``9,270``, ``1,234,567.5``): trainers print
  ``{:,}`` token and sample counts (OLMo, Megatron, DeepSpeed). ``1,23`` is the number 1 followed by
  text, so a list ``1,2,3`` is never one number;
- not-a-number and infinities as trainers print them: ``nan`` (Python, numpy, C's printf ``-nan``),
  ``NaN`` (JSON, Java, pandas), ``NAN`` and ``INF`` (Python's ``{:E}``, Megatron's ``lm loss``),
  ``inf``/``-inf``, ``Inf``, ``Infinity``. Other spellings (``Nan``, ``nAn``) are not numbers. As
  for digits, what may follow (a glued unit as in modded-nanogpt's ``step_avg:nanms``, or a word
  boundary) is the reader's pattern's to say.

A one-element list around a number (``[13.860385]``: a script that prints or saves a 1-element
numpy array or ``tensor.tolist()``) is that number in a table cell (docs/diagnosis.md, "Import: readers and prefixes");
a longer list is not.

A unit glued to the number (``1706ms``, ``160.86GiB``) is not part of it: the reader's pattern
captures it beside the number and :func:`parse_numbers` reports it. Quotes around a value (a
Hugging Face dict's ``'2.897'``) are the reader's to strip.

The pattern uses no look-around, so a line pattern built from it still runs on Arrow's RE2 engine.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Final

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as _pc

pc: Any = _pc  # pyarrow-stubs overloads reject valid calls on generic arrays

FloatArray = npt.NDArray[np.float64]

_EXPONENT: Final = r"(?:[eE][-+]?[0-9]+)?"
NUMBER: Final = (
    r"[-+]?(?:[0-9]{1,3}(?:,[0-9]{3})+(?:\.[0-9]*)?"
    + _EXPONENT
    + r"|[0-9]+\.?[0-9]*"
    + _EXPONENT
    + r"|\.[0-9]+"
    + _EXPONENT
    + r"|nan|NaN|NAN|inf(?:inity)?|Inf(?:inity)?|INF)"
)
"""Regex (no groups, no look-around) of one number as logs write it; see the module docstring."""

_NUMBER_ONLY: Final = re.compile(NUMBER)

_NUMBER_WITH_UNIT: Final = (
    r"^(?P<num>" + NUMBER + r")\s*(?P<unit>[A-Za-zµ%/]*)\s*(?:\(\s*(?P<pct>" + NUMBER + r")\s*%\s*\))?$"
)
"""A whole value cell: a number, an optional unit glued or one blank away, an optional ``(NN%)``."""
_ONE_ELEMENT_LIST: Final = r"^\s*\[\s*(" + NUMBER + r")\s*\]\s*$"
"""A cell that is a one-element list of a number (``[0.25]``): replaced by its number before parsing."""


def parse_number(text: str | bytes) -> float | None:
    """The float that ``text`` (one whole number of the grammar, blanks around it allowed) writes;
    None when it is not one (a unit, a word, an empty string)."""
    if isinstance(text, bytes):
        text = text.decode("ascii", "replace")
    text = text.strip()
    if _NUMBER_ONLY.fullmatch(text) is None:
        return None
    return float(text.replace(",", ""))


@dataclass
class ConvertedValues:
    """Floats parsed from raw strings: ``values`` (NaN where a string did not parse, see ``ok``),
    the unit written after the number (one per distinct unit) and an optional ``(xx%)`` companion."""

    values: FloatArray
    ok: npt.NDArray[np.bool_]
    units: list[tuple[str, npt.NDArray[np.bool_]]]
    pct: FloatArray | None


def utf8_or_null(raw: Any) -> Any:
    """``raw`` (binary or string) as a string array, a value that is not valid UTF-8 (a corrupted
    byte in an uploaded log) null: it is no number or time, and Arrow's string kernels are defined on
    valid text only (the plain cast raised ``ArrowInvalid`` out of the reader)."""
    if raw.type == pa.string():
        return raw
    try:
        return raw.cast(pa.string())
    except pa.ArrowInvalid:
        return pa.array([_utf8_or_none(v) for v in raw.to_pylist()], pa.string())


def _utf8_or_none(value: bytes | None) -> str | None:
    try:
        return None if value is None else value.decode("utf-8")
    except UnicodeDecodeError:
        return None


def parse_numbers(raw: Any) -> ConvertedValues:
    """Parse strings such as ``1.244E+01``, ``nan``, ``10,550``, ``8410ms``, ``160.86GiB(90.19%)``.

    Vectorised (Arrow compute): the plain cast is tried first; units, thousands separators and a
    trailing ``(NN%)`` fall back to one regex extraction over the whole column.
    """
    strings = utf8_or_null(raw)
    n = len(strings)
    try:
        values = pc.cast(strings, pa.float64()).to_numpy(zero_copy_only=False)
        ok = np.ones(n, dtype=bool)
        if strings.null_count:
            ok = ~np.asarray(strings.is_null().to_numpy(zero_copy_only=False), dtype=bool)
            values = np.where(ok, values, np.nan)
        return ConvertedValues(values.astype(np.float64), ok, [], None)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        pass
    strings = pc.replace_substring_regex(strings, pattern=_ONE_ELEMENT_LIST, replacement=r"\1")
    parts = pc.extract_regex(pc.utf8_trim_whitespace(strings), _NUMBER_WITH_UNIT)
    ok = np.asarray(parts.is_valid().to_numpy(zero_copy_only=False), dtype=bool)
    nums = pc.replace_substring(parts.field("num"), ",", "")
    values = np.full(n, np.nan)
    if ok.any():
        parsed = pc.cast(nums.filter(pa.array(ok)), pa.float64()).to_numpy(zero_copy_only=False)
        values[ok] = parsed
    unit_col = parts.field("unit")
    units: list[tuple[str, npt.NDArray[np.bool_]]] = []
    for u in pc.unique(unit_col.filter(pa.array(ok))).to_pylist():
        if u:
            mask = np.asarray(pc.equal(unit_col, u).fill_null(False).to_numpy(zero_copy_only=False))
            units.append((str(u), mask & ok))
    pct: FloatArray | None = None
    pct_col = parts.field("pct")
    has_pct = pc.and_(pc.is_valid(pct_col), pc.greater(pc.utf8_length(pct_col), 0)).fill_null(False)
    if pc.any(has_pct).as_py():
        pct_mask = np.asarray(has_pct.to_numpy(zero_copy_only=False), dtype=bool)
        pct = np.full(n, np.nan)
        pct_text = pc.replace_substring(pct_col.filter(has_pct), ",", "")
        pct[pct_mask] = pc.cast(pct_text, pa.float64()).to_numpy(zero_copy_only=False)
    return ConvertedValues(values, ok, units, pct)
