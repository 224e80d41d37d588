"""Round 26, r26f (issue #32): the held-out rules merged from r26c, kept to the shapes they were made for. Synthetic
runs: a validation loss that drifts up while the training loss keeps falling slowly (overfitting's shape, no lasting
rise: stab_core/held_out_rises.py); one that steps up while only its own training counterpart rises with it (still a
rise); a scattering validation loss with one evaluation far up whose next is back inside the scatter of the
evaluations before (a blip, not a blow-up: stab_core/held_out_blowups.py), beside a two-evaluation blow-up above that
scatter (still one)."""

from __future__ import annotations

import numpy as np

from stab_core.held_out_blowups import held_out_blowups
from stab_core.runview import Series


def _steps(n: int) -> np.ndarray:
    return np.arange(250, 250 * (n + 1), 250, dtype=np.int64)


def _overfitting_run() -> dict[str, Series]:
    """80 evaluations every 250 steps: a val loss that falls to 1.6, holds 30 evaluations, then drifts to ~3.2 with
    +-15 % scatter; a training loss logged every 10 steps that falls fast, then slowly (0.6 -> 0.35) with per-batch
    noise, about 0.93x per eight evaluations over the drift."""
    rng = np.random.default_rng(11)
    n = 80
    val = np.concatenate([np.linspace(4.7, 1.6, 10), np.full(30, 1.6), np.linspace(1.6, 3.2, n - 40)])
    val = val * (1 + 0.15 * rng.uniform(-1, 1, n))
    train_steps = np.arange(0, 250 * n + 1, 10, dtype=np.int64)
    smooth = np.interp(train_steps, [0, 2500, 10000, 250 * n], [13.0, 1.2, 0.6, 0.35])
    train = smooth * (1 + 0.3 * rng.uniform(-1, 1, train_steps.size))
    return {"loss": Series(train_steps, train), "val_loss": Series(_steps(n), val)}


def test_a_validation_loss_drifting_up_while_the_training_loss_keeps_falling_is_no_incident() -> None:
    # overfitting's shape (the WS-DAN run of batch 18): the overfitting finding says it, no spike is shown
    assert held_out_blowups(_overfitting_run()) == []


def _stepped_run(train_total: np.ndarray, train_box: np.ndarray | None) -> dict[str, Series]:
    rng = np.random.default_rng(5)
    n = train_total.size
    val = np.concatenate([np.full(17, 0.6), np.full(n - 17, 0.85)]) * (1 + 0.08 * rng.uniform(-1, 1, n))
    steps = np.arange(n, dtype=np.int64)
    out = {"loss": Series(steps, train_total), "val/box_loss": Series(steps, val)}
    if train_box is not None:
        out["train/box_loss"] = Series(steps, train_box)
    return out


def test_a_validation_step_up_is_a_rise_where_its_own_training_loss_rose_with_it_not_where_none_did() -> None:
    n = 60
    flat_total = np.full(n, 2.5)
    box_up = np.concatenate([np.full(17, 0.57), np.full(n - 17, 0.85)])  # the box loss rises with its validation
    (event,) = held_out_blowups(_stepped_run(flat_total, box_up))
    assert (event.metric, event.start, event.recovered, event.diverged) == ("val/box_loss", 17, False, False)
    # no training loss rose (the total and the box part only hold their level): no lasting rise is said
    assert held_out_blowups(_stepped_run(flat_total, np.full(n, 0.57))) == []


def _scattering(second: float) -> dict[str, Series]:
    """A per-epoch MSE validation loss of 100 evaluations at 1e-5 +-30 %, single evaluations at 3x every 15 (each
    back at once) and at 5x (60), one at 30x (80) and the next at ``second`` times the level."""
    rng = np.random.default_rng(3)
    val = 1e-5 * (1 + 0.3 * rng.uniform(-1, 1, 100))
    val[15::15] = 3e-5
    val[60] = 5e-5
    val[80], val[81] = 3e-4, second * 1e-5
    train = 1e-5 * (1 + 0.2 * rng.uniform(-1, 1, 100))
    return {"loss": Series(_steps(100), train), "val_loss": Series(_steps(100), val)}


def test_one_evaluation_far_up_whose_next_is_back_inside_the_scatter_before_is_no_blow_up() -> None:
    events = held_out_blowups(_scattering(2.5))  # 2.5x the level: inside the 3x excursions the series had before
    assert [e.start for e in events] == []


def test_two_evaluations_above_the_scatter_before_are_still_a_blow_up() -> None:
    (event,) = held_out_blowups(_scattering(4.0))  # above the 3x excursions (under the single 5x: not the band)
    assert (event.start, event.recovered) == (250 * 81, True)
