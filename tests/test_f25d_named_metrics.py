"""Issue #32 (docs/diagnosis.md, "Actions and claims"): "the run logs no loss" is said only where no stored metric names
one.

A run whose loss a reader stored under its own name (``mse_loss_mean`` of a diffusion ``progress.csv``,
``TrainLoss`` of a console, ``loss_D`` of a GAN, ``mlm_loss`` of BERT) holds a loss no reader took as the
run's loss: "Not run: loss spikes: the run logs no loss" and the overview's "loss: not in this run" were
false there. Synthetic runs, no corpus log."""

from __future__ import annotations

import numpy as np

from stab_core.detectors_not_run import detectors_not_run
from stab_core.metrics import metrics_naming, missing_reason
from stab_core.runview import RunView, Series
from stab_core.spike_params import GRAD_NORM_SPIKE_PARAMS, LOSS_SPIKE_PARAMS


def test_a_metric_named_as_a_loss_is_a_loss_unread_not_absent() -> None:
    assert metrics_naming("loss", ["mse_loss_mean", "mse_label_cond_mean"]) == ["mse_loss_mean"]
    assert metrics_naming("loss", ["TrainLoss", "ValLoss", "TrainAcc"]) == ["TrainLoss"]
    assert metrics_naming("loss", ["loss_D", "loss_G_fake"]) == ["loss_D", "loss_G_fake"]
    reason = missing_reason("loss", ["mlm_loss", "nsp_loss", "lr"])
    assert reason.startswith("no loss series was read: the log names one (mlm_loss, nsp_loss)")
    assert "the run logs no loss" not in reason


def test_held_out_losses_loss_scales_and_unrelated_names_are_no_training_loss() -> None:
    assert missing_reason("loss", ["val_loss", "test_loss", "loss_scale", "lr"]) == "the run logs no loss"
    assert metrics_naming("loss", ["dpo_eval_loss", "ValLoss", "valid/loss", "TrainLoss"]) == ["TrainLoss"]
    assert missing_reason("grad_norm", ["act_loss"]) == "the run logs no grad_norm"
    assert missing_reason("grad_norm", ["loss", "grad_norm_clipped"]) == "the run logs no grad_norm"
    assert metrics_naming("loss", ["loss", "loss_recon"]) == []  # the run has its loss


def test_the_not_run_note_names_the_unread_loss() -> None:
    steps = np.arange(1, 101, dtype=np.int64)
    view = RunView(name="d", series={"mse_loss_mean": Series(steps, np.linspace(1.0, 0.5, 100))})
    not_run, _ = detectors_not_run(view, (LOSS_SPIKE_PARAMS, GRAD_NORM_SPIKE_PARAMS), 100, None)
    reasons = dict(not_run)
    assert reasons["loss spikes"].startswith("no loss series was read: the log names one (mse_loss_mean)")
    assert reasons["grad_norm spikes"] == "the run logs no grad_norm"
