"""Incidents ranked by harm, the sensitivity setting, recovery against the trend, early and short runs
(issue #32). The series are shaped as the logs the issue names, with its numbers written in."""

from __future__ import annotations

import numpy as np
import pytest

from ingest.cli import SENSITIVITY_CHOICES
from stab_core.alerts import spike_alerts
from stab_core.analysis import AnalysisParams, analyze_run, find_incidents, params_for, run_params
from stab_core.incidents import Incident
from stab_core.runview import RunView, Series
from stab_core.severity import (
    SENSITIVITIES,
    back_on_trend,
    blips_line,
    classify,
    loss_cost,
    sensitivity,
    severity_words,
    trend_before,
)


def _view(steps: np.ndarray, loss: np.ndarray | None, grad: np.ndarray | None, **meta: object) -> RunView:
    series = {}
    if loss is not None:
        series["loss"] = Series(steps, loss)
    if grad is not None:
        series["grad_norm"] = Series(steps, grad)
    return RunView(name="shape", series=series, meta=dict(meta))


def _covering(incidents: list[Incident], step: int) -> Incident:
    hits = [i for i in incidents if i.start <= step <= i.until]
    assert hits, f"no incident covers step {step}: {[(i.start, i.until) for i in incidents]}"
    return hits[0]


def lucie() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Megatron-DeepSpeed Lucie-7B's first 130 iterations: a loss falling from ~10.7 to ~6.3, warm-up grad
    norms large and erratic over the first 40 iterations, then near 5.7; grad norm 5.7 -> 42.2 at 59 with
    the loss 6.77 -> 7.08, 29.9 at 66; at 99 the loss climbs 6.15 -> 6.47 -> 6.71 -> 6.875 at 101 and is
    back near 6.40 only at 104 (the grad norm back at 101)."""
    rng = np.random.default_rng(5)
    steps = np.arange(1, 131)
    loss = 6.25 + 4.5 * np.exp(-(steps - 1) / 18.0) + 0.002 * np.clip(100 - steps, 0, None)
    loss += rng.normal(0, 0.04, steps.size)
    grad = np.where(steps <= 40, rng.lognormal(np.log(18.0), 0.6, steps.size), 5.6 + rng.normal(0, 0.3, steps.size))
    grad[57], grad[58], grad[65] = 5.7, 42.2, 29.9  # iterations 58, 59, 66
    loss[57], loss[58] = 6.77, 7.08
    grad[98], grad[99] = 14.0, 9.0  # iterations 99, 100
    for step, value in zip(range(98, 105), (6.15, 6.47, 6.71, 6.875, 6.80, 6.66, 6.40), strict=True):
        loss[step - 1] = value
    return steps, loss, grad


# ------------------------------------------------------------------------------ recovery against the trend


def test_lucie_99_recovers_at_104_when_the_loss_is_back_on_its_trend_not_at_101() -> None:
    steps, loss, grad = lucie()
    incident = _covering(find_incidents(_view(steps, loss, grad)), 99)
    assert incident.start == 99
    assert incident.primary.recovery_step == 101  # the grad norm is back at 101 ...
    assert incident.loss_recovered_at == 104  # ... the loss only at 104: 6.875, 6.80, 6.66 are above its band
    assert incident.until == 104
    assert incident.severity == "spike"  # five samples above the trend: steps were lost
    item = {"severity": incident.severity, "loss_recovered_at": incident.loss_recovered_at, "certainty": "high"}
    words = severity_words(item)
    assert words == (
        "Spike: not absorbed within a few logged steps; "
        "the loss was back within the noise band of its trend at step 104."
    )


def test_the_trend_is_robust_and_extrapolated_no_further_than_it_was_fitted() -> None:
    steps = np.arange(100, 140)
    values = 5.0 - 0.01 * (steps - 100) + np.where(steps % 7 == 0, 0.5, 0.0)  # a line with outliers
    band = trend_before(steps, values, 32)
    assert band is not None and band.samples == 32 and band.certainty == "high"
    assert band.slope == pytest.approx(-0.01, abs=1e-9)  # Theil-Sen: the outliers do not tilt it
    assert band.level == pytest.approx(5.0 - 0.01 * 30, abs=1e-9)  # the median of the last 3: the level reached
    far = band.trend(np.array([131 + band.horizon, 131 + 10 * band.horizon]))
    assert far[0] == pytest.approx(far[1])  # flat beyond the fitted span
    assert back_on_trend(steps, values, 32, band) == 32  # the sample at 132 is on the line
    few = trend_before(steps, values, 4)
    assert few is not None and few.slope == 0.0 and few.certainty == "low"  # 4 samples: a flat median
    one = trend_before(steps, values, 1)  # one sample: a level, no noise to take
    assert one is not None and one.level == values[0] and one.upper(steps[1:2])[0] == pytest.approx(values[0])
    assert trend_before(steps, values, 0) is None


def test_loss_cost_counts_the_samples_above_the_band() -> None:
    steps = np.arange(0, 60)
    loss = np.full(60, 3.0) + 0.01 * (steps % 3)
    loss[40:44] = [3.6, 3.5, 3.4, 3.3]
    cost = loss_cost(steps, loss, 40)
    assert cost is not None and cost.recovered_at == 44 and cost.samples_above == 4


def test_a_loss_rising_before_an_incident_is_not_a_trend_to_come_back_to() -> None:
    """The lead-in of a run going bad (12 -> 13 over 16 samples) extrapolated would call 14 "on trend"."""
    steps = np.arange(0, 40)
    loss = 12.0 + steps / 16.0
    loss[16:30] = 15.0
    loss[30:] = [14.0, 13.5, 13.0, 12.9, 13.0, 12.95, 13.0, 12.9, 13.0, 12.95]
    band = trend_before(steps, loss, 16)
    assert band is not None and band.slope == 0.0
    cost = loss_cost(steps, loss, 16)
    # 14.0 at 30 is inside the extrapolated rise (13.9 + noise); the band is the median before the rise
    # (12.47) and the sample-to-sample noise (floored at 1%): 13.5 at 31 is still above the whole lead-in,
    # 13.0 at 32 is back
    assert cost is not None and cost.recovered_at == 32


def test_the_loss_is_not_back_on_trend_before_the_incidents_peak() -> None:
    """A loss that dips into its band on the way up to its peak (15 -> 3.0 -> 16 at the peak) has not
    recovered: recovery is looked for from the peak on."""
    steps = np.arange(0, 60)
    loss = np.full(60, 3.0) + 0.01 * (steps % 3)
    loss[40:50] = [3.6, 3.0, 3.8, 4.0, 4.5, 3.9, 3.5, 3.3, 3.0, 3.01]
    assert loss_cost(steps, loss, 40).recovered_at == 41  # type: ignore[union-attr]
    cost = loss_cost(steps, loss, 40, peak=44)
    assert cost is not None and cost.recovered_at == 48 and cost.samples_above == 8


# ------------------------------------------------------------------------------ severity


def test_classify_ranks_by_what_was_lost() -> None:
    assert classify(diverged=True, loss_samples=1, member_samples=1, blip_samples=3) == "divergence"
    assert classify(diverged=False, loss_samples=1, member_samples=1, blip_samples=3) == "blip"
    assert classify(diverged=False, loss_samples=None, member_samples=2, blip_samples=3) == "blip"
    assert classify(diverged=False, loss_samples=4, member_samples=1, blip_samples=3) == "spike"
    assert classify(diverged=False, loss_samples=1, member_samples=9, blip_samples=3) == "spike"


def test_one_sample_back_at_the_next_is_a_blip_however_sparsely_logged() -> None:
    """A loss logged every 100 steps, 1.6x for one sample and back at the next (parameter-golf JEPA):
    100 steps between the samples, yet the log shows one batch lost, not more. Before: a spike
    (steps_lost 100 > BLIP_MAX_STEPS). Two samples out on the same spacing, or one 4.5x its level,
    stay a spike."""

    def grade(loss_samples: int, member_samples: int, steps_lost: int, settled: bool = True, ratio: float = 1.6) -> str:
        return classify(
            diverged=False,
            loss_samples=loss_samples,
            member_samples=member_samples,
            blip_samples=3,
            steps_lost=steps_lost,
            settled=settled,
            peak_ratio=ratio,
        )

    assert grade(1, 1, 100) == "blip"
    assert grade(2, 1, 200) == "spike" and grade(1, 2, 200) == "spike"
    # a level from a handful of samples (six evals 500 steps apart) cannot vouch for it: a spike
    assert grade(1, 1, 500, settled=False) == "spike"
    # a near-zero loss jumping 4.5x for one sample of a run logged every 10 steps (minGPT's adder): a spike
    assert grade(1, 1, 10, ratio=4.5) == "spike"


def modded_nanogpt(seed: int = 11) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[int]]:
    """A healthy ~20k-step modded-nanogpt record run: the loss falls to ~3.28, and 113 one-batch
    outliers (grad norm 2.5-6x for one step, a third with the loss 1.12x) are absorbed at once."""
    rng = np.random.default_rng(seed)
    steps = np.arange(0, 20_000)
    loss = 3.28 + 1.2 * np.exp(-steps / 2500.0) + rng.normal(0, 0.012, steps.size)
    grad = 0.27 + 0.3 * np.exp(-steps / 1500.0) + rng.normal(0, 0.01, steps.size)
    outliers = sorted(rng.choice(np.arange(500, 19_900, 5), size=113, replace=False).tolist())
    for k, step in enumerate(outliers):
        grad[step] *= rng.uniform(2.5, 6.0)
        if k % 3 == 0:
            loss[step] *= 1.12
    return steps, loss, grad, outliers


def test_a_healthy_run_with_one_batch_outliers_shows_no_spike_by_default() -> None:
    steps, loss, grad, outliers = modded_nanogpt()
    incidents = find_incidents(_view(steps, loss, grad))
    assert len(incidents) >= 100  # each outlier is found and counted ...
    assert {i.start for i in incidents} <= set(outliers)  # ... nothing else is ...
    assert [i for i in incidents if i.severity != "blip"] == []  # ... and none is shown by default
    line = blips_line([{"severity": i.severity, "start": i.start, "until": i.until} for i in incidents])
    assert line is not None and line.startswith(f"+ {len(incidents)} blips absorbed within ")


def test_a_divergence_has_no_return() -> None:
    steps = np.arange(0, 200)
    loss = 3.0 + 0.01 * np.sin(steps)
    loss[150:] = np.linspace(4.0, 9.0, 50)
    incident = _covering(find_incidents(_view(steps, loss, None)), 150)
    assert incident.severity == "divergence" and incident.loss_recovered_at is None


# ------------------------------------------------------------------------------ early and short runs


def test_lucie_grad_norm_jumps_at_59_and_66_are_incidents() -> None:
    steps, loss, grad = lucie()
    incidents = find_incidents(_view(steps, loss, grad))
    at_59, at_66 = _covering(incidents, 59), _covering(incidents, 66)
    assert at_59.start == 59 and at_59.primary.metric == "grad_norm" and at_59.primary.peak_value == 42.2
    assert at_66.start == 66 and at_66.primary.peak_value == 29.9
    assert at_59 is not at_66


def pdsh() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One of the pdsh 20-step runs: grad norm falling to ~20, 56.6 at step 12, the loss falling."""
    steps = np.arange(1, 21)
    before = [31.0, 27.5, 24.8, 23.1, 22.0, 21.2, 20.8, 20.5, 20.3, 20.1, 20.0]
    grad = np.array([*before, 56.6, 24.0, 21.0, 20.4, 20.0, 19.8, 19.7, 19.5, 19.4])
    return steps, np.linspace(10.9, 9.2, 20), grad


