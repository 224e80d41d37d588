"""The run simulator: shapes, determinism, the noise-scale identity, injected mechanisms where stated,
the presets, and that the real analyses find and classify the scenarios' spikes."""

from __future__ import annotations

import json
import time
from dataclasses import replace

import numpy as np
import pytest

from stab_core.analysis import analyze_run
from stab_core.checklist import evaluate_checklist, failing_p0
from stab_core.checklist_facts import run_facts
from stab_core.cost import rollback_steps
from stab_core.runview import RunEvent
from stab_core.schedulers import lr_at
from stab_core.simulate import (
    OPTIONAL_PER_RANK_METRICS,
    PER_RANK_METRICS,
    BatchSkip,
    DataOutlierSpike,
    LrJumpSpike,
    Mechanism,
    NumericalFault,
    RankFault,
    RankGap,
    RouterSeesawSpike,
    SimSpec,
    SimulatedRun,
    Straggler,
    WarmupRestart,
    checkpoint_steps,
    demo_specs,
    scenario_specs,
    scenarios,
    simulate_run,
)
from stab_core.snr import noise_scale


def plain(**overrides: object) -> SimSpec:
    values: dict[str, object] = {"name": "plain", "steps": 3000, "world_size": 4, "per_rank_batch_size": 32}
    values.update(overrides)
    return SimSpec(**values)  # type: ignore[arg-type]


def test_shapes_dtypes_and_metadata() -> None:
    spec = demo_specs()[0]
    run = simulate_run(spec, seed=3)
    assert run.steps.dtype == np.int64 and np.array_equal(run.steps, np.arange(3000))
    assert set(run.per_rank) == set(PER_RANK_METRICS)
    for values in run.per_rank.values():
        assert values.shape == (4, 3000) and values.dtype == np.float32
    expected_run_level = {"loss", "lr", "grad_norm", "grad_norm_clipped", "clip_coef", "tokens", "step_time_s"}
    assert expected_run_level <= set(run.run_level)
    for series in run.run_level.values():
        assert series.shape == (3000,) and series.dtype == np.float64
    meta = run.meta
    assert meta["world_size"] == 4 and meta["per_rank_batch_size"] == 32 and meta["global_batch_size"] == 128
    assert meta["max_norm"] == 1.0 and meta["gpus"] == 32 and meta["usd_per_gpu_hour"] == 2.0
    assert meta["scheduler"]["name"] == "warmup_cosine" and meta["scheduler"]["warmup_steps"] == 200
    assert meta["step_time_s"] == 1.1 and meta["model"] and "demo" in meta["tags"]
    json.dumps(meta)  # the store writes it as JSON
    assert all(isinstance(e, RunEvent) for e in run.events)
    assert [e.step for e in run.events if e.kind == "checkpoint"] == [500, 1000, 1500, 2000, 2500]
    assert [e.step for e in run.events if e.kind == "warmup_end"] == [200]


def test_same_seed_same_run_other_seed_other_noise() -> None:
    spec = demo_specs()[1]
    a, b, c = simulate_run(spec, 5), simulate_run(spec, 5), simulate_run(spec, 6)
    for name in a.run_level:
        assert np.array_equal(a.run_level[name], b.run_level[name], equal_nan=True), name
    for name in a.per_rank:
        assert np.array_equal(a.per_rank[name], b.per_rank[name], equal_nan=True), name
    assert not np.array_equal(a.run_level["loss"], c.run_level["loss"])
    assert not np.array_equal(a.per_rank["grad_norm_local"], c.per_rank["grad_norm_local"])


def test_pinned_seed_wins_over_the_argument() -> None:
    spec = plain(seed=11)
    assert np.array_equal(simulate_run(spec, 1).run_level["loss"], simulate_run(spec, 2).run_level["loss"])


