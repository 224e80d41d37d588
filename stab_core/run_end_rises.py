"""A run that ends above the level its loss held, on too few samples for the other detectors.

The spike detector needs ``min_history`` samples, a climb :data:`~stab_core.incidents.CLIMB_MIN_SAMPLES`
smoothed ones. A run that logs its loss every 1000 steps and diverges in its last 2000 (issue #32,
batch 9: 2.24 -> 2.87 -> 3.59 with the validation loss rising alike), or one whose console keeps only
its first and last few lines (an fp16 run whose loss scale fell to 1 while the loss rose 1.26x), ends
worse than it was and never shows a recovery: that is a divergence a user must see, even with two
samples.

The rule: the run's trailing samples (at least :data:`END_MIN_SAMPLES`) are every one out of the noise
band above the lowest level the loss held before them (:func:`~stab_core.early_rises.held_levels`,
the band as for an early rise) and out of :data:`~stab_core.incidents.RECOVER_RATIO` of it and of the
median of the :data:`END_RECENT` samples before them (a noisy run's lowest dip is not its level), and their
peak is :data:`~stab_core.incidents.EARLY_MIN_RATIO` times that level; or :data:`END_CORROBORATED_RATIO`
times it when another signal of the run agrees (the validation loss rose too, or a dynamic loss scale
collapsed to its floor of 1).

A divergence is a *lasting* level, judged against the run's own noise (:func:`lasting_at_end`): a
trailing stretch (of :data:`~stab_core.rolling_baseline.NOISE_MIN_SAMPLES` or more samples, or after
:data:`LASTING_LEVEL` or more) whose median is within the band of the run's last
:data:`LASTING_HISTORY` samples is the noise of a per-batch loss wandering back up from a quiet dip, not
a rise (issue #32; docs/diagnosis.md, "Lasting rises").
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Final

import numpy as np

from stab_core.early_rises import held_levels, noise_band
from stab_core.incidents import EARLY_MIN_RATIO, RECOVER_RATIO
from stab_core.quantised_levels import floored_level
from stab_core.rolling_baseline import MAD_TO_Z, NOISE_MIN_SAMPLES, logging_resolution
from stab_core.runview import FloatArray, IntArray, Series
from stab_core.spikes import SpikeEvent, build_event
from stab_core.window_medians import lowest_window_median, median_floors, window_medians_at

END_MIN_SAMPLES: Final = 2
"""Trailing samples that must all stand above the held level: one high last sample may be one bad batch."""
END_MIN_HELD: Final = 3
"""Samples before the trailing ones needed for a held level (a median of three)."""
END_CORROBORATED_RATIO: Final = 1.15
"""Peak over the held level that is enough when the validation loss or the loss scale agrees."""
END_RECENT: Final = 8
"""Samples before the trailing stretch its noise band is taken from: the recent ones, since a loss falls
fast in a run's first steps and their second differences would widen the band of a settled run."""
LASTING_HISTORY: Final = 256
"""Samples before a rise that the run's noise is taken from (four spike-detector windows): a noisy
per-batch loss wanders between quiet dips and busier stretches, and a few samples see only one of them."""
LASTING_LEVEL: Final = 63
"""Samples before a rise whose median is the level it left, and at most this many of its last samples
whose median is the level it holds at the end (the spike detector's window)."""
LASTING_SIGMAS: Final = 3.0
"""A level at the end is lasting when it stands this many of the run's noise sigmas above the level before."""
LOSS_SCALE_FLOOR: Final = 1.0
"""A dynamic loss scale at or below this has halved on overflow until it has no range left."""


def _band(before: FloatArray, z_threshold: float) -> float:
    """How far over its held level a trailing sample must be: the noise band of ``before`` with
    :data:`NOISE_MIN_SAMPLES` or more, else up to the highest of them (few samples understate noise)."""
    if before.size >= NOISE_MIN_SAMPLES:
        return noise_band(before, z_threshold)
    level = float(held_levels(np.append(before, np.nan))[-1])
    return max(0.0, float(before.max()) - level)


