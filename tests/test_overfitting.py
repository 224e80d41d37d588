"""The overfitting detector (stab_core.overfitting) on runs of the shapes users bring: nanoGPT's
shakespeare-char overfitting, and healthy runs whose val loss only wobbles."""

from __future__ import annotations

import numpy as np
import pytest

from stab_core.overfitting import detect_overfitting, eval_noise


def shakespeare_char(seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """nanoGPT shakespeare-char's shape: eval every 250 steps to 5,000; val loss 4.2 -> 1.472 at 1,750,
    then up to 1.719 at 5,000; train loss logged every step, falling to 0.62."""
    rng = np.random.default_rng(seed)
    val_steps = np.arange(0, 5001, 250, dtype=np.int64)
    descent = 1.472 + (4.2 - 1.472) * np.exp(-val_steps / 350.0) - (4.2 - 1.472) * np.exp(-1750 / 350.0)
    climb = 1.472 + (1.719 - 1.472) * (val_steps - 1750) / (5000 - 1750)
    val = np.where(val_steps <= 1750, descent, climb) + rng.normal(0, 0.004, val_steps.size)
    val[val_steps == 1750] = 1.472
    val[val_steps == 5000] = 1.719
    train_steps = np.arange(0, 5001, dtype=np.int64)
    train = 0.62 + (4.2 - 0.62) * np.exp(-train_steps / 900.0) + rng.normal(0, 0.02, train_steps.size)
    return val_steps, val, train_steps, train


def test_shakespeare_char_overfitting_found_with_best_checkpoint() -> None:
    val_steps, val, train_steps, train = shakespeare_char()
    found = detect_overfitting(val_steps, val, train_steps, train)
    assert found is not None
    assert found.best_step == 1750
    assert found.best_val_loss == pytest.approx(1.472)
    assert found.span == (1750, 5000)
    assert found.evals_after_best == 13
    assert found.end_val_loss == pytest.approx(1.719 - 0.019, abs=0.02)  # median of the last 3 evals
    assert found.train_at_best is not None and found.train_at_end is not None
    assert found.train_at_end < found.train_at_best
    assert found.train_at_end == pytest.approx(0.62, abs=0.03)
    assert "best checkpoint is at step 1750" in found.message()
    assert found.to_json()["span"] == [1750, 5000]


def test_overfitting_without_a_train_loss_is_still_found() -> None:
    val_steps, val, _, _ = shakespeare_char()
    found = detect_overfitting(val_steps, val)
    assert found is not None and found.train_at_best is None and found.best_step == 1750


@pytest.mark.parametrize("seed", range(40))
def test_a_healthy_val_loss_wobbling_in_its_noise_never_fires(seed: int) -> None:
    rng = np.random.default_rng(seed)
    steps = np.arange(0, 10001, 250, dtype=np.int64)
    level = 1.5 + 2.5 * np.exp(-steps / 800.0)
    val = level + rng.normal(0, 0.01, steps.size)
    train_steps = np.arange(0, 10001, dtype=np.int64)
    train = 1.45 + 2.5 * np.exp(-train_steps / 800.0) + rng.normal(0, 0.03, train_steps.size)
    assert detect_overfitting(steps, val, train_steps, train) is None


def test_val_and_train_rising_together_is_not_overfitting() -> None:
    val_steps, val, train_steps, _ = shakespeare_char()
    rising_train = 1.0 + train_steps / 5000.0
    assert detect_overfitting(val_steps, val, train_steps, rising_train) is None


def test_a_divergence_with_a_last_eval_off_the_train_grid_is_not_overfitting() -> None:
    """A parameter-golf console: train and val loss both every 1,000 steps, one more eval at the
    wall-clock stop (11,578) with no train line after 11,000. Both rose after 9,000 (a late divergence).
    Before: "overfitting", the train loss over (11,000, 11,578] being empty and its check skipped."""
    steps = np.arange(1000, 12_000, 1000, dtype=np.int64)
    train = np.array([3.9, 3.1, 2.8, 2.6, 2.47, 2.4, 2.3, 2.26, 2.24, 2.87, 3.59])
    val_steps = np.append(steps, 11_578)
    val = np.array([3.9, 3.1, 2.8, 2.6, 2.5, 2.42, 2.36, 2.333, 2.342, 2.905, 3.592, 3.409])
    assert detect_overfitting(val_steps, val, steps, train) is None
    # the same evals with the train loss still falling to the last line: overfitting
    falling = np.array([3.9, 3.1, 2.8, 2.6, 2.47, 2.4, 2.3, 2.26, 2.2, 2.15, 2.1])
    found = detect_overfitting(val_steps, val, steps, falling)
    assert found is not None and found.best_step == 8000 and found.train_at_end == pytest.approx(2.1)


def test_one_high_eval_at_the_end_is_not_a_sustained_rise() -> None:
    steps = np.arange(0, 5001, 250, dtype=np.int64)
    val = 1.5 + 2.5 * np.exp(-steps / 500.0)
    val[-1] += 0.3
    assert detect_overfitting(steps, val) is None


def test_too_few_evals_say_nothing_and_non_finite_evals_are_left_out() -> None:
    assert detect_overfitting(np.array([0, 250, 500], np.int64), np.array([3.0, 2.0, 2.5])) is None
    val_steps, val, train_steps, train = shakespeare_char()
    val[3] = np.nan
    found = detect_overfitting(val_steps, val, train_steps, train)
    assert found is not None and found.best_step == 1750


def test_eval_noise_ignores_a_steady_trend() -> None:
    rng = np.random.default_rng(1)
    values = np.linspace(3.0, 1.0, 400) + rng.normal(0, 0.05, 400)
    assert eval_noise(values) == pytest.approx(0.05, rel=0.2)
    assert eval_noise(np.linspace(3.0, 1.0, 50)) == pytest.approx(0.0, abs=1e-12)


def _chaotic_train_run(seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """A prompt-tuning run at too high an lr (PaddleNLP FewCLUE's shape): evals every 100 steps, the val
    loss best 12.95 at 600 then 15-19; a train loss logged every 10 steps that wanders 10-23 (sigma ~3)
    around a drift of 16 -> 13: it never trains."""
    rng = np.random.default_rng(seed)
    val_steps = np.arange(100, 1601, 100, dtype=np.int64)
    val = np.array([16.0, 15.1, 14.2, 13.8, 13.3, 12.95, 15.2, 16.9, 15.8, 17.4, 16.6, 18.1, 17.2, 18.7, 18.3, 19.0])
    train_steps = np.arange(10, 1601, 10, dtype=np.int64)
    train = 16.2 - 3.1 * train_steps / 1600 + rng.normal(0, 3.0, train_steps.size)
    return val_steps, val, train_steps, train


def test_a_val_rise_while_a_chaotic_train_loss_only_wanders_is_not_overfitting() -> None:
    """See docs/diagnosis.md, "Findings": the train loss's fall must exceed ``TRAIN_FALL_NOISE_MULTIPLE`` of its own
    noise over the span, as the val rise must exceed the val noise. Before: "overfitting ... while the train
    loss fell 16.2 -> 13.1" on runs whose train loss wandered 10-23."""
    said = 0
    for seed in range(20):
        val_steps, val, train_steps, train = _chaotic_train_run(seed)
        said += detect_overfitting(val_steps, val, train_steps, train) is not None
    assert said == 0
    # the same val curve with a train loss that does fall (16 -> 4, noise 0.3) is overfitting
    val_steps, val, train_steps, _ = _chaotic_train_run(0)
    train = 16.0 - 12.0 * train_steps / 1600 + np.random.default_rng(0).normal(0, 0.3, train_steps.size)
    assert detect_overfitting(val_steps, val, train_steps, train) is not None