def test_loss_follows_the_power_law_plus_the_lr_term() -> None:
    spec = plain(loss_noise=0.0, rank_loss_noise=0.0, lr_loss_coef=0.0)
    run = simulate_run(spec, 0)
    steps = run.steps.astype(np.float64)
    amplitude = (10.8 - 1.9) * 30.0**0.5
    expected = 1.9 + amplitude * (steps + 30.0) ** -0.5
    assert np.allclose(run.run_level["loss"], expected, rtol=1e-5)
    assert run.run_level["loss"][0] == pytest.approx(10.8, rel=1e-5)
    coupled = simulate_run(replace(spec, lr_loss_coef=0.08), 0)
    lr_fraction = coupled.run_level["lr"] / 3e-4
    assert np.allclose(coupled.run_level["loss"] - run.run_level["loss"], 0.08 * lr_fraction, atol=1e-5)


def test_lr_is_the_schedule_formula() -> None:
    before = scenarios()[1].before
    run = simulate_run(before)
    expected = lr_at(
        run.steps, 6000, warmup_steps=300, restart_warmup_steps=0, num_cycles=2, min_lr_ratio=0.1, peak_lr=1.5e-4
    )
    assert np.allclose(run.run_level["lr"], expected)


def test_explicit_lr_array_and_warmup_restart() -> None:
    lr = np.full(3000, 1e-3)
    run = simulate_run(plain(lr=lr.tolist(), warmup_restarts=(WarmupRestart(1000, 100, lr_scale=0.5),)), 0)
    got = run.run_level["lr"]
    assert np.allclose(got[:1000], 1e-3)
    assert got[1000] == pytest.approx(0.5e-3 / 100) and got[1049] == pytest.approx(0.5e-3 * 50 / 100)
    assert np.allclose(got[1099:], 0.5e-3)
    assert [(e.step, e.kind) for e in run.events if e.kind != "checkpoint"] == [
        (1000, "cycle_restart"),
        (1100, "warmup_end"),
    ]
    with pytest.raises(ValueError, match="lr has 10 values"):
        simulate_run(plain(lr=[1e-3] * 10), 0)


def test_noise_scale_identity_holds_in_expectation() -> None:
    spec = plain(steps=6000, world_size=8, per_rank_batch_size=16, per_rank_metrics=("grad_norm_local",))
    run = simulate_run(spec, 2)
    b_small, b_big = 16.0, 128.0
    g_sq, trace = run.truth.g_sq, run.truth.trace_sigma
    local_sq = (run.per_rank["grad_norm_local"].astype(np.float64) ** 2).mean(axis=0)
    global_sq = run.run_level["grad_norm"] ** 2
    # E|G_small|^2 = |G|^2 + S/B_small and E|G_big|^2 = |G|^2 + S/B_big, averaged over 6,000 steps
    assert np.mean(local_sq / (g_sq + trace / b_small)) == pytest.approx(1.0, abs=0.005)
    assert np.mean(global_sq / (g_sq + trace / b_big)) == pytest.approx(1.0, abs=0.01)
    # ... so the two-batch estimator recovers |G|^2 and S on average
    estimate = noise_scale(local_sq, global_sq, b_small, b_big)
    assert np.mean(estimate.g_sq) == pytest.approx(np.mean(g_sq), rel=0.05)
    assert np.mean(estimate.trace_sigma) == pytest.approx(np.mean(trace), rel=0.02)


def test_gradient_noise_grows_as_the_lr_falls() -> None:
    spec = plain(steps=6000, grad_step_sigma=0.0, schedule_kwargs={"warmup_steps": 200, "min_lr_ratio": 0.0})
    run = simulate_run(spec, 0)
    b_simple = run.truth.trace_sigma / run.truth.g_sq
    lr = run.run_level["lr"]
    assert run.truth.trace_sigma[-1] > 1.8 * run.truth.trace_sigma[1000]  # S doubles as the LR decays
    assert b_simple[-1] == pytest.approx(128 / 1.0, rel=0.01)  # B_simple = B_big / snr_end at the end
    assert b_simple[-1] > 5 * b_simple[300]
    assert lr[-1] < 0.2 * lr[300]
    final_norm = float(np.sqrt(run.truth.g_sq[-1] + run.truth.trace_sigma[-1] / 128))
    assert final_norm == pytest.approx(0.25, rel=0.01)


