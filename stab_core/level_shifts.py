"""Lasting rises of a very noisy, densely logged loss, seen in block medians (issue #32; docs/diagnosis.md, "Lasting
rises").

A per-iteration loss whose batches differ a lot (p10-p90 spanning 0.6x-1.4x its median) hides a rise
of its *level*: no one sample stands out (the spike detector's ratio and z tests answer the batch
noise), the 5-sample median of the climb detector dips as low as the noise does, and the run's lowest
dip is not its level. A nanoGPT run whose level moved 0.81 -> 1.03 for ~350 iterations, with the eval
loss confirming it, showed nothing.

The rule: cut the finite samples into consecutive blocks of :data:`BLOCK` samples and take each
block's median (a batch outlier moves it by nothing). A block whose median is :data:`SHIFT_RATIO` times
the level held before it (the median of the :data:`HELD_BLOCKS` block medians before it) *and* more
than :data:`SHIFT_Z` times the usual wander of a block median above it (the robust spread of the
changes between consecutive block medians over up to :data:`WANDER_BLOCKS` blocks before it: a loss
whose block medians swing by 30% on their own, as a diffusion objective's sampled masking makes them,
needs far more than 1.25x), with the next block still :data:`STAY_RATIO` times that level, starts a
rise; it counts when it lasts :data:`LASTING_BLOCKS` blocks or more before a block is back within
:data:`~stab_core.incidents.RECOVER_RATIO` of the level (a rise open at the log's end needs as many
blocks before the end: the last few blocks of a noisy run are no lasting level). It is over at the first
later block back within
:data:`~stab_core.incidents.RECOVER_RATIO` of the level. Only series of :data:`MIN_SAMPLES` or more
are looked at: a block median needs many samples, and a sparsely logged loss is the other detectors'.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Final

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from stab_core.quantised_levels import back_at_most
from stab_core.rolling_baseline import MAD_TO_Z, logging_resolution
from stab_core.runview import FloatArray, IntArray
from stab_core.spikes import SpikeEvent, build_event
from stab_core.window_medians import window_medians

BLOCK: Final = 50
"""Samples per block median."""
HELD_BLOCKS: Final = 4
"""Blocks before a block whose median median is the level the loss held."""
WANDER_BLOCKS: Final = 20
"""Blocks before a block whose consecutive changes measure how far a block median wanders on its own."""
SHIFT_RATIO: Final = 1.25
"""A block median this many times the held level is a rise. Measured on seeds (2,000 samples, +-30 %
uniform noise, a 400-sample shift after 20 blocks): a 1.3x shift is found in 83 of 100 seeds (86 of 100
after 60 blocks), 1.4x in 99, 1.25x in 64, and no rise on any of 500 seeds without one (uniform or
Gaussian 30 % noise). 1.2 finds 89 of 100 1.3x shifts but says one rise on the 500 Gaussian seeds without
one; most of the misses left are the :data:`SHIFT_Z` test's, not this ratio's."""
STAY_RATIO: Final = 1.15
"""The next block's median must still be this many times the held level: the rise lasts."""
SHIFT_Z: Final = 5.0
"""Wanders of a block median (robust standard deviations) the rise must clear."""
LASTING_BLOCKS: Final = 5
"""Blocks a rise must hold before it counts (250 samples: a level, not a run of unlucky batches)."""
LEVEL_SAMPLES: Final = LASTING_BLOCKS * BLOCK
"""Samples of a loss event that make it a level, not a spike: its end is when the level is back."""
MIN_SAMPLES: Final = (HELD_BLOCKS + 2) * BLOCK * 2
"""Finite samples a series needs before it is looked at."""


