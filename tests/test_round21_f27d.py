"""Issue #32 (docs/diagnosis.md, "Findings"): statements whose premise fails. Synthetic runs, one test per rule."""

from __future__ import annotations

import numpy as np


def _evals() -> tuple[np.ndarray, np.ndarray]:
    """A val loss at its best at the 3rd of 30 evals, then rising to 2x and staying there."""
    steps = np.arange(100, 3100, 100, dtype=np.int64)
    values = np.where(steps <= 300, 5.0 - steps / 300.0, 4.0 + np.minimum(steps - 300, 1000) / 250.0)
    return steps, values


def test_a_val_rise_beside_training_losses_that_never_fell_is_no_overfitting() -> None:
    """No ``loss`` among the run's metrics, but its training losses under their own names (an adversarial
    adaptation's ``loss/encoder`` and ``loss/discrim``) flat or rising while the val loss rises: a held-out
    divergence, not a model learning its training set; "overfitting ... keep the best checkpoint" is not said.
    One of them falling, or a val loss logged alone, is overfitting as before."""
    from stab_core.findings import finding_metrics, run_findings

    steps, val = _evals()
    flat = (steps, np.full(steps.size, 0.95) + 0.001 * (steps / 100.0 % 3))
    rising = (steps, 1.05 + steps / 30_000.0)
    falling = (steps, 2.0 - steps / 2_000.0)
    series = {"val_loss": (steps, val), "loss/encoder": flat, "loss/discrim": rising}
    assert finding_metrics(series) == ["val_loss", "loss/encoder", "loss/discrim"]
    assert run_findings(series)["overfitting"] is None
    assert run_findings({**series, "loss/encoder": falling})["overfitting"] is not None
    assert run_findings({"val_loss": (steps, val)})["overfitting"] is not None
    assert finding_metrics(["loss", "val_loss", "loss/discrim"]) == ["val_loss", "loss"]
