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

import re
from collections.abc import Mapping, Sequence
from typing import Final

import numpy as np

from stab_core.adversarial import COLLAPSE_FRACTION, DISCRIMINATOR_LOSSES, GENERATOR_LOSSES, LEVEL_SAMPLES, loss_leaf
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
        return won_outright(series, incidents)
    if any(i.severity == "divergence" and i.primary.metric == "loss" for i in incidents):
        return list(incidents)
    finite = np.isfinite(loss.values)
    steps, values = loss.steps[finite], loss.values[finite].astype(float)
    if values.size < MIN_SAMPLES:
        return list(incidents)
    head = values[: max(LEVEL_SAMPLES, values.size // 10)]
    early = float(np.median(head))
    if early <= 0 or float(np.median(values[-LEVEL_SAMPLES:])) < WIN_RATIO * early:
        return won_outright(series, incidents)
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


WON_FRACTION: Final = 0.1
"""A discriminator that won outright ends (median of its last :data:`LEVEL_SAMPLES` samples) under this fraction of
its first level (the median of its first LEVEL_SAMPLES): it tells every fake from every real sample."""
_PAIRED = re.compile(r"^(?:loss_)?d_(.+)$")
"""A discriminator loss named for its side (CycleGAN's ``D_A``, ``loss_D_B``), paired with the generator loss of the
same side (``G_A``, ``loss_G_B``)."""


def gan_pairs(series: Mapping[str, Series]) -> list[tuple[str, str]]:
    """The (discriminator, generator) loss names of ``series`` that are one adversarial pair: a whole
    discriminator loss with the generator loss beside it (``d_loss`` and ``g_loss``), and each side's
    (``D_A`` with ``G_A``)."""
    names = {loss_leaf(name): name for name in series}
    pairs = []
    whole_d = next((names[n] for n in sorted(DISCRIMINATOR_LOSSES) if n in names), None)
    whole_g = next((names[n] for n in sorted(GENERATOR_LOSSES) if n in names), None)
    if whole_d is not None and whole_g is not None:
        pairs.append((whole_d, whole_g))
    for leaf, name in sorted(names.items()):
        side = _PAIRED.match(leaf)
        if side is None or leaf in DISCRIMINATOR_LOSSES or leaf in DISCRIMINATOR_PARTS:
            continue
        partner = next((names[g] for g in (f"g_{side[1]}", f"loss_g_{side[1]}") if g in names), None)
        if partner is not None:
            pairs.append((name, partner))
    return pairs


def _won_from(discriminator: Series, generator: Series) -> int | None:
    """The step from which ``discriminator`` won outright against ``generator`` (the rule of
    :func:`won_outright`), None where it did not."""
    d = discriminator.values[np.isfinite(discriminator.values)]
    d_steps = discriminator.steps[np.isfinite(discriminator.values)]
    g_ok = np.isfinite(generator.values)
    g, g_steps = generator.values[g_ok], generator.steps[g_ok]
    if d.size < MIN_SAMPLES or g.size < MIN_SAMPLES:
        return None
    first, g_first = float(np.median(d[:LEVEL_SAMPLES])), float(np.median(g[:LEVEL_SAMPLES]))
    if first <= 0 or g_first <= 0 or float(np.median(d[-LEVEL_SAMPLES:])) >= WON_FRACTION * first:
        return None
    rolling = np.lib.stride_tricks.sliding_window_view(d, LEVEL_SAMPLES)
    above = np.flatnonzero(np.median(rolling, axis=1) >= COLLAPSE_FRACTION * first)
    onset = int(above[-1]) + LEVEL_SAMPLES if above.size else LEVEL_SAMPLES // 2
    if onset >= d.size:
        return None
    start = int(d_steps[onset])
    # the generator got no better from there: its loss held at or above its first level (an LSGAN's sits at the
    # target 1 of D(G(x)) = 0); a discriminator loss falling while its generator's falls too is both learning
    after = g[g_steps >= start]
    if after.size < LEVEL_SAMPLES or min(float(np.median(after)), float(np.median(g[-LEVEL_SAMPLES:]))) < g_first:
        return None
    return start


def won_outright(series: Mapping[str, Series], incidents: Sequence[Incident]) -> list[Incident]:
    """``incidents`` of a GAN whose discriminators won outright, with the collapse as one diverged ``climb`` of the
    generator loss (issue #32, round 26; docs/diagnosis.md). The rule, for any GAN log with its discriminator
    and generator losses paired (:func:`gan_pairs`): every discriminator loss ends under :data:`WON_FRACTION`
    of its first level and stayed under :data:`COLLAPSE_FRACTION` of it (its :data:`LEVEL_SAMPLES`-sample
    rolling median) from some step to the end, while its generator's loss from that step on, and at the end,
    is at or above its own first level: the discriminator tells every fake apart, the generator's gradient
    vanishes and the generator never gets better (a CycleGAN whose D_A and D_B fall 0.52 -> 0.000 within
    three epochs while G_A and G_B sit at the LSGAN target 1.0 for the remaining 197). Its generator loss need
    not climb far (the 3x of :func:`discriminator_wins`): an LSGAN generator's loss is bounded by that target.
    The incident starts at the latest onset of the pairs (all have won there), on the generator whose median
    since is the highest over its first level; the loss incidents open there are folded into it. A run that
    starts collapsed (a resume) has no fall to show and is left as it is; unchanged too where a divergence
    is already reported."""
    pairs = gan_pairs(series)
    if not pairs or any(i.severity == "divergence" for i in incidents):
        return list(incidents)
    onsets = [_won_from(series[d], series[g]) for d, g in pairs]
    if any(o is None for o in onsets):
        return list(incidents)
    start = max(o for o in onsets if o is not None)

    def rise(name: str) -> float:
        s = series[name]
        ok = np.isfinite(s.values)
        return float(np.median(s.values[ok & (s.steps >= start)]) / np.median(s.values[ok][:LEVEL_SAMPLES]))

    name = max((g for _, g in pairs), key=rise)
    ok = np.isfinite(series[name].values)
    steps, values = series[name].steps[ok], series[name].values[ok].astype(float)
    head = values[:LEVEL_SAMPLES]
    first = float(np.median(head))
    scale = float(np.median(np.abs(head - first))) or 1e-12
    onset = int(np.searchsorted(steps, start))
    won = build_event(name, steps, values, onset, values.size - 1, None, first, scale)
    metrics = {"loss", *(m for pair in pairs for m in pair)}
    inside = [i for i in incidents if i.primary.metric in metrics and max(i.primary.peak, i.until) >= start]
    kept = [i for i in incidents if all(i is not j for j in inside)]
    return sorted([*kept, Incident("climb", (won,), {}, severity="divergence")], key=lambda i: i.start)