def test_clip_coefficients_follow_torch() -> None:
    run = simulate_run(plain(), 0)
    norm, coef = run.run_level["grad_norm"], run.run_level["clip_coef"]
    assert np.allclose(coef, np.minimum(1.0, 1.0 / (norm + 1e-6)))
    assert np.allclose(run.run_level["grad_norm_clipped"], norm * coef)
    assert coef[:50].min() < 1.0 and coef[-500:].min() == 1.0  # clipped early, not late
    assert "clip_coef" not in simulate_run(plain(max_norm=0.0), 0).run_level


RESTART_AT_1500: dict[str, object] = {
    "schedule": "warmup_cosine_restart",
    "schedule_kwargs": {"warmup_steps": 200, "restart_warmup_steps": 0, "num_cycles": 2},
}
"""Two LR cycles over 3,000 steps, the second starting at step 1,500 with a hard jump."""


@pytest.mark.parametrize(
    ("mechanism", "schedule"),
    [
        (DataOutlierSpike(1800), {}),
        (RouterSeesawSpike(1800), {}),
        (RankFault(1800, rank=1), {}),
        (LrJumpSpike(1500), RESTART_AT_1500),
        (NumericalFault(1800, kind="nan"), {}),
    ],
)
def test_injected_spike_is_in_the_loss_at_the_stated_step(mechanism: Mechanism, schedule: dict[str, object]) -> None:
    spec = plain(mechanisms=(mechanism,), num_experts=8, **schedule)
    run = simulate_run(spec, 4)
    (truth,) = run.truth.spikes
    assert truth.injected
    loss = run.run_level["loss"]
    before = float(np.median(loss[truth.onset - 40 : truth.onset - 2]))
    assert abs(loss[truth.onset - 2] - before) < 0.1  # nothing before the onset
    if isinstance(mechanism, NumericalFault):
        assert np.isnan(loss[1800:1820]).all() and np.isfinite(loss[1820:]).all() and np.isfinite(loss[:1800]).all()
    else:
        assert loss[truth.peak] - before > 0.8 * truth.height > 0.5
        assert loss[truth.peak + 200] - before < 0.1  # recovered


def test_nan_fault_marks_every_rank_and_counts_nonfinite_steps() -> None:
    run = simulate_run(plain(mechanisms=(NumericalFault(1000, duration_steps=5),)), 0)
    window = (run.steps >= 1000) & (run.steps < 1005)
    assert np.isnan(run.per_rank["loss"][:, window]).all()
    assert np.isnan(run.per_rank["grad_norm_local"][:, window]).all()
    assert np.isnan(run.run_level["grad_norm"][window]).all()
    assert np.array_equal(run.run_level["nonfinite_grads"] > 0, window)
    assert np.isfinite(run.per_rank["loss"][:, ~window]).all()


def test_unrecovered_nan_fault_stays_nan() -> None:
    run = simulate_run(plain(mechanisms=(NumericalFault(2000, recovered=False),)), 0)
    assert np.isnan(run.run_level["loss"][2000:]).all()
    assert not run.truth.spikes[0].recovered


def test_fp16_loss_scale_cycles_and_collapses() -> None:
    spec = demo_specs()[1]
    run = simulate_run(spec, 0)
    scale, skipped = run.run_level["loss_scale"], run.run_level["nonfinite_grads"] > 0
    assert scale[0] == 2.0**16 and scale.max() <= 2.0**17
    collapse = (run.steps >= 1500) & (run.steps < 1520)
    assert skipped[collapse].all()
    assert scale[run.steps == 1519][0] == 1.0  # 20 halvings from <= 2^17 hit the floor
    assert np.isinf(run.run_level["grad_norm"][collapse]).all()
    # after the collapse the scale regrows by x2 per 1,000 clean steps
    assert scale[run.steps == 2519][0] == 1.0 and scale[run.steps == 2520][0] == 2.0
    assert not skipped[~collapse].any()


