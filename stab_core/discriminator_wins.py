"""A GAN whose discriminator won: the generator loss climbing to a multiple of its early level while every
discriminator loss collapses toward 0 (issue #32; docs/diagnosis.md, "GANs and RL").

The mirror of :mod:`stab_core.adversarial` (a generator drift beside a discriminator that holds its level
is no divergence): when the discriminator losses fall to a fraction of their level and the generator loss
ends many times its own, the discriminator overpowers the generator (vanishing generator gradient) and
the run never comes back, however slowly the climb went. The climb is one divergence from the step the
generator loss's rolling median left its early level for good; a one-line outlier on the way up (a
per-iteration GAN loss is noisy) is part of that climb, never a spike that "recovered".
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Final

import numpy as np

from stab_core.adversarial import COLLAPSE_FRACTION, DISCRIMINATOR_LOSSES, LEVEL_SAMPLES, loss_leaf
from stab_core.incidents import Incident
from stab_core.runview import Series
from stab_core.spikes import build_event

DISCRIMINATOR_PARTS: Final = frozenset({"d_real", "d_fake", "loss_d_real", "loss_d_fake", "errd_real", "errd_fake"})
"""Series names of a discriminator's per-input losses (pix2pix's ``D_real``/``D_fake``)."""
WIN_RATIO: Final = 3.0
"""The generator loss's end level (median of the last :data:`LEVEL_SAMPLES` samples) is at least this
many times its early level (median of the run's first tenth): the climb of a lost balance."""
ONSET_RATIO: Final = 1.25
"""The climb starts where the generator loss's rolling median rises above this multiple of its early
level and never falls back."""
MIN_SAMPLES: Final = 8 * LEVEL_SAMPLES
"""Fewer finite generator-loss samples show no early level and end level apart."""


def _collapsed(series: Series) -> bool:
    """Whether ``series`` (a discriminator loss) ends under :data:`COLLAPSE_FRACTION` of its early level."""
    v = series.values[np.isfinite(series.values)]
    if v.size < MIN_SAMPLES:
        return False
    early = float(np.median(v[: max(LEVEL_SAMPLES, v.size // 10)]))
    return early > 0 and float(np.median(v[-LEVEL_SAMPLES:])) < COLLAPSE_FRACTION * early


def discriminator_wins(series: Mapping[str, Series], incidents: Sequence[Incident]) -> list[Incident]:
    """``incidents`` of a GAN whose discriminator won (every discriminator loss in ``series`` collapsed,
    the generator ``loss`` ends :data:`WIN_RATIO` times its early level) with the climb as one diverged
    ``climb`` incident and the loss incidents inside it dropped; unchanged otherwise or when a loss
    divergence is already reported."""
    # a whole discriminator loss (``Discriminator_Loss``, ``d_loss``) collapses as its parts do
    names = {loss_leaf(name): name for name in series}
    parts = [series[names[n]] for n in sorted(DISCRIMINATOR_PARTS | DISCRIMINATOR_LOSSES) if n in names]
    loss = series.get("loss")
    if loss is None or not parts or not all(_collapsed(s) for s in parts):
        return list(incidents)
    if any(i.severity == "divergence" and i.primary.metric == "loss" for i in incidents):
        return list(incidents)
    finite = np.isfinite(loss.values)
    steps, values = loss.steps[finite], loss.values[finite].astype(float)
    if values.size < MIN_SAMPLES:
        return list(incidents)
    head = values[: max(LEVEL_SAMPLES, values.size // 10)]
    early = float(np.median(head))
    if early <= 0 or float(np.median(values[-LEVEL_SAMPLES:])) < WIN_RATIO * early:
        return list(incidents)
    window = max(LEVEL_SAMPLES, values.size // 50)
    rolling = np.array([np.median(values[i : i + window]) for i in range(values.size - window + 1)])
    below = np.flatnonzero(rolling < ONSET_RATIO * early)
    onset = int(below[-1]) + 1 + window // 2 if below.size else window // 2
    if onset >= values.size:
        return list(incidents)
    # a loss incident still open at the climb's start (its peak or its end past it) is the same rise,
    # seen by a detector whose band followed the noise: the climb starts at the earliest of them
    inside = [i for i in incidents if i.primary.metric == "loss" and max(i.primary.peak, i.until) >= steps[onset]]
    first = min([int(steps[onset]), *(i.start for i in inside)])
    onset = int(np.searchsorted(steps, first))
    scale = float(np.median(np.abs(head - early))) or 1e-12
    climb = build_event("loss", steps, values, onset, values.size - 1, None, early, scale)
    kept = [i for i in incidents if all(i is not j for j in inside)]
    return sorted([*kept, Incident("climb", (climb,), {}, severity="divergence")], key=lambda i: i.start)
