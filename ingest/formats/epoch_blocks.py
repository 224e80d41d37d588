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
(``Average loss`` is ``loss``, ``Learning rate`` is ``lr``). A ``Test`` line is the validation only in a log
that prints no other evaluation: beside ``Val`` lines it is the test split, dropped when printed once (the
evaluation after training, which must not overwrite the last epoch's validation) and its own ``test_`` series when
printed at every epoch. A tqdm bar is read at its last redraw
(``\\r``-separated) with its bar, counts and rates cut off; a parenthesised companion (``(Max: 10.46
GB)``) is no field; an epoch counter on a line (``Train Epoch: 3``) is the step, not a metric. Fence
lines, lines before the first block and a best-so-far summary (``Best test Acc: 89.4``) are counted as
skipped; a one-item list is its item (``lr: [0.0002]``).

The opener may name the model first (``resnet-50 - Epoch 3/100``): a script that trains several models
one after another prints each one's blocks in turn, and an epoch counter that goes back (to 1 for the
next model) starts another run (:mod:`ingest.formats.segments`), never overwriting the earlier epochs.
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
    r"^[ \t]*(?:[A-Za-z][A-Za-z0-9_.-]*[ \t]+[-:|][ \t]+)?"  # the model's label: 'resnet-50 - Epoch 3/100'
    r"(?:Epoch|EPOCH|epoch)[ \t]*[:=#]?[ \t]*(?P<epoch>[0-9]+)(?:[ \t]*/[ \t]*[0-9]+)?[ \t]*$"
)
_FENCE: Final = re.compile(r"^[ \t]*(?:```|~~~)")
_BAR: Final = re.compile(r":?[ \t]*[0-9]{1,3}%\|.*$")
_PARENS: Final = re.compile(r"\([^()]*\)")
_FIELD: Final = re.compile(
    r"(?P<key>[A-Za-z][A-Za-z0-9_@./-]*(?: [A-Za-z][A-Za-z0-9_@./-]*){0,3})[ \t]*[:=]?[ \t]+"
    r"(?P<br>\[)?(?P<value>" + NUMBER + r")(?(br)\])(?P<unit>%|[ \t]?[GMK]i?B)?(?=[ \t,;|]|$)"
)
_BEST: Final = re.compile(r"^[ \t]*(?:Best|BEST|best)\b")
"""A summary of the best value so far (``Best test Top-1 Acc: 89.37`` after a model's last epoch): no epoch's record."""
_EVAL: Final = re.compile(r"^[ \t]*(?:Test|Val|Valid|Validation|Eval|Evaluation)\b", re.IGNORECASE)
_TEST: Final = re.compile(r"^[ \t]*Test\b", re.IGNORECASE)
"""A test-set evaluation's line: the run's validation unless the log also prints one (:func:`_test_records`)."""
_TEST_MARK: Final = "\x00test:"
"""The provisional name prefix of a test line's fields, until the whole log tells which split they are."""


def _test_records(records: list[Record], canonical: dict[str, bool]) -> list[Record]:
    """``records`` with the test lines' fields (named ``_TEST_MARK`` + metric) named for what they are
    (round 23 f29b). In a log whose epochs print no other evaluation, the test line is the run's validation
    (``val_``, ``Test set: Average loss`` every epoch). Beside a validation line it is another split: a test line
    of one epoch only is the one evaluation after training (``Test Loss: ..`` after the last epoch's ``Val Loss``),
    no epoch's record, and is dropped, so it cannot overwrite that epoch's validation; test lines of several epochs
    are their own ``test_`` series."""
    tested = [r for r in records if r[0].startswith(_TEST_MARK)]
    if not tested:
        return records
    validated = any(r[0].startswith("val_") for r in records)
    epochs = {r[2] for r in tested}
    if validated and len(epochs) < 2:
        return [r for r in records if not r[0].startswith(_TEST_MARK)]
    prefix = "test_" if validated else "val_"
    out: list[Record] = []
    for name, unit, step, value, seq in records:
        if name.startswith(_TEST_MARK):
            base = name[len(_TEST_MARK) :]
            name = prefix + base
            canonical[name] = canonical[_TEST_MARK + base]
        out.append((name, unit, step, value, seq))
    return out


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
    # a CRLF line's last '\r' ends the line, no redraw: the fields are on the piece before it
    text = _PARENS.sub(" ", _BAR.sub("", line.rstrip("\r").split("\r")[-1]))
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
            if _BEST.match(raw):
                return [], "best-so-far summary"
            eval_line = _EVAL.match(raw) is not None
            test_line = _TEST.match(raw) is not None
            rows: list[Row] = []
            for key, value, unit in fields:
                name, known = _name(key)
                if test_line:  # validation or another split: the whole log tells (_test_records)
                    name = _TEST_MARK + name.removeprefix("val_")  # 'test Loss' names val_loss
                elif eval_line and not name.startswith("val_"):
                    name = f"val_{name}"
                canonical[name] = known
                rows.append((name, unit, epoch, value))
            return rows, None

        def last_per_epoch(records: list[Record]) -> list[Record]:
            # the last redraw or repeat of a field in its epoch is the epoch's value; an epoch shown
            # again after others (a counter that restarts: the next model of a comparison) is another
            # run's, kept for the builder to cut
            kept: dict[tuple[str, str | None], list[Record]] = {}
            for record in sorted(records, key=lambda r: r[4]):
                rows = kept.setdefault((record[0], record[1]), [])
                if rows and rows[-1][2] == record[2]:
                    rows[-1] = record
                else:
                    rows.append(record)
            return _test_records(sorted((r for rows in kept.values() for r in rows), key=lambda r: r[4]), canonical)

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
