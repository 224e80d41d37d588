"""A line that prints one known metric and no step (issue #31): ``LINESEARCH LR: 0.001953125`` between a
trainer's step lines.

**Rule.** A line that carries only the learning rate (``<words> lr: <number>``, ``learning rate = <number>``:
its last word names the LR, nothing else is on it) has no step of its own: it belongs to the step of the
adjacent metric line and is stored at that step. Which neighbour is the trainer's habit, so each reader
that meets such a line says it: a trainer that prints the LR it has just picked for the steps to come (an
LR line search before its evaluation line ``step N: train loss ...``) gives it to the *next* metric line's
step (:func:`lone_lr_kind` with ``fill_next=True``). A lone ``key: number`` line whose key is no known
metric is not read by this kind (it stays an unknown layout: config dumps print the same shape). A lone LR line
printed once is a setting, not a series: a configuration dump prints ``learning_rate = 1e-3`` once before training,
an LR line search prints its pick at every search (:func:`keep_recurring_lr`).
"""

from __future__ import annotations

from typing import Final

from ingest.formats._common import LogBuilder
from ingest.formats.aliases import canonical_name
from ingest.formats.numbers import NUMBER
from ingest.formats.textlog_patterns import LineKind

MIN_LONE_LR_LINES: Final = 2
"""Lone LR lines a file must print for them to be the run's LR series (one is the configuration's value)."""

_LR_WORD: Final = r"(?:[Ll][Rr]|[Ll]earning[ _][Rr]ate)"
"""The LR's name as the line's last word (``LR``, ``lr``, ``learning rate``); canonical_name confirms it."""

LONE_LR_PREFIX: Final = (
    r"(?=(?:[A-Za-z][A-Za-z0-9_]*[ \t]+)*" + _LR_WORD + r"[ \t]*[:=][ \t]*" + NUMBER + r"[ \t]*\r?$)"
)
"""A whole line of one LR pair, with an optional tag of words before the LR's name (``LINESEARCH LR: x``)."""


def lone_lr_key(key: str) -> tuple[str, str | None] | None:
    """``("lr", None)`` for a key whose last word is the LR's name (``LINESEARCH LR``), else None (dropped)."""
    words = key.split()
    if not words:
        return None
    for tail in (" ".join(words[-2:]), words[-1]):
        if canonical_name(tail)[0] == "lr":
            return ("lr", None)
    return None


def lone_lr_kind(*, fill_next: bool) -> LineKind:
    """The line kind of a lone LR line; ``fill_next``: it belongs to the next metric line's step (else the
    previous one's): the reader states which from how its trainer prints it."""
    return LineKind(
        name="lone_lr",
        prefix=LONE_LR_PREFIX,
        pairs=r"(?P<key>[A-Za-z][A-Za-z0-9_ \t]*?)[ \t]*[:=][ \t]*(?P<val>" + NUMBER + ")",
        keymap=lone_lr_key,
        fill_next=fill_next,
        evidence=False,  # any console may print such a line: the reader's own lines say whose file it is
    )


def keep_recurring_lr(builder: LogBuilder) -> None:
    """Forget the ``lr`` rows of a reader whose only LR lines are lone ones when fewer than
    :data:`MIN_LONE_LR_LINES` were read: a single one is the configuration's LR printed before training."""
    steps, _, _ = builder.rows_of("lr")
    if 0 < steps.shape[0] < MIN_LONE_LR_LINES:
        builder.drop("lr")
