"""Early instability measured against a level the loss held, not against one lucky batch.

In a run's first samples the spike detector has no baseline yet (:mod:`stab_core.spikes` needs
``min_history`` samples). A rise there is judged against the lowest level the loss *held*: the lowest
median of three consecutive samples before it. The minimum of single batches is not robust: one easy
batch at 0.884 amid losses of 1.14-1.32 (a NeMo 2 Evo2 fine-tune, issue #32 item 3) made every
later ordinary batch "1.49x the lowest so far".

A rise (early, or a climb) must also clear the run's own noise band, taken from the samples before it,
as a spike must (the detector asks both a ratio and a modified z-score): on a reward model whose
per-batch loss swings 0.36-1.27 around 0.66 (issue #32, held-out corpus), 1.3x a held level is one
noisy batch, not instability.
"""

from __future__ import annotations

from typing import Final

import numpy as np

from stab_core.incidents import EARLY_MIN_RATIO, detect_climbs, early_rises
from stab_core.rolling_baseline import MAD_TO_Z, NOISE_MIN_SAMPLES, descends, sample_noise
from stab_core.runview import FloatArray, IntArray
from stab_core.spikes import SpikeEvent
from stab_core.window_medians import window_medians

HELD_SAMPLES: Final = 3
"""Consecutive samples whose median is a level the loss held (one outlier batch of three is outvoted)."""


LASTING_SAMPLES: Final = 3
"""Consecutive logs at ``EARLY_MIN_RATIO`` times the level or more that make an early rise one that lasted
(the severity rules' ``RECURRING_RISE``): a noisy per-batch loss jumps for one log, not three in a row."""


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
        running_low = np.minimum.accumulate(window_medians(windows))
        out[HELD_SAMPLES:] = running_low[: n - HELD_SAMPLES]
    return out


def early_levels(values: FloatArray) -> FloatArray:
    """:func:`held_levels`, except right after a descent from the first sample
    (:func:`~stab_core.rolling_baseline.descends`): there
    the descent's last sample is the level. A loss falling 10.48, 10.48, 7.28 has reached 7.28, the
    progress its first updates made; a lucky batch sits *amid* a level (1.14-1.32 around 0.884), not at
    the foot of a fall, and the median of three still outvotes it. Only the first turn is judged so: a
    rise back to 9.78 after a 2-step warmup is the model knocked back (1.34x what it had reached)."""
    out = held_levels(values)
    turn = HELD_SAMPLES
    while turn < values.size and descends(values[: turn + 1]):
        turn += 1
    if turn < values.size and descends(values[:turn]):
        out[turn] = min(float(out[turn]), float(values[turn - 1]))
    return out


def noise_band(values: FloatArray, z_threshold: float) -> float:
    """How far above its level a rise must go to be out of the run's noise (loss units):
    ``z_threshold`` modified z-scores of :func:`sample_noise`, the spike detector's own test."""
    return z_threshold * sample_noise(values) / MAD_TO_Z


def robust_early_rises(
    steps: IntArray, values: FloatArray, history: int, metric: str = "loss", z_threshold: float = 0.0
) -> list[SpikeEvent]:
    """Rises in the first ``history`` finite samples: a sample at least
    :data:`~stab_core.incidents.EARLY_MIN_RATIO` times the lowest held level before it
    (:func:`held_levels`) and out of the noise band of the samples before it (:func:`noise_band` at
    ``z_threshold``; 0: no band; fewer than :data:`NOISE_MIN_SAMPLES` before it: above all of them, unless
    they fall: :func:`early_levels`).
    The event's baseline is that level; it recovers at the first sample back within
    :data:`~stab_core.incidents.RECOVER_RATIO` of it. Non-finite samples are skipped."""
    band = (lambda before: _early_band(before, z_threshold)) if z_threshold > 0 else None
    events = early_rises(steps, values, history, metric, levels=early_levels, band=band)
    if band is None:
        return events
    return [e for e in events if _clears_later_noise(steps, values, e, history, z_threshold)]


