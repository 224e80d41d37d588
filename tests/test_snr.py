"""Gradient SNR: McCandlish known answers, EMA smoothing, the temporal proxy, collapse detection."""

from __future__ import annotations

import math

import numpy as np
import pytest

from stab_core.runview import RankMatrix, RunView, Series
from stab_core.snr import (
    ESTIMATOR_LABELS,
    PROXY_MAX,
    SnrSeries,
    collapse_ratio,
    detect_snr_collapse,
    ema,
    gradient_snr,
    noise_scale,
    noise_scale_ema,
    snr_at_batch,
    snr_drop,
    temporal_snr_proxy,
    two_batch_snr,
)


@pytest.mark.parametrize(
    ("inputs", "expected"),
    [((10.0, 2.125, 1, 8), (1.0, 9.0, 9.0)), ((24.0, 6.5, 32, 256), (4.0, 640.0, 160.0))],
)
def test_noise_scale_known_answers(inputs: tuple[float, float, int, int], expected: tuple[float, ...]) -> None:
    result = noise_scale(*inputs)
    assert isinstance(result.g_sq, float)
    assert (result.g_sq, result.trace_sigma, result.b_simple) == pytest.approx(expected)


def test_noise_scale_arrays_and_guards() -> None:
    result = noise_scale(np.array([10.0, 24.0, 2.0, 1.0]), np.array([2.125, 6.5, 3.0, -1.0]), 1, 8)
    assert isinstance(result.g_sq, np.ndarray) and isinstance(result.b_simple, np.ndarray)
    np.testing.assert_allclose(result.g_sq[:2], [1.0, (8 * 6.5 - 24.0) / 7])
    # g_big > g_small: S < 0 -> no B_simple; |G|^2 <= 0 -> no B_simple
    assert np.isnan(result.b_simple[2]) and np.isnan(result.b_simple[3])
    assert float(np.asarray(result.trace_sigma)[2]) < 0


def test_noise_scale_rejects_bad_batches() -> None:
    with pytest.raises(ValueError, match="b_big must be larger"):
        noise_scale(1.0, 1.0, 8, 8)
    with pytest.raises(ValueError, match="b_small"):
        noise_scale(1.0, 1.0, 0, 8)


def _reference_ema(x: np.ndarray, beta: float) -> np.ndarray:
    state, count, out = 0.0, 0, []
    for value in x:
        if np.isfinite(value):
            state = beta * state + (1 - beta) * value
            count += 1
        out.append(state / (1 - beta**count) if count else np.nan)
    return np.array(out)


@pytest.mark.parametrize("beta", [0.0, 0.5, 0.9, 0.99, 0.9999])
def test_ema_matches_the_recurrence(beta: float) -> None:
    x = np.random.default_rng(1).normal(size=9000)
    x[[0, 5, 4000, 8999]] = np.nan
    np.testing.assert_allclose(ema(x, beta), _reference_ema(x, beta), rtol=1e-10, atol=1e-12, equal_nan=True)


def test_ema_bias_correction_and_validation() -> None:
    np.testing.assert_allclose(ema(np.full(50, 7.0), 0.99), 7.0)
    with pytest.raises(ValueError, match="beta"):
        ema([1.0], 1.0)


def test_noise_scale_ema_recovers_known_answer_exactly_on_clean_input() -> None:
    smoothed = noise_scale_ema(np.full(300, 24.0), np.full(300, 6.5), 32, 256, beta=0.9)
    np.testing.assert_allclose(smoothed.g_sq, 4.0)
    np.testing.assert_allclose(smoothed.trace_sigma, 640.0)
    np.testing.assert_allclose(smoothed.b_simple, 160.0)


def test_ratio_of_emas_is_unbiased_where_per_step_ratios_are_not() -> None:
    # two-batch model: E|G_B|^2 = |G|^2 + S/B with |G|^2 = 4, S = 640 (B_simple 160), noisy per step
    rng = np.random.default_rng(2)
    n, b_small, b_big = 20_000, 32.0, 256.0
    g_small = (4.0 + 640.0 / b_small) * (1.0 + 0.5 * rng.standard_normal(n))
    g_big = (4.0 + 640.0 / b_big) * (1.0 + 0.3 * rng.standard_normal(n))
    smoothed = noise_scale_ema(g_small, g_big, b_small, b_big, beta=0.999)
    assert float(np.asarray(smoothed.b_simple)[-1]) == pytest.approx(160.0, rel=0.1)
    per_step = np.asarray(noise_scale(g_small, g_big, b_small, b_big).b_simple)
    assert abs(np.nanmean(per_step) - 160.0) > 0.5 * 160.0  # the EMA of ratios would be far off


def test_snr_at_batch() -> None:
    np.testing.assert_allclose(snr_at_batch([160.0, 0.0, np.nan], 256.0), [1.6, np.nan, np.nan])
    with pytest.raises(ValueError, match="batch"):
        snr_at_batch([1.0], 0.0)


