"""A JSON document that is a table without a header: a list of equal-length rows of numbers.

An exported scalar series saved as JSON (TensorBoard's "JSON" link, a plotting tool's or a script's
``json.dump`` of ``zip(steps, values)``) is ``[[wall, step, value], ...]`` or ``[[step, value], ...]``,
its series named only by the file (``run-.-tag-loss.json``, ``loss.json``). The columns are told apart
by what they hold, for any such document:

- three columns whose first is a clock (every value a plausible Unix time, 1e8-1e11 seconds) and whose
  second is whole: ``wall_time, step, value``;
- two columns whose first is whole: ``step, value``.

The value is named for the file (:func:`ingest.formats.value_column.series_name`). Anything else (rows
of other lengths, a first column not whole, text cells) is not read as such a table.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Final

from ingest.formats.value_column import series_name

_CLOCK: Final = (1e8, 1e11)
"""Seconds since 1970: 1973 to 5138, what a wall-clock column of an export holds."""


def _number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def _whole(x: Any) -> bool:
    return _number(x) and math.isfinite(x) and float(x).is_integer()


def row_records(doc: Any, path: Path) -> list[dict[str, Any]] | None:
    """Per-step records of a header-less row table (module docstring), None for any other document."""
    if not isinstance(doc, list) or len(doc) < 2:
        return None
    width = len(doc[0]) if isinstance(doc[0], list) else 0
    if width not in (2, 3) or not all(isinstance(r, list) and len(r) == width for r in doc):
        return None
    if not all(_number(x) or (isinstance(x, str) and number_text(x)) for r in doc for x in r[-1:]):
        return None
    name = series_name(path).strip() or "value"
    if width == 3:
        if not all(_number(r[0]) and _CLOCK[0] <= r[0] <= _CLOCK[1] and _whole(r[1]) for r in doc):
            return None
        return [{"wall_time": float(r[0]), "step": int(r[1]), name: r[2]} for r in doc]
    if not all(_whole(r[0]) for r in doc):
        return None
    return [{"step": int(r[0]), name: r[1]} for r in doc]


def number_text(text: str) -> bool:
    """Whether ``text`` reads as a float (``"1e-3"``, ``"nan"``): a number a JSON writer quoted."""
    try:
        float(text)
    except ValueError:
        return False
    return True
