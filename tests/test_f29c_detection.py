"""Round 23, f29c (issue #32): incidents missed on batch 22, on synthetic series of those shapes
(docs/diagnosis.md, "Rules added in round 23", f29c)."""

from __future__ import annotations

import numpy as np

from stab_core.analysis import find_incidents
from stab_core.runview import RunView, Series


def _grpo(nan_at: list[int], n: int = 40) -> RunView:
    """A GRPO log every 5 steps: the loss printed 0.0 on every record, a grad norm 0.10-0.20, NaN at the
    records ``nan_at`` (indices)."""
    rng = np.random.default_rng(3)
    steps = np.arange(1, n + 1, dtype=np.int64) * 5
    grad = 0.15 + rng.uniform(-0.05, 0.05, n)
    grad[nan_at] = np.nan
    loss = np.zeros(n)
    return RunView("grpo", {"loss": Series(steps, loss), "grad_norm": Series(steps, grad)}, {})


def _severities(view: RunView) -> dict[int, str]:
    return {i.start: i.severity for i in find_incidents(view)}


def test_first_nan_grad_norm_beside_a_zero_loss_is_shown_later_ones_are_blips() -> None:
    found = _severities(_grpo([11, 21, 31]))
    assert found[60] == "spike"
    assert found[110] == "blip" and found[160] == "blip"


def test_a_last_record_nan_after_skipped_ones_is_a_blip_not_a_divergence() -> None:
    view = _grpo([2, 11, 18, 39])
    found = _severities(view)
    assert found[15] == "spike"
    assert found[200] == "blip"
    last = next(i for i in find_incidents(view) if i.start == 200)
    assert not last.primary.diverged


def test_a_nan_grad_norm_beside_a_loss_that_moves_stays_a_blip() -> None:
    view = _grpo([11])
    loss = view.series["loss"]
    moving = Series(loss.steps, 2.0 - 0.01 * np.arange(loss.steps.size))
    assert _severities(RunView("lm", {**view.series, "loss": moving}, {}))[60] == "blip"


def _rewards(tail: float, tail_std: float, n: int = 40, first_tail: int = 2) -> RunView:
    """A GRPO log every 10 steps: a reward near 0.5 (std 0.2), then from record ``first_tail`` on exactly
    ``tail`` with a spread ``tail_std``; the loss is the KL term, falling."""
    rng = np.random.default_rng(5)
    steps = np.arange(1, n + 1, dtype=np.int64) * 10
    reward = 0.5 + rng.uniform(-0.1, 0.1, n)
    std = np.full(n, 0.2)
    reward[first_tail:], std[first_tail:] = tail, tail_std
    loss = 0.05 * np.exp(-np.arange(n) / 8.0) + 0.004
    series = {"loss": Series(steps, loss), "reward": Series(steps, reward), "reward_std": Series(steps, std)}
    return RunView("grpo", series, {})


def test_a_reward_stuck_at_zero_with_no_spread_to_the_end_is_a_collapse() -> None:
    found = [i for i in find_incidents(_rewards(0.0, 0.0)) if i.primary.metric == "reward"]
    assert [(i.start, i.severity) for i in found] == [(30, "divergence")]


def test_a_reward_at_its_ceiling_or_with_spread_left_is_no_collapse() -> None:
    assert not [i for i in find_incidents(_rewards(1.0, 0.0)) if i.primary.metric == "reward"]
    assert not [i for i in find_incidents(_rewards(0.0, 0.1)) if i.primary.metric == "reward"]
    assert not [i for i in find_incidents(_rewards(0.0, 0.0, first_tail=37)) if i.primary.metric == "reward"]


def test_a_one_step_grad_norm_outlier_beside_a_loss_around_zero_is_a_blip() -> None:
    """A GRPO policy loss +-0.0005 (a signed objective) and one grad norm 340x its level, back at the next
    step: the 100x rule is a loss's, this is a one-step outlier."""
    rng = np.random.default_rng(7)
    steps = np.arange(1, 201, dtype=np.int64)
    loss = rng.uniform(-0.0005, 0.0008, steps.size)
    grad = 0.25 + rng.uniform(-0.05, 0.05, steps.size)
    grad[78], loss[78] = 85.0, 0.055
    view = RunView("grpo", {"loss": Series(steps, loss), "grad_norm": Series(steps, grad)}, {})
    assert _severities(view)[79] == "blip"


def test_a_validation_loss_that_blows_up_and_holds_in_the_main_is_a_divergence_from_its_onset() -> None:
    """A never-learning run (train loss flat at chance): val loss 2.4 with single jumps, then 5-20x from
    evaluation 35 to the end with a few single evaluations back near 3-5: never back, held in the main."""
    rng = np.random.default_rng(11)
    epochs = np.arange(1, 101, dtype=np.int64)
    val = 2.4 + rng.uniform(0.0, 0.3, epochs.size)
    val[[3, 8, 15]] = [4.9, 6.5, 6.4]
    val[34:] = rng.uniform(10.0, 40.0, epochs.size - 34)
    val[[38, 47, 52]] = [3.3, 5.0, 4.6]
    val[34] = 45.0
    train = 2.30 - 0.0004 * np.arange(epochs.size)
    view = RunView("val", {"loss": Series(epochs, train), "val_loss": Series(epochs, val)}, {})
    found = [i for i in find_incidents(view) if i.primary.metric == "val_loss" and i.severity != "blip"]
    assert [(i.start, i.severity) for i in found][:1] == [(35, "divergence")]
