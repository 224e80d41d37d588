"""Spike detection: known answers, causality, robustness to real-log shapes, and real public logs."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

from stab_core.rolling_baseline import MAD_TO_Z, logging_resolution, robust_zscore, rolling_level, rolling_robust_zscore
from stab_core.runview import Series
from stab_core.spike_params import GRAD_NORM_SPIKE_PARAMS, LOSS_SPIKE_PARAMS, SpikeParams, default_spike_params
from stab_core.spikes import SpikeEvent, detect_spikes, event_at_step, link_grad_norm_lead

REAL_LOGS = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "real_logs"


def _noisy_loss(n: int, seed: int = 0, level: float = 3.0, noise: float = 0.01) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return level * (1.0 + noise * rng.standard_normal(n))


# ------------------------------------------------------------------------------------ robust z-score


def test_robust_zscore_known_answer_iglewicz_hoaglin() -> None:
    # median 3, |x - 3| = [2, 1, 0, 1, 97], MAD 1 -> 0.6745 * (x - 3)
    z = robust_zscore([1, 2, 3, 4, 100])
    np.testing.assert_allclose(z, [-1.349, -0.6745, 0.0, 0.6745, 65.4265], atol=1e-4)


def test_robust_zscore_ignores_nonfinite_and_scores_them_nan() -> None:
    z = robust_zscore([1, 2, np.nan, 3, 4, 100, np.inf])
    assert np.isnan(z[2]) and np.isnan(z[6])
    np.testing.assert_allclose(z[[0, 1, 3, 4, 5]], [-1.349, -0.6745, 0.0, 0.6745, 65.4265], atol=1e-4)


def test_robust_zscore_zero_mad_and_floor() -> None:
    z = robust_zscore([5, 5, 5, 6])
    assert z[0] == 0.0 and z[3] == np.inf
    np.testing.assert_allclose(robust_zscore([5, 5, 5, 6], mad_floor=0.5), [0, 0, 0, MAD_TO_Z * 2])


def test_robust_zscore_rejects_empty_input() -> None:
    with pytest.raises(ValueError, match="finite"):
        robust_zscore([np.nan, np.nan])
    with pytest.raises(ValueError, match="1-D"):
        robust_zscore(np.ones((2, 2)))


def test_logging_resolution_finds_the_print_precision() -> None:
    assert logging_resolution([0.27, 0.28, 0.26, 0.27, np.nan]) == pytest.approx(0.01)
    assert logging_resolution([1.0]) == 0.0
    assert logging_resolution(np.random.default_rng(0).normal(size=1000)) < 1e-2


# ------------------------------------------------------------------------------------ rolling baseline


def test_rolling_baseline_known_answer() -> None:
    params = SpikeParams(window=5, stride=1, min_history=5, rel_mad_floor=0.0, abs_mad_floor=0.0)
    base = rolling_robust_zscore([1.0, 2.0, 3.0, 4.0, 5.0, 100.0], params)
    # sample 5 sees [1..5]: median 3, recent (last 1 sample) 5 -> level 5; MAD 1 (resolution 1 too)
    assert base.level[5] == 5.0 and base.scale[5] == 1.0
    assert base.z[5] == pytest.approx(MAD_TO_Z * 95.0)
    assert np.isnan(base.level[:5]).all()


def _brute_force_level_scale(x: np.ndarray, params: SpikeParams, floor: float) -> tuple[np.ndarray, np.ndarray]:
    level = np.full(x.size, np.nan)
    scale = np.full(x.size, np.nan)
    for i in range(x.size):
        end = (i // params.stride) * params.stride
        if end < params.min_history or end == 0:
            continue
        window = x[max(0, end - params.window) : end]
        median = np.median(window)
        level[i] = max(median, np.median(x[end - params.stride : end]))
        scale[i] = max(np.median(np.abs(window - median)), params.rel_mad_floor * abs(level[i]), floor)
    return level, scale


@pytest.mark.parametrize(("window", "stride"), [(9, 4), (8, 3), (63, 16)])
def test_rolling_baseline_matches_brute_force(window: int, stride: int) -> None:
    x = _noisy_loss(400, seed=window) + np.linspace(0, 1, 400)
    params = SpikeParams(window=window, stride=stride, min_history=stride)
    base = rolling_robust_zscore(x, params)
    level, scale = _brute_force_level_scale(x, params, params.abs_mad_floor)
    np.testing.assert_allclose(base.level, level, equal_nan=True)
    np.testing.assert_allclose(base.scale, scale, equal_nan=True)


def test_rolling_baseline_is_causal() -> None:
    x = _noisy_loss(500)
    before = rolling_robust_zscore(x)
    changed = x.copy()
    changed[300:] = 1e6
    after = rolling_robust_zscore(changed)
    np.testing.assert_array_equal(before.level[:301], after.level[:301])
    np.testing.assert_array_equal(before.z[:300], after.z[:300])


def test_rolling_baseline_skips_nonfinite_samples() -> None:
    x = _noisy_loss(200)
    with_nan = np.insert(x, [100, 150], np.nan)
    base = rolling_robust_zscore(with_nan)
    clean = rolling_robust_zscore(x)
    kept = np.isfinite(with_nan)
    np.testing.assert_array_equal(base.level[kept], clean.level)
    assert np.isnan(base.z[~kept]).all()
    assert np.isfinite(base.level[100])  # a NaN sample still has the baseline of its neighbours


# ------------------------------------------------------------------------------------ detection


def test_single_step_spike_is_one_event_that_recovers_at_once() -> None:
    steps = np.arange(1000)
    loss = _noisy_loss(1000)
    loss[600] *= 2.0
    (event,) = detect_spikes(steps, loss, "loss")
    assert (event.start, event.peak, event.end) == (600, 600, 600)
    assert event.recovered and not event.diverged and not event.nonfinite
    assert event.recovery_step == 601 and event.duration == 1
    assert event.ratio == pytest.approx(2.0, rel=0.05)
    assert event.z > 50
    assert event.n_samples == 1
    assert 1 <= event.steps_lost <= 10


def test_multi_step_spike_and_recovery_band() -> None:
    steps = np.arange(1000)
    loss = _noisy_loss(1000)
    loss[500:506] *= np.array([1.5, 2.5, 2.0, 1.6, 1.3, 1.05])
    (event,) = detect_spikes(steps, loss, "loss")
    assert event.start == 500 and event.peak == 501
    # back within the band (ratio <= 1.1) at the 1.05x sample
    assert event.end == 504 and event.recovery_step == 505
    assert event.ratio == pytest.approx(2.5, rel=0.05)


def test_adjacent_detections_merge_distant_ones_do_not() -> None:
    steps = np.arange(1000)
    loss = _noisy_loss(1000)
    loss[[400, 402]] *= 2.0
    loss[[700, 720]] *= 2.0
    events = detect_spikes(steps, loss, "loss")
    assert [(e.start, e.end) for e in events] == [(400, 402), (700, 700), (720, 720)]
    assert events[0].n_samples == 3
    assert detect_spikes(steps, loss, "loss", SpikeParams(merge_gap=0))[0].end == 400


def test_nonfinite_values_are_always_flagged_and_diverged_unless_back() -> None:
    steps = np.arange(600)
    loss = _noisy_loss(600)
    loss[3] = np.nan  # during warm-up, before any baseline exists
    loss[300] = np.inf
    events = detect_spikes(steps, loss, "loss")
    assert [e.start for e in events] == [3, 300]
    for event in events:
        assert event.nonfinite and event.ratio == np.inf
        # diverged only when never back: a finite value in the band later means the weights stayed finite
        assert event.diverged is (not event.recovered)
    assert events[1].recovered and events[1].recovery_step == 301


def test_loss_that_never_returns_is_diverged() -> None:
    steps = np.arange(0, 5000, 5)
    loss = _noisy_loss(steps.size)
    loss[600:] *= 3.0
    (event,) = detect_spikes(steps, loss, "loss")
    assert event.start == 3000 and event.end == 4995
    assert not event.recovered and event.diverged and event.recovery_step is None
    assert event.duration == 1995 and event.steps_lost == 1995


def test_warmup_transient_quantised_and_sparse_series_raise_no_false_spikes() -> None:
    rng = np.random.default_rng(3)
    steps = np.arange(0, 200_000, 50)  # sparse logging, every 50 steps
    t = steps.astype(float)
    loss = (2.5 + 8.5 * np.exp(-t / 3000.0)) * (1.0 + 0.01 * rng.standard_normal(steps.size))
    assert detect_spikes(steps, loss, "loss") == []
    # quantised to the 2nd decimal: most wiggles are 0 or 1 quantum, the MAD often 0
    assert detect_spikes(steps, np.round(loss, 2), "loss") == []
    quantised_norm = np.round(0.27 + 0.004 * rng.standard_normal(steps.size), 2)
    assert detect_spikes(steps, quantised_norm, "grad_norm") == []


def test_near_zero_series_raise_no_false_spikes() -> None:
    rng = np.random.default_rng(4)
    steps = np.arange(20_000)
    tiny = np.abs(rng.standard_normal(steps.size)) * 1e-10  # numerically zero grad norm
    assert detect_spikes(steps, tiny, "grad_norm") == []
    converged = np.round(np.abs(rng.normal(0.0, 0.0001, steps.size)), 4)  # loss printed as 0.0000/0.0001
    assert detect_spikes(steps, converged, "loss") == []


def test_gaps_and_a_slow_upward_drift_raise_no_false_spikes() -> None:
    rng = np.random.default_rng(5)
    steps = np.concatenate((np.arange(0, 3000), np.arange(13_000, 16_000)))
    loss = 3.0 - steps / 20_000 + 0.02 * rng.standard_normal(steps.size)
    assert detect_spikes(steps, loss, "loss") == []
    drifting_norm = np.linspace(1.0, 1.9, 186) * np.exp(0.12 * rng.standard_normal(186))
    assert detect_spikes(np.arange(15, 2791, 15), drifting_norm, "grad_norm") == []


def test_a_sparse_log_still_finds_its_spike() -> None:
    steps = np.arange(0, 50_000, 50)
    loss = _noisy_loss(steps.size)
    loss[500] *= 1.6
    (event,) = detect_spikes(steps, loss, "loss")
    assert event.start == 25_000 and event.recovery_step == 25_050 and event.duration == 50


def test_grad_norm_lead_is_linked() -> None:
    steps = np.arange(1000)
    loss = _noisy_loss(1000)
    loss[600:603] *= 2.0
    norm = _noisy_loss(1000, seed=1, level=0.3, noise=0.05)
    norm[597] *= 10.0
    (event,) = detect_spikes(steps, loss, "loss", grad_norm=Series(steps, norm))
    assert event.grad_norm_lead_steps == 3 and event.grad_norm_led is True
    assert event.onset == 597
    (alone,) = detect_spikes(steps, loss, "loss")
    assert alone.grad_norm_lead_steps is None and alone.onset == 600


def test_link_grad_norm_lead_window() -> None:
    def event(start: int, end: int, metric: str = "loss") -> SpikeEvent:
        return SpikeEvent(metric, start, start, end, 2.0, 1.0, 2.0, 10.0, 1, True, end + 1, False, False, 1, 1)

    linked = link_grad_norm_lead(
        [event(100, 105), event(500, 500), event(900, 910)],
        [event(95, 95, "grad_norm"), event(400, 400, "grad_norm"), event(905, 905, "grad_norm")],
        max_lead_steps=50,
    )
    assert [(e.grad_norm_lead_steps, e.grad_norm_led) for e in linked] == [(5, True), (None, None), (-5, False)]
    with pytest.raises(ValueError, match="max_lead_steps"):
        link_grad_norm_lead([], [], -1)


def test_event_at_step_explains_any_step() -> None:
    steps = np.arange(1000)
    loss = _noisy_loss(1000)
    loss[700] *= 1.15  # below the detection ratio: not an event, but explainable
    event = event_at_step(steps, loss, 700)
    assert event.start == 700 and event.ratio == pytest.approx(1.15, rel=0.03)
    assert event.recovered and event.recovery_step == 701
    with pytest.raises(ValueError, match="after the last"):
        event_at_step(steps, loss, 5000)
    with pytest.raises(ValueError, match="no baseline"):
        event_at_step(steps, loss, 2)


def test_input_validation() -> None:
    with pytest.raises(ValueError, match="strictly increasing"):
        detect_spikes([0, 2, 2], [1.0, 1.0, 1.0])
    with pytest.raises(ValueError, match="one entry per value"):
        detect_spikes([0, 1], [1.0, 1.0, 1.0])
    with pytest.raises(ValueError, match="stride"):
        SpikeParams(window=8, stride=16)
    with pytest.raises(ValueError, match="recover_z"):
        SpikeParams(z_threshold=2.0, recover_z=3.0)
    with pytest.raises(ValueError, match="min_ratio"):
        SpikeParams(min_ratio=1.05, recover_ratio=1.1)
    assert detect_spikes([], []) == []


def test_default_params_by_metric() -> None:
    assert default_spike_params("grad_norm") is GRAD_NORM_SPIKE_PARAMS
    assert default_spike_params("grad_norm_local") is GRAD_NORM_SPIKE_PARAMS
    assert default_spike_params("grad_norm/layer.3") is GRAD_NORM_SPIKE_PARAMS
    assert default_spike_params("loss") is LOSS_SPIKE_PARAMS


# ------------------------------------------------------------------------------------ real public logs


def _real(folder: str) -> Path:
    path = REAL_LOGS / folder
    if not path.is_dir():
        pytest.skip(f"../shared absent: {path} not found")
    return path


def test_modded_nanogpt_fp4_loss_spikes_are_found() -> None:
    (log,) = _real("mng_quantizedfp4").glob("*-*.txt")
    pairs = re.findall(r"^step:(\d+)/\d+ train_loss:(\S+)", log.read_text(), re.MULTILINE)
    steps = np.array([int(s) for s, _ in pairs])
    loss = np.array([float(v) for _, v in pairs])
    events = detect_spikes(steps, loss, "loss")
    starts = {e.start for e in events}
    assert {524, 2263, 2906, 201} <= starts  # PROVENANCE: single-step spikes, recovered in 1-2 steps
    by_start = {e.start: e for e in events}
    assert by_start[2263].ratio == pytest.approx(5.238 / 3.44, rel=0.02)
    assert all(e.recovered and e.duration <= 2 for e in events)
    assert len(events) <= 12


def test_llmc_grad_norm_spike_without_loss_spike() -> None:
    text = (_real("mng_llmc_gpt2_124m") / "main.log").read_text()
    rows = re.findall(r"^s:(\d+) trl:(\S+) lr:(\S+) norm:(\S+)", text, re.MULTILINE)
    steps = np.array([int(r[0]) for r in rows])
    loss = np.array([float(r[1]) for r in rows])
    norm = np.array([float(r[3]) for r in rows])
    norm_events = {e.start: e for e in detect_spikes(steps, norm, "grad_norm")}
    assert {9025, 7435, 9954} <= set(norm_events)
    assert norm_events[9025].ratio == pytest.approx(2.02 / 0.27, rel=0.02)
    assert norm_events[9025].recovery_step == 9026
    # no loss divergence: its +0.3 single-step bumps stay under the 1.2x rule
    assert detect_spikes(steps, loss, "loss") == []


def test_clean_llamafactory_run_has_no_spikes() -> None:
    lines = (_real("llamafactory_luojiu7b_cpt") / "trainer_log.jsonl").read_text().splitlines()
    records = [json.loads(line) for line in lines]
    kept = [r for r in records if r["loss"] is not None]
    steps = np.array([r["current_steps"] for r in kept])
    loss = np.array([r["loss"] for r in kept])
    assert steps.size == 1742
    assert detect_spikes(steps, loss, "loss") == []


def test_tinyllama_rising_grad_norm_is_not_a_spike() -> None:
    state = json.loads((_real("hf_trainer_state_tinyllama_sft") / "trainer_state.json").read_text())
    train = [e for e in state["log_history"] if "loss" in e and "grad_norm" in e]
    steps = np.array([e["step"] for e in train])
    assert detect_spikes(steps, np.array([e["loss"] for e in train]), "loss") == []
    assert detect_spikes(steps, np.array([e["grad_norm"] for e in train]), "grad_norm") == []


def test_megatron_moe_spikes_with_missing_samples() -> None:
    golden = json.loads((_real("megatron_mixtral8x7b_h100") / "golden_values_dev_dgx_h100.json").read_text())
    values = golden["lm loss"]["values"]
    # the string "nan" marks a sample that was never logged: a gap, not a NaN loss
    logged = [(int(k), float(v)) for k, v in values.items() if v != "nan"]
    steps = np.array([s for s, _ in logged])
    loss = np.array([v for _, v in logged])
    starts = {e.start: e for e in detect_spikes(steps, loss, "loss")}
    assert {3850, 4260} <= set(starts)
    assert starts[3850].ratio == pytest.approx(3.411 / 2.459, rel=0.02)
    assert starts[3850].recovery_step == 3855


def test_rolling_level_is_the_baseline_level_without_the_mad() -> None:
    x = _noisy_loss(3000) + np.linspace(0, 2, 3000)
    x[[10, 1000, 2999]] = np.nan
    params = SpikeParams(window=31, stride=8, min_history=8)
    np.testing.assert_array_equal(rolling_level(x, params), rolling_robust_zscore(x, params).level)


# ------------------------------------------------------------------------------------ differential


def _varied_series(rng: np.random.Generator) -> np.ndarray:
    """Loss-like series with NaN/+-inf runs, a plateau, back-to-back spikes, rounding; sizes that
    cross the 64k-sample blocks of the blockwise passes."""
    n = int(rng.choice([1, 15, 16, 17, 64, 257, 3000, 70_000, 140_000]))
    x = 3.0 + 0.05 * rng.standard_t(3, n)
    kind = int(rng.integers(5))
    if kind == 1:
        x = np.round(x, 2)
    elif kind == 2:
        x[: n // 2] = 2.0  # plateau: a MAD of zero
    elif kind == 3:
        x = np.zeros(n)
    for _ in range(int(rng.integers(0, 30))):
        at, length = int(rng.integers(n)), int(rng.integers(1, 6))
        what = int(rng.integers(5))
        if what < 3:
            x[at : at + length] = (np.nan, np.inf, -np.inf)[what]
        else:
            x[at : at + length] *= rng.choice([1.5, 3.0, 10.0, 100.0])  # runs of spikes back to back
    if rng.random() < 0.05:
        x[:] = np.nan
    return x


def _reference_events(x: np.ndarray, params: SpikeParams) -> list[tuple[int, int, int | None, float, float]]:
    """(first, last, recovery, baseline, scale) per event, sample by sample from the whole-series
    baseline: flag non-finite samples and those past the z and ratio rules; an event ends before the
    first finite sample back in the band of its start's baseline; a flag within merge_gap joins it."""
    base = rolling_robust_zscore(x, params)
    with np.errstate(invalid="ignore"):
        ratio_ok = (base.level <= 0) | (x >= params.min_ratio * base.level)
        if params.outlier_ratio is not None:  # twice the z threshold out: the smaller outlier ratio is enough
            ratio_ok |= (base.z >= 2 * params.z_threshold) & (x >= params.outlier_ratio * base.level)
        past = (base.z >= params.z_threshold) & ratio_ok
    flagged = np.flatnonzero(~np.isfinite(x) | past).tolist()
    events, k = [], 0
    while k < len(flagged):
        first = flagged[k]
        level, scale = float(base.level[first]), float(base.scale[first])
        b, s = (level, scale) if np.isfinite(level) else (np.inf, 1.0)

        def back(j: int, b: float = b, s: float = s) -> bool:
            with np.errstate(invalid="ignore"):
                return bool(
                    np.isfinite(x[j])
                    and not (x[j] == 0.0 and b > 0)  # an exact zero under a positive (or no finite) level: no return
                    and (MAD_TO_Z * (x[j] - b) / s <= params.recover_z or (b > 0 and x[j] <= params.recover_ratio * b))
                )

        def recovery_after(i: int) -> int | None:
            return next((j for j in range(i + 1, x.size) if back(j)), None)

        recovery = recovery_after(first)
        segment, bad = first, 0  # a non-finite flag within as many samples as the event held NaN joins it too
        while True:
            if recovery is None:
                last = x.size - 1
                break
            last = recovery - 1
            bad += sum(1 for j in range(segment, recovery) if not np.isfinite(x[j]))
            later = [f for f in flagged if f >= recovery]
            gap = later[0] - recovery if later else 0
            if not later or (gap >= params.merge_gap and not (bad and not np.isfinite(x[later[0]]) and gap < bad)):
                break
            segment = later[0]
            recovery = recovery_after(later[0])
        events.append((first, last, recovery, level, scale))
        k = next((i for i, f in enumerate(flagged) if f > last), len(flagged))
    return events


