"""The early-warning measure (stab_core.early_warning) on generated series with a known lead."""

from __future__ import annotations

import math

import numpy as np
import pytest

from stab_core.bootstrap import bootstrap_ratio
from stab_core.early_warning import (
    alarm_steps,
    fall_before,
    rising_zscore,
    score_predictor,
    score_run,
    snr_fall_score,
)


def _snr_with_fall(n: int = 1000, fall_at: int = 500, fall_to: float = 2.0, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    snr = 10.0 * np.exp(rng.normal(0.0, 0.05, n))
    snr[fall_at : fall_at + 30] = fall_to
    return snr


def test_an_snr_fall_twenty_steps_before_a_spike_warns_with_a_lead_of_twenty():
    steps = np.arange(1000)
    score = snr_fall_score(_snr_with_fall(), window=64)
    alarms = alarm_steps(steps, score, threshold=3.0)
    assert alarms.tolist() == [500]
    run = score_run(alarms, [(520, 530)], horizon=50)
    assert (run.alarms, run.warning_alarms, run.spikes, run.warned, run.leads) == (1, 1, 1, 1, (20,))
    # a horizon shorter than the lead misses it, and the alarm becomes a false one
    late = score_run(alarms, [(520, 530)], horizon=10)
    assert (late.warned, late.false_alarms) == (0, 1)


def test_the_score_is_causal_a_later_fall_does_not_change_earlier_scores():
    base = _snr_with_fall(fall_at=900)
    changed = base.copy()
    changed[950:] = 0.01
    a, b = snr_fall_score(base), snr_fall_score(changed)
    np.testing.assert_array_equal(a[:950], b[:950])


def test_alarms_mark_the_first_sample_of_each_excursion_and_nan_never_alarms():
    steps = np.arange(10) * 5
    score = np.array([np.nan, 1, 4, 5, 1, 4, np.nan, 4, 1, 1])
    assert alarm_steps(steps, score, 3.0).tolist() == [10, 25, 35]


def test_alarms_inside_a_spike_are_neither_hits_nor_false_alarms():
    run = score_run([100, 205, 300], [(200, 210)], horizon=50)
    # 205 is inside the spike; 100 and 300 are false alarms; the spike was not warned
    assert (run.alarms, run.warning_alarms, run.false_alarms, run.warned) == (2, 0, 2, 0)


def test_precision_and_recall_sum_over_runs_with_intervals_from_runs():
    runs = [
        score_run([90], [(100, 105)], horizon=20),  # warned, lead 10
        score_run([50, 300], [(310, 320)], horizon=20),  # one false alarm, warned with lead 10
        score_run([], [(400, 402)], horizon=20),  # missed
        score_run([70], [], horizon=20),  # healthy run, one false alarm
    ]
    result = score_predictor(runs, resamples=2000)
    assert result.precision.estimate == pytest.approx(2 / 4)
    assert result.recall.estimate == pytest.approx(2 / 3)
    assert (result.alarms, result.false_alarms, result.spikes, result.warned) == (4, 2, 3, 2)
    assert result.median_lead == 10
    assert result.precision.low <= 0.5 <= result.precision.high
    assert 0.0 <= result.recall.low < result.recall.high <= 1.0


def test_bootstrap_ratio_of_one_cluster_has_no_width_and_no_data_is_nan():
    one = bootstrap_ratio([3], [4], resamples=100)
    assert (one.estimate, one.low, one.high, one.n) == (0.75, 0.75, 0.75, 4)
    assert math.isnan(bootstrap_ratio([], [], resamples=10).estimate)
    with pytest.raises(ValueError):
        bootstrap_ratio([1, 2], [3], resamples=10)


def test_rising_zscore_flags_a_jump_against_the_trailing_median():
    rng = np.random.default_rng(1)
    x = 1.0 + rng.normal(0, 0.01, 300)
    x[250] = 2.0
    z = rising_zscore(x, window=64)
    assert z[250] > 20
    assert np.nanmax(np.abs(z[:250])) < 6


def test_fall_before_reports_how_far_and_how_early():
    steps = np.arange(1000)
    score = snr_fall_score(_snr_with_fall(), window=64)
    fb = fall_before(steps, score, start=520, lookback=40, threshold=3.0)
    assert fb.crossed == 500 and fb.lead == 20
    assert fb.score == pytest.approx(5.0, rel=0.1)
    none = fall_before(steps, score, start=300, lookback=40, threshold=3.0)
    assert none.crossed is None and none.score < 1.5
    with pytest.raises(ValueError):
        fall_before(steps, score, start=300, lookback=0, threshold=3.0)


def _row(source: str, horizon: int, precision: float, recall: float, lead: float | None = 30.0) -> dict:
    interval = lambda v: {"estimate": v, "low": v, "high": v, "n": 10}  # noqa: E731
    name = "SNR fall >= 2" if source == "snr" else f"{source} z >= 3"
    return {
        "horizon": horizon,
        "predictor": name,
        "source": source,
        "threshold": 2.0,
        "runs": 4,
        "spikes": 10,
        "warned": round(recall * 10),
        "alarms": 20,
        "false_alarms": 20 - round(precision * 20),
        "precision": interval(precision),
        "recall": interval(recall),
        "median_lead": lead,
    }


def test_the_snr_rule_is_said_to_warn_only_when_it_beats_every_baseline_at_its_horizon():
    from ingest.training.lead_time import lead_verdict, snr_beats_baselines

    losing = [_row("snr", 50, 0.2, 0.5), _row("grad_norm", 50, 0.3, 0.4), _row("loss", 50, 0.1, 0.2)]
    assert snr_beats_baselines(losing) == []
    assert "not supported by this measurement" in lead_verdict(losing)
    winning = [_row("snr", 50, 0.4, 0.6), *losing[1:], _row("grad_norm", 10, 0.9, 0.9)]
    assert snr_beats_baselines(winning) == [winning[0]]
    assert lead_verdict(winning).startswith("On these runs (10 spikes), 'SNR fall >= 2' warned of 6 spikes within 50")
    too_late = [_row("snr", 50, 0.4, 0.6, lead=5.0), *losing[1:]]
    assert snr_beats_baselines(too_late) == []
    assert lead_verdict([]).startswith("Not measured")
