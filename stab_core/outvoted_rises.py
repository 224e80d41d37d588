"""Early rises seen past a one-row blip, kept only when they last (issue #32; docs/diagnosis.md, "Early and short
runs").

With fewer than :data:`OUTVOTE_SAMPLES` samples before it, an early rise is judged against the noise
band of those few (:func:`stab_core.early_rises._early_band`). One outlier among them (0.69, 0.62, 4.52,
0.59, 0.58) sets three of their second differences, so their median, and the band swells until a real
rise (1.82, 1.50, 1.08: three rows at 3.1x, 2.6x, 1.9x the level) is read as noise. Leaving the highest
of those samples out mends the band, but it also lets through the one-row jumps of a sparsely logged
loss whose first few samples were calm (a loss logged every 100 steps, 2.2x for one row, back at the
next). The rule, for any run: the highest sample is left out only when it is an outlier
(:data:`OUTLIER_RATIO` times the others' median), and a rise found only so must stand
:data:`~stab_core.incidents.EARLY_MIN_RATIO` times its level for :data:`LASTING_SAMPLES` logged samples
in a row from its start; a one-row jump stays judged by the band as it was.
"""

from __future__ import annotations

from typing import Final

import numpy as np

from stab_core.early_rises import LASTING_SAMPLES, _clears_later_noise, _early_band, early_levels
from stab_core.incidents import EARLY_MIN_RATIO, early_rises
from stab_core.rolling_baseline import NOISE_MIN_SAMPLES
from stab_core.runview import FloatArray, IntArray
from stab_core.spikes import SpikeEvent

OUTLIER_RATIO: Final = 2.0
"""The highest of those few samples is left out only when it stands this many times the median of the
others: a one-row blip (4.5 among 0.6s), not the top of a per-batch loss swinging +-30%."""
OUTVOTE_SAMPLES: Final = 9
"""Samples whose second differences (7) outvote one outlier: a sample sets three of them, and their
median ignores those three only when four more are clean."""


def outvoted_early_rises(
    steps: IntArray,
    values: FloatArray,
    history: int,
    z_threshold: float,
    found: list[SpikeEvent],
    metric: str = "loss",
) -> list[SpikeEvent]:
    """Lasting early rises (module docstring) in the first ``history`` finite samples that none of
    ``found`` overlaps, judged against the noise band of the samples before each with their highest one
    left out when they number :data:`~stab_core.rolling_baseline.NOISE_MIN_SAMPLES` to
    :data:`OUTVOTE_SAMPLES` - 1, and clearing the noise after their return as every early rise must
    (:func:`stab_core.early_rises.robust_early_rises`)."""
    finite = np.isfinite(values)
    s, x = steps[finite], values[finite]
    events = early_rises(
        steps, values, history, metric, levels=early_levels, band=lambda b: _outvoted_band(b, z_threshold)
    )
    out = []
    for e in events:
        if any(e.start <= f.until and f.start <= e.until for f in found):
            continue
        first = int(np.searchsorted(s, e.start))
        run = x[first : first + LASTING_SAMPLES]
        lasting = run.size == LASTING_SAMPLES and bool((run >= EARLY_MIN_RATIO * e.baseline).all())
        if lasting and _clears_later_noise(steps, values, e, history, z_threshold):
            out.append(e)
    return out


def _outvoted_band(before: FloatArray, z_threshold: float) -> float:
    """The noise band of ``before`` with its highest sample left out (only where there are few samples:
    elsewhere infinite, so :func:`early_rises` finds nothing the unchanged rules did not judge)."""
    finite = before[np.isfinite(before)]
    if not NOISE_MIN_SAMPLES <= finite.size < OUTVOTE_SAMPLES:
        return float("inf")
    rest = np.delete(finite, int(np.argmax(finite)))
    if not float(finite.max()) >= OUTLIER_RATIO * float(np.median(rest)):
        return float("inf")  # the highest is one more swing of the noise, not an outlier that swells it
    return _early_band(rest, z_threshold)
