"""Issues #31/#32 (docs/diagnosis.md, "Import: the loss"): a VAE console's objective is the run's loss. A VAE/WAE
trainer prints its objective beside its terms (``loss_vae; loss_recon; loss_kl; loss_mmd``) and no plain ``loss``; the
KL term may rise by design while the objective falls, so the objective, not a term, is the loss.
Every input here is synthetic (own numbers in the layout)."""

from __future__ import annotations

from pathlib import Path

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
