"""A launch appended to a console whose first logged step repeats the last launch's (docs/diagnosis.md, "Import: steps,
epochs and runs"; issue
#31), for the generic reader (:mod:`ingest.formats.generic`).

A trainer relaunched with the same settings and appended to one file prints its start-up lines again
(``Loaded configuration from ...``, ``Starting PPO run``) and then its first step line, at the step
the file's runs start at. Where the launch before it died after logging only that first step, the
step does not go down (``iter=0`` then ``iter=0``), so the segments' rule (a step going back to the
first step starts a run: :func:`ingest.formats.segments.fresh_starts`) sees one step logged twice.
The rule: a step line of the same layout as the step line before it, at the same step, that step the
lowest the file has shown, with a line between them that repeats a line printed before the file's
first step line (its digits aside: times and line numbers change) starts a run. A line printed
twice in a row (two writers), or a rank's copy with no start-up line repeated between, stays one
record; a step that goes on is never cut here.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Sequence
from typing import Final, Protocol

_DIGITS: Final = re.compile(r"[0-9]+")
MAX_HEAD_LINES: Final = 2000
"""Start-up lines remembered (the lines before the file's first step line)."""


class _Line(Protocol):
    line_no: int
    step: int

    @property
    def layout(self) -> tuple[str, ...]: ...


def _shape(text: str) -> str:
    return _DIGITS.sub("", text).strip()


class StartupLines:
    """The start-up lines of a console (before its first step line) and the later lines that repeat
    one of them (:meth:`see`, line by line, in file order)."""

    def __init__(self) -> None:
        self.head: set[str] = set()
        self.repeated: list[int] = []
        self.stepped = False

    def see(self, line_no: int, text: str, is_step: bool) -> None:
        """Note line ``line_no``: a step line, or another line (a start-up line before the first step)."""
        if is_step:
            self.stepped = True
            return
        shape = _shape(text)
        if not shape:
            return
        if not self.stepped:
            if len(self.head) < MAX_HEAD_LINES:
                self.head.add(shape)
        elif shape in self.head:
            self.repeated.append(line_no)


def repeated_launches(lines: Sequence[_Line], repeated: Sequence[int]) -> list[int]:
    """Line numbers of the step lines of ``lines`` (file order, steps >= 0) that start a launch by the
    rule of the module docstring; ``repeated``: the sorted line numbers of the start-up lines printed
    again."""
    out: list[int] = []
    if not repeated:
        return out
    lowest: int | None = None
    last: _Line | None = None
    stepped = [x for x in lines if x.step >= 0]
    for x, after in zip(stepped, [*stepped[1:], None], strict=True):
        if (
            last is not None
            and lowest is not None
            and x.layout == last.layout
            and bisect.bisect_right(repeated, last.line_no) < bisect.bisect_left(repeated, x.line_no)
            and (x.step == last.step == lowest or _counts_from_start(x, last, after))
        ):
            out.append(x.line_no)
        lowest = x.step if lowest is None else min(lowest, x.step)
        last = x
    return out


def _counts_from_start(x: _Line, last: _Line, after: _Line | None) -> bool:
    """Whether step line ``x``, below the step line before it (``last``), counts from its launch's start: its step
    is no more than its own logging interval, the rise to the step line after it (``after``, of its layout). A
    resume from a checkpoint at step ``c > 0`` logs ``c + g`` first, more than its interval ``g``; a launch from
    scratch logs ``g`` (``10, 20, ...`` after a launch that ended at 1561)."""
    if after is None or after.layout != x.layout or not 0 < x.step < last.step:
        return False
    return 0 < x.step <= after.step - x.step
