"""Incidents (issue #20): logging gaps are not faults, early rises and climbs are found where the spike
detector is blind, and a loss spike with its grad-norm twin is one incident. Known answers worked out
by hand from the small series below."""

from __future__ import annotations

import numpy as np
import pytest

from stab_core.analysis import analyze_run, find_incidents
from stab_core.incidents import (
    detect_climbs,
    early_rises,
    group_incidents,
    is_training_math,
    logging_gaps,
    window_ratio,
    without_steps,
)
from stab_core.runview import RankMatrix, RunView, Series
from stab_core.spikes import detect_spikes


def _series(values: list[float] | np.ndarray, first: int = 1) -> Series:
    v = np.asarray(values, dtype=np.float64)
    return Series(np.arange(first, first + v.size, dtype=np.int64), v)


# ------------------------------------------------------------------------------------ logging gaps


def test_every_metric_nan_is_a_gap_or_the_end_of_logging() -> None:
    n = 100
    loss = np.linspace(3.0, 2.0, n)
    step_time = np.full(n, 1.5)
    # a middle gap at steps 41-45 and the end from step 91: every metric NaN, step time included
    for arr in (loss, step_time):
        arr[40:45] = np.nan
        arr[90:] = np.nan
    view = RunView("r", series={"loss": _series(loss), "step_time_s": _series(step_time)})
    gaps = logging_gaps(view)
    assert gaps.gaps == ((41, 45),) and gaps.end == 91 and gaps.dead_steps.size == 15
    clean = without_steps(view, gaps.dead_steps)
    assert clean.series["loss"].steps.size == 85 and np.isfinite(clean.series["loss"].values).all()


def test_a_nan_loss_with_a_finite_step_time_is_not_a_gap() -> None:
    loss = np.full(50, 2.0)
    loss[30:] = np.nan  # the loss blew up; the step time and LR kept being logged
    view = RunView(
        "r",
        series={"loss": _series(loss), "step_time_s": _series(np.ones(50)), "lr": _series(np.full(50, 1e-4))},
    )
    gaps = logging_gaps(view)
    assert gaps.gaps == () and gaps.end is None and not gaps.any


def test_only_training_math_nan_is_not_a_gap_and_per_rank_data_counts() -> None:
    # loss and grad norm both NaN: that is what an overflow looks like, whatever else is absent
    nan = np.full(10, np.nan)
    view = RunView("r", series={"loss": _series(nan), "grad_norm": _series(nan)})
    assert not logging_gaps(view).any
    # every run-level value NaN, but rank 0 still logged a finite step time: the job was alive
    matrix = RankMatrix(np.array([0]), np.arange(1, 11), np.ones((1, 10)), np.ones((1, 10), dtype=bool))
    view = RunView("r", series={"loss": _series(nan), "gpu_mem_gb": _series(nan)}, per_rank={"step_time_s": matrix})
    assert not logging_gaps(view).any
    assert is_training_math("grad_norm/layer.3") and is_training_math("val_loss") and not is_training_math("lr")


# ------------------------------------------------------------------------------- early rises, climbs

MEGDS_HEAD = [12.44, 12.45, 44.24, 48.14, 47.5, 46.59, 45.66, 44.28, 42.74, 41.06, 39.25, 37.43, 35.68, 34.0]
"""The first 14 losses of the Megatron-DeepSpeed perf log (steps 1-14)."""


def test_an_early_many_fold_rise_is_found_before_the_detector_can_look() -> None:
    s = _series(MEGDS_HEAD + [12.9, 12.5, 12.1] + [12.0] * 10)
    assert detect_spikes(s.steps, s.values, "loss") == []  # the detector needs 16 samples of history
    (event,) = early_rises(s.steps, s.values, history=16)
    # 44.24 at step 3 is 3.56x the lowest before it (12.44); peak 48.14 at step 4 (3.87x); back within
    # 1.1x of 12.44 (<= 13.684) at step 15 (12.9)
    assert (event.start, event.peak, event.recovery_step) == (3, 4, 15)
    assert event.ratio == pytest.approx(48.14 / 12.44) and event.recovered