def run_end_rises(
    steps: IntArray,
    values: FloatArray,
    z_threshold: float,
    corroborated: Callable[[int], bool] | None = None,
    metric: str = "loss",
) -> list[SpikeEvent]:
    """The run-end rise of ``values`` (at most one; see the module docstring), as a never-recovered
    event starting at its first trailing sample with the held level as baseline. ``corroborated(step)``
    says whether another metric agrees from that step on (None: nothing does). With nothing sharp at
    the end and another signal to agree, a slow climb to the end (:func:`end_climbs`)."""
    sharp = _sharp_end_rise(steps, values, z_threshold, corroborated, metric) or held_end_rises(steps, values, metric)
    if sharp or corroborated is None:
        return sharp
    return end_climbs(steps, values, corroborated, metric)


# A held rise at the end (docs/diagnosis.md, "Lasting rises"): a late climb that never comes back on a noisy fine-tune
# loss (0.025-0.058 over its last settled stretch, then never below 0.060 for its last ten logs) is missed by the sharp
# rule: its band is taken from the eight samples before, whose one-log swings (0.025 -> 0.062 -> 0.036) make it wider
# than the climb. Every one of the last HELD_END_SAMPLES or more samples standing HELD_END_RATIO times the median of the
# HELD_END_LEVEL before them is no noise however wide the band: i.i.d. noise puts eight samples in a row
# above 1.4x its median with a chance of (P(x >= 1.4 m))^8, a few in a million at a 20 % tail.
HELD_END_SAMPLES: Final = 8
"""Trailing samples that must every one stand high for a held rise at the end."""
HELD_END_RATIO: Final = 1.4
"""How far over the median of the samples before them each trailing sample must stand."""
HELD_END_LEVEL: Final = 16
"""Finite samples before the trailing stretch whose median is the level it left."""


def held_end_rises(steps: IntArray, values: FloatArray, metric: str = "loss") -> list[SpikeEvent]:
    """The longest trailing stretch of :data:`HELD_END_SAMPLES` or more finite samples every one at
    :data:`HELD_END_RATIO` times or more the median of the :data:`HELD_END_LEVEL` finite samples before it
    (at most one), as a never-recovered event with that median as baseline."""
    keep = np.isfinite(values)
    s, x = steps[keep], values[keep]
    if x.size < HELD_END_LEVEL + HELD_END_SAMPLES:
        return []
    suffix_low = np.minimum.accumulate(x[::-1])[::-1]
    starts = np.arange(HELD_END_LEVEL, x.size - HELD_END_SAMPLES + 1)
    # the level before start s is the median of x[s - HELD_END_LEVEL : s], at or over its floor: a start whose
    # lowest sample from there on is under HELD_END_RATIO x the floor is under that much of the level too
    floors = median_floors(x[:-1], HELD_END_LEVEL)[: starts.size]
    maybe = starts[suffix_low[starts] >= HELD_END_RATIO * floors]
    base = window_medians_at(x, HELD_END_LEVEL, maybe - HELD_END_LEVEL)
    held = np.flatnonzero((base > 0) & (suffix_low[maybe] >= HELD_END_RATIO * base))
    if held.size == 0:
        return []
    first = int(maybe[held[0]])
    level = float(np.median(x[first - HELD_END_LEVEL : first]))
    return [build_event(metric, s, x, first, x.size - 1, None, level, max(abs(level) * 0.01, 1e-12))]


