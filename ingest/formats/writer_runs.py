"""Two or more training processes appending to one log file at the same time (issue #31; docs/diagnosis.md,
"Import: steps, epochs and runs").

A second launch started while the first still trains, both writing into one ``loss_log.txt``, leaves their
lines interleaved: ``100 2700 200 300 2800 400 2900 ...``. Read as one writer, every line whose step goes
down is a restart, and the file falls apart into hundreds of runs of one or two lines, each with an invented
rewind. The rule: lines of different writers that interleave are never a rollback or a restart. Each
writer's step rises on its own, so a line goes to the writer whose series it continues:

- among the runs that wrote one of the last :data:`WINDOW` lines (a writer that is still writing) and
  whose last step is below the line's, the one whose next step on its own logging grid (last step plus
  its last rise) the line is nearest to; on a tie (two writers' series cross at one step, or run side by
  side), the one whose last time per step the line's is nearest to (two launches seldom run at one pace:
  one has the GPU to itself, the other shares it, or they train different models); then the one that
  has waited longest (writers take turns) among the writer of the line before and those whose lines came
  between its own, else the writer of the line before (a launch that passes the step a short launch
  before it ended at goes on);
- a line below every such run's last step starts a run (a relaunch: its counter starts again).

The split is taken only where lines go back to another writer's series at least :data:`MIN_RETURNS`
times (two writers alternate on every few lines); else the file is one writer's, and the reader's own
rule (any step that does not advance starts a run) stands. A rewind is then judged per writer.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

WINDOW: Final = 6
"""Lines a writer that is still writing may be apart (the other writers' lines between)."""

MIN_RETURNS: Final = 3
"""Lines that continue another writer's series than the line before them's, from which writers interleave."""


@dataclass
class _Writer:
    last: int  # the last step it logged
    first: int  # the index of its first line
    line: int  # the index of its last line
    rise: int = 0  # the step's last rise (its logging grid), 0 until it has risen once
    pace: float = math.nan  # its last line's time per step, seconds (NaN: not printed)


def writer_runs(steps: Sequence[int], pace: Sequence[float] | None = None) -> list[int] | None:
    """Run index of each line (``steps``: each line's step, file order; runs numbered in the order their
    first line comes) when the lines are several writers' interleaved; None when they are not (fewer
    than :data:`MIN_RETURNS` returns to another writer's series). ``pace``: each line's time per step
    in seconds where the line prints one (NaN where not), which tells writers apart where their steps do not."""
    writers: list[_Writer] = []
    run_of: list[int] = []
    returns = 0
    for i, step in enumerate(steps):
        live = [k for k, w in enumerate(writers) if w.line >= i - WINDOW and w.last < step]
        if not live:
            first = pace[i] if pace is not None else math.nan
            writers.append(_Writer(step, i, i, pace=first if _is_pace(first) else math.nan))
            run_of.append(len(writers) - 1)
            continue
        before = writers[run_of[-1]]
        mark = pace[i] if pace is not None else math.nan
        k = min(live, key=lambda k: _distance(writers[k], before, step, mark))
        returns += writers[k] is not before
        w = writers[k]
        w.rise, w.last, w.line = step - w.last, step, i
        if _is_pace(mark):
            w.pace = mark
        run_of.append(k)
    return run_of if returns >= MIN_RETURNS else None


def _distance(w: _Writer, before: _Writer, step: int, pace: float) -> tuple[int, float, float]:
    """How far a line at ``step`` (its time per step ``pace``) is from continuing writer ``w`` (``before``:
    the writer of the line before): steps from its next on its grid, then the pace's log ratio, then
    the turn (a tie with a writer whose lines never came between this one's goes to ``before``)."""
    turn = w.line if w is before or _interleave(w, before) else math.inf
    apart = abs(math.log(pace / w.pace)) if _is_pace(pace) and _is_pace(w.pace) else 0.0
    return abs(step - (w.last + w.rise)), apart, turn


def _is_pace(seconds: float) -> bool:
    """Whether a printed time per step tells writers apart: finite and positive (an ``inf`` or ``0`` a damaged
    line prints is no pace; its log ratio to another is undefined)."""
    return 0.0 < seconds < math.inf


def _interleave(a: _Writer, b: _Writer) -> bool:
    """Whether each of two writers wrote a line after the other's first."""
    return a.line > b.first and b.line > a.first
