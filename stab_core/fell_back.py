"""A loss rise from a level of its first few samples that fell back from its peak by most of the rise is
no divergence (issue #32, round 22 f28d).

A divergence is a loss that does not come back within the log: it stays up, or goes on rising, to the
log's end. A rise whose loss, after its peak, falls again and trains on (an RTMDet warm-up climb from a
first-step loss of 0.07 to 1.54, then down to 0.31 over the next 4,000 steps) lost steps, but the run did
not diverge: it is a spike that left the loss above its level. Saying "Diverged: it has not come back" and
"Restart from the beginning" of it is false, and so is its severity ``divergence``.

A divergence is judged against a level the loss had established. A level resting on fewer than
:data:`~stab_core.rolling_baseline.NOISE_MIN_SAMPLES` logged samples (the run's first steps: an untrained
start, a detection head whose first losses are tiny before it matches any box) is no trained level that a
loss failing to come back to has lost; a level of more samples is (a Whisper fine-tune at 0.12 over five
evaluations that rises to 0.33 and ends at 0.18 has diverged from it, however far it fell again).

The rule, for an incident ranked ``divergence`` whose primary member is a finite loss rise (no
non-finite member; a NaN never "falls back") and whose trend level before it rests on fewer than
``NOISE_MIN_SAMPLES`` samples (``Incident.trend``; no trend: none before it): take the median of the
loss's last :data:`END_SAMPLES` finite samples, all after the peak (at least :data:`AFTER_SAMPLES`
finite samples after it, so the run was seen to train on); when that end level is below
:data:`FELL_SHARE` of the way from the level before the rise to the peak (most of the rise undone), the
incident is a ``spike`` whose primary did not diverge, and it records ``fell_back`` = (the last step, the
end level) for its recovery claim ("Not back to its level by the log's end, but ..."). A loss still at
half its rise or more at the log's end, or one that never fell after its peak, stays a divergence.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Final

import numpy as np

from stab_core.incidents import Incident
from stab_core.rolling_baseline import NOISE_MIN_SAMPLES
from stab_core.runview import Series

END_SAMPLES: Final = 5
"""Finite loss samples at the log's end whose median is where the loss ended (one outlier outvoted)."""
AFTER_SAMPLES: Final = 10
"""Finite loss samples after the peak needed to see the run train on (fewer: too little to tell)."""
FELL_SHARE: Final = 0.5
"""The end level below this share of the rise (from the level before it to the peak): most of it undone."""


def end_level(loss: Series, after: int) -> tuple[int, float] | None:
    """(last step, median of the last :data:`END_SAMPLES` finite samples) when :data:`AFTER_SAMPLES` or more
    finite samples follow step ``after``, else None. Steps are the run's, values the loss's units."""
    keep = np.isfinite(loss.values) & (loss.steps > after)
    steps, values = loss.steps[keep], loss.values[keep]
    if steps.size < AFTER_SAMPLES:
        return None
    return int(steps[-1]), float(np.median(values[-END_SAMPLES:]))


def fell_back_rises(series: Mapping[str, Series], incidents: Sequence[Incident]) -> list[Incident]:
    """``incidents`` with each divergence from a level of too few samples whose loss fell back by most of its
    rise made a spike (module)."""
    loss = series.get("loss")
    if loss is None:
        return list(incidents)
    out = []
    for incident in incidents:
        primary = incident.primary
        level, peak = primary.baseline, primary.peak_value
        if (
            incident.severity == "divergence"
            and primary.metric == "loss"
            and not any(m.nonfinite for m in incident.members)
            and math.isfinite(level)
            and math.isfinite(peak)
            and peak > level
            and (incident.trend is None or incident.trend[1] < NOISE_MIN_SAMPLES)
        ):
            end = end_level(loss, primary.peak)
            if end is not None and end[1] < level + FELL_SHARE * (peak - level):
                members = (replace(primary, diverged=False), *incident.members[1:])
                incident = replace(incident, members=members, severity="spike", fell_back=end)
        out.append(incident)
    return out