@pytest.mark.parametrize("seed", range(4))
def test_detect_spikes_matches_a_sample_by_sample_reference(seed: int) -> None:
    rng = np.random.default_rng(seed)
    for _ in range(12):
        x = _varied_series(rng)
        steps = np.cumsum(rng.integers(1, 4, x.size))
        window = int(rng.choice([5, 31, 63]))
        params = SpikeParams(
            window=window, stride=int(rng.integers(1, window + 1)), min_history=int(rng.integers(1, 80))
        )
        events = detect_spikes(steps, x, "loss", params)
        expected = _reference_events(x, params)
        assert len(events) == len(expected)
        for event, (first, last, recovery, level, scale) in zip(events, expected, strict=True):
            assert (event.start, event.end) == (steps[first], steps[last])
            assert event.recovery_step == (None if recovery is None else steps[recovery])
            np.testing.assert_array_equal([event.baseline], [level])
            if np.isfinite(level) and np.isfinite(event.peak_value):
                assert event.z == MAD_TO_Z * (event.peak_value - level) / scale
        for step in rng.integers(0, int(steps[-1]) + 1, 3):
            first = int(np.searchsorted(steps, step))
            if first < x.size and np.isfinite(rolling_robust_zscore(x, params).level[first]):
                assert (
                    event_at_step(steps, x, int(step), "loss", params).baseline
                    == rolling_robust_zscore(x, params).level[first]
                )