def test_fp16_dynamic_scaling_overflows_once_per_growth_window() -> None:
    run = simulate_run(plain(steps=6000, precision="fp16"), 0)
    scale, skipped = run.run_level["loss_scale"], run.run_level["nonfinite_grads"] > 0
    # 2^16 -> 2^17 at step 1000; every later doubling to 2^18 overflows, is skipped and backs off
    assert run.steps[skipped].tolist() == [2000, 3001, 4002, 5003]
    assert scale[1000] == 2.0**17 and set(scale[1000:].tolist()) == {2.0**17}
    assert np.isfinite(run.run_level["grad_norm"]).all()


def test_rank_fault_concentrates_on_one_rank() -> None:
    run = simulate_run(plain(mechanisms=(RankFault(1200, rank=2, duration_steps=3),)), 0)
    local = run.per_rank["grad_norm_local"]
    at = (run.steps >= 1200) & (run.steps < 1203)
    others = np.delete(local[:, at], 2, axis=0)
    assert (local[2, at] > 8 * np.median(others, axis=0)).all()
    assert (local[2, run.steps == 1190] < 2 * np.median(local[:, run.steps == 1190])).all()
    assert run.run_level["grad_norm"][at].min() > 3 * np.median(run.run_level["grad_norm"][1100:1190])


def test_data_outlier_collapses_the_snr_before_the_spike() -> None:
    run = simulate_run(
        plain(mechanisms=(DataOutlierSpike(1800, snr_drop=12.0, ramp_steps=120),), grad_step_sigma=0.0), 0
    )
    trace = run.truth.trace_sigma
    base = simulate_run(plain(grad_step_sigma=0.0), 0).truth.trace_sigma
    assert trace[1800] / base[1800] == pytest.approx(12.0, rel=0.01)
    assert trace[1740] / base[1740] == pytest.approx(6.5, rel=0.01)  # half-way up the ramp
    assert trace[1600] == pytest.approx(base[1600])


def test_router_seesaw_and_bias_balancing() -> None:
    spec = plain(num_experts=16, mechanisms=(RouterSeesawSpike(2000, lead_steps=40, load_peak=3.2),))
    load = simulate_run(spec, 0).run_level["expert_load_max_over_mean"]
    baseline = float(np.median(load[1400:1900]))
    assert 1.25 < baseline < 1.45
    assert load[1960:2003].max() > 2.0 * baseline  # seesaw within 40 steps before the spike
    assert load[1900:1955].max() < 1.3 * baseline
    balanced = simulate_run(replace(spec, bias_balancing_from=1000), 0)
    assert np.median(balanced.run_level["expert_load_max_over_mean"][1400:1900]) < 1.12
    assert balanced.truth.spikes[0].suppressed == "bias balancing on from step 1000"
    assert "router_z_loss" in balanced.run_level
    assert "expert_load_max_over_mean" not in simulate_run(plain(), 0).run_level


def test_straggler_sets_the_pace_and_runs_hot() -> None:
    run = simulate_run(plain(stragglers=(Straggler(3, 1000, 1500, slowdown=1.3),), checkpoint_interval_steps=None), 0)
    times, window = run.per_rank["step_time_s"], (run.steps >= 1000) & (run.steps < 1500)
    ratio = np.median(times[3, window]) / np.median(times[:3, window])
    assert ratio == pytest.approx(1.3, rel=0.02)
    assert np.allclose(run.run_level["step_time_s"][window], times[:, window].max(axis=0) * 1.02, rtol=1e-5)
    assert np.median(run.per_rank["gpu_temp_c"][3, window]) > np.median(run.per_rank["gpu_temp_c"][3, ~window]) + 5
    assert np.median(run.per_rank["gpu_util"][:3, window]) < 0.8 * 99


