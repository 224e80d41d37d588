"""The baselines' spike rules (stab_core.baselines) on generated series with known answers: each
fires just above its threshold and not just below it."""

from __future__ import annotations

import numpy as np
import pytest

from stab_core.baselines import (
    baseline_incidents,
    incidents_from_flags,
    llmc_flags,
    llmc_zscores,
    megatron_flags,
    olmo_flags,
)


def _alternating(n: int, mean: float = 10.0, std: float = 1.0) -> np.ndarray:
    """n values alternating mean -/+ std: population mean ``mean``, population std ``std``."""
    return mean + std * np.where(np.arange(n) % 2 == 0, -1.0, 1.0)


def _llmc_z(window: np.ndarray, value: float) -> float:
    """The z-score llm.c gives ``value`` after it replaced the oldest of ``window`` (128 values)."""
    kept = np.append(window[1:], value)
    return float((value - kept.mean()) / kept.std())


def _value_for_llmc_z(window: np.ndarray, z: float) -> float:
    """The value whose llm.c z-score is ``z`` (bisection: z grows with the value above the mean)."""
    lo, hi = float(window.mean()), float(window.mean() + 1e3)
    for _ in range(200):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if _llmc_z(window, mid) < z else (lo, mid)
    return (lo + hi) / 2


@pytest.mark.parametrize(("z", "fires"), [(7.01, True), (6.9, False), (9.0, True), (3.0, False)])
def test_llmc_rule_fires_above_z_7_and_not_at_6_9(z: float, fires: bool) -> None:
    window = _alternating(128)
    value = _value_for_llmc_z(window, z)
    series = np.append(window, value)
    scores = llmc_zscores(series)
    assert np.isnan(scores[:128]).all()  # the window is still filling
    assert scores[128] == pytest.approx(z, abs=1e-6)
    assert bool(llmc_flags(series)[128]) is fires


def test_llmc_takes_a_skipped_value_back_out_of_its_window() -> None:
    window = _alternating(128)
    spike = _value_for_llmc_z(window, 9.0)
    series = np.concatenate([window, [spike, spike, 10.0]])
    scores = llmc_zscores(series)
    # the second spike is scored against a window without the first one: the same z again
    assert scores[129] == pytest.approx(scores[128], rel=1e-9)
    assert abs(scores[130]) < 0.1


@pytest.mark.parametrize(("value", "fires"), [(16.01, True), (15.99, False)])
def test_olmo_rule_fires_above_mean_plus_6_sigma_of_the_128_before(value: float, fires: bool) -> None:
    series = np.append(_alternating(128), value)  # mean 10, population std 1: threshold 16
    flags = olmo_flags(series)
    assert bool(flags[128]) is fires and not flags[:128].any()
    assert not olmo_flags(np.append(np.full(128, 3.0), 99.0)).any()  # std 0: the monitor abstains


@pytest.mark.parametrize(("value", "fires"), [(20.0, True), (19.99, False), (-25.0, True)])
def test_megatron_rule_fires_at_10x_the_max_of_the_first_100(value: float, fires: bool) -> None:
    first = np.linspace(1.0, 2.0, 100)  # max |value| 2.0
    series = np.concatenate([first, [1.5, value]])
    flags = megatron_flags(series)
    assert bool(flags[101]) is fires and not flags[:101].any()


def test_flags_become_incidents_and_non_finite_samples_are_left_out() -> None:
    steps = np.arange(0, 50, dtype=np.int64) * 10
    flags = np.zeros(50, bool)
    flags[[5, 6, 9, 30]] = True
    found = incidents_from_flags(steps, flags, "loss")
    assert [(i["start"], i["end"]) for i in found] == [(50, 90), (300, 300)]
    values = np.append(_alternating(128), [np.nan, 30.0])
    series = {"loss": (np.arange(130, dtype=np.int64), values)}
    found = baseline_incidents(olmo_flags, ("loss", "grad_norm"), series)
    assert [(i["metric"], i["peak"]) for i in found] == [("loss", 129)]
