"""Spikes over the level a run holds *now*, where the rolling window still holds a steep fall.

The spike detector (:mod:`stab_core.spikes`) judges a sample against the median of the ``window``
samples before it, taking the higher of that and the recent median: on a falling loss the higher
level is the cautious one. When the loss falls by a large factor inside one window (a model memorising
its data: 1.4 -> 0.08 over 63 samples, issue #32 batch 8), that median sits 10-20x above the run's
present level, and a batch that jumps the loss 0.04 -> 0.28 (6.7x what the run held) is still far
below it: nothing is flagged.

Where the window's median is above a spike's own threshold of the recent level (``min_ratio`` times the
lowest level held over the last :data:`RECENT_SAMPLES` samples, and times the median of those samples:
a noisy run's lowest dip is no fall), that median is not the run's level.
There a sample is judged against the recent held level, in ratios: its log-ratio to the level against
the run's recent noise in log units (the median absolute second difference of the log loss over
sqrt(6), which cancels the steady fall, as :func:`stab_core.early_rises.sample_noise` does). A loss at
0.04 that wobbles 10% a batch is as noisy as one at 4 that does; the ratio and z thresholds are the
detector's own (``SpikeParams``). Early jumps of a series (:func:`stab_core.incidents.early_jumps`),
where the detector's window is not yet full, are kept here too: both look where the window median is
not the run's level.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

import numpy as np

from stab_core.early_rises import HELD_SAMPLES
from stab_core.incidents import early_jumps
from stab_core.rolling_baseline import MAD_TO_Z
from stab_core.runview import FloatArray, IntArray, Series
from stab_core.short_run_surges import short_run_surges
from stab_core.spike_params import SpikeParams
from stab_core.spikes import SpikeEvent, build_event
from stab_core.window_medians import medians_before

RECENT_SAMPLES: Final = 16
"""Samples before a sample that its recent level and noise are taken from (the detector's
``min_history``: the fewest it trusts a level from)."""


def _held_recent(x: FloatArray, recent: int) -> FloatArray:
    """For each index i >= ``recent``, the lowest median of :data:`HELD_SAMPLES` consecutive samples
    among x[i - recent : i] (a level the series held, one outlier outvoted); NaN before."""
    out = np.full(x.size, np.nan)
    if x.size <= recent:
        return out
    a, b, c = x[:-2], x[1:-1], x[2:]
    # the median of three without sorting: med[k] covers x[k : k + 3]
    med = np.maximum(np.minimum(a, b), np.minimum(np.maximum(a, b), c))
    # the windows inside x[i - recent : i] are med[i - recent : i - 2]: a running minimum over them,
    # one shifted np.minimum per window position (a sliding-window reduction is several times slower)
    width = recent - HELD_SAMPLES + 1
    lows = med[: med.size - width + 1].copy()
    for shift in range(1, width):
        np.minimum(lows, med[shift : shift + lows.size], out=lows)
    out[recent:] = lows[: x.size - recent]
    return out


def recent_level_jumps(
    steps: IntArray, values: FloatArray, params: SpikeParams, metric: str = "loss", recent: int = RECENT_SAMPLES
) -> list[SpikeEvent]:
    """Spikes of a positive series judged against its recent held level where the detector's window
    median (``params.window`` samples before) is more than ``params.min_ratio`` times that level. A
    sample is flagged at ``params.min_ratio`` times the level and ``params.z_threshold`` modified
    z-scores of the recent log noise above it; it recovers at the first later sample within
    ``params.recover_ratio`` of the level. Non-finite and non-positive samples are left out (a log needs
    a positive value; the detector flags non-finite ones itself)."""
    keep = np.isfinite(values) & (values > 0)
    s, x = steps[keep], values[keep]
    if x.size <= max(recent, params.min_history):
        return []
    held = _held_recent(x, recent)
    with np.errstate(invalid="ignore"):
        candidate = np.flatnonzero(x >= params.min_ratio * held)
    candidate = candidate[candidate >= params.min_history]
    if candidate.size == 0:
        return []
    # the gate: the window the detector judges by holds a fall (its median is above a spike's threshold)
    # ... and the recent samples sit below it: a noisy run's lowest dip is not a fall (a LoRA run whose
    # loss swings 0.78-1.21 around 1.03 holds 0.79 for three samples; its window median is 1.3x that,
    # and so is its recent median)
    window_medians = medians_before(x, candidate, params.window)
    recent_medians = medians_before(x, candidate, recent)
    candidate = candidate[
        (window_medians > params.min_ratio * held[candidate]) & (window_medians > params.min_ratio * recent_medians)
    ]
    if candidate.size == 0:
        return []
    logs = np.log(x)
    second = np.abs(np.diff(logs, 2))  # second[k] uses logs[k : k + 3]
    events: list[SpikeEvent] = []
    resume = 0
    for i in (int(k) for k in candidate):
        if i < resume:
            continue
        level = float(held[i])
        noise = max(float(np.median(second[i - recent : i - 2])) / np.sqrt(6.0), np.log1p(params.rel_mad_floor))
        if MAD_TO_Z * float(logs[i] - np.log(level)) / noise < params.z_threshold:
            continue
        back = np.flatnonzero(x[i + 1 :] <= params.recover_ratio * level)
        recovery = i + 1 + int(back[0]) if back.size else None
        last = recovery - 1 if recovery is not None else x.size - 1
        events.append(build_event(metric, s, x, i, last, recovery, level, level * noise))
        if recovery is None:
            break
        resume = recovery + 1
    return events


def _uncovered(jumps: Sequence[SpikeEvent], detected: Sequence[SpikeEvent]) -> list[SpikeEvent]:
    return [j for j in jumps if not any(d.start <= j.start <= d.until for d in detected)]


def new_early_jumps(series: Series, detected: Sequence[SpikeEvent], params: SpikeParams) -> list[SpikeEvent]:
    """Early jumps of ``series`` (:func:`stab_core.incidents.early_jumps`) that no event the detector
    found already covers. They are looked for over the first two windows of samples: as long as the
    detector's window still holds samples of the run's first window (warm-up transients, a norm
    falling from 10x its later level), its median and MAD sit far above the recent level. A grad norm's held
    surges in a short run's first samples (:func:`stab_core.short_run_surges.short_run_surges`) are early events
    too, found where neither rule already has one."""
    jumps = early_jumps(
        series.steps,
        series.values,
        2 * params.window,
        min_ratio=params.min_ratio,
        z_threshold=params.z_threshold,
        recover_ratio=params.recover_ratio,
    )
    found = _uncovered(jumps, detected)
    return found + short_run_surges(series, [*detected, *found], params)


def new_recent_level_jumps(
    series: Series, detected: Sequence[SpikeEvent], params: SpikeParams, metric: str = "loss"
) -> list[SpikeEvent]:
    """:func:`recent_level_jumps` of ``series`` that no event of ``detected`` already covers."""
    return _uncovered(recent_level_jumps(series.steps, series.values, params, metric), detected)
