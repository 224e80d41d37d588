"""A second look at the loss with the samples of its earlier long incidents left out of the baseline.

The spike detector's baseline is the median of the samples before a step. When an earlier incident
kept the loss high for many samples (a word-language model at lr 20 that sat at ~14.8 through two
epochs, its own level ~12.4), those samples raise the median, and a second blow-up 12.21 -> 17.21
reads 1.18x "the median before" instead of 1.41x the level the run held (issue #32, held-out corpus).
The run was not at its level during an incident, so an incident's samples are no baseline, as node 5
already leaves earlier incidents' samples out of its SNR level. Only incidents longer than a blip are
left out: a blip's few samples cannot move a median of a window.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from stab_core.runview import FloatArray, IntArray
from stab_core.spike_params import SpikeParams
from stab_core.spikes import SpikeEvent, detect_spikes


def _inside(steps: IntArray, spans: Sequence[tuple[int, int]]) -> np.ndarray:
    mask = np.zeros(steps.size, dtype=bool)
    for start, until in spans:
        lo, hi = np.searchsorted(steps, start), np.searchsorted(steps, until, side="right")
        mask[lo:hi] = True
    return mask


def spikes_past_long_incidents(
    steps: IntArray,
    values: FloatArray,
    metric: str,
    params: SpikeParams,
    found: Sequence[SpikeEvent],
    blip_samples: int,
) -> list[SpikeEvent]:
    """Spikes of ``metric`` the detector finds once the samples of the events of ``found`` that lasted
    more than ``blip_samples`` samples and came back are left out, that start after such an event
    and inside none of ``found``. Empty (no second pass) when no event of ``found`` is that long."""
    long_ones = [(e.start, e.end) for e in found if e.n_samples > blip_samples and e.recovery_step is not None]
    if not long_ones:
        return []
    keep = ~_inside(steps, long_ones)
    first_after = min(end for _, end in long_ones)
    events = detect_spikes(steps[keep], values[keep], metric, params)
    return [
        e
        for e in events
        if e.start > first_after and not any(f.start <= e.start <= max(f.end, f.recovery_step or f.end) for f in found)
    ]