def _sharp_end_rise(
    steps: IntArray,
    values: FloatArray,
    z_threshold: float,
    corroborated: Callable[[int], bool] | None,
    metric: str,
) -> list[SpikeEvent]:
    """:func:`run_end_rises` where the trailing samples each stand out of the ones before them."""
    keep = np.isfinite(values)
    s, x = steps[keep], values[keep]
    if x.size < END_MIN_HELD + END_MIN_SAMPLES:
        return []
    levels = held_levels(x)
    # lowest sample from each index to the end: the trailing stretch from k holds when it is out of band
    suffix_low = np.minimum.accumulate(x[::-1])[::-1]
    first: int | None = None
    ks = np.arange(END_MIN_HELD, x.size - END_MIN_SAMPLES + 1)
    # the indices whose trailing stretch is out of the held level's band, found at once (a loop over every
    # sample of a 10^6-step log cost a second); the recent-median test below runs on these only
    out_of_band = ks[(levels[ks] > 0) & (suffix_low[ks] > RECOVER_RATIO * levels[ks])]
    for k in out_of_band.tolist():
        level = float(levels[k])
        low = float(suffix_low[k])
        recent = x[max(0, k - END_RECENT) : k]
        # above the recent median too: a noisy run's lowest held dip is not where it stands
        if low > RECOVER_RATIO * float(np.median(recent)) and low > level + _band(recent, z_threshold):
            first = k
            break
    if first is None or x.size - first < END_MIN_SAMPLES:
        return []
    level = float(levels[first])
    ratio = float(x[first:].max()) / level
    needed = EARLY_MIN_RATIO
    if corroborated is not None and corroborated(int(s[first])):
        needed = END_CORROBORATED_RATIO
    if ratio < needed:
        return []
    # a stretch of a few samples on a sparse log keeps the held-level rule (few samples, no noise to judge)
    dense = x.size - first >= NOISE_MIN_SAMPLES or first >= LASTING_LEVEL
    if dense and not lasting_at_end(x[:first], x[first:]):
        return []
    return [build_event(metric, s, x, first, x.size - 1, None, level, max(abs(level) * 0.01, 1e-12))]


def rise_corroborated(val_loss: Series | None, loss_scale: Series | None) -> Callable[[int], bool]:
    """Whether another signal agrees that the run got worse from a step on: the validation loss logged
    from there is above :data:`~stab_core.incidents.RECOVER_RATIO` times its lowest value before it, or
    a dynamic loss scale above :data:`LOSS_SCALE_FLOOR` before it is at that floor from there."""

    def agrees(step: int) -> bool:
        for series, test in ((val_loss, _val_rose), (loss_scale, _scale_collapsed)):
            if series is None:
                continue
            ok = np.isfinite(series.values)
            before = series.values[ok & (series.steps < step)]
            after = series.values[ok & (series.steps >= step)]
            if before.size and after.size and test(before, after):
                return True
        return False

    return agrees


def _val_rose(before: FloatArray, after: FloatArray) -> bool:
    low = float(before.min())
    return low > 0 and float(after.min()) > RECOVER_RATIO * low


def _scale_collapsed(before: FloatArray, after: FloatArray) -> bool:
    return float(before.max()) > LOSS_SCALE_FLOOR and float(after.max()) <= LOSS_SCALE_FLOOR


def cut_off_at_log_end(events: list[SpikeEvent], series: Series, loss: Series | None = None) -> list[SpikeEvent]:
    """``events`` with each finite one-sample event on the series' last finite sample marked neither
    recovered nor diverged: the log ends at it, so nothing shows whether it lasted (one high last sample
    may be one bad batch, :data:`END_MIN_SAMPLES`); a noisy run cut off on an outlier did not diverge.
    So is a longer finite event that never recovered but holds no lasting level at the end
    (:func:`_lasting`, with the run's ``loss`` for a grad-norm event): a divergence needs no return *and*
    a level that lasts, judged against the run's noise."""
    finite = series.steps[np.isfinite(series.values)]
    if not finite.size:
        return events
    last = int(finite[-1])
    out = []
    for e in events:
        if e.diverged and not e.nonfinite and e.end == last and (e.n_samples == 1 or not _lasting(e, series, loss)):
            e = replace(e, diverged=False)
        out.append(e)
    return out


