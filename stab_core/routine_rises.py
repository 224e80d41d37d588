"""A rise a noisy loss makes every few hundred samples is its own scatter, measured from a robust level (issue #32;
docs/diagnosis.md, "Severity").

On a per-batch loss whose scatter is heavy-tailed and comes in stretches (a fill-in-the-middle objective: runs of
60-150 easy batches at 0.03-0.1 amid a median of ~1, single batches at 4-7x in every thousand), the spike
detector's level, the median of the 63 samples before a sample, is the easy stretch's; the loss coming back to
its usual ~1 is then "155x its level" and stays an incident until a sample happens to fall to 1.1x that dip
again, thousands of steps later. What a user of such a log needs, whatever made it noisy:

- the level an incident is measured from is a robust one: the higher of the median of the
  :data:`SHORT_SAMPLES` finite samples before it and the median of the :data:`LONG_SAMPLES` before it (sixteen
  windows: a stretch of easy batches much shorter than that is a dip, not a new level);
- a rise the series makes routinely is no incident: the excursion's peak is reached by at least one in
  :data:`ROUTINE_EVERY` of the series' samples outside it, measured either over the median of the window before
  each sample (the detector's own measure: its flags are the series' scatter where they are that common) or over
  each sample's robust level; and, for an excursion of :data:`MIN_HELD` samples or more, its median is within
  :data:`HELD_RATIO` of its robust level (it sat at the usual level) or is reached by at least as large a share of
  the windows of as many samples (a noisy objective is not a spike every few hundred steps; a loss that stays up
  longer than its noise ever does is still an incident);
- an excursion whose median sat within HELD_RATIO of its robust level and whose peak is routine never rose
  (:func:`at_usual_level`), back to the dip it was measured from or not.

Pure numpy. Ratios are of the loss's own units (a positive loss); steps are the run's logged steps.
"""

from __future__ import annotations

from typing import Final

import numpy as np

from stab_core.runview import FloatArray, IntArray, Series
from stab_core.window_medians import medians_before, window_medians_at

SHORT_SAMPLES: Final = 63
"""The spike detector's window (``stab_core.spike_params.SpikeParams.window``): its level of a sample."""
LONG_SAMPLES: Final = 16 * SHORT_SAMPLES
"""Finite samples whose median is a noisy loss's long-run level: a stretch of easy batches shorter than this
pulls the short median down to the stretch and not this one."""
ROUTINE_EVERY: Final = 500
"""A rise reached by at least one in this many of the series' own samples is routine (a noisy objective is not a
spike every few hundred steps): a per-batch FIM loss reaches 6.6x its window median once every ~110 samples, a
real blow-up of a noisy RL value loss (20-3000x) none of the other 3000."""
HELD_RATIO: Final = 1.3
"""A span whose median is at most this many times the robust level sat at the series' usual level (the lasting-rise
rule's ``RISE_RATIO``): a loss never back to a dip it was measured from, but at its long-run level, never rose."""
MIN_HELD: Final = 3
"""Samples from which an excursion's median, not only its peak, must be routine: one or two samples are a peak."""
MAX_CELLS: Final = 16_000_000
"""Probes times window samples taken for the windows' medians (probes evenly spread; every sample of a run of up
to ~30,000 samples): a share of 1/:data:`ROUTINE_EVERY` counted exactly where it can be, bounded on long runs."""


def robust_levels(x: FloatArray, index: IntArray) -> FloatArray:
    """The robust level before each ``index`` of the finite positive ``x``: the higher of the medians of the
    :data:`SHORT_SAMPLES` and the :data:`LONG_SAMPLES` samples before it."""
    return np.maximum(medians_before(x, index, SHORT_SAMPLES), medians_before(x, index, LONG_SAMPLES))


