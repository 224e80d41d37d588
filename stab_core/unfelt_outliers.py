"""A grad-norm outlier the loss never felt is a blip, judged against the loss's own scatter (issue #32;
docs/diagnosis.md, "Severity").

The severity rules (:mod:`stab_core.severity`) ask whether the loss left the noise band of its *trend*: a
line fitted on the samples before the incident, whose band is the fit's residual noise. A per-batch loss
whose scatter is wide and slow leaves such a band on its own: a dozen easy batches just before a grad-norm
outlier tilt the fitted line down, and the loss's plain return to its usual level reads as "not back"
(a GPT-2 pre-training console, 3.35 -> 3.1 for 12 batches -> 3.35). Such outliers were shown as spikes
that cost steps though the loss never stood higher than in the samples just before (healthy GPT-2, ViT,
NER, C3D and NMT runs; a VAE's grad norm in a calm phase).

The rule, for any run: an incident shown as a ``spike`` whose every member is a finite grad-norm event
(one the log's end cut short included: a last-step outlier), and whose loss never rose more than
:data:`FELT_SIGMAS` robust deviations (the MAD, as a sigma, of the :data:`LEVEL_SAMPLES` finite loss
samples before it) above their median anywhere from its start to its end, is a ``blip``. The loss is the
run's evidence of lost progress: a gradient outlier it did not register lost none. Where the loss is
not logged inside the incident, fewer than a full window of samples precede it, or it is a signed
objective, the rule says nothing; an outlier the log's end cut short stays what the severity rules call
it (the log ends on it: nothing says it was absorbed).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Final

import numpy as np

from stab_core.incidents import Incident
from stab_core.metrics import signed_objective
from stab_core.rolling_baseline import MAD_TO_Z
from stab_core.runview import Series
from stab_core.severity import RECOVER_SIGMAS

FELT_SIGMAS: Final = RECOVER_SIGMAS
"""Robust deviations above its recent median the loss must reach inside the incident to have felt it (the
same width as the band it must come back into to have recovered)."""
LEVEL_SAMPLES: Final = 32
"""Finite loss samples before the incident whose median and MAD are the loss's level and scatter."""
MIN_LEVEL_SAMPLES: Final = LEVEL_SAMPLES
"""Fewer finite loss samples before the incident are no level: in a run's first window the loss still falls
fast from its start, so the median of the samples before stands above where it had got to, and a loss that
stopped falling would read as unmoved (a torchtitan start-up: 0.3 a step for 17 steps, then level at 7)."""


def loss_felt(loss: Series, start: int, until: int) -> bool | None:
    """Did the loss rise more than :data:`FELT_SIGMAS` robust deviations above its recent median between
    ``start`` and ``until`` (steps, inclusive)? None when it cannot tell (too few samples before, none inside)."""
    steps, values = loss.steps, loss.values
    first = int(np.searchsorted(steps, start))
    before = values[:first][np.isfinite(values[:first])][-LEVEL_SAMPLES:]
    during = values[first : int(np.searchsorted(steps, until, side="right"))]
    if before.size < MIN_LEVEL_SAMPLES or during.size == 0:
        return None
    if not np.isfinite(during).all():
        return True
    level = float(np.median(before))
    sigma = float(np.median(np.abs(before - level))) / MAD_TO_Z
    return bool(float(during.max()) > level + FELT_SIGMAS * sigma)


def unfelt_grad_norm_outliers(series: Mapping[str, Series], incidents: Sequence[Incident]) -> list[Incident]:
    """``incidents`` with each grad-norm-only spike whose loss never felt it made a ``blip`` (module docstring)."""
    loss = series.get("loss")
    if loss is None or loss.steps.size == 0 or signed_objective(loss.values):
        return list(incidents)
    out = []
    for incident in incidents:
        if (
            incident.severity == "spike"
            and all(m.metric == "grad_norm" and m.recovered and not m.nonfinite for m in incident.members)
            and loss_felt(loss, incident.start, incident.until) is False
        ):
            incident = replace(incident, severity="blip")
        out.append(incident)
    return out
