"""A loss noisy throughout: an excursion must stand out from the series' own scatter (issue #32; docs/diagnosis.md,
"Severity").

The spike detector flags a loss sample that reaches ``min_ratio`` (1.2x) times the median of the window
before it and sits far out in that window's MAD. On a loss whose scatter is heavy-tailed throughout (an RL
value loss per episode, a GAN's per-batch loss, a tiny-batch loss) such samples are ordinary: a PPO value
loss of median ~5 and 90th percentile ~120 puts half of its samples over 1.2x their window median, and a
10,000-row log drew 118 incidents, every one a sample in the series' usual tail.

The rule, for any run: where at least :data:`ORDINARY_SHARE` of the loss's samples reach ``min_ratio``
times the median of the ``window`` samples before them (the detector's own rise is ordinary), an incident
shown as a ``spike`` or an ``early_instability`` whose every member recovered and is finite, and whose
loss never rose more than :data:`STAND_OUT_SIGMAS` robust deviations above the median of the
:data:`LEVEL_SAMPLES` finite loss samples before it, is a ``blip``. The scatter is measured on
log(loss): a loss whose rises are ratios has a scatter of ratios, and a heavy tail's MAD in the loss's
own units is the width of its core, not of the tail that makes it noisy. det22's rule for grad-norm
outliers (:mod:`stab_core.unfelt_outliers`) is the model: a rise measured in robust deviations of the
window before (in the run's first window, its first samples outside the incident: a series noisy
throughout is as noisy at its start). No rule where the loss is not positive throughout or not noisy
throughout; a divergence, a non-finite value or an excursion the log's end cut short keeps its severity.

Round 24 (:mod:`stab_core.routine_rises`): on such a loss an excursion of any kind (a climb too) is also a blip
where its rise is one the series makes routinely, measured from a robust level, and one that sat at the series'
usual level with a routine peak never rose, back to the dip of easy batches it was measured from or not (no
"diverged" is said of it).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Final

import numpy as np

from stab_core.incidents import Incident
from stab_core.metrics import signed_objective
from stab_core.rolling_baseline import MAD_TO_Z
from stab_core.routine_rises import at_usual_level, routine_peak, routine_rise
from stab_core.runview import FloatArray, Series
from stab_core.spike_params import LOSS_SPIKE_PARAMS
from stab_core.window_medians import window_medians

ORDINARY_SHARE: Final = 0.25
"""Share of a loss's samples at or over ``min_ratio`` times their window median from which such a rise is
ordinary for that series (one sample in four; a training loss that falls or holds puts few there)."""
STAND_OUT_SIGMAS: Final = 3.0
"""Robust deviations of log(loss) above its recent median an excursion must reach to stand out."""
LEVEL_SAMPLES: Final = 63
"""Finite loss samples before an incident whose median and MAD (of their logs) are its level and scatter
(the detector's window)."""
MIN_LEVEL_SAMPLES: Final = 32
"""Fewer samples before an incident are no scatter to judge it by (det22's minimum)."""
MAX_PROBES: Final = 4000
"""Samples probed for the ordinary share (evenly spread): enough for a share, bounded on long runs."""


def ordinary_share(values: FloatArray, window: int = LOSS_SPIKE_PARAMS.window) -> float | None:
    """Share of the finite ``values`` (after the first ``window``) at or over ``min_ratio`` times the
    median of the ``window`` finite values before each; None when there are not ``2 * window`` of them."""
    finite = values[np.isfinite(values)]
    if finite.size < 2 * window:
        return None
    probes = np.unique(np.linspace(window, finite.size - 1, min(MAX_PROBES, finite.size - window)).astype(int))
    windows = np.lib.stride_tricks.sliding_window_view(finite, window)[probes - window]
    medians = window_medians(windows)
    return float(np.mean(finite[probes] >= LOSS_SPIKE_PARAMS.min_ratio * medians))


def stands_out(loss: Series, start: int, until: int) -> bool | None:
    """Did log(loss) rise more than :data:`STAND_OUT_SIGMAS` robust deviations above the median of its
    :data:`LEVEL_SAMPLES` finite samples before ``start`` anywhere in ``start..until`` (steps, inclusive)?
    In the run's first window (fewer than :data:`MIN_LEVEL_SAMPLES` before), its first
    :data:`LEVEL_SAMPLES` finite samples outside the incident are the scatter: a series noisy
    throughout is as noisy at its start. None when it cannot tell (too few samples, none inside)."""
    steps, values = loss.steps, loss.values
    first, last = int(np.searchsorted(steps, start)), int(np.searchsorted(steps, until, side="right"))
    before = values[:first][np.isfinite(values[:first])][-LEVEL_SAMPLES:]
    if before.size < MIN_LEVEL_SAMPLES:  # the run's first window: its scatter is that window's, less the incident
        outside = np.concatenate([values[:first], values[last:]])
        before = outside[np.isfinite(outside)][:LEVEL_SAMPLES]
    during = values[first:last]
    if before.size < MIN_LEVEL_SAMPLES or during.size == 0:
        return None
    if not np.isfinite(during).all():
        return True
    logs = np.log(before)
    level = float(np.median(logs))
    sigma = float(np.median(np.abs(logs - level))) / MAD_TO_Z
    return bool(float(np.log(during.max())) > level + STAND_OUT_SIGMAS * sigma)


def noisy_throughout(loss: Series | None) -> bool:
    """Is ``loss`` positive and noisy throughout (:data:`ORDINARY_SHARE` of its rises ordinary)?"""
    if loss is None or loss.steps.size == 0 or signed_objective(loss.values):
        return False
    finite = loss.values[np.isfinite(loss.values)]
    if finite.size == 0 or float(finite.min()) <= 0.0:
        return False
    share = ordinary_share(loss.values)
    return share is not None and share >= ORDINARY_SHARE


def ordinary_excursions(series: Mapping[str, Series], incidents: Sequence[Incident]) -> list[Incident]:
    """``incidents`` with each loss excursion inside a noisy loss's own scatter made a ``blip`` (module
    docstring)."""
    loss = series.get("loss")
    if not noisy_throughout(loss):
        return list(incidents)
    assert loss is not None
    out = []
    for incident in incidents:
        if (
            incident.severity == "spike"
            and any(m.metric == "loss" for m in incident.members)
            and all(m.recovered and not m.diverged and not m.nonfinite for m in incident.members)
            and ordinary(loss, incident)
        ):
            incident = replace(incident, severity="blip")
        elif incident.severity != "blip" and _never_rose(loss, incident):
            members = tuple(replace(m, diverged=False, recovered=True) for m in incident.members)
            incident = replace(incident, members=members, severity="blip")
        out.append(incident)
    return out


def _never_rose(loss: Series, incident: Incident) -> bool:
    """A loss incident that sat at the series' usual level all along, its peak routine (:mod:`stab_core.routine_rises`,
    round 24): measured from a dip of easy batches, the loss never rose from its long-run level; back to that dip
    or not, neither a spike nor "diverged" is said."""
    return (
        incident.primary.metric == "loss"
        and not any(m.nonfinite for m in incident.members)
        and at_usual_level(loss, incident.start, incident.until)
        and routine_peak(loss, incident.start, incident.until) is True
    )


def ordinary(loss: Series, incident: Incident) -> bool:
    """Is ``incident`` inside the noisy ``loss``'s own scatter: a spike or early rise within its scatter of
    log(loss) (:func:`stands_out`), or any excursion, a climb too, whose rise the series makes routinely
    measured from a robust level (:func:`stab_core.routine_rises.routine_rise`, round 24)?"""
    start, until = incident.start, incident.until
    if incident.kind != "climb" and stands_out(loss, start, until) is False:
        return True
    return routine_rise(loss, start, until) is True or _never_rose(loss, incident)
