"""No divergence from a level of a few logged samples that the loss then holds (issue #32; docs/diagnosis.md,
"Severity").

A resumed run's first logged interval may hold one step averaged over a ten-step divisor (loss 1.47, then 13.8-15.2
for the 965 lines after, slowly falling): the detector sees a 9.4x rise from the first sample that never comes
back, and "diverged" was said of a healthy run. With fewer than
:data:`~stab_core.rolling_baseline.NOISE_MIN_SAMPLES` finite samples before it, a rise has no level the log can
vouch for: the odd one out may be those first samples as well as the rest. What tells a divergence from that is
the loss after the rise: a run that blew up keeps rising, goes non-finite or freezes at one value (scatter under
:data:`STUCK_SCATTER`); one that holds its new level with the run's noise (the
median of its last :data:`~stab_core.run_end_rises.LASTING_LEVEL` finite samples no more than
:data:`~stab_core.incidents.RECOVER_RATIO` times the median of its first NOISE_MIN_SAMPLES samples from the rise)
shows no instability after the step. The rule, for any run: such an incident (a training-loss rise never back,
finite throughout, from a level of fewer than NOISE_MIN_SAMPLES samples) is a ``spike``, not a ``divergence``, and
its recovery says what the log shows (:attr:`~stab_core.incidents.Incident.short_level`); its peak is the step up at
its start (the highest sample of the level held after it is that level's noise). Pure.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Final

import numpy as np

from stab_core.incidents import RECOVER_RATIO, Incident
from stab_core.rolling_baseline import NOISE_MIN_SAMPLES
from stab_core.run_end_rises import LASTING_LEVEL
from stab_core.runview import Series
from stab_core.spikes import SpikeEvent

STUCK_SCATTER: Final = 1e-3
"""A loss whose samples after the rise scatter (MAD) by at most this share of their median is stuck, not training:
a run that jumped and froze there diverged, however few samples came before."""


def held_after_short_level(loss: Series, incident: Incident) -> bool:
    """Does ``incident`` rise from fewer than NOISE_MIN_SAMPLES finite loss samples, never come back, stay
    finite, and hold its new level to the log's end (module docstring)?"""
    primary = incident.primary
    if primary.metric != "loss" or primary.recovered or primary.nonfinite or not primary.diverged:
        return False
    finite = np.isfinite(loss.values)
    before = int(np.count_nonzero(finite & (loss.steps < incident.start)))
    after = loss.values[loss.steps >= incident.start]
    if before == 0 or before >= NOISE_MIN_SAMPLES or after.size < 2 * NOISE_MIN_SAMPLES or not np.isfinite(after).all():
        return False
    level = float(np.median(after))
    if not level > 0 or float(np.median(np.abs(after - level))) <= STUCK_SCATTER * level:
        return False  # stuck at one value after the jump (an MSE of 3e31 flat to 1e-5): a dead run, diverged
    return float(np.median(after[-LASTING_LEVEL:])) <= RECOVER_RATIO * float(np.median(after[:NOISE_MIN_SAMPLES]))


def short_level_steps(series: Mapping[str, Series], incidents: Sequence[Incident]) -> list[Incident]:
    """``incidents`` with each divergence from a level of a few samples that the loss then held made a
    ``spike`` (module docstring)."""
    loss = series.get("loss")
    if loss is None or loss.steps.size == 0:
        return list(incidents)
    out = []
    for incident in incidents:
        if incident.severity == "divergence" and held_after_short_level(loss, incident):
            members = tuple(_stepped(m, loss) if m.metric == "loss" else m for m in incident.members)
            incident = replace(incident, members=members, severity="spike", short_level=True)
        out.append(incident)
    return out


def _stepped(event: SpikeEvent, loss: Series) -> SpikeEvent:
    """``event`` no longer diverged, its peak the step up at its start: a level held after it is no peak (the
    highest sample of 965 on a held level is that level's noise, not where anything happened)."""
    at = int(np.searchsorted(loss.steps, event.start))
    value = float(loss.values[at])
    ratio = value / event.baseline if event.baseline > 0 else event.ratio
    return replace(event, diverged=False, peak=event.start, peak_value=value, ratio=ratio)
