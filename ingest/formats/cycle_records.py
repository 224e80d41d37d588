"""A record printed over a fixed cycle of lines, as the generic reader takes it
(:mod:`ingest.formats.record_lines`).

Some trainers print each logging interval as a block of short lines, only one of which holds the
step counter (a face detector's ``Timer: 0.66`` / ``epoch:0 || iter:10 || Loss:19.45`` /
``->> pal1 conf loss:4.73 || pal1 loc loss:4.67`` / ``->>lr:0.0005``). Read line by line, the
counter-less lines are values of no step and the loss terms collide under one name. The rule a reader
applies to any file of that shape: where the lines between two step lines repeat one sequence of
line shapes (the keys of each line, in order) between most step lines of the head, the step line and
that sequence are one record. The record starts where the first block starts: the lines just before
the first step line that repeat the sequence's tail open it (the ``Timer`` line above belongs to the
step below it). A block is joined only when every line matches the cycle in order; anything else
(an evaluation line, a warning) ends it and is read on its own. Joined, every key of the record must
be a distinct name (no two loss terms on one metric), else nothing is joined.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from itertools import pairwise
from typing import Final

Pairs = list[tuple[str, float, str | None]]
Shape = tuple[str, ...]
Line = tuple[int, str]
Cycle = tuple[list[Shape], int]
"""A record's line shapes in order, and the index of its step line."""

CYCLE_HEAD_LINES: Final = 4000
"""Non-blank lines of the head the cycle is found in."""
MIN_CYCLES: Final = 5
"""Step lines followed by the same sequence a cycle needs."""
MAX_CYCLE: Final = 8
"""Lines a record may span."""
CYCLE_LINE_MAX: Final = 160
"""Characters a line of a cycle may have: longer lines are records of their own."""
_LEAD: Final = re.compile(r"^[^A-Za-z0-9_\[(]+")
"""A continuation line's leading arrows or bullets (``->> lr:0.0005``)."""


def _shape(text: str, pairs_of: Callable[[str], Pairs]) -> Shape | None:
    """The keys of ``text``'s pairs in order (None: a blank line, a long line or one with no pair)."""
    if not text.strip() or len(text) > CYCLE_LINE_MAX:
        return None
    return tuple(key for key, _, _ in pairs_of(text)) or None


def find_cycle(lines: Sequence[str], pairs_of: Callable[[str], Pairs], is_step: Callable[[str], bool]) -> Cycle | None:
    """The shapes of one record's lines in order and the step line's place among them (None: the
    head's step lines repeat no sequence)."""
    shapes = [_shape(text, pairs_of) for text in lines[:CYCLE_HEAD_LINES] if text.strip()]
    stepped = [i for i, s in enumerate(shapes) if s is not None and any(is_step(k) for k in s)]
    gaps = Counter((shapes[a], tuple(shapes[a + 1 : b])) for a, b in pairwise(stepped))
    if not gaps:
        return None
    (step_shape, gap), count = gaps.most_common(1)[0]
    if step_shape is None or all(is_step(k) for k in step_shape):
        return None  # a lone 'Step: N' over 'key: number' lines: record_lines.joined reads those
    if not gap or len(gap) >= MAX_CYCLE or count < MIN_CYCLES or 3 * count < 2 * (len(stepped) - 1):
        return None
    if any(s is None or any(is_step(k) for k in s) for s in gap):
        return None
    # the first full block: a step line before the cycle starts (a first batch with no update yet) is no block
    first = next(i for i in stepped if shapes[i] == step_shape and tuple(shapes[i + 1 : i + 1 + len(gap)]) == gap)
    lead = 0
    while lead < len(gap) and first - lead > 0 and shapes[first - lead - 1] == gap[len(gap) - lead - 1]:
        lead += 1
    cycle = [s for s in (*gap[len(gap) - lead :], step_shape, *gap[: len(gap) - lead]) if s is not None]
    sample = [text for text in lines[:CYCLE_HEAD_LINES] if text.strip()][first - lead : first - lead + len(cycle)]
    keys = [key for key, _, _ in pairs_of(_join(sample, lead))]
    if len(keys) != sum(len(s) for s in cycle) or len(set(keys)) != len(keys):
        return None  # joined, two keys would be one metric
    return cycle, lead


def _join(texts: Sequence[str], step_at: int) -> str:
    """One record's lines as one line, in the step line's own column separator."""
    step = texts[step_at]
    sep = " || " if "||" in step else " | " if "|" in step else ", "
    return sep.join(_LEAD.sub("", text.strip()) for text in texts)


def cycled(
    lines: Iterable[Line], found: Cycle, pairs_of: Callable[[str], Pairs]
) -> Iterator[tuple[int, str, list[Line]]]:
    """``(line_no, text, consumed lines)`` of each line, a full cycle as one record on its first line."""
    cycle, step_at = found
    held: list[Line] = []
    for line_no, text in lines:
        shape = _shape(text, pairs_of)
        if held and shape is not None and shape == cycle[len(held)]:
            held.append((line_no, text))
        else:
            yield from ((n, t, []) for n, t in held)
            held = []
            if shape is not None and shape == cycle[0]:
                held = [(line_no, text)]
            else:
                yield line_no, text, []
                continue
        if len(held) == len(cycle):
            yield held[0][0], _join([t for _, t in held], step_at), held[1:]
            held = []
    yield from ((n, t, []) for n, t in held)
