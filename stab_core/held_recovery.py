"""The step a reader says a loss recovered at: where it came back to its level before the rise and stayed.

The trend band of :mod:`stab_core.severity` (the trend before the incident, plus three sigmas) answers
whether the loss regained the progress it had made; on a loss that was still falling before the rise it
is met only when the loss is back *on that falling trend*, often dozens of samples after a reader sees
it back at its level (an SRGAN generator loss 0.089 -> 0.66, back at 0.09 and staying there 15 steps
before the band is met). The goldens' ``recovered_by`` (tests/corpus/README.md) is the step the curve
stays near its level, not the first noisy dip under it (the first sample within 1.15x was a dip
on a noisy loss: docs/diagnosis.md, "Decisions"). So the stated recovery is the earlier of the band's step and the first
sample after the peak from which :data:`HELD_SAMPLES` logged samples in a row stay within
:data:`HELD_RATIO` of the level before the rise (issue #32; docs/diagnosis.md, "Recovery")."""

from __future__ import annotations

from typing import Final

import numpy as np

from stab_core.incidents import Incident
from stab_core.runview import FloatArray, IntArray, Series
from stab_core.severity import LossCost, loss_cost

HELD_RATIO: Final = 1.1
"""Back at its level: within this many times the level before the rise (the goldens count 1.1-1.15x
back; over 1.1x a loss that came back to 1.14x and stayed there had not regained its level in the
goldens of word-language-model GRU runs)."""
HELD_SAMPLES: Final = 5
"""Logged samples in a row that must all stay within :data:`HELD_RATIO`: one or two samples under it
are a noisy dip (a per-step loss spread 0.3-1.4 dips under its level every few steps)."""
LEVEL_SAMPLES: Final = 3
"""Finite samples just before the rise whose median is its level: the level the loss had reached, not
an older, higher one of a falling loss (a median of 16 samples of a loss falling 0.4 -> 0.08 is 5x the
level it rose from)."""
LEAD_IN_SAMPLES: Final = 16
"""Finite samples before the rise whose median the level may not exceed: a level above it means the loss
was already rising before the detected start (a lead-in 5.2 -> 5.52 -> 6.66 before a spike flagged at
7.55), so the level before the rise is not known from the samples just before it and the trend's band
keeps its answer (tests/test_det10_shapes.py)."""
MIN_HISTORY: Final = 5
"""Finite samples before the rise needed for a level at all (a run's first few samples are no level:
an early instability keeps the band's answer)."""


def held_back(
    steps: IntArray, values: FloatArray, start: int, peak: int, band_step: int | None
) -> tuple[int, float] | None:
    """(step, level): the first logged step after ``peak`` (and after ``start``) from which
    :data:`HELD_SAMPLES` finite loss samples in a row are all at most :data:`HELD_RATIO` times
    ``level``, the median of the :data:`LEVEL_SAMPLES` finite samples before ``start``; only when that
    step is earlier than ``band_step`` (the step the loss was back within its trend's noise band).

    None when the band never saw the loss back (``band_step`` None: a loss not back by the log's end
    stays not back), with fewer than :data:`MIN_HISTORY` finite samples before ``start``, on a level
    above the median of the :data:`LEAD_IN_SAMPLES` before ``start`` (a lead-in), on a level that is not
    positive (a ratio of a negative objective means nothing), or when no such step comes
    before ``band_step``."""
    if band_step is None or steps.size == 0:
        return None
    first = int(np.searchsorted(steps, start))
    before = values[:first][np.isfinite(values[:first])]
    if before.size < MIN_HISTORY:
        return None
    level = float(np.median(before[-LEVEL_SAMPLES:]))
    if not 0 < level <= float(np.median(before[-LEAD_IN_SAMPLES:])):
        return None
    begin = max(first + 1, int(np.searchsorted(steps, peak, side="right")))
    end = int(np.searchsorted(steps, band_step))
    with np.errstate(invalid="ignore"):
        near = (np.isfinite(values) & (values <= HELD_RATIO * level))[begin : end + HELD_SAMPLES - 1]
    if near.size < HELD_SAMPLES:
        return None
    runs = np.convolve(near.astype(np.int64), np.ones(HELD_SAMPLES, dtype=np.int64), "valid")
    held = np.flatnonzero(runs[: end - begin] == HELD_SAMPLES)
    return (int(steps[begin + int(held[0])]), level) if held.size else None


def costed_recovery(
    loss: Series | None, incident: Incident
) -> tuple[LossCost | None, int | None, tuple[int, float] | None]:
    """(the loss's cost of ``incident`` (:func:`stab_core.severity.loss_cost`), the step it recovered at,
    (that step, the level) when it is :func:`held_back`'s, else None). Only a loss incident's own rise
    is timed by its level: during a grad-norm incident the loss may sit a few percent above a falling
    level and has not recovered until its trend's band says so (a loss at 1.07x in a grad-norm spike);
    nor an early instability's: a run's first epochs still fall fast, the level before them is no level
    (a ResNet's loss back at 1.1x of its epoch-54 plateau at 73 had a golden recovery at 64)."""
    if loss is None:
        return None, None, None
    cost = loss_cost(loss.steps, loss.values, incident.start, incident.primary.peak)
    band_step = cost.recovered_at if cost is not None else None
    held = (
        held_back(loss.steps, loss.values, incident.start, incident.primary.peak, band_step)
        if incident.primary.metric == "loss" and incident.kind != "early_instability"
        else None
    )
    return cost, held[0] if held is not None else band_step, held
