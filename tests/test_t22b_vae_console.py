"""Round 16 (t22b, #31/#32): a VAE console's objective is the run's loss. A VAE/WAE trainer prints its
objective beside its terms (``loss_vae; loss_recon; loss_kl; loss_mmd``) and no plain ``loss``; the
KL term may rise by design while the objective falls, so the objective, not a term, is the loss.
Every input here is synthetic (own numbers in the layout)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from ingest.formats import FALLBACK_READERS, read_log
from ingest.formats.run_loss import aggregate_loss
from tests.conftest import write_log_lines


def _vae_lines() -> list[str]:
    lines = ["model:", "  |- lr\t0.002", "  |- n_iter\t6000"]
    for i in range(13):
        recon = 2.8 / (1 + i)
        kl = 3.0 + 17.0 * i  # rises by design: the KL weight anneals in
        lines.append(
            f"ITER {i * 500} TRAINING (phase 1). loss_vae: {recon + 0.01 * kl:.4f}; loss_recon: {recon:.4f}; "
            f"loss_kl: {kl:.4f}; loss_mmd: -1.{950 + i}; Grad_norm: {0.4 + 0.01 * i:.4e} "
        )
        lines.append('Sample (cat T=1.0): "<start> K L A <eos>"')
    return lines


def test_vae_objective_beside_its_terms_is_the_loss(tmp_path: Path) -> None:
    parsed = read_log([write_log_lines(tmp_path, _vae_lines())], reader_set=FALLBACK_READERS)
    assert parsed.format == "generic"
    assert parsed.meta["mapping"]["loss"] == "loss_vae"
    assert parsed.meta["proposed_map"] == {"loss_vae": "loss"}


@pytest.mark.parametrize(
    ("names", "total"),
    [
        (["loss_vae", "loss_recon", "loss_kl"], "loss_vae"),
        (["elbo_loss", "recon_loss", "kl_loss"], "elbo_loss"),
        (["loss_recon", "loss_kl"], None),  # terms alone: no total to take
        (["loss_vae", "loss_kl"], None),  # one term: a proposal to the user, not a rule
    ],
)
def test_objective_names(names: list[str], total: str | None) -> None:
    assert aggregate_loss(names) == total


def test_early_rise_on_a_few_calm_samples_must_clear_the_noise_after() -> None:
    """A per-batch loss whose first samples happen to be calm (a band of a few samples is too narrow)
    then swings +-20% for the rest of the log: a 1.3x sample among the first is that swing, judged
    against the noise of the samples after its return as well (round 16: t22b)."""
    from stab_core.early_rises import robust_early_rises

    rng = np.random.default_rng(7)
    first = np.array([3.75, 3.62, 3.65, 3.35, 3.60, 3.58, 3.44, 3.35, 3.25])
    later = 3.5 * (1 + 0.12 * rng.standard_normal(300)) * np.linspace(1.0, 0.8, 300)
    loss = np.concatenate([first, [4.45, 3.8, 3.4], later])
    steps = np.arange(10_000, 10_000 + 10 * loss.size, 10, dtype=np.int64)
    assert robust_early_rises(steps, loss, 16, "loss", 6.0) == []
    # a start-up blow-up still stands out of that noise
    blown = loss.copy()
    blown[9] = 9.0
    (event,) = robust_early_rises(steps, blown, 16, "loss", 6.0)
    assert event.start == steps[9]
