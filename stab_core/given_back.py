"""Early rises judged by the share of the early fall they give back (issue #32; docs/diagnosis.md, "Early and short
runs").

A loss that fell 11.0 -> 8.9 over its first five steps and climbs back to 10.6 for four steps has lost
most of what its first updates bought, yet stands only 1.19x its lowest level: under
:data:`~stab_core.incidents.EARLY_MIN_RATIO`, the ratio rule of :func:`stab_core.early_rises.robust_early_rises`
never sees it. The rule, for any run: in the first ``history`` finite samples of a positive loss that
fell :data:`EARLY_FALL_RATIO` times or more from its first sample to its held level, a rise that gives
back :data:`GIVEN_BACK` of that fall for :data:`~stab_core.early_rises.LASTING_SAMPLES` samples in a
row, beyond the noise band of the samples after its return, is an early instability. It fills only
that gap: a rise whose peak reaches ``EARLY_MIN_RATIO`` times its level is the ratio rule's to judge
(a restart's loss falling 100x in its first logs gives back a third of that fall in one noisy batch).
"""

from __future__ import annotations

from typing import Final

import numpy as np

from stab_core.early_rises import LASTING_SAMPLES, early_levels, noise_band
from stab_core.incidents import EARLY_MIN_RATIO, RECOVER_RATIO
from stab_core.rolling_baseline import NOISE_MIN_SAMPLES
from stab_core.runview import FloatArray, IntArray
from stab_core.spikes import SpikeEvent, build_event

EARLY_FALL_RATIO: Final = 1.2
"""How far a loss must have fallen from its first sample (first / held level) before a rise is judged
by the share of that fall it gives back."""
GIVEN_BACK: Final = 1 / 3
"""The share of the early fall (first sample to the held level) a lasting rise gives back."""


def progress_given_back(
    steps: IntArray, values: FloatArray, history: int, z_threshold: float, found: list[SpikeEvent], metric: str = "loss"
) -> list[SpikeEvent]:
    """The first rise of the module docstring's rule that none of ``found`` overlaps, as a one-event list
    (or none). It starts at the first sample of the lasting run, peaks at its highest, and recovers at the
    first sample back within :data:`~stab_core.incidents.RECOVER_RATIO` of the level."""
    finite = np.isfinite(values)
    s, x = steps[finite], values[finite]
    limit = min(history, x.size)
    if limit <= LASTING_SAMPLES + 1 or x[0] <= 0:
        return []
    levels = early_levels(x[:limit])
    i = 1
    while i + LASTING_SAMPLES <= limit:
        level = float(levels[i])
        fall = float(x[0]) - level
        if not (level > 0 and x[0] >= EARLY_FALL_RATIO * level) or not bool(
            (x[i : i + LASTING_SAMPLES] - level >= GIVEN_BACK * fall).all()
        ):
            i += 1
            continue
        back = np.flatnonzero(x[i + 1 :] <= RECOVER_RATIO * level)
        recovery = i + 1 + int(back[0]) if back.size else None
        last = recovery - 1 if recovery is not None else x.size - 1
        peak = float(x[i : last + 1].max())
        after = x[recovery : recovery + history] if recovery is not None else x[:0]
        beyond_noise = after.size < NOISE_MIN_SAMPLES or peak - level >= noise_band(after, z_threshold)
        event = build_event(metric, s, x, i, last, recovery, level, max(level * 0.01, 1e-12))
        overlaps = any(event.start <= f.until and f.start <= event.until for f in found)
        if beyond_noise and peak < EARLY_MIN_RATIO * level and not overlaps:
            return [event]
        i = last + 1
    return []
