"""How the generic reader (:mod:`ingest.formats.generic`) takes lines of a layout no reader knows:
``|`` columns as whole pairs (:func:`spelled_columns`, applied by :mod:`ingest.formats.record_lines`),
words of prose that are no key (:func:`no_key`), and the head lines a mapping is proposed from
(:func:`head_records`).

A line of columns separated by ``|`` (``iteration 30/ 1000 | learning rate: 1.5E-04 | lm loss: 2.6 |
loss scale: 16384.0 | number of nan iterations: 0 |``) prints one pair per column, and a column's
name is every word before its colon: ``learning rate``, not ``rate``; ``number of nan iterations``,
not a key ``of`` with value ``nan``. Such a column is rewritten as one key (the words joined by
``_``), which the alias table reads as the spaced name (``learning_rate`` is ``lr``). Columns whose
name carries a unit in brackets (``elapsed time per iteration (ms): 4220.8``) are left as they are:
the pair pattern reads the unit with them. A name that ends in a bracketed word saying how the value
was summarised (``Loss (Avg): 11.91``: the mean over the logging interval) is the name before it.
A trailing word ``value`` names nothing (``lm loss value``
is ``lm loss``). When the first column is a split's label and no pair (``validation loss at
iteration 100 | lm loss value: 8.1 | lm loss PPL: 3281``), every column after it is that split's
(``validation_lm_loss``, which the alias table reads as ``val_loss``).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from typing import Final, TypeVar

from ingest.formats.numbers import NUMBER

_WORD: Final = r"[A-Za-z][A-Za-z0-9_/.\-]*"
_COLUMN: Final = re.compile(
    r"^[ \t]*(?P<key>" + _WORD + r"(?:[ \t]+" + _WORD + r"){1,7})[ \t]*:[ \t]*(?P<val>" + NUMBER + r")[ \t]*$"
)
"""One column of several words, a colon and one number, nothing else."""
_QUALIFIED: Final = re.compile(
    r"^[ \t]*(?P<key>" + _WORD + r"(?:[ \t]+" + _WORD + r"){0,7})[ \t]*\((?P<q>[^()\n]{1,12})\)[ \t]*:[ \t]*"
    r"(?P<val>" + NUMBER + r")[ \t]*$"
)
"""One column whose name ends in a bracketed word (``Loss (Avg): 11.91``, ``MFU (%): 1.73``)."""
_STATISTIC: Final = re.compile(r"^[ \t]*(?i:avg|average|mean|ema|smoothed|running)[ \t]*$")
"""A bracketed word that says how the value was summarised (``(Avg)``), not what it measures."""
_SPLIT: Final = re.compile(r"^[ \t]*(?P<split>(?i:validation|valid|val|evaluation|eval|test))\b(?![ \t]*[:=])")
"""A first column that labels the columns after it as a split's."""
_FILLER: Final = re.compile(r"[ \t]+value$", re.IGNORECASE)
MIN_COLUMNS: Final = 2
"""Columns of several words a line must hold to be read as columns (one ``a b: 1 | c`` is prose)."""


def spelled_columns(text: str) -> str:
    """``text`` with each ``|`` column of several words before its colon and number printed as one
    key (``learning rate: 1e-4`` as ``learning_rate: 1e-4``); other text as it was."""
    if text.count("|") < MIN_COLUMNS:
        return text
    columns = text.split("|")
    named = [_COLUMN.match(column) for column in columns]
    # a name ending in a summary's word ('Loss (Avg)') is the name (one ending in a unit, '(%)', is
    # left for the pair pattern, which reads the unit with it)
    qualified = [_QUALIFIED.match(column) if m is None else None for column, m in zip(columns, named, strict=True)]
    named = [q if q is not None and _STATISTIC.match(q["q"]) else m for m, q in zip(named, qualified, strict=True)]
    if sum(m is not None for m in named) < MIN_COLUMNS:
        return text
    label = _SPLIT.match(columns[0]) if named[0] is None and ":" not in columns[0] else None
    prefix = f"{label['split']}_" if label is not None else ""
    return "|".join(
        column if m is None else f" {prefix}{'_'.join(_FILLER.sub('', m['key']).split())}: {m['val']} "
        for column, m in zip(columns, named, strict=True)
    )


_LEAD_DURATION: Final = re.compile(
    r"^[ \t]*(?:-[ \t]*)?(?P<val>[0-9]+(?:\.[0-9]+)?)(?P<unit>ms|s)[ \t]+-[ \t]+(?=[A-Za-z_][A-Za-z0-9_]*[ \t]*:)"
)
"""A duration heading a `` - `` separated line of pairs (Keras's ``224s - loss: 0.61 - acc: 0.82``)."""


def lead_duration(text: str) -> str:
    """``text`` with a duration that heads its pairs unnamed (``224s - loss: 0.61``) as the pair
    ``time: 224s`` after them: the time the step (or epoch) the line logs took."""
    m = _LEAD_DURATION.match(text)
    return text if m is None else f"{text[m.end() :]} - time: {m['val']}{m['unit']}"


FUNCTION_WORDS: Final = frozenset(
    {"of", "on", "at", "to", "for", "by", "from", "with", "and", "or", "the", "after", "before", "than", "into"}
)
"""Words of prose that a number may follow (``number of nan iterations: 0``, ``at iteration 2500 on
320-sample draw``): never a metric's name. (``in`` is not one: ``processed in 276.79s`` is the time
a step took, read as such.)"""


def no_key(key: str, unit: str | None = None) -> bool:
    """Whether ``key`` (as a pair pattern read it) is a word of prose, never a metric's name: a
    number with a unit after it (``after 3.2s``) is a quantity the line states, and stays read."""
    return unit is None and key.strip().lower() in FUNCTION_WORDS


_P = TypeVar("_P")


def head_records(
    lines: Iterable[str], pairs_of: Callable[[str], list[_P]], trains: Callable[[_P], bool], limit: int
) -> list[tuple[list[_P], str]]:
    """``(pairs, line)`` of the head lines with two pairs or more that a mapping is proposed from, in
    file order: the first ``limit`` that carry a training metric (``trains``) and the first ``limit``
    that do not. A head flooded with other pair lines (a compiler's warnings, an environment dump, a
    config repr printed line by line) no longer crowds out every metric line after it."""
    out: list[tuple[list[_P], str]] = []
    telling = other = 0
    for line in lines:
        pairs = pairs_of(line)
        if len(pairs) < 2:
            continue
        if any(trains(p) for p in pairs):
            telling += 1
            if telling <= limit:
                out.append((pairs, line))
        elif other < limit:
            other += 1
            out.append((pairs, line))
        if telling >= limit and other >= limit:
            break
    return out