def level_shifts(steps: IntArray, values: FloatArray, metric: str = "loss") -> list[SpikeEvent]:
    """Lasting rises of the block medians of ``values`` (see the module docstring), each as an event
    from the first sample of its first high block, with the held level as baseline; recovered at the
    first sample of the first block back within ``RECOVER_RATIO`` of it, else open to the end."""
    keep = np.isfinite(values)
    s, x = steps[keep], values[keep]
    n = x.size // BLOCK
    if x.size < MIN_SAMPLES or n < HELD_BLOCKS + 2:
        return []
    med = window_medians(x[: n * BLOCK].reshape(n, BLOCK))
    level_at, wander_at = _held_levels(med)
    high = (level_at > 0) & (med >= SHIFT_RATIO * level_at) & (med - level_at > SHIFT_Z * wander_at)
    high[:-1] &= med[1:] >= STAY_RATIO * level_at[:-1]  # and the next block still high: the rise lasts
    events: list[SpikeEvent] = []
    resolution = logging_resolution(x)
    k = HELD_BLOCKS + 1
    for candidate in np.flatnonzero(high[: n - 1]):
        if candidate < k:
            continue
        k = int(candidate)
        level = float(level_at[k])
        # a block of exact zeros under a positive level is placeholders (non-finite steps dropped from the
        # logged mean) or a collapse, never the loss back at its level (docs/diagnosis.md, "Spike detector")
        # a level under the print's resolution is back within the print's noise of its floor (round 25)
        back = np.flatnonzero((med[k + 1 :] <= back_at_most(level, resolution)) & (med[k + 1 :] != 0.0))
        held_for = 1 + (int(back[0]) if back.size else n - k - 1)
        if held_for < LASTING_BLOCKS:
            k += held_for
            continue
        first = k * BLOCK
        recovery = (k + 1 + int(back[0])) * BLOCK if back.size else None
        last = (recovery - 1) if recovery is not None else x.size - 1
        scale = max(abs(level) * 0.01, 1e-12)
        events.append(_block_peak(build_event(metric, s, x, first, last, recovery, level, scale), s, med, k, last))
        if recovery is None:
            break
        k = recovery // BLOCK + 1
    return events


def _block_peak(event: SpikeEvent, steps: IntArray, med: FloatArray, k: int, last: int) -> SpikeEvent:
    """``event`` measured in block medians: its peak value is the level the rise held (the median of the
    medians of its blocks, ``k`` to the one holding sample ``last``), its peak the middle of its first block
    at that level. One batch's value said a lasting 1.5x shift under +-30 % noise "jumped 1.94x" (severity's
    peak ratio too); the highest of ten block medians still says 1.6-1.7x."""
    held = med[k : min(last // BLOCK + 1, med.size)]
    peak_value = float(np.median(held))
    top = k + int(np.argmax(held >= peak_value))
    return replace(
        event,
        peak=int(steps[top * BLOCK + BLOCK // 2]),
        peak_value=peak_value,
        ratio=peak_value / event.baseline if event.baseline > 0 else event.ratio,
        z=MAD_TO_Z * (peak_value - event.baseline) / max(abs(event.baseline) * 0.01, 1e-12),
    )


def _held_levels(med: FloatArray) -> tuple[FloatArray, FloatArray]:
    """Per block ``k``: the level the loss held (the median of the ``HELD_BLOCKS`` block medians before it)
    and how far a block median wanders on its own (the robust scale of the consecutive changes of the
    ``WANDER_BLOCKS`` before it, fewer at the start); NaN where there are too few blocks. All blocks at once:
    a median per block in a Python loop was most of a long run's analysis."""
    n = med.size
    level_at = np.full(n, np.nan)
    wander_at = np.full(n, np.nan)
    if n > HELD_BLOCKS:
        level_at[HELD_BLOCKS:] = window_medians(sliding_window_view(med, HELD_BLOCKS)[: n - HELD_BLOCKS])
    change = np.abs(np.diff(med))
    for k in range(2, min(WANDER_BLOCKS, n)):  # the first blocks: fewer changes before them
        wander_at[k] = np.median(change[: k - 1])
    if n > WANDER_BLOCKS:
        windows = sliding_window_view(change, WANDER_BLOCKS - 1)[: n - WANDER_BLOCKS]
        wander_at[WANDER_BLOCKS:] = window_medians(windows)
    # a change between two blocks has twice a block's variance: sqrt(2) turns it back into one block's
    return level_at, wander_at / MAD_TO_Z / np.sqrt(2.0)
