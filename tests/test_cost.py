"""Known answers for the rollback-cost and checkpoint-interval formulas (issue 7)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from stab_core.cost import (
    DEEPSEEK_V3,
    LLAMA3_405B_FAILURES,
    GpuCost,
    checkpoint_overhead_fraction,
    daly_interval,
    expected_waste_per_failure,
    gpu_hours_for_steps,
    interval_advice,
    price_spikes,
    rollback_cost,
    rollback_cost_from_steps,
    rollback_steps,
    run_spike_cost,
    steps_cost,
    young_interval,
)


def test_deepseek_v3_rollbacks_match_the_issue() -> None:
    two = rollback_cost(DEEPSEEK_V3.total_gpu_hours, 0.02, DEEPSEEK_V3.usd_per_gpu_hour)
    five = rollback_cost(DEEPSEEK_V3.total_gpu_hours, 0.05, DEEPSEEK_V3.usd_per_gpu_hour)
    assert two.gpu_hours == pytest.approx(53_280.0)
    assert two.usd == pytest.approx(106_560.0)
    assert five.gpu_hours == pytest.approx(133_200.0)
    assert five.usd == pytest.approx(266_400.0)
    assert DEEPSEEK_V3.total_usd == pytest.approx(5_328_000.0)
    assert DEEPSEEK_V3.wall_days == pytest.approx(2.664e6 / 2048 / 24)


def test_three_to_five_spikes_cost_about_320k_to_1_33m() -> None:
    budget = DEEPSEEK_V3.total_gpu_hours
    low = run_spike_cost(rollback_cost(budget, 0.02, 2.0), 3, budget)
    high = run_spike_cost(rollback_cost(budget, 0.05, 2.0), 5, budget)
    assert low.per_run.usd == pytest.approx(319_680.0)
    assert round(low.per_run.usd, -4) == 320_000
    assert high.per_run.usd == pytest.approx(1_332_000.0)
    assert low.budget_share == pytest.approx(0.06)
    assert high.budget_share == pytest.approx(0.25)
    assert high.per_rollback.gpu_hours == pytest.approx(133_200.0)


def test_rollback_cost_rejects_fractions_outside_unit_interval() -> None:
    with pytest.raises(ValueError, match="fraction_lost"):
        rollback_cost(1000.0, 1.5, 2.0)
    with pytest.raises(ValueError, match="total_gpu_hours"):
        rollback_cost(-1.0, 0.1, 2.0)


@pytest.mark.parametrize(
    ("c", "m", "young", "daly"),
    [(5.0, 180.0, 42.43, 39.16), (5.0, 300.0, 54.77, None), (5.0, 1440.0, 120.0, 116.69)],
)
def test_young_and_daly_known_answers(c: float, m: float, young: float, daly: float | None) -> None:
    assert young_interval(c, m) == pytest.approx(young, abs=0.005)
    if daly is not None:
        assert daly_interval(c, m) == pytest.approx(daly, abs=0.005)


def test_daly_falls_back_to_mtbf_when_checkpoints_cost_more_than_two_mtbf() -> None:
    assert daly_interval(400.0, 180.0) == 180.0
    assert daly_interval(360.0, 180.0) == 180.0


def test_intervals_are_unit_free() -> None:
    # 5 min and 180 min in hours give the minute answers divided by 60.
    assert young_interval(5 / 60, 3.0) * 60 == pytest.approx(young_interval(5.0, 180.0))
    assert daly_interval(5 / 60, 3.0) * 60 == pytest.approx(daly_interval(5.0, 180.0))


def test_llama3_405b_mtbf_preset() -> None:
    assert LLAMA3_405B_FAILURES.mtbf_hours == pytest.approx(3.09, abs=0.005)
    # Half the GPUs, twice the MTBF (failures scale with the fleet).
    assert LLAMA3_405B_FAILURES.mtbf_hours_at(8192) == pytest.approx(2 * 54 * 24 / 419)


def test_expected_waste_is_half_an_interval_plus_restart() -> None:
    assert expected_waste_per_failure(60.0, 10.0) == 40.0
    # Moving from a 2 h interval to Young's saves (2 - tau)/2 hours per failure.
    tau = young_interval(5 / 60, LLAMA3_405B_FAILURES.mtbf_hours)
    saved = expected_waste_per_failure(2.0, 0.25) - expected_waste_per_failure(tau, 0.25)
    assert saved == pytest.approx((2.0 - tau) / 2)


def test_daly_interval_minimises_dalys_overhead_model() -> None:
    taus = np.linspace(10.0, 100.0, 9001)
    overhead = np.array([checkpoint_overhead_fraction(float(t), 5.0, 180.0) for t in taus])
    best = float(taus[int(np.argmin(overhead))])
    assert best == pytest.approx(daly_interval(5.0, 180.0), abs=0.02)
    # First order, the overhead at Young's interval is sqrt(2C/M) + C/M; the exact model adds
    # second-order terms of size (tau/M)^2, so it lies a few percent above.
    first_order = math.sqrt(2 * 5 / 180) + 5 / 180
    at_young = checkpoint_overhead_fraction(young_interval(5.0, 180.0), 5.0, 180.0)
    assert first_order < at_young < 1.1 * first_order
    assert checkpoint_overhead_fraction(daly_interval(5.0, 180.0), 5.0, 180.0) < at_young


def test_interval_advice_prices_a_too_long_interval() -> None:
    advice = interval_advice(
        current_interval_hours=8.0,
        checkpoint_write_hours=0.1,
        mtbf_hours=3.09,
        restart_hours=0.25,
        run_hours=1000.0,
        gpus=1000,
        usd_per_gpu_hour=2.0,
    )
    assert advice.optimum_hours == pytest.approx(daly_interval(0.1, 3.09))
    assert advice.waste_per_failure_current_hours == pytest.approx(4.25)
    assert advice.overhead_fraction_current > advice.overhead_fraction_optimum
    expected_gpu_hours = (advice.overhead_fraction_current - advice.overhead_fraction_optimum) * 1000 * 1000
    assert advice.saving.gpu_hours == pytest.approx(expected_gpu_hours)
    assert advice.saving.usd == pytest.approx(2 * expected_gpu_hours)


def test_steps_to_gpu_hours_to_usd() -> None:
    # 3600 steps of 2 s on 1024 GPUs = 2 h x 1024 GPUs.
    assert gpu_hours_for_steps(3600, 2.0, 1024) == pytest.approx(2048.0)
    assert steps_cost(3600, 2.0, 1024, 2.5) == GpuCost(2048.0, 5120.0)


def test_rollback_cost_from_steps_adds_idle_restart() -> None:
    cost = rollback_cost_from_steps(
        steps_since_checkpoint=300,
        detection_delay_steps=60,
        restart_overhead_s=1800,
        step_time_s=10.0,
        gpus=2048,
        usd_per_gpu_hour=2.0,
    )
    # 360 steps x 10 s = 1 h, plus 0.5 h restart, on 2048 GPUs.
    assert cost.gpu_hours == pytest.approx(1.5 * 2048)
    assert cost.usd == pytest.approx(3 * 2048)


def test_rollback_steps_restore_before_the_spike() -> None:
    assert rollback_steps(4250, 4320, [2000, 4000, 6000]) == 320
    assert rollback_steps(4000, 4010, [2000, 4000]) == 10
    with pytest.raises(ValueError, match="no checkpoint"):
        rollback_steps(1500, 1600, [2000])


def test_price_spikes_charges_steps_lost_or_a_rollback() -> None:
    bill = price_spikes(
        [40, 120, 10],
        [False, True, False],
        step_time_s=12.0,
        gpus=6144,
        usd_per_gpu_hour=2.0,
        rollback_steps_diverged=[0, 320, 0],
        restart_overhead_s=1200.0,
    )
    per_step_gpu_hours = 12.0 * 6144 / 3600
    assert bill.steps_charged == (40.0, 320.0, 10.0)
    assert bill.per_spike[0].gpu_hours == pytest.approx(40 * per_step_gpu_hours)
    assert bill.per_spike[1].gpu_hours == pytest.approx(320 * per_step_gpu_hours + 1200 * 6144 / 3600)
    assert bill.total.gpu_hours == pytest.approx(sum(c.gpu_hours for c in bill.per_spike))
    assert bill.total.usd == pytest.approx(2 * bill.total.gpu_hours)
    assert bill.diverged_count == 1


def test_price_spikes_rejects_misaligned_inputs() -> None:
    with pytest.raises(ValueError, match="align"):
        price_spikes([1, 2], [True], step_time_s=1.0, gpus=1, usd_per_gpu_hour=1.0)
