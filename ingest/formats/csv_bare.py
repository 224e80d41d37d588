"""Tables of numbers with no header row, or with one named column (round 20: f26b, issue #31).

A script that appends ``f"{loss:.2f},{reward:.2f}\\n"`` after every update writes a CSV with no header
(``16.84,-210.47``); ``csv.writer`` over a list of losses writes one column under one name
(``losses``, then a number a row). Neither has a delimiter in a header line naming two columns, which the
CSV readers looked for, and both were refused as "format not recognised". The rules, for any such file:

- **A headerless table of numbers** (:data:`MIN_ROWS` first lines or more, each the same number of cells,
  every cell a number) is read with its columns named ``column_1``, ``column_2`` ... in file order, and
  the first column whose values are never negative is proposed as ``loss`` (a loss, the quantity a
  training script writes first, is at or above zero for nearly every objective; a reward or a score may
  be negative): ``meta['proposed_map']``, which ``--map NAME=ROLE`` corrects as for the generic reader.
- **A one-column table** (a name alone on the first line, numbers a line below it) is read as that
  column, named by its header.

Neither has a step column: the row number is the step (the table reader's rule for a table without a
counter), and the import report says so (``meta['mapping']``, ``step`` = the row number).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final

from ingest.formats.csv_comments import without_comments
from ingest.formats.numbers import parse_number

MIN_ROWS: Final = 3
"""Lines of numbers a bare table must start with: fewer say too little about its shape."""
_NAME: Final = re.compile(r"^[A-Za-z_][\w ./()-]{0,63}$")
ROW_STEP: Final = "(row number)"
"""How the mapping names the step of a table without a step column."""


@dataclass(frozen=True)
class BareTable:
    """The column names of a bare table and whether its first line is data (no header)."""

    names: list[str]
    headerless: bool


def _cells(line: str, delimiter: str) -> list[str]:
    return [c.strip() for c in line.split(delimiter)]


def bare_table(head: bytes, delimiter: str = ",") -> BareTable | None:
    """The layout of a CSV whose first bytes are ``head`` when it is a headerless table of numbers or a
    one-column table under one name; None for anything else (a table with a header of two or more names)."""
    text = without_comments(head).decode("utf-8-sig", errors="replace")
    lines = text.replace("\r", "\n").split("\n")
    if not text.endswith(("\n", "\r")):
        lines = lines[:-1]  # the last line may be cut by the head's end
    lines = [line.strip() for line in lines if line.strip()][: MIN_ROWS * 4 + 1]
    if len(lines) < MIN_ROWS + 1:
        return None
    first = _cells(lines[0], delimiter)
    rows = [_cells(line, delimiter) for line in lines[1:]]
    if not all(len(r) == len(first) and all(parse_number(c) is not None for c in r) for r in rows):
        return None
    if all(parse_number(c) is not None for c in first):
        return BareTable([f"column_{i}" for i in range(1, len(first) + 1)], headerless=True)
    if len(first) == 1 and _NAME.match(first[0]):
        return BareTable(first, headerless=False)
    return None


def bare_loss(names: list[str], nonnegative: list[bool]) -> dict[str, str]:
    """``{column: "loss"}`` for the first of a headerless table's columns (``names``) whose values are
    never negative (``nonnegative``, column by column); empty when none is."""
    return next(({name: "loss"} for name, ok in zip(names, nonnegative, strict=True) if ok), {})
