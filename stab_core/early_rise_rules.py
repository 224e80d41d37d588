"""Every early-rise rule of a loss's first samples in one call (issue #32; docs/diagnosis.md, "Early and short runs"):
the ratio rule of :func:`stab_core.early_rises.robust_early_rises`, then the rises it cannot see, each rule in its own
module (:mod:`stab_core.outvoted_rises`, :mod:`stab_core.given_back`), added where no earlier one overlaps."""

from __future__ import annotations

import numpy as np

from stab_core.early_rises import banded_climbs as banded_climbs  # analysis.py takes both from here
from stab_core.early_rises import robust_early_rises
from stab_core.given_back import progress_given_back
from stab_core.outvoted_rises import outvoted_early_rises
from stab_core.runview import FloatArray, IntArray, Series
from stab_core.spikes import SpikeEvent


def early_rise_events(
    steps: IntArray, values: FloatArray, history: int, metric: str = "loss", z_threshold: float = 0.0
) -> list[SpikeEvent]:
    """The early rises of :func:`~stab_core.early_rises.robust_early_rises` (same arguments), with the
    lasting rises past a one-row blip and the rises giving back the early fall it misses (``z_threshold``
    0: the ratio rule alone)."""
    events = robust_early_rises(steps, values, history, metric, z_threshold)
    if z_threshold <= 0:
        return events
    events += outvoted_early_rises(steps, values, history, z_threshold, events, metric)
    return events + progress_given_back(steps, values, history, z_threshold, events, metric)


def early_limit(loss: Series | None, window: int) -> int:
    """The step before which an incident is early: the loss's ``window``-th finite sample (its baseline is
    full from there); 0 without a finite training loss (nothing is early)."""
    finite = loss.steps[np.isfinite(loss.values)] if loss is not None else np.zeros(0, dtype=np.int64)
    return int(finite[min(window, finite.size) - 1]) if finite.size else 0
