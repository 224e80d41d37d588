"""A lasting grad-norm surge is a spike, whether or not the loss rose (issue #32; docs/diagnosis.md, "Severity").

The severity rules judge an incident by what the loss lost: a grad-norm event the loss never felt is a
``blip`` (:mod:`stab_core.severity`, :mod:`stab_core.unfelt_outliers`). That is right for one outlier batch
the optimizer absorbed. It is wrong for a grad norm that moved to a new regime and stayed there: a
wav2vec2 fine-tune whose transformer is unfrozen at update 100 has its grad norm go from ~450 to
1,400-5,800 for 40 updates, with three fp16 overflows, while its loss falls out of a plateau. Nothing was
lost on the loss, but every update of that span was several times the size the run had been taking:
a user watching the run wants it shown, with when it started and ended.

The rule, for any run: an incident shown as a ``blip`` with a grad-norm member, every grad-norm member
finite, whose grad norm stood at :data:`SURGE_RATIO` times its level or more for :data:`SURGE_SAMPLES`
consecutive logged samples or more between the incident's start and its end, is a ``spike``. The level
is the median of the (up to :data:`LEVEL_SAMPLES`) finite grad-norm samples before the incident; with
fewer than :data:`MIN_LEVEL_SAMPLES` there is no level (a run's first steps, whose grad norm still moves
from its initial scale, say nothing). One outlier batch is one sample; a few outliers merged into one
incident each fall back between them; a slow drift up is not a detected incident at all (the window
median follows it). Only a grad norm that jumped and held lasts 16 samples at 4x.

Such an incident is over when its grad norm is back in its band (its recovery says that step): the loss
never left its own band, so the step it was "back" in it dates nothing.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Final

import numpy as np

from stab_core.incidents import Incident
from stab_core.runview import Series

SURGE_RATIO: Final = 4.0
"""Times its level the grad norm must stand at (the low sensitivity's grad-norm ratio is 3x, the default 2x:
this is well beyond a detection)."""
SURGE_SAMPLES: Final = 16
"""Consecutive logged samples at :data:`SURGE_RATIO` or more that make a surge last (the detector's own
minimum history: as many samples as it needs to call anything a level)."""
LEVEL_SAMPLES: Final = 32
"""Finite grad-norm samples before the incident whose median is its level."""
MIN_LEVEL_SAMPLES: Final = 16
"""Fewer finite samples before the incident are no level (the detector's minimum history)."""


def longest_surge(grad_norm: Series, start: int, until: int) -> int | None:
    """The most consecutive logged grad-norm samples between ``start`` and ``until`` (steps, inclusive)
    at :data:`SURGE_RATIO` times the level before ``start`` or more; None when there is no level (fewer
    than :data:`MIN_LEVEL_SAMPLES` finite samples before, or a level that is not positive)."""
    steps, values = grad_norm.steps, grad_norm.values
    first = int(np.searchsorted(steps, start))
    before = values[:first][np.isfinite(values[:first])][-LEVEL_SAMPLES:]
    if before.size < MIN_LEVEL_SAMPLES:
        return None
    level = float(np.median(before))
    if not level > 0:
        return None
    during = values[first : int(np.searchsorted(steps, until, side="right"))]
    longest = run = 0
    for high in np.isfinite(during) & (during >= SURGE_RATIO * level):
        run = run + 1 if high else 0
        longest = max(longest, run)
    return longest


def lasting_surges(series: Mapping[str, Series], incidents: Sequence[Incident]) -> list[Incident]:
    """``incidents`` with each blip that holds a lasting grad-norm surge made a ``spike`` (module docstring)."""
    grad_norm = series.get("grad_norm")
    if grad_norm is None or grad_norm.steps.size == 0:
        return list(incidents)
    out = []
    for incident in incidents:
        members = [m for m in incident.members if m.metric == "grad_norm"]
        if (
            incident.severity == "blip"
            and members
            and not any(m.nonfinite for m in members)
            and (longest_surge(grad_norm, incident.start, incident.until) or 0) >= SURGE_SAMPLES
        ):
            # over when the grad norm is back: the loss never left its band, so its "return" dates nothing
            incident = replace(incident, severity="spike", loss_recovered_at=None, held=None)
        out.append(incident)
    return out