def _probes(n: int, first: int, last: int, width: int) -> IntArray:
    """Evenly spread sample positions from :data:`SHORT_SAMPLES` on whose ``width`` samples fit in the series and
    do not touch samples ``first..last``."""
    count = max(1, MAX_CELLS // max(width, LONG_SAMPLES))
    top = n - width
    if top < SHORT_SAMPLES:
        return np.zeros(0, dtype=np.int64)
    probes = np.unique(np.linspace(SHORT_SAMPLES, top, min(count, top - SHORT_SAMPLES + 1)).astype(np.int64))
    return probes[(probes + width <= first) | (probes > last)]


def _excursion(loss: Series, start: int, until: int) -> tuple[FloatArray, int, int, float] | None:
    """The finite samples, the excursion's first and stop indices and its robust level; None when it cannot be
    judged (a non-finite or non-positive value, in the series' first :data:`SHORT_SAMPLES` samples)."""
    finite = np.isfinite(loss.values)
    steps, x = loss.steps[finite], loss.values[finite]
    first, stop = int(np.searchsorted(steps, start)), int(np.searchsorted(steps, until, side="right"))
    if stop <= first or first < SHORT_SAMPLES or not finite[(loss.steps >= start) & (loss.steps <= until)].all():
        return None
    if float(x.min()) <= 0.0:
        return None
    return x, first, stop, float(robust_levels(x, np.array([first]))[0])


def _peak_share_ok(x: FloatArray, first: int, stop: int, level: float) -> bool | None:
    """Is the peak of ``x[first:stop]`` routine by either measure: over the window median before it (what the
    detector flagged: its own scatter where such flags are common) or over its robust level (the series'
    scatter)? None with too few samples elsewhere to count a share of 1/:data:`ROUTINE_EVERY`."""
    peak = first + int(np.argmax(x[first:stop]))
    probes = _probes(x.size, first, stop - 1, 1)
    if probes.size < ROUTINE_EVERY:
        return None
    short_rise = float(x[peak]) / float(medians_before(x, np.array([peak]), SHORT_SAMPLES)[0])
    short_share = float(np.mean(x[probes] / medians_before(x, probes, SHORT_SAMPLES) >= short_rise))
    robust_share = float(np.mean(x[probes] / robust_levels(x, probes) >= float(x[peak]) / level))
    return max(short_share, robust_share) >= 1.0 / ROUTINE_EVERY


def routine_peak(loss: Series, start: int, until: int) -> bool | None:
    """Is the peak of the loss excursion over steps ``start..until`` (inclusive) one the series reaches routinely
    (module docstring)? None when it cannot tell."""
    found = _excursion(loss, start, until)
    if found is None:
        return None
    x, first, stop, level = found
    return _peak_share_ok(x, first, stop, level)


def routine_rise(loss: Series, start: int, until: int) -> bool | None:
    """Is the loss excursion over steps ``start..until`` (inclusive) a rise the series makes routinely (module
    docstring): its peak (:func:`routine_peak`) and, over :data:`MIN_HELD` samples or more, its median (routine
    at once where it is within :data:`HELD_RATIO` of the robust level: it sat at the usual level)? None when it
    cannot tell: a non-finite or non-positive value, the excursion in the series' first :data:`SHORT_SAMPLES`
    samples, or too few samples elsewhere to count a share of 1/:data:`ROUTINE_EVERY`."""
    found = _excursion(loss, start, until)
    if found is None:
        return None
    x, first, stop, level = found
    peak_ok = _peak_share_ok(x, first, stop, level)
    if not peak_ok:
        return peak_ok
    during = x[first:stop]
    if during.size < MIN_HELD:
        return True
    held_rise = float(np.median(during)) / level
    if held_rise <= HELD_RATIO:
        return True  # it sat at the series' usual level: only its peak was out, and that is routine
    probes = _probes(x.size, first, stop - 1, during.size)
    if probes.size < ROUTINE_EVERY:
        return None
    held = window_medians_at(x, during.size, probes) / robust_levels(x, probes)
    return bool(float(np.mean(held >= held_rise)) >= 1.0 / ROUTINE_EVERY)


def at_usual_level(loss: Series, start: int, until: int) -> bool:
    """Did the finite positive loss sit at its usual level over steps ``start..until``: the median of its samples
    there no more than :data:`HELD_RATIO` times its robust level before ``start`` (:func:`robust_levels`)?"""
    finite = np.isfinite(loss.values)
    steps, x = loss.steps[finite], loss.values[finite]
    first, stop = int(np.searchsorted(steps, start)), int(np.searchsorted(steps, until, side="right"))
    if stop <= first or first < SHORT_SAMPLES or float(x.min()) <= 0.0:
        return False
    return float(np.median(x[first:stop])) <= HELD_RATIO * float(robust_levels(x, np.array([first]))[0])