def test_two_batch_snr_is_labelled() -> None:
    snr = two_batch_snr(np.arange(100), np.full(100, 24.0), np.full(100, 6.5), 32, 256)
    assert snr.estimator == "two_batch" and snr.label == ESTIMATOR_LABELS["two_batch"]
    assert snr.batch == 256.0 and snr.window == 100
    np.testing.assert_allclose(snr.values, 256.0 / 160.0)


def test_temporal_proxy_known_answer_and_label() -> None:
    rng = np.random.default_rng(3)
    norms = np.abs(1.0 + 0.2 * rng.standard_normal(500))
    norms[250] = np.nan
    proxy = temporal_snr_proxy(np.arange(500), norms, window=50)
    assert proxy.estimator == "temporal_proxy" and "not the noise scale" in proxy.label
    finite = norms[np.isfinite(norms)]
    assert proxy.steps.size == 499 and 250 not in proxy.steps
    assert np.isnan(proxy.values[:49]).all()
    window = finite[300 - 49 : 301]
    assert proxy.values[300] == pytest.approx(window.mean() ** 2 / window.var(ddof=1), rel=1e-9)


def test_temporal_proxy_caps_a_constant_series() -> None:
    proxy = temporal_snr_proxy(np.arange(200), np.full(200, 0.27), window=100)
    np.testing.assert_allclose(proxy.values[99:], PROXY_MAX)
    with pytest.raises(ValueError, match="window"):
        temporal_snr_proxy(np.arange(5), np.ones(5), window=1)


def _two_batch_view(ranks: int = 4, n: int = 3000, seed: int = 0) -> RunView:
    rng = np.random.default_rng(seed)
    g_sq, trace, b_small = 0.05, 0.05 * 64.0, 8.0
    b_big = b_small * ranks
    local = np.sqrt(g_sq + trace / b_small) * np.exp(0.05 * rng.standard_normal((ranks, n)))
    global_norm = np.sqrt(g_sq + trace / b_big) * np.exp(0.05 * rng.standard_normal(n))
    steps = np.arange(n)
    matrix = RankMatrix(np.arange(ranks), steps, local, np.ones(local.shape, dtype=bool))
    return RunView(
        "two-batch",
        series={"grad_norm": Series(steps, global_norm)},
        per_rank={"grad_norm_local": matrix},
        meta={"per_rank_batch_size": b_small, "global_batch_size": b_big},
    )


def test_gradient_snr_picks_the_estimator_the_data_allows() -> None:
    view = _two_batch_view()
    snr = gradient_snr(view)
    assert snr is not None and snr.estimator == "two_batch" and snr.b_simple is not None
    # B_simple = S/|G|^2 = 64 examples; SNR at the global batch of 32 = 0.5
    assert float(np.median(snr.b_simple[500:])) == pytest.approx(64.0, rel=0.1)
    assert float(np.median(snr.values[500:])) == pytest.approx(0.5, rel=0.1)
    no_ranks = RunView("single", series=view.series, meta=view.meta)
    proxy = gradient_snr(no_ranks)
    assert proxy is not None and proxy.estimator == "temporal_proxy"
    without_batch_sizes = gradient_snr(RunView("no-meta", series=view.series, per_rank=view.per_rank))
    assert without_batch_sizes is not None and without_batch_sizes.estimator == "temporal_proxy"
    assert gradient_snr(RunView("empty")) is None


def _dipping_snr() -> SnrSeries:
    values = 2.0 * (1.0 + 0.05 * np.random.default_rng(4).standard_normal(2000))
    values[1200:1260] /= 5.0
    return SnrSeries(np.arange(0, 4000, 2), values, "temporal_proxy", "test", 100)


def test_detect_snr_collapse_finds_the_dip() -> None:
    (collapse,) = detect_snr_collapse(_dipping_snr(), factor=3.0)
    assert (collapse.start, collapse.end) == (2400, 2518)
    assert collapse.drop == pytest.approx(5.0, rel=0.15)
    assert collapse.level == pytest.approx(2.0, rel=0.05)
    steady = SnrSeries(np.arange(500), np.full(500, 2.0), "temporal_proxy", "test", 100)
    assert detect_snr_collapse(steady) == []
    with pytest.raises(ValueError, match="factor"):
        detect_snr_collapse(steady, factor=1.0)


def test_collapse_ratio_is_level_over_value() -> None:
    level, ratio = collapse_ratio(_dipping_snr())
    assert np.nanmax(ratio) == pytest.approx(5.0, rel=0.15)
    assert np.nanmedian(ratio) == pytest.approx(1.0, rel=0.05)
    assert np.isnan(level[0])