def test_optional_per_rank_throughput_and_expert_load() -> None:
    """Asked-for per-rank metrics (the benchmark's): each rank's tokens over its own step time, and each
    rank's expert load around the run's; adding them moves no other series."""
    extra = (*PER_RANK_METRICS, *OPTIONAL_PER_RANK_METRICS)
    spec = plain(num_experts=8, stragglers=(Straggler(3, 1000, 1500, slowdown=1.3),))
    run, more = simulate_run(spec, 0), simulate_run(replace(spec, per_rank_metrics=extra), 0)
    tokens = 32 * 4096
    assert np.allclose(more.per_rank["throughput_tok_s"], tokens / more.per_rank["step_time_s"], rtol=1e-5)
    load = more.per_rank["expert_load_max_over_mean"]
    assert load.shape == (4, 3000) and load.min() >= 1.0
    assert np.allclose(np.median(load, axis=0), more.run_level["expert_load_max_over_mean"], rtol=0.1)
    for name in run.per_rank:
        assert np.array_equal(run.per_rank[name], more.per_rank[name]), name
    for name in run.run_level:
        assert np.array_equal(run.run_level[name], more.run_level[name]), name
    with pytest.raises(ValueError, match="needs num_experts > 1"):
        plain(per_rank_metrics=("expert_load_max_over_mean",))


def test_checkpoint_write_stalls_the_step() -> None:
    run = simulate_run(plain(checkpoint_interval_steps=1000, checkpoint_write_s=45.0), 0)
    step_time = run.run_level["step_time_s"]
    at = np.isin(run.steps, [1000, 2000])
    assert (step_time[at] > 45.0).all() and (step_time[~at] < 3.0).all()
    assert checkpoint_steps(plain(checkpoint_steps=(700, 5000))) == [700]


def test_gaps_stop_and_rank_gaps() -> None:
    spec = plain(gaps=((500, 700),), stop_step=2500, rank_gaps=(RankGap(1, 1000, 1100),))
    run = simulate_run(spec, 0)
    assert run.steps.size == 2500 - 200 and 600 not in run.steps and run.steps[-1] == 2499
    assert all(v.shape == (4, run.steps.size) for v in run.per_rank.values())
    assert run.present_rank is not None
    gap = (run.steps >= 1000) & (run.steps < 1100)
    assert not run.present_rank[1, gap].any() and run.present_rank[[0, 2, 3]].all()
    assert np.isnan(run.per_rank["loss"][1, gap]).all()
    view = run.to_view()
    assert np.array_equal(view.per_rank["loss"].present, run.present_rank)
    assert np.array_equal(view.series["loss"].steps, run.steps)
    assert all(e.step < 2500 for e in run.events)


def test_sparse_logging_keeps_mechanisms_visible() -> None:
    spec = plain(
        steps=20_000,
        log_every=10,
        precision="fp16",
        mechanisms=(
            DataOutlierSpike(8000, ramp_steps=600),
            RankFault(12_000, rank=1, duration_steps=20),
            NumericalFault(16_000, kind="loss_scale_collapse", duration_steps=200),
        ),
    )
    run = simulate_run(spec, 0)
    assert np.array_equal(run.steps, np.arange(0, 20_000, 10))
    assert run.per_rank["loss"].shape == (4, 2000)
    found = sorted((start, cause) for start, _, cause, _ in analysed(run))
    assert found == [(8010, "data_outlier"), (12_010, "rank_fault"), (16_000, "numerical")]
    assert run.run_level["loss_scale"][run.steps == 16_190][0] == 1.0


