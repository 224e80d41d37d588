"""A metrics file in long form: one ``<step> <name> <value>`` record a line (issue #31; docs/diagnosis.md, "Import: the
generic reader").

A trainer that appends each value as it is computed writes its metrics file "long": the step, the
series' name, the value, separated by blanks (``0 val 11.0864`` / ``0 hella 0.2498`` / ``1 train
10.97``), with ``#`` comment lines (a resume note) and blank lines between. The rules, for any such file
(no trainer named):

- the step is the record's own first field: records of different series at one step are one step of
  each, never rows of one series (a ``val`` record at step 250 never overwrites the ``train`` one);
- a name that is only a data split (``train``, ``val``/``valid``/``validation``/``eval``/``dev``,
  ``test``) names that split's loss: nothing else of the split is logged beside it in this layout;
  every other name keeps its canonical metric name (``ingest.formats.aliases``);
- a step that goes back (a resumed launch appending to the same file) is the builder's usual rollback or
  fresh run (``ingest.formats.segments``), never a second value of the same step kept twice.

It is a fallback reader: it claims a file only where nearly every non-blank, non-comment head line is
such a record, below every reader keyed on a trainer's own spelling of the same layout.
"""

from __future__ import annotations

import re
from typing import Final

from ingest.formats.aliases import canonical_name
from ingest.formats.numbers import NUMBER
from ingest.formats.textlog import LineKind, TextLogReader

_NAME: Final = r"[A-Za-z][A-Za-z0-9_./-]{0,63}"
_RECORD: Final = re.compile(r"^[ \t]*[0-9]+[ \t]+" + _NAME + r"[ \t]+" + NUMBER + r"[ \t]*$")

SPLIT_LOSS: Final = {
    "train": "loss",
    "val": "val_loss",
    "valid": "val_loss",
    "validation": "val_loss",
    "eval": "val_loss",
    "dev": "val_loss",
    "test": "test_loss",
}
"""A record named only by its data split is that split's loss."""

MIN_RECORDS: Final = 3
"""Head records needed before the layout is claimed."""
MIN_SHARE: Final = 0.9
"""Share of the head's non-blank, non-comment lines that must be records."""


def long_key(key: str) -> tuple[str, str | None]:
    """``(metric, unit)`` of a record's name (``train`` -> ``loss``; else the alias table)."""
    low = key.strip().lower()
    if low in SPLIT_LOSS:
        return SPLIT_LOSS[low], None
    return canonical_name(key)


def record_share(text: str) -> tuple[int, int]:
    """``(records, non-blank non-comment lines)`` of ``text``; its last line may be cut by the head."""
    lines = [line for line in text.splitlines()[:-1] or text.splitlines() if line.strip()]
    lines = [line for line in lines if not line.lstrip().startswith("#")]
    return sum(1 for line in lines if _RECORD.match(line)), len(lines)


class LongRowsReader(TextLogReader):
    """Metrics written long: ``<step> <name> <value>`` a line (see the module docstring)."""

    name = "long_rows"
    description = "metrics in long form: '<step> <name> <value>' records, one a line"
    kinds = (
        LineKind(
            name="record",
            prefix=r"(?P<step>[0-9]+)[ \t]+(?=" + _NAME + r"[ \t]+" + NUMBER + r"[ \t]*$)",
            pairs=r"(?P<key>" + _NAME + r")[ \t]+(?P<val>" + NUMBER + ")",
            keymap=long_key,
        ),
    )

    def near_miss(self, head: bytes) -> tuple[int, str]:
        # ``<int> <name> <number>`` ends many console lines (``... lr 0.0001``): behind other text it is
        # no evidence of this layout, so it never turns the generic reader's fallback into a refusal
        return 0, f"{self.name}: fewer than {MIN_SHARE:.0%} of the head lines are '<step> <name> <value>' records"

    def score(self, n_metric_lines: int, text: str) -> float:
        records, lines = record_share(text)
        if records < MIN_RECORDS or records < MIN_SHARE * lines:
            return 0.0
        return 0.6
