"""A GAN's generator loss that drifts up while the discriminator holds its own: a shift of the adversarial
balance, not a divergence (issue #32; docs/diagnosis.md, "GANs and RL").

A GAN's generator loss is no objective the run drives down: it measures how well the generator fools
the discriminator of the moment, so it rises whenever the discriminator gets better. Its one lasting rise
that is a failure is the discriminator winning outright: the discriminator loss collapsing toward 0 while
the generator loss climbs many times its level (DCGAN's classic failure: 0.68 -> 0.06, 2 -> 13). A climb
of at most :data:`DRIFT_MAX_RATIO` beside a discriminator loss that kept at least :data:`COLLAPSE_FRACTION`
of its level (an SN-DCGAN's 0.94 -> 1.51 while D goes 1.2 -> 0.73) lost nothing the log can show: it is a
``spike`` not back by the log's end, never "diverged".
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Final

import numpy as np

from stab_core.incidents import Incident
from stab_core.runview import Series

GENERATOR_LOSSES: Final = frozenset({"loss_gen", "gen_loss", "loss_g", "g_loss", "generator_loss", "loss_generator"})
"""Series names of a generator loss (the importer's, ``ingest.formats.run_loss``: stab_core reads no ingest)."""
DISCRIMINATOR_LOSSES: Final = frozenset(
    {"loss_dis", "dis_loss", "loss_disc", "disc_loss", "loss_d", "d_loss", "discriminator_loss", "loss_discriminator"}
)
"""Series names of the discriminator loss beside it: with a generator loss, the log is a GAN's."""
DRIFT_MAX_RATIO: Final = 2.0
"""A generator-loss climb to at most this many times its level can be a drift of the balance; higher, as
a DCGAN whose discriminator won (8x), it stays a divergence."""
COLLAPSE_FRACTION: Final = 1 / 3
"""The discriminator loss has collapsed (the discriminator won) when its median over the last
:data:`LEVEL_SAMPLES` samples is under this fraction of its median over those before the climb."""
LEVEL_SAMPLES: Final = 16
"""Samples whose median is the discriminator loss's level before the climb and at the log's end."""
_SPLIT_PREFIXES: Final = ("train_", "training_")


def loss_leaf(name: str) -> str:
    """The name a GAN's loss series is matched on: its last path segment, lower case, less a training-split
    prefix (Lightning's ``self.log("train_gen_loss")`` names the generator's loss as ``gen_loss`` does;
    round 22: f28c)."""
    leaf = name.rsplit("/", 1)[-1].lower()
    for prefix in _SPLIT_PREFIXES:
        leaf = leaf.removeprefix(prefix)
    return leaf


def gan_generator(series: Mapping[str, Series]) -> str | None:
    """The name of the generator's loss in ``series`` where a discriminator's loss sits beside it (the log is
    a GAN's); None otherwise."""
    names = {loss_leaf(name): name for name in series}
    if not DISCRIMINATOR_LOSSES & names.keys():
        return None
    return next((names[n] for n in sorted(GENERATOR_LOSSES) if n in names), None)


def _discriminator_held(series: Series, start: int) -> bool:
    """Whether the discriminator loss ``series`` kept :data:`COLLAPSE_FRACTION` of its level from before
    step ``start`` to its end (False with fewer than :data:`LEVEL_SAMPLES` finite samples either side)."""
    finite = np.isfinite(series.values)
    before = series.values[finite & (series.steps < start)][-LEVEL_SAMPLES:]
    after = series.values[finite & (series.steps >= start)][-LEVEL_SAMPLES:]
    if before.size < LEVEL_SAMPLES or after.size < LEVEL_SAMPLES:
        return False
    level = float(np.median(before))
    return level > 0 and float(np.median(after)) >= COLLAPSE_FRACTION * level


def adversarial_drifts(series: Mapping[str, Series], incidents: Sequence[Incident]) -> list[Incident]:
    """``incidents`` with each diverged loss climb (past the run's first window) of a GAN's generator loss
    (``series`` holds a generator and a discriminator loss) that rose at most :data:`DRIFT_MAX_RATIO` while
    the discriminator held its level made a ``spike`` whose primary did not diverge (not back by the log's
    end)."""
    names = {loss_leaf(name): name for name in series}
    discriminator = next((series[names[n]] for n in DISCRIMINATOR_LOSSES if n in names), None)
    if discriminator is None or not GENERATOR_LOSSES & names.keys():
        return list(incidents)
    out = []
    for incident in incidents:
        primary = incident.primary
        if (
            incident.severity == "divergence"
            and incident.kind == "climb"
            and primary.metric == "loss"
            and not primary.nonfinite
            and 1.0 < primary.ratio <= DRIFT_MAX_RATIO
            and _discriminator_held(discriminator, incident.start)
        ):
            drift = replace(primary, diverged=False)
            incident = replace(incident, members=(drift, *incident.members[1:]), severity="spike")
        out.append(incident)
    return out