def test_rolling_baseline_matches_window_medians() -> None:
    """Level and scale against np.median over each window of the finite history, across blocks."""
    rng = np.random.default_rng(7)
    x = 3.0 + 0.05 * rng.standard_t(3, 70_000)
    x[rng.integers(0, x.size, 40)] = np.nan
    params = SpikeParams(window=31, stride=8, min_history=8)
    base = rolling_robust_zscore(x, params)
    finite_values = x[np.isfinite(x)]
    resolution = logging_resolution(x)
    for i in rng.integers(0, x.size, 2000):
        if not np.isfinite(x[i]):
            continue
        end = int(np.isfinite(x[:i]).sum()) // params.stride * params.stride  # the window serving i
        if end < params.min_history:
            assert np.isnan(base.level[i])
            continue
        window = finite_values[max(0, end - params.window) : end]
        median = np.median(window)
        level = max(median, np.median(finite_values[end - params.stride : end]))
        scale = max(
            np.median(np.abs(window - median)), params.rel_mad_floor * abs(level), params.abs_mad_floor, resolution
        )
        assert base.level[i] == pytest.approx(level, rel=1e-15)
        assert base.scale[i] == pytest.approx(scale, rel=1e-15)


@pytest.mark.parametrize("seed", range(3))
def test_blockwise_spread_matches_the_whole_series_expansion(seed: int) -> None:
    """Per-window values spread over any range of samples equal the whole-series expansion there."""
    from stab_core.rolling_baseline import _expand, baseline_windows, level_windows

    rng = np.random.default_rng(seed)
    for _ in range(20):
        x = _varied_series(rng)
        if rng.random() < 0.5 and x.size > 100:
            x[rng.integers(0, x.size // 3, 3)] = np.nan  # non-finite samples only before later blocks
        window = int(rng.choice([5, 31, 63, 255]))
        params = SpikeParams(
            window=window, stride=int(rng.integers(1, window + 1)), min_history=int(rng.integers(1, 80))
        )
        windows = baseline_windows(x, params)
        finite = np.isfinite(x)
        whole_level = _expand(windows.level, finite, params.stride)
        whole_scale = _expand(windows.scale, finite, params.stride)
        np.testing.assert_array_equal(
            rolling_level(x, params), _expand(level_windows(x, params).level, finite, params.stride)
        )
        for _ in range(10):
            first = int(rng.integers(0, x.size))
            stop = int(rng.integers(first + 1, x.size + 1))
            np.testing.assert_array_equal(windows.spread(windows.level, first, stop), whole_level[first:stop])
            np.testing.assert_array_equal(windows.spread(windows.scale, first, stop), whole_scale[first:stop])
            level, scale = windows.at(first)
            np.testing.assert_array_equal([level, scale], [whole_level[first], whole_scale[first]])


def test_robust_zscore_columns_matches_robust_zscore_per_column() -> None:
    from stab_core.rolling_baseline import robust_zscore, robust_zscore_columns

    rng = np.random.default_rng(11)
    matrix = rng.normal(10.0, 1.0, size=(7, 40))
    matrix[rng.random(matrix.shape) < 0.1] = np.nan
    matrix[2, 5], matrix[4, 6] = np.inf, -np.inf
    matrix[:, 7] = 3.0  # MAD 0: the floor decides
    matrix[:, 8] = matrix[:, 11] = [3.0] * 6 + [4.0]  # MAD 0, one value off: +inf without a floor (11)
    matrix[:5, 9] = np.nan  # two finite values: under min_finite
    floors = np.where(np.arange(40) % 2, 0.0, 0.05)
    got = robust_zscore_columns(matrix, mad_floor=floors, min_finite=3)
    for j in range(matrix.shape[1]):
        column = matrix[:, j]
        if np.isfinite(column).sum() < 3:
            assert np.isnan(got[:, j]).all()
            continue
        np.testing.assert_allclose(got[:, j], robust_zscore(column, mad_floor=floors[j]), rtol=1e-12)
    assert (
        got[6, 11] == np.inf and np.isfinite(got[6, 8]) and np.isnan(got[2, 5])
    )  # unfloored zero MAD; a non-finite value scores NaN
    np.testing.assert_array_equal(
        robust_zscore_columns([[1.0], [2.0], [3.0], [4.0], [100.0]])[:, 0], robust_zscore([1.0, 2.0, 3.0, 4.0, 100.0])
    )  # the docstring's example
    with pytest.raises(ValueError, match="2-D"):
        robust_zscore_columns([1.0, 2.0])