def _clears_later_noise(steps: IntArray, values: FloatArray, event: SpikeEvent, history: int, z: float) -> bool:
    """A rise judged on fewer than :data:`NOISE_MIN_SAMPLES` samples before it had no noise band to
    clear, only the highest of them (after a fall from the first sample, however long: none): once the
    loss is back, it must also clear the band of the (up to ``history``) samples logged from its return
    on. A loss swinging +-30% per batch rises 1.4-1.7x over its first three samples by chance, and the
    samples after show that swing; a start-up blow-up (6.94 -> 11.17, then a smooth fall) clears it many
    times over, and one that never came back (or has too few samples after its return to measure) stands
    as it is. Samples after it above its own peak (a later blow-up: 3.9, 3.5, 3.4, then 146,981) are left
    out of that band. A rise after a fall from the first sample that stood
    :data:`~stab_core.incidents.EARLY_MIN_RATIO` times its level, and
    the median of those samples after, for :data:`LASTING_SAMPLES` logs in a row, where the samples after
    its return never do, is no swing of that noise: it lasted (docs/diagnosis.md, "Early and short runs")."""
    finite = np.isfinite(values)
    s, x = steps[finite], values[finite]
    first = int(np.searchsorted(s, event.start))
    if (first >= NOISE_MIN_SAMPLES and not descends(x[:first])) or event.recovery_step is None:
        return True
    back = int(np.searchsorted(s, event.recovery_step))
    after = x[back : back + history]
    # a later excursion above this rise's own peak is another incident, not the noise it is judged against
    after = after[after <= event.peak_value]
    if after.size < NOISE_MIN_SAMPLES:
        return True
    # measured from the level it came back to as well: the lowest level held sits at the foot of a noisy
    # loss's swing, and three logs at 1.3x that foot are its middle, not a rise
    ref = max(event.baseline, float(np.median(after)))
    if descends(x[:first]) and _lasting_run(x[first:back], ref) and not _lasting_run(after, ref):
        return True
    if descends(x[:first]) and _held_over_later(x[first:back], event.baseline, x[back : back + history]):
        return True
    return bool(event.peak_value - event.baseline >= noise_band(after, z))


HELD_OVER_LATER: Final = 2
"""Consecutive logs at ``EARLY_MIN_RATIO`` times the level that, with a peak over every later sample, make an early
rise after a fall one that lasted (round 26, :func:`_held_over_later`)."""


def _held_over_later(rise: FloatArray, level: float, later: FloatArray) -> bool:
    """Did an early rise after a fall from the first sample last over the noise of the samples after its return?
    Its first :data:`HELD_OVER_LATER` logs (``rise``) stand :data:`~stab_core.incidents.EARLY_MIN_RATIO` times its
    ``level`` or more (still up at the next log: no one-batch outlier) and its peak tops every one of the ``later``
    samples (finite; at least :data:`NOISE_MIN_SAMPLES`): the later per-batch noise never reaches it, so it is no
    swing of that noise however wide a band the noise's second differences give. An ORPO loss falling 1.05 ->
    0.111 that jumps to 0.251 and is still 0.147 at the next log, while the 16 logs after it swing 0.08-0.19
    (a band of 0.35 at the detector's z), is the golden's early rise that lasts (issue #32, round 26)."""
    later = later[np.isfinite(later)]
    if rise.size < HELD_OVER_LATER or later.size < NOISE_MIN_SAMPLES:
        return False
    held = bool(np.all(rise[:HELD_OVER_LATER] >= EARLY_MIN_RATIO * level))
    return held and float(rise.max()) > float(later.max())


def _lasting_run(x: FloatArray, level: float) -> bool:
    """Do :data:`LASTING_SAMPLES` consecutive samples of ``x`` stand at
    :data:`~stab_core.incidents.EARLY_MIN_RATIO` times ``level`` or more?"""
    high = x >= EARLY_MIN_RATIO * level
    if high.size < LASTING_SAMPLES:
        return False
    return bool(np.lib.stride_tricks.sliding_window_view(high, LASTING_SAMPLES).all(axis=1).any())


def _early_band(before: FloatArray, z_threshold: float) -> float:
    """How far over its held level a sample after ``before`` must rise: the noise band with
    :data:`NOISE_MIN_SAMPLES` finite samples or more; with fewer, up to the highest of them."""
    finite = before[np.isfinite(before)]
    if finite.size == 0 or descends(finite):
        # a fall is no noise, however many samples it has: its spread is progress (the noise after the
        # return is still judged, :func:`_clears_later_noise`)
        return 0.0
    if finite.size >= NOISE_MIN_SAMPLES:
        return noise_band(finite, z_threshold)
    level = float(held_levels(np.append(finite, np.nan))[-1])
    return max(0.0, float(finite.max()) - level) if np.isfinite(level) else 0.0


def banded_climbs(steps: IntArray, values: FloatArray, z_threshold: float, metric: str = "loss") -> list[SpikeEvent]:
    """Climbs (:func:`stab_core.incidents.detect_climbs`) whose smoothed loss stays out of the noise band
    (:func:`noise_band`) of the samples before the rise, over the lowest level, for the whole sustained
    span. The band comes from before the rise: a rise that fills most of a short log must not set its
    own noise."""
    return detect_climbs(steps, values, metric, band=lambda before: noise_band(before, z_threshold))