def test_to_view_is_float64_and_carries_no_truth() -> None:
    run = simulate_run(demo_specs()[2], 0)
    view = run.to_view()
    assert view.name == "demo-moe-2b" and view.meta == run.meta
    assert view.per_rank["grad_norm_local"].values.dtype == np.float64
    assert np.allclose(view.series["loss"].values, run.run_level["loss"])
    assert not hasattr(view, "truth")


CAUSE_WORDS = ("seesaw", "outlier", "fault", "spike", "numerical", "lr_transition", "rank_fault", "data_outlier")


@pytest.mark.parametrize("spec", demo_specs() + scenario_specs(), ids=lambda s: s.name)
def test_outputs_do_not_label_causes(spec: SimSpec) -> None:
    run = simulate_run(spec, 0)
    visible = {k: v for k, v in run.meta.items() if k != "config"}
    text = json.dumps([visible, [(e.kind, e.label, e.detail) for e in run.events]]).lower()
    assert not [w for w in CAUSE_WORDS if w in text]
    assert not [w for w in CAUSE_WORDS if w in json.dumps(spec.config).lower()]


def test_demo_specs_are_small_with_one_or_two_spikes() -> None:
    specs = demo_specs()
    assert 2 <= len(specs) <= 3
    for spec in specs:
        assert spec.world_size == 4 and 2000 <= spec.steps <= 5000
        assert 1 <= len(spec.mechanisms) <= 2 and spec.schedule_kwargs["warmup_steps"] > 0
        assert spec.config is not None and spec.seed is None
    assert len({s.name for s in specs}) == len(specs)


def test_scenarios_pair_before_and_after_identical_up_to_the_fork() -> None:
    found = scenarios()
    assert [s.key for s in found] == ["s1-moe-7b", "s2-dense-70b", "s3-dense-140b"]
    assert [s.name for s in scenario_specs()] == [n for s in found for n in (s.before.name, s.after.name)]
    for scenario in found:
        assert 8 <= scenario.before.world_size <= 16 and 3000 <= scenario.before.steps <= 6000
        before, after = simulate_run(scenario.before, 0), simulate_run(scenario.after, 99)
        fork = scenario.fork_step
        for name in ("loss", "grad_norm", "lr"):
            assert np.array_equal(before.run_level[name][:fork], after.run_level[name][:fork]), (scenario.key, name)
        assert not np.array_equal(
            before.run_level["loss"][fork : fork + 400], after.run_level["loss"][fork : fork + 400]
        )
        assert before.meta["variant"] == "before" and after.meta["scenario"] == scenario.key


def grades(spec: SimSpec) -> dict[str, str]:
    view = simulate_run(spec, 0).to_view()
    return {r.id: r.status for r in evaluate_checklist(spec.config, run_facts(view))}


def test_checklist_grades_the_scenario_configs() -> None:
    s1, s2, s3 = scenarios()
    before3 = evaluate_checklist(s3.before.config, run_facts(simulate_run(s3.before, 0).to_view()))
    assert {r.id for r in failing_p0(before3)} == {"min_lr_ratio", "checkpoint_interval"}
    assert failing_p0(evaluate_checklist(s3.after.config, run_facts(simulate_run(s3.after, 0).to_view()))) == []
    assert grades(s1.before)["moe_router"] == "fail" and grades(s1.after)["moe_router"] == "pass"
    assert grades(s2.before)["restart_warmup"] == "fail" and grades(s2.after)["restart_warmup"] == "pass"
    for spec in (s1.before, s1.after, s2.before, s2.after):
        assert set(grades(spec).values()) <= {"pass", "fail"} and not failing_p0(
            evaluate_checklist(spec.config, run_facts(simulate_run(spec, 0).to_view()))
        ), spec.name


def analysed(run: SimulatedRun) -> list[tuple[int, int, str, bool]]:
    """(start, end, cause, recovered) of each loss spike the real analyses found."""
    analysis = analyze_run(run.to_view())
    return [
        (d.spike.start, d.spike.end, d.diagnosis.cause, d.spike.recovered)
        for d in analysis.spikes
        if d.spike.metric == "loss"
    ]