def test_a_20_step_run_grad_norm_jump_at_12_is_an_incident_stated_as_less_certain() -> None:
    steps, loss, grad = pdsh()
    incidents = find_incidents(_view(steps, loss, grad))
    assert [(i.start, i.primary.metric, i.certainty) for i in incidents] == [(12, "grad_norm", "low")]
    assert incidents[0].primary.peak_value == 56.6


def test_a_20_step_run_as_analysed_says_certainty_in_its_json() -> None:
    steps, loss, grad = pdsh()
    (item,) = analyze_run(_view(steps, loss, grad)).spike_dicts()
    assert item["certainty"] == "low" and item["start"] == 12
    assert item["severity"] in {"blip", "spike", "divergence"}


def test_nanogpt_single_large_outlier_in_a_long_run_logged_every_10_steps_is_found() -> None:
    rng = np.random.default_rng(3)
    steps = np.arange(440_000, 450_000, 10)
    loss = 2.92 + rng.normal(0, 0.04, steps.size)  # ~2.85-2.95 around it
    loss[np.searchsorted(steps, 445_390)] = 3.495  # 1.197x the level, z > 12
    incidents = find_incidents(_view(steps, loss, None))
    assert [(i.start, i.primary.peak_value) for i in incidents] == [(445_390, 3.495)]


