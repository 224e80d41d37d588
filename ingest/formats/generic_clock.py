"""The step time of a log the generic reader (:mod:`ingest.formats.generic`) reads whose step lines
print a training clock and no step time.

A key named a time whose values on the training lines never go down and at least double
(:func:`~ingest.formats.generic_units.is_clock`: ``train_time:51886ms``, ``elapsed: 301.5s``) is the
time trained so far, not any step's time. Where the log prints no step time of its own, each training
line's ``step_time_s`` is the clock's difference from the training line before it over the steps
between them (the mean over the steps a line logged every N steps stands for). Evaluation lines'
readings of the clock are left out (a clock that stops while evaluating would move the evaluation's
bookkeeping into the next step), and where the clock goes back (reset after a warm-up, a restart)
that step has no figure rather than a negative one.
"""

from __future__ import annotations

import re
from collections.abc import Collection
from typing import Final

import numpy as np

from ingest.formats._common import LogBuilder
from ingest.formats.generic_units import MIN_UNNAMED_LINES, is_clock

_NOT_A_CLOCK: Final = ("step_time", "eval", "val", "data_time", "test")
"""Stored names that are a step's or an evaluation's own time, never the training clock."""
_EVAL_WORDS: Final = frozenset({"val", "valid", "validation", "eval", "evaluation", "test"})
"""Words of a clock's name that make it an evaluation's clock (``Net_validation_time_s``)."""


def clock_step_times(builder: LogBuilder, names: Collection[str]) -> None:
    """Add ``step_time_s`` (s) from the one training clock among the stored ``names`` (see the module);
    none where the log stores a step time already, or where no name, or more than one, is a training
    clock. Every clock's own series then leaves the run: the time so far is no metric (docs/diagnosis.md, "Import: step
    times and clocks"; SAR-DDPM's cumulative ``Net training time: 70.2s`` and ``Net validation time: 36.7s``), and its
    differences are the step time."""
    evaluated = np.concatenate([builder.rows_of(n)[2] for n in ("val_loss", "eval_loss")])
    clocks, others = [], []
    for name in names:
        low = name.lower()  # a console's 'Time: 266.5s' is stored as 'Time_s'
        if "time" not in low or not low.endswith("_s") or low.startswith(("step_time", "data_time")):
            continue
        steps, values, seq = builder.rows_of(name)
        training = ~np.isin(seq, evaluated)
        if not is_clock(values[training].tolist(), MIN_UNNAMED_LINES):
            continue
        if low.startswith(_NOT_A_CLOCK) or _EVAL_WORDS & set(re.split(r"[^a-z]+", low)):
            others.append(name)  # an evaluation's clock: no training step's time
        else:
            clocks.append((name, steps[training], values[training]))
    for name in [*others, *(c[0] for c in clocks)]:
        builder.drop(name)
    if len(clocks) != 1 or "step_time_s" in names:
        return
    _, steps, clock = clocks[0]
    d_step, d_time = np.diff(steps), np.diff(clock)
    ok = (d_step > 0) & (d_time > 0) & np.isfinite(d_time)
    if ok.any():
        builder.add("step_time_s", steps[1:][ok], d_time[ok] / d_step[ok], canonical=True)
