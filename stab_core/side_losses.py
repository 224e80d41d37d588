"""A side loss that explodes by orders of magnitude and stays there: a divergence of its own, even while
the headline loss falls (issue #32; docs/diagnosis.md, "GANs and RL").

A run's ``loss`` is often one term of several it logs beside it (a VAE's KL term, a mixture of experts'
auxiliary loss, a reconstruction or generation term): where the headline is another term (a VAE whose
printed ``loss`` is its reconstruction term), a KL term running 13 -> 3e15 leaves the headline falling and
the detectors that read it quiet, though the model's latent space has blown up and the run never comes
back. The rule: a series named as a loss (or a KL or auxiliary term) other than the headline and the
held-out losses, with positive finite values, whose value first reaches :data:`EXPLOSION_RATIO` times its
level (the median of the samples before its rise, at least :data:`MIN_LEVEL_SAMPLES` of them) and then
never falls back under :data:`STAY_RATIO` times that level to the log's end, is a diverged ``climb``. Its
start is the first sample of the unbroken run of samples at :data:`RISE_RATIO` times the level or more
that leads to the explosion. A series already inside an incident at that start adds nothing. A loss
scale is no loss (its growth by powers of two is the scaler's doing).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Final

import numpy as np

from stab_core.incidents import Incident
from stab_core.runview import Series
from stab_core.spikes import build_event

EXPLOSION_RATIO: Final = 100.0
"""Two orders of magnitude over the level: no noise or schedule of a loss term moves it that far."""
STAY_RATIO: Final = 10.0
"""After its explosion the term never falls under this many times its level: it did not come back."""
RISE_RATIO: Final = 1.25
"""The rise that leads to the explosion starts where the term first holds this many times its level."""
MIN_LEVEL_SAMPLES: Final = 5
"""Samples before the rise its level rests on."""
MAX_CANDIDATES: Final = 64
"""Samples over 100x the least before them judged against the median (a term near 0 has many)."""
_SIDE_LOSS: Final = re.compile(r"loss|(?<![a-z])(?:kl|aux)(?![a-z])", re.IGNORECASE)
_NOT_SIDE: Final = re.compile(r"scale|^(?:val|valid|validation|eval|test)(?![a-z])", re.IGNORECASE)
_HEADLINE: Final = frozenset({"loss", "val_loss"})


def _explosion(series: Series) -> tuple[int, float] | None:
    """``(index of the rise's first sample, level)`` where ``series`` exploded and stayed; None else."""
    x, steps = series.values, series.steps
    finite = np.isfinite(x)
    if not finite.all() or x.size <= MIN_LEVEL_SAMPLES or (x <= 0).any():
        return None
    least_after = np.minimum.accumulate(x[::-1])[::-1]  # the least value from each sample to the end
    least_before = np.minimum.accumulate(x)
    # the median before a sample is at least the least value before it: only these can be explosions
    candidates = np.flatnonzero(x[1:] >= EXPLOSION_RATIO * least_before[:-1]) + 1
    for i in (int(c) for c in candidates[candidates >= MIN_LEVEL_SAMPLES][:MAX_CANDIDATES]):
        level = float(np.median(x[:i]))
        if x[i] >= EXPLOSION_RATIO * level:
            if least_after[i] < STAY_RATIO * level:
                return None  # it came back: another detector's spike, not a lasting explosion
            first = i
            while first > MIN_LEVEL_SAMPLES and x[first - 1] >= RISE_RATIO * float(np.median(x[: first - 1])):
                first -= 1
            return (first, float(np.median(x[:first]))) if steps.size else None
    return None


def exploded_terms(series: Mapping[str, Series], incidents: Sequence[Incident]) -> list[Incident]:
    """``incidents`` with a diverged ``climb`` for each side loss of ``series`` that exploded and stayed
    (see the module's rule), where no incident already holds its start."""
    out = list(incidents)
    for name, s in series.items():
        if name in _HEADLINE or not _SIDE_LOSS.search(name) or _NOT_SIDE.search(name):
            continue
        found = _explosion(s)
        if found is None:
            continue
        first, level = found
        start = int(s.steps[first])
        if any(inc.start <= start <= inc.until for inc in out):
            continue
        before = s.values[:first]
        scale = float(np.median(np.abs(before - level))) or abs(level) * 0.01
        event = build_event(name, s.steps, s.values, first, s.values.size - 1, None, level, scale)
        out.append(Incident("climb", (event,), severity="divergence"))
    return sorted(out, key=lambda inc: inc.start)
