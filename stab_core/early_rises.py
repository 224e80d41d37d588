"""Early instability measured against a level the loss held, not against one lucky batch.

In a run's first samples the spike detector has no baseline yet (:mod:`stab_core.spikes` needs
``min_history`` samples). A rise there is judged against the lowest level the loss *held*: the lowest
median of three consecutive samples before it. The minimum of single batches is not robust: one easy
batch at 0.884 amid losses of 1.14-1.32 (a NeMo 2 Evo2 fine-tune, issue #32 item 3) made every
later ordinary batch "1.49x the lowest so far".
"""

from __future__ import annotations

from typing import Final

import numpy as np

from stab_core.incidents import early_rises
from stab_core.runview import FloatArray, IntArray
from stab_core.spikes import SpikeEvent

HELD_SAMPLES: Final = 3
"""Consecutive samples whose median is a level the loss held (one outlier batch of three is outvoted)."""


def held_levels(values: FloatArray) -> FloatArray:
    """For each index i of ``values`` (finite, 1-D), the lowest level the series held before i: the lowest
    median of :data:`HELD_SAMPLES` consecutive samples among values[:i] (with fewer than that many
    before i, the median of those). NaN at i = 0 (nothing before it)."""
    n = values.size
    out = np.full(n, np.nan)
    if n < 2:
        return out
    for i in range(1, min(n, HELD_SAMPLES)):
        out[i] = float(np.median(values[:i]))
    if n > HELD_SAMPLES:
        windows = np.lib.stride_tricks.sliding_window_view(values, HELD_SAMPLES)
        # window k covers values[k : k+3] and is entirely before index k+3
        running_low = np.minimum.accumulate(np.median(windows, axis=1))
        out[HELD_SAMPLES:] = running_low[: n - HELD_SAMPLES]
    return out


def robust_early_rises(steps: IntArray, values: FloatArray, history: int, metric: str = "loss") -> list[SpikeEvent]:
    """Rises in the first ``history`` finite samples: a sample at least
    :data:`~stab_core.incidents.EARLY_MIN_RATIO` times the lowest held level before it
    (:func:`held_levels`). The event's baseline is that level; it recovers at the first sample back
    within :data:`~stab_core.incidents.RECOVER_RATIO` of it. Non-finite samples are skipped."""
    return early_rises(steps, values, history, metric, levels=held_levels)
