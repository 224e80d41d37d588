"""The experiment's statistics (stab_core.bootstrap) against known answers, and its results format's
JSON round trip (ingest.training.experiment_results)."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from ingest.errors import StabScopeError
from ingest.training.experiment_results import (
    ARTICLE_CLAIMS,
    ArmDifference,
    ArmSummary,
    ClaimCheck,
    ExperimentResults,
    Machine,
    RunResult,
    load_latest_results,
    read_results,
    results_from_json,
    results_to_json,
    write_results,
)
from stab_core.bootstrap import (
    Interval,
    bootstrap_mean,
    bootstrap_paired_difference,
    bootstrap_relative_change,
)


def test_constant_sample_has_a_point_interval() -> None:
    got = bootstrap_mean([2.5] * 8)
    assert (got.estimate, got.low, got.high, got.n) == (2.5, 2.5, 2.5, 8)
    assert got.excludes_zero


def test_two_point_sample_interval_spans_both_values() -> None:
    # resampled means of [0, 1] are 0, 0.5, 1 with probabilities 1/4, 1/2, 1/4: the 95 % interval is [0, 1]
    got = bootstrap_mean([0.0, 1.0], resamples=20_000, seed=3)
    assert got.estimate == 0.5
    assert (got.low, got.high) == (0.0, 1.0)
    assert not got.excludes_zero


def test_mean_interval_matches_the_normal_approximation() -> None:
    # n = 400 values of sd 1: the mean's 95 % interval is about +-1.96 / sqrt(400) = +-0.098
    x = np.random.default_rng(11).normal(5.0, 1.0, 400)
    got = bootstrap_mean(x, seed=1)
    half = 1.96 * x.std() / math.sqrt(x.size)
    assert got.estimate == pytest.approx(x.mean())
    assert got.low == pytest.approx(x.mean() - half, abs=0.015)
    assert got.high == pytest.approx(x.mean() + half, abs=0.015)


def test_paired_difference_of_a_constant_shift_is_exact() -> None:
    baseline = np.array([3.0, 1.0, 4.0, 1.0, 5.0, 9.0, 2.0, 6.0])
    got = bootstrap_paired_difference(baseline - 0.25, baseline)
    assert (got.estimate, got.low, got.high) == pytest.approx((-0.25, -0.25, -0.25))
    assert got.excludes_zero


def test_identical_arms_differ_by_zero_and_nan_pairs_are_dropped() -> None:
    a = np.array([1.0, np.nan, 0.0, 1.0])
    b = np.array([1.0, 0.0, np.nan, 1.0])
    got = bootstrap_paired_difference(a, b)
    assert (got.estimate, got.low, got.high, got.n) == (0.0, 0.0, 0.0, 2)
    assert not got.excludes_zero


def test_relative_change_known_answer() -> None:
    # spikes in 8 of 8 seeds without a remedy, in 1 of 8 with one: the rate is down 87.5 %
    got = bootstrap_relative_change([1, 0, 0, 0, 0, 0, 0, 0], [1] * 8)
    assert got.estimate == pytest.approx(-0.875)
    assert got.low == pytest.approx(-1.0)
    assert got.high <= -0.5
    assert bootstrap_relative_change([1, 0], [0, 0]).empty


def test_no_data_gives_an_empty_interval_and_bad_settings_raise() -> None:
    assert bootstrap_mean([]).empty and bootstrap_mean([np.nan]).n == 0
    with pytest.raises(ValueError):
        bootstrap_mean([1.0], confidence=1.5)
    with pytest.raises(ValueError):
        bootstrap_paired_difference([1.0], [1.0, 2.0])


def _results(experiment_id: str = "t1") -> ExperimentResults:
    interval = Interval(0.5, 0.25, 0.75, 8)
    run = RunResult(
        mechanism="A",
        arm="none",
        seed=0,
        run="exp-t1-A-none-s0",
        transition_step=300,
        spiked=True,
        peak_ratio=2.5,
        steps_to_recover=None,
        recovered=False,
        diverged=True,
        final_val_loss=math.nan,
        wall_time_s=12.5,
        incidents=2,
        snr_steps=(10, 20),
        snr_values=(1.5, None),
    )
    return ExperimentResults(
        experiment_id=experiment_id,
        created_utc="2026-12-02T12:00:00Z",
        command="stabscope experiment --quick",
        config={"steps": 600, "mechanisms": ["A"]},
        machine=Machine("host", 2, 0.5, "cpu", "2.13.0", "3.11.9"),
        runs=(run,),
        arms=(ArmSummary("A", "none", 1, {"spike_rate": interval}, "exp-t1-A-none"),),
        differences=(ArmDifference("A", "restart", "none", "spike_rate", Interval(-0.5, -1.0, -0.25, 8)),),
        claim_checks=(
            ClaimCheck("spike_rate_down_90", "A", interval, interval, Interval(math.nan, math.nan, math.nan, 0), None),
        ),
        notes=("a note",),
    )


def test_results_round_trip_through_json(tmp_path: Path) -> None:
    results = _results()
    back = results_from_json(results_to_json(results))
    assert back.runs[0].snr_values == (1.5, None)
    assert math.isnan(back.runs[0].final_val_loss)
    assert not back.runs[0].succeeded
    assert back.claims == ARTICLE_CLAIMS
    assert back.difference("A", "restart", "none", "spike_rate") is not None
    assert back.difference("A", "restart", "none", "spike_rate").excludes_zero  # type: ignore[union-attr]
    # equal apart from NaN (NaN != NaN): compare the JSON of both
    assert results_to_json(back) == results_to_json(results)
    path = write_results(tmp_path, results)
    assert path == tmp_path / "experiments" / "t1.json"
    assert read_results(path).source == str(path)


def test_latest_results_prefer_the_store_over_the_docs_copy(tmp_path: Path) -> None:
    docs = tmp_path / "docs.json"
    docs.write_text(results_to_json(_results("docs")))
    store = tmp_path / "store"
    assert load_latest_results(store, docs).experiment_id == "docs"  # type: ignore[union-attr]
    write_results(store, _results("older"))
    newest = write_results(store, _results("newer"))
    newest.touch()
    assert load_latest_results(store, docs).experiment_id == "newer"  # type: ignore[union-attr]
    assert load_latest_results(tmp_path / "none", None) is None


def test_a_damaged_results_file_is_one_clear_error(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text('{"schema_version": 1, "runs": []}')
    with pytest.raises(StabScopeError, match=r"bad\.json"):
        read_results(bad)


def _run(arm: str, seed: int, *, spiked: bool, val: float, recovered: bool = True) -> RunResult:
    return RunResult(
        mechanism="A",
        arm=arm,
        seed=seed,
        run=f"exp-x-A-{arm}-s{seed}",
        transition_step=400,
        spiked=spiked,
        peak_ratio=2.0 if spiked else 1.1,
        steps_to_recover=50 if spiked and recovered else None,
        recovered=spiked and recovered,
        diverged=False,
        final_val_loss=val,
        wall_time_s=10.0,
        incidents=1,
    )


def test_summaries_differences_and_claims_from_known_runs() -> None:
    from ingest.training.experiment_summary import arm_differences, claim_checks, summarise_arms

    runs = [_run("none", s, spiked=True, val=2.5, recovered=s % 2 == 0) for s in range(8)]
    runs += [_run("clip", s, spiked=True, val=2.4, recovered=s < 2) for s in range(8)]
    runs += [_run("restart", s, spiked=False, val=2.2) for s in range(8)]
    arms = {a.arm: a for a in summarise_arms(runs, {("A", "none"): "exp-x-A-none"})}
    assert arms["none"].figures["spike_rate"].estimate == 1.0
    assert arms["none"].figures["success_rate"].estimate == 0.5
    assert arms["clip"].figures["success_rate"].estimate == 0.25
    assert arms["restart"].figures["steps_to_recover"].empty  # no spike, nothing to recover from
    assert arms["none"].seed_group == "exp-x-A-none"
    diffs = {(d.arm, d.baseline, d.figure): d for d in arm_differences(runs)}
    spike = diffs[("restart", "none", "spike_rate")].difference
    assert (spike.estimate, spike.low, spike.high) == (-1.0, -1.0, -1.0)
    assert diffs[("restart", "clip", "final_val_loss")].difference.estimate == pytest.approx(-0.2)
    assert diffs[("restart", "clip", "final_val_loss")].excludes_zero
    checks = {c.claim: c for c in claim_checks(runs)}
    # every spike gone is -100 %: the claimed -90 % lies outside the measured (degenerate) interval
    assert checks["spike_rate_down_90"].measured_change.estimate == -1.0
    assert checks["spike_rate_down_90"].agrees is False
    assert checks["spike_rate_down_90"].direction_holds is True  # ... but the direction is confirmed
    success = checks["success_60_to_95"]
    assert (success.measured_baseline.estimate, success.measured_arm.estimate) == (0.25, 1.0)
    assert success.agrees is False  # 60 % is outside clip's interval of 2 successes in 8
    assert success.direction_holds is True  # restart's 8 of 8 beat clip's 2 of 8, interval above 0


def test_report_tables_show_the_measured_cells() -> None:
    from ingest.training.experiment import ExperimentConfig
    from ingest.training.experiment_cli import build_results
    from ingest.training.experiment_report import report

    runs = [_run("none", s, spiked=True, val=2.5) for s in range(4)]
    runs += [_run("restart", s, spiked=False, val=2.25) for s in range(4)]
    config = ExperimentConfig("x", mechanisms=("A",), arms=("none", "restart"), seeds=4).resolved()
    results = build_results(config, "stabscope experiment", _results().machine, "now", runs, planned=8)
    assert results.complete
    text = report(results)
    assert "| none | 4 | 100% [100%, 100%]" in text
    assert "| restart - none | -100 pp [-100, -100] **(CI excludes 0)**" in text
    assert "-0.250 [-0.250, -0.250] **(CI excludes 0)**" in text
    # 2 spikes in 8 seeds without a remedy, none with it: -100 %, but the paired difference's interval
    # reaches 0, so the direction is not confirmed
    few = [_run("none", s, spiked=s < 2, val=2.5) for s in range(8)] + [
        _run("restart", s, spiked=False, val=2.25) for s in range(8)
    ]
    [check] = [c for c in build_results(config, "", _results().machine, "now", few, 16).claim_checks]
    assert check.measured_change.estimate == -1.0 and check.direction_holds is False
    partial = build_results(config, "stabscope experiment", _results().machine, "now", runs[:3], planned=8)
    assert not partial.complete and "3 of 8" in partial.notes[0]


def test_spontaneous_mechanism_has_no_restart_arms_small_batches_and_the_whole_run_as_window() -> None:
    from ingest.training.experiment import ExperimentConfig, run_specs

    config = ExperimentConfig(experiment_id="t", steps=400, seeds=2, mechanisms=("A", "S")).resolved()
    specs = run_specs(config)
    assert {s.arm for s in specs if s.mechanism == "S"} == {"none", "clip", "zclip"}
    assert {s.arm for s in specs if s.mechanism == "A"} == {"none", "clip", "zclip", "restart", "restart+clip"}
    s_spec = next(s for s in specs if s.mechanism == "S")
    a_spec = next(s for s in specs if s.mechanism == "A")
    assert (s_spec.batch, s_spec.transition_step, s_spec.spike_window) == (8, 10, 390)
    assert (a_spec.batch, a_spec.transition_step, a_spec.spike_window) == (8, 200, 80)