def test_snr_drop_uses_fixed_step_windows() -> None:
    snr = _dipping_snr()
    drop = snr_drop(snr, before_step=2600, lookback_steps=300, baseline_steps=300)
    assert drop.step is not None and 2400 <= drop.step < 2520
    assert drop.drop == pytest.approx(5.0, rel=0.2) and drop.level == pytest.approx(2.0, rel=0.05)
    assert drop.samples == 150
    quiet = snr_drop(snr, before_step=1000, lookback_steps=300, baseline_steps=300)
    assert quiet.drop < 1.5
    empty = snr_drop(snr, before_step=10, lookback_steps=300, baseline_steps=300)
    assert empty.samples == 0 and math.isnan(empty.drop)


@pytest.mark.parametrize("beta", [0.5, 0.99, 0.9999])
def test_ema_matches_the_recurrence_across_blocks(beta: float) -> None:
    """Long enough for the 2-D groups of whole blocks and a partial last block; NaN prefix and inf."""
    rng = np.random.default_rng(3)
    x = rng.normal(size=150_001)
    x[:7] = np.nan
    x[rng.integers(0, x.size, 50)] = np.inf
    np.testing.assert_allclose(ema(x, beta), _reference_ema(x, beta), rtol=1e-9, atol=1e-12, equal_nan=True)


def test_two_batch_snr_same_with_a_gathered_or_an_aligned_rank_matrix() -> None:
    """Per-rank norms with a column per step (no gather) and with extra columns give the same SNR."""
    rng = np.random.default_rng(4)
    steps = np.arange(0, 140_000, 2, dtype=np.int64)
    local = 3.0 * np.exp(0.1 * rng.standard_normal((4, steps.size)))
    local[rng.integers(0, 4, 30), rng.integers(0, steps.size, 30)] = np.nan
    present = rng.random(local.shape) > 0.01
    grad = Series(steps, 1.2 * np.exp(0.1 * rng.standard_normal(steps.size)))
    meta = {"per_rank_batch_size": 8.0, "global_batch_size": 32.0}
    ranks = np.arange(4, dtype=np.int64)
    aligned = RunView(
        "a", {"grad_norm": grad}, {"grad_norm_local": RankMatrix(ranks, steps, local, present)}, meta=meta
    )
    # interleave columns for odd steps nobody asks for: the gathering path
    wide_steps = np.arange(0, 140_000, dtype=np.int64)
    wide = np.full((4, wide_steps.size), 99.0)
    wide[:, ::2] = local
    wide_present = np.ones(wide.shape, dtype=bool)
    wide_present[:, ::2] = present
    gathered = RunView(
        "g", {"grad_norm": grad}, {"grad_norm_local": RankMatrix(ranks, wide_steps, wide, wide_present)}, meta=meta
    )
    a, g = gradient_snr(aligned), gradient_snr(gathered)
    assert a is not None and g is not None and a.estimator == "two_batch"
    np.testing.assert_array_equal(a.values, g.values)
    # and the mean square itself against a per-step reference
    ok = present & np.isfinite(local)
    with np.errstate(invalid="ignore"):
        expected = np.where(ok, local * local, 0.0).sum(axis=0) / ok.sum(axis=0)
    from stab_core.snr import _rank_mean_square

    np.testing.assert_allclose(_rank_mean_square(aligned, steps), expected, rtol=1e-14)


def test_detect_snr_collapse_matches_runs_of_the_whole_series_ratio() -> None:
    rng = np.random.default_rng(5)
    values = np.exp(0.2 * rng.standard_normal(150_000))
    for at in rng.integers(300, values.size - 50, 40):
        values[at : at + int(rng.integers(1, 30))] /= rng.choice([2.0, 5.0, 50.0])
    values[rng.integers(0, values.size, 30)] = np.nan
    values[rng.integers(0, values.size, 10)] = 0.0
    snr = SnrSeries(np.arange(values.size, dtype=np.int64) * 3, values, "temporal_proxy", "", 100)
    for factor, window in ((3.0, 255), (1.5, 31)):
        level, ratio = collapse_ratio(snr, window)
        with np.errstate(invalid="ignore"):
            below = ratio >= factor
        expected = []
        i = 0
        while i < values.size:
            if not below[i]:
                i += 1
                continue
            j = i
            while j + 1 < values.size and below[j + 1]:
                j += 1
            worst = i + int(np.argmax(ratio[i : j + 1]))
            expected.append((snr.steps[i], snr.steps[j], snr.steps[worst], values[worst], level[i], ratio[worst]))
            i = j + 1
        found = detect_snr_collapse(snr, factor, window)
        assert len(expected) > 5
        got = [(c.start, c.end, c.min_step, c.min_value, c.level, c.drop) for c in found]
        np.testing.assert_array_equal(np.array(got, dtype=np.float64), np.array(expected, dtype=np.float64))
