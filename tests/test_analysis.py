"""analyze_run end to end, the spike JSON contract, the generated runs and the detection measurement."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from stab_core.analysis import (
    AnalysisParams,
    DiagnosedSpike,
    RunAnalysis,
    analyze_run,
    explain_step,
    run_clip_stats,
    spike_to_dict,
)
from stab_core.evaluation import evaluate_detection, match_detections
from stab_core.runview import RunView, Series
from stab_core.simulate import (
    SPIKE_CLASSES,
    InjectedSpike,
    SimulatedRun,
    SyntheticRunSpec,
    cause_of,
    random_spec,
    synthetic_run,
)
from stab_core.spike_params import SpikeParams
from stab_core.spikes import SpikeEvent
from stab_core.tree_walk import walk_tree

ALL_CLASSES = (
    "numerical",
    "lr_transition",
    "rank_fault",
    "router",
    "data_outlier_recovered",
    "unknown",
    "data_outlier_diverged",
)
CONTRACT_FIELDS = {"start", "peak", "end", "metric", "ratio", "recovered", "cause", "confidence", "path", "actions"}


@pytest.fixture(scope="module")
def full_run() -> tuple[SimulatedRun, RunAnalysis]:
    run = synthetic_run(SyntheticRunSpec(classes=ALL_CLASSES, log_every=1), seed=11)
    return run, analyze_run(run.to_view())


def test_every_injected_class_is_found_and_classified(full_run: tuple[SimulatedRun, RunAnalysis]) -> None:
    run, analysis = full_run
    loss = [item for item in analysis.spikes if item.spike.metric == "loss"]
    assert len(loss) == len(ALL_CLASSES)
    for truth, found in match_detections(run.truth.spikes, loss, 10):
        assert found is not None, truth
        assert found.diagnosis.cause == truth.cause, (truth, found.diagnosis.path)
    diverged = [item for item in loss if item.spike.diverged and not item.spike.nonfinite]
    assert [item.diagnosis.leaf for item in diverged] == ["leaf_data_outlier_diverged"]


def test_run_analysis_carries_snr_and_clip_stats(full_run: tuple[SimulatedRun, RunAnalysis]) -> None:
    run, analysis = full_run
    view = run.to_view()
    assert analysis.run == "synthetic"
    assert analysis.snr is not None and analysis.snr.estimator == "two_batch"
    assert analysis.snr.steps.size == view.series["grad_norm"].steps.size
    # the precursors of both data outliers are SNR collapses
    collapse_starts = [c.start for c in analysis.snr_collapses]
    for truth in run.truth.spikes:
        if truth.cause == "data_outlier":
            assert any(truth.onset - 150 <= start < truth.onset for start in collapse_starts)
    norms = view.series["grad_norm"].values
    assert analysis.clip is not None and analysis.clip_steps is not None
    finite = np.isfinite(norms)
    # torch's rule, max_norm 1: clipped when 1 / (norm + 1e-6) < 1
    expected = float((norms[finite] + 1e-6 > 1.0).sum()) / finite.sum()
    assert analysis.clip.overall_clip_ratio == pytest.approx(expected, abs=1e-3)
    assert np.array_equal(analysis.clip_steps, view.series["grad_norm"].steps)


def test_spike_dicts_follow_the_json_contract(full_run: tuple[SimulatedRun, RunAnalysis]) -> None:
    _, analysis = full_run
    dicts = analysis.spike_dicts()
    text = json.dumps(dicts, allow_nan=False)  # strict JSON: no NaN/Infinity anywhere
    assert json.loads(text) == dicts
    for item in dicts:
        assert set(item) >= CONTRACT_FIELDS
        assert item["cause"] in {"numerical", "lr_transition", "rank_fault", "router", "data_outlier", "unknown"}
        assert 0.0 <= item["confidence"] <= 1.0
        assert item["start"] <= item["peak"] <= item["end"]
        assert all({"node", "question", "answer", "evidence"} <= set(visit) for visit in item["path"])
        assert all(isinstance(action, str) and action for action in item["actions"])
    nan_spike = next(item for item in dicts if item["metric"] == "loss" and item["cause"] == "numerical")
    assert nan_spike["ratio"] is None and nan_spike["nonfinite"] is True
    # non-finite and back in its band later is no divergence (docs/diagnosis.md, "Spike detector"): diverged iff never
    # back
    assert nan_spike["diverged"] is (not nan_spike["recovered"])


def test_spike_to_dict_values() -> None:
    spike = SpikeEvent("loss", 100, 101, 103, 6.0, 3.0, 2.0, 40.0, 4, True, 104, False, False, 2, 4, 2, True)
    diagnosis = walk_tree({"numerical": "no", "lr_transition": "yes"})
    item = spike_to_dict(spike, diagnosis)
    assert (item["start"], item["peak"], item["end"], item["ratio"], item["recovered"]) == (100, 101, 103, 2.0, True)
    assert item["cause"] == "lr_transition" and item["confidence"] == 1.0 and item["leaf"] == "leaf_lr_transition"
    assert [v["answer"] for v in item["path"]] == ["no", "yes"]
    assert (item["steps_lost"], item["grad_norm_lead_steps"], item["grad_norm_led"]) == (2, 2, True)
    assert DiagnosedSpike(spike, diagnosis).to_dict() == item


def test_spike_at_and_explain_step(full_run: tuple[SimulatedRun, RunAnalysis]) -> None:
    run, analysis = full_run
    view = run.to_view()
    router_step = next(t.onset for t in run.truth.spikes if t.spike_class == "router")
    found = analysis.spike_at(router_step + 1)
    assert found is not None and found.spike.metric == "loss" and found.diagnosis.cause == "router"
    assert analysis.spike_at(router_step + 1, metric="grad_norm") is not None
    assert analysis.spike_at(100) is None
    explained = explain_step(view, router_step)
    assert explained.spike.start == router_step and explained.diagnosis.cause == "router"
    quiet = explain_step(view, router_step - 400)
    assert quiet.spike.ratio == pytest.approx(1.0, abs=0.1) and quiet.spike.recovered
    with pytest.raises(ValueError, match="no 'val_loss' series"):
        explain_step(view, 10, metric="val_loss")


def test_clip_stats_need_max_norm_or_a_logged_coefficient() -> None:
    steps = np.arange(500)
    norms = np.where(steps % 10 == 0, 2.0, 0.5)
    assert run_clip_stats(RunView("no-max", series={"grad_norm": Series(steps, norms)})) is None
    coef = np.minimum(1.0, 1.0 / (norms + 1e-6))
    view = RunView("coef", series={"grad_norm": Series(steps, norms), "clip_coef": Series(steps, coef)})
    result = run_clip_stats(view)
    assert result is not None
    clip_steps, stats = result
    assert np.array_equal(clip_steps, steps)
    assert stats.max_norm == pytest.approx(1.0, rel=1e-6)  # inferred from coef * (norm + 1e-6)
    assert stats.overall_clip_ratio == pytest.approx(0.1)
    assert run_clip_stats(RunView("none")) is None
    analysis = analyze_run(RunView("no-max", series={"grad_norm": Series(steps, norms)}))
    assert analysis.clip is None and analysis.snr is not None and analysis.snr.estimator == "temporal_proxy"


def test_analyze_run_on_a_run_without_grad_norm() -> None:
    rng = np.random.default_rng(0)
    steps = np.arange(0, 5000, 5)
    loss = 3.0 * (1 + 0.01 * rng.standard_normal(steps.size))
    loss[600] *= 1.8
    analysis = analyze_run(RunView("loss-only", series={"loss": Series(steps, loss)}))
    assert analysis.snr is None and analysis.clip is None
    (item,) = analysis.spikes
    assert item.spike.start == 3000 and item.diagnosis.cause == "unknown"
    assert [v.answer for v in item.diagnosis.path] == ["no", "unknown", "unknown", "unknown", "unknown"]
    assert len(item.diagnosis.missing) == 4


def test_params_reach_detection() -> None:
    spec = SyntheticRunSpec(classes=("unknown",))
    run = synthetic_run(spec, seed=1)
    strict = AnalysisParams(loss_spikes=SpikeParams(min_ratio=5.0, recover_ratio=1.1, outlier_ratio=None))
    assert [i for i in analyze_run(run.to_view(), strict).spikes if i.spike.metric == "loss"] == []


def test_synthetic_spec_validation_and_layout() -> None:
    with pytest.raises(ValueError, match="last"):
        SyntheticRunSpec(classes=("data_outlier_diverged", "router"))
    with pytest.raises(ValueError, match="unknown spike classes"):
        SyntheticRunSpec(classes=("meteor",))
    run = synthetic_run(SyntheticRunSpec(classes=("router", "unknown"), log_every=5, gaps=True, quantise=True), seed=0)
    view = run.to_view()
    steps = view.series["loss"].steps
    assert np.all(steps % 5 == 0) and np.diff(steps).max() > 200  # logging gaps
    assert np.allclose(view.series["grad_norm"].values, np.round(view.series["grad_norm"].values, 2))
    assert all(t.onset % 5 == 0 for t in run.truth.spikes)
    assert cause_of("data_outlier_diverged") == "data_outlier" and set(SPIKE_CLASSES) == set(ALL_CLASSES)


def test_match_detections_pairs_nearest_once() -> None:
    def found(start: int) -> DiagnosedSpike:
        spike = SpikeEvent("loss", start, start, start, 2.0, 1.0, 2.0, 9.0, 1, True, start + 1, False, False, 1, 1)
        return DiagnosedSpike(spike, walk_tree({}))

    truths = [
        InjectedSpike("router", 100, 100, 1.0),
        InjectedSpike("unknown", 104, 104, 1.0),
        InjectedSpike("numerical", 500, 500, 1.0),
    ]
    pairs = match_detections(truths, [found(103), found(101), found(900)], tolerance_steps=5)
    assert [(t.onset, None if f is None else f.spike.start) for t, f in pairs] == [(100, 101), (104, 103), (500, None)]


def test_evaluate_detection_on_a_few_runs() -> None:
    result = evaluate_detection(n_runs=6, seed=0)
    assert result["runs"] == 6 and result["injected"] >= 18
    assert result["recall"] >= 0.95
    assert result["precision"] >= 0.9
    assert result["classification_accuracy"] >= 0.9
    assert sum(c["injected"] for c in result["per_class"].values()) == result["injected"]
    assert sum(sum(row.values()) for row in result["confusion"].values()) == result["true_positives"]
    assert math.isclose(result["recall"], result["true_positives"] / result["injected"])
    with pytest.raises(ValueError, match="n_runs"):
        evaluate_detection(0, 0)


def test_random_spec_only_injects_what_the_run_can_show() -> None:
    rng = np.random.default_rng(0)
    for _ in range(200):
        spec = random_spec(rng)
        assert 3 <= len(spec.classes) <= 6 and len(set(spec.classes)) == len(spec.classes)
        assert spec.per_rank or "rank_fault" not in spec.classes
        assert spec.moe or "router" not in spec.classes
        assert "data_outlier_diverged" not in spec.classes[:-1]
