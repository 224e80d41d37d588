"""Issue #32 (docs/diagnosis.md, "Early and short runs"): batch 12's blow-up shapes on small synthetic runs.

- an early blow-up right after a descent from the initial loss: 10.48, 10.48, 7.28 (the model reached 7.28)
  then 9.78, 8.9-9.6 for dozens of steps: judged against the foot of the fall, not the median of three;
- a loss two orders of magnitude over its level for one sample is no blip, however soon it is back."""

from __future__ import annotations

from typing import Any

import numpy as np

from stab_core.analysis import analyze_run
from stab_core.early_rises import early_levels, held_levels
from stab_core.runview import RunView, Series
from stab_core.severity import BLOWUP_RATIO, classify, trend_before


def _shown(view: RunView) -> list[dict[str, Any]]:
    return [i for i in analyze_run(view).spike_dicts() if i["severity"] != "blip"]


def _knocked_back(seed: int = 0) -> RunView:
    """A loss logged every step that falls from its initial level in two steps (10.48, 10.48, 7.28), is
    knocked back to 9.8 at step 4, stays 8.3-10.4 through step 30, then falls smoothly."""
    rng = np.random.default_rng(seed)
    head = [10.481, 10.481, 7.281, 9.779, 8.87, 9.57, *rng.uniform(8.3, 9.3, 6), 10.365]
    loss = np.concatenate([head, np.linspace(9.0, 7.5, 19), np.linspace(7.27, 5.0, 70)])
    return RunView("knock", {"loss": Series(np.arange(1, loss.size + 1), loss)})


def test_the_foot_of_a_fall_from_the_first_sample_is_a_level() -> None:
    values = np.array([10.481, 10.4811, 7.281, 9.779, 8.87])
    assert held_levels(values)[3] > 10.0
    assert early_levels(values)[3] == 7.281
    # a lucky batch amid a level is not the foot of a fall: the median of three still outvotes it
    amid = np.array([1.2, 1.3, 0.884, 1.25, 1.18])
    assert np.array_equal(early_levels(amid), held_levels(amid), equal_nan=True)


def test_a_loss_knocked_back_after_its_first_fall_is_an_early_blow_up() -> None:
    (item,) = [i for i in _shown(_knocked_back()) if i["metric"] == "loss"]
    assert item["kind"] == "early_instability"
    assert item["start"] == 4
    assert item["severity"] == "spike"


def test_a_steady_fall_with_ordinary_noise_is_no_early_blow_up() -> None:
    rng = np.random.default_rng(3)
    loss = 10.5 * np.exp(-np.arange(100) / 20.0) + 2.0 + 0.05 * rng.standard_normal(100)
    assert _shown(RunView("fall", {"loss": Series(np.arange(1, 101), loss)})) == []


def test_a_loss_two_orders_over_its_level_is_no_blip() -> None:
    common: dict[str, Any] = {"diverged": False, "loss_samples": 1, "member_samples": 1, "blip_samples": 3}
    assert classify(**common, steps_lost=5, peak_ratio=BLOWUP_RATIO * 400) == "spike"
    assert classify(**common, steps_lost=5, peak_ratio=3.0) == "blip"
    # a grad-norm outlier the loss never felt stays a blip however tall
    assert classify(**common, steps_lost=5, peak_ratio=BLOWUP_RATIO * 400, loss_left_band=False) == "blip"


def test_a_twenty_sample_run_whose_loss_blows_up_40000x_for_one_log_shows_it() -> None:
    steps = np.arange(5, 105, 5)
    loss = np.array(
        [955004.7, 3.878e10, 2.3e5, 1e5, 5e4, 6e5, 198, 3e3, 1e4, 2e3, 500, 300, 46, 28, 40, 30, 35, 28, 45, 40]
    )
    shown = [i for i in _shown(RunView("grpo", {"loss": Series(steps, loss)})) if i["metric"] == "loss"]
    assert [i["start"] for i in shown] == [10]


def test_a_fall_of_three_samples_has_reached_its_foot() -> None:
    """The level a loss comes back to after an early blow-up: the foot of the fall (7.28), not the median
    of the three samples (10.48), so "back at its level" is not said at the first sample under 10.48."""
    band = trend_before(np.arange(1, 5), np.array([10.481, 10.4811, 7.281, 9.779]), 3)
    assert band is not None and band.level == 7.281
    flat = trend_before(np.arange(1, 5), np.array([7.3, 10.48, 10.2, 9.779]), 3)
    assert flat is not None and flat.level == 10.2
    (item,) = [i for i in _shown(_knocked_back()) if i["metric"] == "loss"]
    assert item["recovery_step"] is None or item["recovery_step"] > 20


def test_a_huge_ratio_is_said_in_a_form_a_reader_can_read() -> None:
    """A PaiNN loss went 0.0191 -> 9.7e11: "50643482308069.56x" was said; two decimals of 10^13 say nothing."""
    from stab_core.spikes import times

    assert times(1.2749) == "1.27x"
    assert times(9999.0) == "9999.00x"
    assert times(50643482308069.56) == "5.1e+13x"