def lasting_at_end(before: FloatArray, after: FloatArray) -> bool:
    """Does a series that never came back stand at a lasting level at the log's end, judged against the
    run's noise? ``before``: its samples before the rise; ``after``: from the rise's start to the end.

    The level it holds (the median of its last :data:`LASTING_LEVEL` samples) must stand above the level
    it left (the median of the last :data:`LASTING_LEVEL` before) by :data:`LASTING_SIGMAS` times the
    run's noise (the MAD, as a sigma, of its last :data:`LASTING_HISTORY` samples before: a per-batch
    loss's spread between its quiet and busy stretches is its noise) and by
    :data:`~stab_core.incidents.RECOVER_RATIO` times that level. Under
    :data:`~stab_core.rolling_baseline.NOISE_MIN_SAMPLES` finite samples before there is no noise to
    judge by: any level at the end is lasting (the detector's call stands)."""
    history = before[np.isfinite(before)][-LASTING_HISTORY:]
    tail = after[np.isfinite(after)][-LASTING_LEVEL:]
    if history.size < NOISE_MIN_SAMPLES or tail.size == 0:
        return True
    # a loss printed at a fixed resolution (4 decimals: mostly 0.0000 once trained) has a level no finer than
    # half its last digit and a noise no smaller than one print step (:mod:`stab_core.quantised_levels`)
    resolution = logging_resolution(history)  # the samples before: a jump between two values is no print step
    level = floored_level(float(np.median(history[-LASTING_LEVEL:])), resolution)
    sigma = max(float(np.median(np.abs(history - np.median(history)))) / MAD_TO_Z, resolution / MAD_TO_Z)
    end = float(np.median(tail))
    return end > level + LASTING_SIGMAS * sigma and end > RECOVER_RATIO * level


def _lasting(event: SpikeEvent, series: Series, loss: Series | None) -> bool:
    """Is ``event`` (unrecovered at the log's end) a lasting rise? A grad-norm event is when the loss
    (logged) holds a lasting level from its start: a norm still high at the last steps while the loss
    is where it was has cost the run nothing yet. Any other is when it spans
    :data:`~stab_core.rolling_baseline.NOISE_MIN_SAMPLES` samples or more and holds a lasting level of
    its own series (fewer: the detector's call stands; one sample is :func:`cut_off_at_log_end`'s)."""
    judged = loss if event.metric.startswith("grad_norm") and loss is not None else series
    if judged is series and event.n_samples < NOISE_MIN_SAMPLES:
        return True
    at = judged.steps >= event.start
    return lasting_at_end(judged.values[~at], judged.values[at])


# A slow climb to the end (docs/diagnosis.md, "Lasting rises"): a loss drifting up over hundreds of samples (a constant
# high learning rate, medians 2.1 -> 2.3 -> 2.5, no sample 1.15x the few before it) is never out of its recent samples,
# so the sharp rule misses it; with the validation loss rising too, the run still ended worse than it was. Judged on
# medians of LASTING_LEVEL samples: the last one END_CORROBORATED_RATIO times or more the lowest before;
# the climb starts after the last END_RECENT-sample median back within RECOVER_RATIO of that level,
# spans LASTING_LEVEL samples or more, is corroborated from its start, and its end level is lasting.
def end_climbs(
    steps: IntArray,
    values: FloatArray,
    corroborated: Callable[[int], bool],
    metric: str = "loss",
) -> list[SpikeEvent]:
    """The slow climb that ends ``values`` (at most one), as a never-recovered
    event from its first sample to the last, with the lowest held median as baseline."""
    keep = np.isfinite(values)
    s, x = steps[keep], values[keep]
    if x.size < 3 * LASTING_LEVEL:
        # a held level, a climb and its end level each need a window of their own
        return []
    # the lowest median of LASTING_LEVEL samples, x[best : best + LASTING_LEVEL], and the last one
    best, level = lowest_window_median(x, LASTING_LEVEL)
    end = float(window_medians_at(x, LASTING_LEVEL, [x.size - LASTING_LEVEL])[0])
    if not (level > 0 and end >= END_CORROBORATED_RATIO * level):
        return []
    # the climb starts after the last short median still back near the level (after the best window), the
    # median of x[k : k + END_RECENT]; one whose floor is over that is not back
    after = best + LASTING_LEVEL
    near = RECOVER_RATIO * level
    maybe = np.flatnonzero(median_floors(x[after:], END_RECENT) <= near)
    back = maybe[window_medians_at(x[after:], END_RECENT, maybe) <= near]
    first = after + (int(back[-1]) + 1 if back.size else 0)
    if x.size - first < LASTING_LEVEL or not corroborated(int(s[first])):
        return []
    if not lasting_at_end(x[:first], x[first:]):
        return []
    return [build_event(metric, s, x, first, x.size - 1, None, level, max(abs(level) * 0.01, 1e-12))]
