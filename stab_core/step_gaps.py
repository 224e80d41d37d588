"""Baselines that reach across a gap in the logging are not the run's level at the judged step.

A rolling baseline describes the run at the step it judges only if its samples are near that step.
Where the log jumps far ahead (pasted excerpts of a long run, a logger that was off for thousands of
steps), the run went on unseen: a grad norm that grew from ~3,200 at 8,600 to ~80,000 at 12,000 over
3,400 unlogged steps is the run's new level, not a spike (tr8b-104B's chronicle, issue #32 held-out
corpus). After such a gap the level is unknown again, as at a run's start: the detector needs
``min_history`` samples of history, and samples from before the gap are no history.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from stab_core.runview import IntArray, Series
from stab_core.spike_params import SpikeParams
from stab_core.spikes import SpikeEvent
from stab_core.tree_nodes import logging_interval


def step_gap_starts(steps: IntArray, max_gap: int) -> IntArray:
    """Indices of the samples of ``steps`` (sorted) that follow a jump of more than ``max_gap`` steps."""
    if steps.size < 2:
        return np.empty(0, dtype=np.intp)
    return np.flatnonzero(np.diff(steps) > max_gap) + 1


def judged_across_gap(
    events: Sequence[SpikeEvent], steps: IntArray, max_gap: int, min_history: int
) -> list[SpikeEvent]:
    """The events of ``events`` (detected on the series logged at ``steps``) whose start has at least
    ``min_history`` samples since the last gap of more than ``max_gap`` steps before it (or no such
    gap): the others were judged against a baseline made mostly of samples from before the gap."""
    starts = step_gap_starts(steps, max_gap)
    if starts.size == 0:
        return list(events)
    kept = []
    for event in events:
        index = int(np.searchsorted(steps, event.start))
        before = starts[starts <= index]
        if before.size == 0 or index - int(before[-1]) >= min_history:
            kept.append(event)
    return kept


def near_baseline(events: Sequence[SpikeEvent], series: Series, params: SpikeParams) -> list[SpikeEvent]:
    """``events`` of ``series`` less those judged on a baseline from before a gap of more than the
    detector's window in steps (``params.window`` times the logging interval)."""
    max_gap = params.window * logging_interval(series.steps)
    return judged_across_gap(events, series.steps, max_gap, params.min_history)