@pytest.mark.parametrize("spec", demo_specs() + scenario_specs(), ids=lambda s: s.name)
def test_real_analyses_find_and_classify_the_injected_spikes(spec: SimSpec) -> None:
    run = simulate_run(spec, 0)
    found = analysed(run)
    injected = [s for s in run.truth.spikes if s.injected]
    compound = {s.cause for s in injected} == {"lr_transition", "data_outlier"}  # scenario 2: one spike, A + B
    expected = [s for s in injected if not (compound and s.cause == "data_outlier")]
    assert len(found) == len(expected), (found, expected)
    for truth in expected:
        (hit,) = [f for f in found if f[0] - 5 <= truth.onset <= f[1]]
        assert hit[2] == truth.cause, (truth, hit)
        assert hit[3] == truth.recovered


def test_scenario_three_rollback_is_priced_from_its_checkpoints() -> None:
    s3 = scenarios()[2]
    run = simulate_run(s3.before, 0)
    (diverged,) = [s for s in analysed(run) if not s[3]]
    saved = [e.step for e in run.events if e.kind == "checkpoint"]
    assert saved == [2000, 4000]
    redo = rollback_steps(diverged[0], 4450, saved)
    assert 400 <= redo <= 450  # restore 4000, the job was stopped at 4450


def test_batch_skip_and_lr_threshold_suppress_data_outliers() -> None:
    spec = plain(mechanisms=(DataOutlierSpike(1500),), batch_skips=(BatchSkip(1400, 200),))
    (truth,) = simulate_run(spec, 0).truth.spikes
    assert truth.suppressed == "its batches were skipped at step 1400"
    low_lr = plain(mechanisms=(DataOutlierSpike(2900, lr_threshold=0.9),))
    assert simulate_run(low_lr, 0).truth.spikes[0].suppressed is not None


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"mechanisms": (RankFault(100, rank=9),)}, "outside 0..3"),
        ({"per_rank_metrics": ("loss", "bogus")}, "unknown per-rank metrics"),
        ({"mechanisms": (NumericalFault(100, kind="loss_scale_collapse"),)}, "needs precision='fp16'"),
        ({"mechanisms": (DataOutlierSpike(5000),)}, "outside the run"),
        ({"schedule": "nope"}, "unknown schedule"),
        ({"steps": 1}, "steps must be >= 2"),
    ],
)
def test_bad_specs_raise_clear_errors(overrides: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        plain(**overrides)


def _draw_floor_seconds(shape: tuple[int, int], arrays: int) -> float:
    """Seconds to draw ``arrays`` arrays of standard normals of ``shape`` into one buffer (best of two): the
    least a simulator of that many per-rank values could cost on this machine, measured in the same run."""
    buf, rng, best = np.empty(shape), np.random.default_rng(0), float("inf")
    for _ in range(2):
        start = time.perf_counter()
        for _ in range(arrays):
            rng.standard_normal(out=buf)
        best = min(best, time.perf_counter() - start)
    return best


@pytest.mark.slow
def test_large_runs_generate_in_seconds() -> None:
    # a ratio to a floor measured here, not an absolute time: machines (and a loaded CI box) vary 2-3x; the
    # simulator ran at about 4x this floor when the limit was set
    spec = plain(steps=100_000, world_size=256, mechanisms=(DataOutlierSpike(50_000), RankFault(70_000, rank=200)))
    start = time.perf_counter()
    run = simulate_run(spec, 0)
    elapsed = time.perf_counter() - start
    assert run.per_rank["grad_norm_local"].shape == (256, 100_000) and len(run.per_rank) == 7
    del run
    floor = _draw_floor_seconds((256, 100_000), 7)
    assert elapsed < 12 * floor, (
        f"256 ranks x 100k steps x 7 per-rank metrics took {elapsed:.1f} s, floor {floor:.2f} s"
    )
