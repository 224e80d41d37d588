"""A GAN whose discriminator won (issue #32; docs/diagnosis.md, "GANs and RL"): a slow generator-loss climb while the
discriminator losses collapse toward 0 is one divergence, and a one-line outlier on the way up is no
spike that "recovered". Synthetic numbers in a pix2pix-like layout (G_GAN as the run's loss, D_real, D_fake)."""

from __future__ import annotations

import numpy as np

from stab_core.analysis import find_incidents
from stab_core.discriminator_wins import discriminator_wins
from stab_core.runview import RunView, Series

N = 3000
STEPS = np.arange(1, N + 1, dtype=np.int64) * 100
ONSET = 280  # the climb starts at sample 280 (step 28100)


def _view(discriminator_end: float) -> RunView:
    """A generator loss ~1 that climbs (square-root shape) to ~6 with per-iteration noise, a tenth of its
    samples back near 1 (the generator fooling the discriminator now and then) and a one-line outlier of
    14; D_real and D_fake decay from 0.5 to ``discriminator_end`` over the same span."""
    rng = np.random.default_rng(2)
    frac = np.clip((np.arange(N) - ONSET) / (N - ONSET), 0.0, 1.0)
    g = (1.0 + 5.0 * np.sqrt(frac)) * rng.lognormal(0.0, 0.4, N)
    dips = rng.random(N) < 0.1
    g[dips] = rng.lognormal(0.0, 0.25, int(dips.sum()))
    g[2000] = 14.0
    d = 0.5 * (discriminator_end / 0.5) ** frac
    series = {
        "loss": Series(STEPS, g),
        "D_real": Series(STEPS, d * rng.lognormal(0.0, 0.2, N)),
        "D_fake": Series(STEPS, d * rng.lognormal(0.0, 0.2, N)),
    }
    return RunView(name="gan", series=series, meta={})


def test_discriminator_win_is_one_divergence_from_the_climbs_start() -> None:
    incidents = find_incidents(_view(0.005))
    loss = [i for i in incidents if i.primary.metric == "loss"]
    assert len(loss) == 1, loss
    climb = loss[0]
    assert climb.severity == "divergence" and climb.primary.diverged
    assert abs(climb.start - STEPS[ONSET]) <= 150 * 100  # within ~a tenth of the climb
    assert climb.loss_recovered_at is None


def test_discriminator_that_holds_its_level_changes_nothing() -> None:
    view = _view(0.45)
    assert discriminator_wins(view.series, []) == []
