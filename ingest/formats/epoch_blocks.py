"""Custom epoch consoles: each epoch a block opened by a line that holds only its number, its metrics on
the lines under it, often pasted into a Markdown code fence::

    ```bash
    Epoch: 3
    Learning rate: 0.023000
    Train Epoch: 3 Loss: 3.636 Acc@1 25.923 Acc@5 49.759: 100%|##########| 10010/10010 [59:37<00:00]

    Test set: Average loss: 3.3124, Acc@1: 31.062%, Acc@5: 56.962%
    GPU Memory: 0.43 GB (Max: 10.46 GB)
    ```

The step is the epoch of the block (``Epoch: 3``, ``Epoch 3``, ``Epoch 3/80``). Every ``Name: value``
(or ``Name value``) field under it is that epoch's: a line that starts with ``Test``, ``Val``,
``Valid``, ``Eval`` gives ``val_`` metrics; a name of several words is the metric its last words name
(``Average loss`` is ``loss``, ``Learning rate`` is ``lr``). A tqdm bar is read at its last redraw
(``\\r``-separated) with its bar, counts and rates cut off; a parenthesised companion (``(Max: 10.46
GB)``) is no field; an epoch counter on a line (``Train Epoch: 3``) is the step, not a metric. Fence
lines, and lines before the first block, are counted as skipped.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Final

from ingest.formats._common import LogBuilder
from ingest.formats.aliases import canonical_name
from ingest.formats.base import Reader
from ingest.formats.line_console import LineResult, Record, Row, Where, read_console
from ingest.formats.numbers import NUMBER, parse_number
from ingest.formats.raw_text import decode_head, looks_binary
from stab_core.metrics import CANONICAL_METRICS

_OPEN: Final = re.compile(
    r"^[ \t]*(?:Epoch|EPOCH|epoch)[ \t]*[:=#]?[ \t]*(?P<epoch>[0-9]+)(?:[ \t]*/[ \t]*[0-9]+)?[ \t]*$"
)
_FENCE: Final = re.compile(r"^[ \t]*(?:```|~~~)")
_BAR: Final = re.compile(r":?[ \t]*[0-9]{1,3}%\|.*$")
_PARENS: Final = re.compile(r"\([^()]*\)")
_FIELD: Final = re.compile(
    r"(?P<key>[A-Za-z][A-Za-z0-9_@./-]*(?: [A-Za-z][A-Za-z0-9_@./-]*){0,3})[ \t]*[:=]?[ \t]+"
    r"(?P<value>" + NUMBER + r")(?P<unit>%|[ \t]?[GMK]i?B)?(?=[ \t,;|]|$)"
)
_EVAL: Final = re.compile(r"^[ \t]*(?:Test|Val|Valid|Validation|Eval|Evaluation)\b", re.IGNORECASE)


def _name(key: str) -> tuple[str, bool]:
    """The metric a field's name gives, and whether it is canonical (its last words tried, longest first)."""
    words = key.split()
    for i in range(len(words)):
        name, _ = canonical_name(" ".join(words[i:]))
        if name in CANONICAL_METRICS:
            return name, True
    return "_".join(words), False


_MAX_RECORD_CHARS: Final = 4096
"""The longest last redraw of a line read as an epoch's fields: a longer one (a million-character line, one
field printed over and over) is no record of one epoch; earlier tqdm redraws before a ``\r`` do not count."""


def _fields(line: str) -> list[tuple[str, float, str | None]]:
    """``(name, value, unit)`` of each field of one line (its tqdm bar and parentheses cut off)."""
    text = _PARENS.sub(" ", _BAR.sub("", line.split("\r")[-1]))
    out = []
    for m in _FIELD.finditer(text):
        if (value := parse_number(m["value"])) is None:
            continue
        if m["key"].split()[-1].lower() == "epoch":
            continue  # the block's epoch, printed again
        unit = (m["unit"] or "").strip() or None
        out.append((m["key"], value, None if unit == "%" else unit))
    return out


class EpochBlockReader(Reader):
    name = "epoch_blocks"
    description = "custom epoch console: an 'Epoch: N' line opens each epoch, 'Name: value' fields under it"

    def sniff(self, head: bytes, path: Path) -> float:
        if path.is_dir() or not head or looks_binary(head):
            return 0.0
        lines = decode_head(head).splitlines()
        opens = [i for i, line in enumerate(lines) if _OPEN.match(line)]
        if len(opens) < 2:
            return 0.0
        # a block holds fields: the lines between two openers are metric lines, not another layout's
        filled = sum(1 for a, b in itertools.pairwise(opens) if any(_fields(x) for x in lines[a + 1 : b]))
        return 0.6 if filled >= max(1, (len(opens) - 1) * 3 // 4) else 0.0

    def fill(self, paths: Sequence[Path], builder: LogBuilder) -> None:
        where = Where()
        epoch: int | None = None
        canonical: dict[str, bool] = {}

        def line(raw: str) -> LineResult:
            nonlocal epoch
            if where.line == 1:
                epoch = None  # each file's blocks open with its own heading
            if (m := _OPEN.match(raw.rstrip("\r"))) is not None:
                epoch = int(m["epoch"])
                return [], "epoch heading"
            if _FENCE.match(raw):
                return [], "markdown fence"
            if len(raw.rsplit("\r", 1)[-1]) > _MAX_RECORD_CHARS:
                return [], None  # no epoch's record: skipped and counted
            if not (fields := _fields(raw)):
                return [], None
            if epoch is None:
                return [], "values without a step"
            prefix = "val_" if _EVAL.match(raw) else ""
            rows: list[Row] = []
            for key, value, unit in fields:
                name, canonical[prefix + name] = _name(key)
                rows.append((prefix + name, unit, epoch, value))
            return rows, None

        def last_per_epoch(records: list[Record]) -> list[Record]:
            # the last redraw or repeat of a field in its epoch is the epoch's value
            by_epoch: dict[tuple[str, str | None], dict[int, Record]] = {}
            for record in records:
                by_epoch.setdefault((record[0], record[1]), {})[record[2]] = record
            return [r for rows in by_epoch.values() for r in sorted(rows.values(), key=lambda r: r[4])]

        read_console(
            paths,
            builder,
            line,
            "an epoch block line",
            whole=True,
            where=where,
            finish=last_per_epoch,
            canonical=lambda metric, unit: canonical[metric] and unit is None,
        )