# ------------------------------------------------------------------------------ sensitivity


def test_sensitivity_moves_the_thresholds() -> None:
    rng = np.random.default_rng(2)
    steps = np.arange(0, 3000)
    loss = 3.0 + rng.normal(0, 0.03, steps.size)
    heights = [1.17, 1.25, 1.35, 1.6]  # over the level: below default, just above it, above low's, large
    for k, h in enumerate(heights):
        loss[500 + 600 * k] = 3.0 * h
    found = {
        name: [i.start for i in find_incidents(_view(steps, loss, None), params_for(name))] for name in SENSITIVITIES
    }
    assert found["high"] == [500, 1100, 1700, 2300]
    assert found["default"] == [1100, 1700, 2300]
    assert found["low"] == [1700, 2300]


def test_sensitivity_names_and_errors() -> None:
    assert tuple(SENSITIVITIES) == SENSITIVITY_CHOICES
    assert sensitivity(None).name == "default" and params_for(None) == AnalysisParams()
    with pytest.raises(ValueError, match="sensitivity 'extreme' is not one of low, default, high"):
        params_for("extreme")
    assert run_params(_view(np.arange(3), None, None, sensitivity="high")).sensitivity == "high"
    assert run_params(_view(np.arange(3), None, None, sensitivity="unknown")) == AnalysisParams()


def test_the_stored_sensitivity_reaches_the_analysis() -> None:
    steps, loss, grad, _ = modded_nanogpt()
    default = analyze_run(_view(steps, loss, grad)).spikes
    low = analyze_run(_view(steps, loss, grad, sensitivity="low")).spikes
    assert 0 < len(low) < len(default)


def test_a_blip_raises_no_new_spike_alert_a_spike_does() -> None:
    blip = {"start": 90, "peak": 90, "metric": "loss", "ratio": 1.3, "recovered": True, "severity": "blip"}
    spike = {**blip, "severity": "spike"}
    assert spike_alerts("r", [blip], 100, live=True) == []
    assert [a.kind for a in spike_alerts("r", [spike], 100, live=True)] == ["new_spike"]