def test_a_short_rise_below_the_threshold_is_not_early_instability() -> None:
    s = _series([10.0, 9.0, 11.5, 8.0])  # 11.5 / 9.0 = 1.28 < 1.3
    assert early_rises(s.steps, s.values, history=16) == []


def test_a_sustained_climb_is_found_and_a_one_sample_spike_is_not() -> None:
    flat = np.full(40, 2.0)
    climb = np.concatenate([np.linspace(2.0, 3.0, 30), np.full(10, 3.0)])  # to 1.5x its level, never back
    s = _series(np.concatenate([flat, climb]))
    (event,) = detect_climbs(s.steps, s.values)
    # peak: the first 3.0, the ramp's last sample (index 69, step 70)
    assert not event.recovered and event.peak == 70 and event.ratio == pytest.approx(1.5)
    # the climb leaves the 1.1x band (2.2) at the ramp's 7th sample: 2 + 6/29 = 2.207 (index 46, step 47)
    assert event.start == 47
    spike = flat.copy()
    spike[20] = 10.0
    s = _series(spike)
    assert detect_climbs(s.steps, s.values) == []


# -------------------------------------------------------------------------------------- incidents


def test_a_loss_spike_and_its_grad_norm_twin_are_one_incident() -> None:
    rng = np.random.default_rng(0)
    n = 400
    loss = 3.0 + 0.01 * rng.standard_normal(n)
    grad = 0.3 + 0.005 * rng.standard_normal(n)
    loss[200] = 4.5
    grad[198:201] = 1.5  # the grad norm led by 2 steps
    grad[300] = 1.6  # a grad-norm spike alone: the loss did not move
    view = RunView("r", series={"loss": _series(loss, 0), "grad_norm": _series(grad, 0)})
    incidents = find_incidents(view)
    assert [i.metrics for i in incidents] == [["loss", "grad_norm"], ["grad_norm"]]
    joint, alone = incidents
    assert joint.primary.metric == "loss" and joint.primary.grad_norm_lead_steps == 2
    assert joint.start == 198 and alone.primary.steps_lost == 0
    assert alone.co_moves["loss"] == pytest.approx(float(loss[300]) / float(np.median(loss[237:300])))
    analysis = analyze_run(view)
    assert len(analysis.spikes) == 2 and analysis.spike_at(199) is analysis.spikes[0]
    as_json = analysis.spike_dicts()[0]
    assert as_json["metrics"] == ["loss", "grad_norm"] and len(as_json["members"]) == 2


def test_group_incidents_joins_by_overlap_and_lead_only() -> None:
    values = 1.0 + 0.01 * np.random.default_rng(1).standard_normal(92)
    values[[30, 61]] = 5.0
    s = _series(values, 0)
    events = detect_spikes(s.steps, s.values, "grad_norm")
    assert [e.start for e in events] == [30, 61]
    groups = group_incidents([(e, "spike") for e in events], join_steps=3, max_lead_steps=50)
    assert len(groups) == 2  # 31 steps apart: two incidents, although within the lead window
    assert window_ratio(s, 30, 31) == pytest.approx(5.0 / np.median(values[:30]))
    assert window_ratio(None, 0, 1) is None


def test_the_rank_that_stood_out_is_part_of_the_incident() -> None:
    from stab_core.incident_headline import incident_headline
    from stab_core.simulate import SyntheticRunSpec, synthetic_run

    run = synthetic_run(SyntheticRunSpec(classes=("rank_fault",)), seed=2)
    (item,) = analyze_run(run.to_view()).spike_dicts()
    # the generator multiplies one rank's local grad norm by 15 at the spike (stab_core.simulate.signatures)
    outlier = item["rank_outlier"]
    assert item["cause"] == "rank_fault" and outlier["metric"] == "grad_norm_local"
    assert 10.0 < outlier["ratio"] < 20.0 and abs(outlier["step"] - run.truth.spikes[0].onset) <= 1
    assert f"rank {outlier['rank']}'s grad_norm_local" in incident_headline(item)
    quiet = synthetic_run(SyntheticRunSpec(classes=("unknown",)), seed=2)
    assert all(d["rank_outlier"] is None for d in analyze_run(quiet.to_view()).spike_dicts())
