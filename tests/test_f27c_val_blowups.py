"""Issue #32 (docs/diagnosis.md, "Validation losses"): a validation loss that blows up for two or more evaluations is an
incident even while the training loss falls (stab_core/held_out_blowups.py); an overfitting drift, one bad evaluation
and the ordinary scatter of a per-epoch validation loss are not. Synthetic per-epoch series."""

from __future__ import annotations

import numpy as np

from stab_core.analysis import find_incidents
from stab_core.held_out_blowups import held_out_blowups
from stab_core.runview import RunView, Series

EPOCHS = np.arange(1, 31, dtype=np.int64)


def _train() -> np.ndarray:
    return 2.0 * np.exp(-EPOCHS / 8.0) + 0.3


def _val_base(seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return (1.5 * np.exp(-EPOCHS / 6.0) + 0.5) * rng.lognormal(0.0, 0.05, EPOCHS.size)


def _view(val: np.ndarray, name: str = "val_loss", train: np.ndarray | None = None) -> RunView:
    loss = Series(EPOCHS, _train() if train is None else train)
    return RunView("run", {"loss": loss, name: Series(EPOCHS, val)}, {})


def test_a_two_epoch_validation_blow_up_is_a_spike_dated_from_its_jump_and_over_when_the_loss_is_back() -> None:
    val = _val_base()
    val[11:13] = [4.5 * val[10], 3.8 * val[10]]  # epochs 12-13 up, back at 14
    val[13:] = np.minimum(val[13:], 0.98 * val[:11].min())
    [event] = held_out_blowups({"val_loss": Series(EPOCHS, val)})
    assert (event.start, event.end, event.recovery_step) == (12, 13, 14)
    [incident] = [i for i in find_incidents(_view(val)) if i.start <= 12 <= i.until]
    assert incident.severity == "spike" and incident.loss_recovered_at == 14


def test_a_validation_component_that_blows_up_and_never_comes_back_is_a_divergence() -> None:
    val = _val_base(1)
    val[4:] = val[3] * np.linspace(1.9, 2.3, EPOCHS.size - 4)  # up from epoch 5 to the end
    train = _train()
    train[4:] = train[3] * np.random.default_rng(1).lognormal(0.0, 0.02, EPOCHS.size - 4)  # the train loss flat
    view = _view(val, "val/cls_loss", train)
    [incident] = [i for i in find_incidents(view) if i.start <= 5 <= i.until]
    assert incident.primary.metric == "val/cls_loss" and incident.primary.start == 5
    assert incident.severity == "divergence" and incident.loss_recovered_at is None


def test_a_validation_loss_up_for_good_while_the_training_loss_falls_is_overfitting_not_a_blow_up() -> None:
    val = _val_base(1)
    val[4:] = val[3] * np.linspace(1.9, 2.3, EPOCHS.size - 4)  # the same rise; the train loss keeps falling
    assert held_out_blowups({"val_loss": Series(EPOCHS, val), "loss": Series(EPOCHS, _train())}) == []
    assert not any(i.primary.metric == "val_loss" for i in find_incidents(_view(val)))


def test_a_blow_up_in_the_last_evaluations_is_not_said_to_last() -> None:
    val = _val_base(4)
    val[-2:] = 3.0 * val[-3]  # two evaluations up, then the log ends
    assert held_out_blowups({"val_loss": Series(EPOCHS, val)}) == []


def test_a_noisy_validation_loss_that_reached_as_high_before_has_not_blown_up() -> None:
    val = _val_base(5)
    val[3] = 4.0 * val[2]  # an early excursion
    val[12:14] = [3.0 * val[11], 2.8 * val[11]]  # two epochs up, but under the epoch-4 high
    assert held_out_blowups({"val_loss": Series(EPOCHS, val)}) == []


def test_an_overfitting_drift_one_bad_evaluation_and_ordinary_scatter_are_not_blow_ups() -> None:
    drift = _val_base(2)
    drift[10:] = drift[9] * np.exp(np.arange(1, EPOCHS.size - 9) * 0.06)  # +6 % an epoch, 3x by the end
    one = _val_base(3)
    one[15] = 5.0 * one[14]  # one epoch up, back at the next
    for val in (
        drift,
        one,
        *(_val_base(seed) * np.random.default_rng(seed).lognormal(0, 0.12, 30) for seed in range(20)),
    ):
        assert held_out_blowups({"val_loss": Series(EPOCHS, val)}) == []
