"""Gradient signal-to-noise ratio: the two-batch gradient noise scale, and a temporal proxy.

Two-batch estimator (McCandlish, Kaplan, Amodei et al. 2018, "An Empirical Model of Large-Batch
Training", arXiv:1812.06162, App. A.1). With |G_B|^2 the squared norm of a gradient averaged over B
examples, E|G_B|^2 = |G|^2 + tr(Sigma)/B, so two batch sizes give unbiased estimates

    |G|^2 = (B_big |G_big|^2 - B_small |G_small|^2) / (B_big - B_small)
    S = tr(Sigma) = (|G_small|^2 - |G_big|^2) / (1/B_small - 1/B_big)
    B_simple = S / |G|^2                (the "simple" noise scale, in the batch sizes' unit)

and the SNR of a gradient averaged over B examples is |G|^2 / (S/B) = B / B_simple. Under data
parallelism B_small is the per-rank batch (the local gradient before the all-reduce) and B_big the
global batch (the gradient after it). Per-step estimates are noisy and can be negative, so |G|^2 and
S are smoothed with separate EMAs and the ratio of the EMAs is taken (the paper's advice: the EMA of
a ratio is biased).

Temporal proxy: with a single grad-norm series (most uploaded logs) the noise scale cannot be
estimated. The proxy mean^2 / variance of the grad norm over a rolling window of logged samples rises
when the norm is steady and collapses when it becomes erratic; it is *not* the noise scale and every
result says which estimator produced it (``SnrSeries.estimator``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Final, Literal

import numpy as np
import numpy.typing as npt

from stab_core.rolling_baseline import level_windows, rolling_level
from stab_core.runview import FloatArray, IntArray, RunView
from stab_core.spike_params import level_params

Estimator = Literal["two_batch", "temporal_proxy"]

ESTIMATOR_LABELS: Final[dict[str, str]] = {
    "two_batch": "gradient SNR at the global batch, B/B_simple (two-batch noise scale, McCandlish et al. 2018)",
    "temporal_proxy": "temporal SNR proxy: rolling mean^2/variance of the grad norm (not the noise scale)",
}
"""What the UI must print next to an SNR chart, by estimator."""

PROXY_MAX: Final = 1e6
"""Cap of the temporal proxy: the variance is floored at (1e-3 * mean)^2, so a constant (e.g. a
quantised) grad norm reads as 1e6 rather than infinity."""

_EMA_MAX_EXPONENT: Final = 600.0
"""Blocks of the vectorised EMA are sized so that beta^-L stays below e^600 (no float64 overflow)."""

_BLOCK_ELEMENTS: Final = 1 << 16
"""Samples per block of the per-sample passes done in blocks (cache-sized temporaries that the
allocator reuses, instead of fresh whole-series ones)."""


@dataclass(frozen=True)
class NoiseScale:
    """Two-batch noise-scale estimates; arrays for array input, floats for scalar input.

    ``g_sq``: |G|^2, squared norm of the true gradient (units of grad_norm^2).
    ``trace_sigma``: S = tr(Sigma), trace of the per-example gradient covariance (grad_norm^2 x examples).
    ``b_simple``: S/|G|^2 in the unit of the batch sizes (examples or tokens); NaN where |G|^2 <= 0 or
    S < 0 (estimates that noise pushed outside their range).
    """

    g_sq: FloatArray | float
    trace_sigma: FloatArray | float
    b_simple: FloatArray | float


@dataclass(frozen=True)
class SnrSeries:
    """A gradient SNR series: ``values[i]`` at optimizer step ``steps[i]`` (dimensionless).

    ``estimator``: ``two_batch`` (B/B_simple at ``batch``) or ``temporal_proxy``; ``label`` is the text
    the UI shows; ``batch`` is the batch the SNR refers to (global batch, two_batch only); ``b_simple``
    is the smoothed noise scale (two_batch only); ``window`` is the EMA horizon 1/(1-beta) or the
    proxy's rolling window, in logged samples.
    """

    steps: IntArray
    values: FloatArray
    estimator: Estimator
    label: str
    window: int
    batch: float | None = None
    b_simple: FloatArray | None = None


@dataclass(frozen=True)
class SnrCollapse:
    """A run of samples whose SNR sat at least ``factor`` below its recent level.

    ``start``/``end``: first and last step below; ``min_step``/``min_value``: the lowest SNR;
    ``level``: the recent level just before it fell; ``drop``: level / min_value.
    """

    start: int
    end: int
    min_step: int
    min_value: float
    level: float
    drop: float


@dataclass(frozen=True)
class SnrDrop:
    """The fall of the SNR before a step (:func:`snr_drop`): ``drop`` = ``level`` / ``value`` (1 = at
    its level, 3 = a third of it) with ``value`` the lowest SNR, at ``step``; ``samples`` SNR samples
    looked at; NaN drop and 0 samples when either window holds no finite SNR."""

    drop: float
    step: int | None
    value: float
    level: float
    samples: int


def _as_array(value: npt.ArrayLike) -> FloatArray:
    return np.asarray(value, dtype=np.float64)


def _validate_batches(b_small: npt.ArrayLike, b_big: npt.ArrayLike) -> tuple[FloatArray, FloatArray]:
    small, big = _as_array(b_small), _as_array(b_big)
    if np.any(~np.isfinite(small)) or np.any(small <= 0):
        raise ValueError(f"b_small must be a positive batch size, got {b_small!r}")
    if np.any(~np.isfinite(big)) or np.any(big <= small):
        raise ValueError(f"b_big must be larger than b_small, got b_small={b_small!r}, b_big={b_big!r}")
    return small, big


def _raw_estimates(
    g_small_sq: npt.ArrayLike, g_big_sq: npt.ArrayLike, b_small: npt.ArrayLike, b_big: npt.ArrayLike
) -> tuple[FloatArray, FloatArray]:
    small, big = _validate_batches(b_small, b_big)
    g_small, g_big = _as_array(g_small_sq), _as_array(g_big_sq)
    # (big * g_big - small * g_small) / (big - small), with one temporary fewer
    g_sq = np.multiply(big, g_big)
    g_sq -= small * g_small
    g_sq /= big - small
    g_sq = np.asarray(g_sq, dtype=np.float64)
    trace_sigma = np.subtract(g_small, g_big)
    trace_sigma /= 1.0 / small - 1.0 / big
    return g_sq, np.asarray(trace_sigma, dtype=np.float64)


def _guarded_ratio(trace_sigma: FloatArray, g_sq: FloatArray) -> FloatArray:
    valid = (g_sq > 0) & (trace_sigma >= 0)
    out = np.full(np.broadcast(trace_sigma, g_sq).shape, np.nan)
    np.divide(trace_sigma, g_sq, out=out, where=valid)
    return out


def _scalar_or_array(value: FloatArray, scalar: bool) -> FloatArray | float:
    return float(value) if scalar else value


def noise_scale(
    g_small_sq: npt.ArrayLike, g_big_sq: npt.ArrayLike, b_small: npt.ArrayLike, b_big: npt.ArrayLike
) -> NoiseScale:
    """Per-step two-batch noise scale (McCandlish et al. 2018, App. A.1), no smoothing.

    ``g_small_sq``/``g_big_sq``: squared gradient norms at batch ``b_small``/``b_big`` (b_big > b_small,
    same unit: examples or tokens). Known answers: (10, 2.125, 1, 8) -> |G|^2 1, S 9, B_simple 9;
    (24, 6.5, 32, 256) -> 4, 640, 160.
    """
    g_sq, trace_sigma = _raw_estimates(g_small_sq, g_big_sq, b_small, b_big)
    scalar = g_sq.ndim == 0
    return NoiseScale(
        g_sq=_scalar_or_array(g_sq, scalar),
        trace_sigma=_scalar_or_array(trace_sigma, scalar),
        b_simple=_scalar_or_array(_guarded_ratio(trace_sigma, g_sq), scalar),
    )


def ema(values: npt.ArrayLike, beta: float) -> FloatArray:
    """Bias-corrected exponential moving average (Adam-style: divided by 1 - beta^t).

    ``ema[t] = beta * ema[t-1] + (1 - beta) * x[t]`` over the finite samples; a non-finite sample
    leaves the average unchanged (it is carried forward), NaN before the first finite sample.
    Vectorised in blocks: cost O(n) with a Python loop over n/L blocks, L up to 4096.
    """
    if not (0.0 <= beta < 1.0):
        raise ValueError(f"beta must be in [0, 1), got {beta!r}")
    x = _as_array(values)
    if x.ndim != 1:
        raise ValueError(f"ema needs a 1-D array, got shape {x.shape}")
    return _ema_of_finite(x, np.isfinite(x), beta)


def _ema_of_finite(x: FloatArray, finite: npt.NDArray[np.bool_], beta: float) -> FloatArray:
    """:func:`ema` of ``x`` over the samples where ``finite`` holds (all of them must be finite)."""
    return _emas_of_finite((x,), finite, beta)[0]


def _emas_of_finite(series: tuple[FloatArray, ...], finite: npt.NDArray[np.bool_], beta: float) -> list[FloatArray]:
    """:func:`ema` of each of ``series`` over the samples where ``finite`` holds (all finite there):
    one carry index for all of them."""
    if not (0.0 <= beta < 1.0):
        raise ValueError(f"beta must be in [0, 1), got {beta!r}")
    all_finite = bool(finite.all())
    out: list[FloatArray] = []
    last: IntArray | None = None
    for x in series:
        y = x if all_finite else x[finite]
        smoothed = y.copy() if beta == 0.0 else _blocked_ema(y, beta)
        if all_finite:
            out.append(smoothed)
            continue
        if smoothed.size == 0:
            out.append(np.full(x.size, np.nan))
            continue
        if last is None:
            # each sample takes the average at the last finite sample up to it (carried over
            # non-finite ones): the finite samples counted so far, minus one, index the smoothed series
            last = np.cumsum(finite)
            last -= 1
            np.maximum(last, 0, out=last)
        filled = smoothed[last]
        filled[: int(np.argmax(finite))] = np.nan
        out.append(filled)
    return out


def _blocked_ema(y: FloatArray, beta: float) -> FloatArray:
    block = int(max(1, min(4096, _EMA_MAX_EXPONENT / -math.log(beta))))
    powers = beta ** np.arange(1, block + 1, dtype=np.float64)  # beta^(t+1) for t in the block
    inverse = beta ** -np.arange(block, dtype=np.float64)  # beta^-k
    out = np.empty(y.size)
    state = 0.0
    # whole blocks a group at a time, as a 2-D array: the same operations as the 1-D loop below,
    # with only the carried state (one float per block) done in Python
    whole = y.size // block
    group = max(1, _BLOCK_ELEMENTS // block)
    scale = powers / beta
    for first_block in range(0, whole, group):
        lo, hi = first_block * block, min(first_block + group, whole) * block
        accumulated = np.cumsum(y[lo:hi].reshape(-1, block) * inverse, axis=1)
        accumulated *= scale
        accumulated *= 1.0 - beta
        states = np.empty(accumulated.shape[0])
        for row in range(states.size):
            states[row] = state
            state = float(accumulated[row, -1] + state * powers[-1])
        accumulated += states[:, None] * powers
        out[lo:hi] = accumulated.reshape(-1)
    for first in range(whole * block, y.size, block):
        chunk = y[first : first + block]
        n = chunk.size
        # (1-beta) * sum_k beta^(t-k) y_k, computed as beta^t * cumsum(beta^-k y_k)
        accumulated = np.cumsum(chunk * inverse[:n]) * (powers[:n] / beta) * (1.0 - beta)
        out[first : first + n] = accumulated + state * powers[:n]
        state = float(out[first + n - 1])
    # the bias correction 1 - beta^t is exactly 1 in float64 once beta^t < 2^-53
    corrected = min(y.size, math.ceil(-37.0 / math.log(beta)))
    out[:corrected] /= 1.0 - beta ** np.arange(1, corrected + 1, dtype=np.float64)
    return out


def noise_scale_ema(
    g_small_sq: npt.ArrayLike,
    g_big_sq: npt.ArrayLike,
    b_small: float,
    b_big: float,
    beta: float = 0.99,
) -> NoiseScale:
    """Smoothed two-batch noise scale: separate EMAs of the per-step |G|^2 and S estimates, and
    B_simple as the ratio of the EMAs (NaN where the smoothed |G|^2 <= 0 or S < 0).

    1-D arrays, one entry per step; non-finite steps are skipped (the EMAs hold). ``beta`` 0.99
    averages over ~100 steps.
    """
    g_sq, trace_sigma = _raw_estimates(g_small_sq, g_big_sq, b_small, b_big)
    if g_sq.ndim != 1:
        raise ValueError(f"noise_scale_ema needs 1-D per-step arrays, got shape {g_sq.shape}")
    both = np.isfinite(g_sq) & np.isfinite(trace_sigma)
    smooth_g, smooth_s = _emas_of_finite((g_sq, trace_sigma), both, beta)
    return NoiseScale(g_sq=smooth_g, trace_sigma=smooth_s, b_simple=_guarded_ratio(smooth_s, smooth_g))


def snr_at_batch(b_simple: npt.ArrayLike, batch: float) -> FloatArray:
    """SNR of a gradient averaged over ``batch`` examples: batch / B_simple (same unit)."""
    if not (math.isfinite(batch) and batch > 0):
        raise ValueError(f"batch must be a positive number, got {batch!r}")
    noise = _as_array(b_simple)
    out = np.full(noise.shape, np.nan)
    np.divide(batch, noise, out=out, where=noise > 0)
    return out


def two_batch_snr(
    steps: npt.ArrayLike,
    g_small_sq: npt.ArrayLike,
    g_big_sq: npt.ArrayLike,
    b_small: float,
    b_big: float,
    beta: float = 0.99,
) -> SnrSeries:
    """SNR at the global batch from the smoothed two-batch noise scale: b_big / B_simple."""
    smoothed = noise_scale_ema(g_small_sq, g_big_sq, b_small, b_big, beta)
    b_simple = np.asarray(smoothed.b_simple, dtype=np.float64)
    step_array = np.asarray(steps, dtype=np.int64)
    if step_array.shape != b_simple.shape:
        raise ValueError(f"steps has shape {step_array.shape}, the norms {b_simple.shape}")
    return SnrSeries(
        steps=step_array,
        values=snr_at_batch(b_simple, b_big),
        estimator="two_batch",
        label=ESTIMATOR_LABELS["two_batch"],
        window=round(1.0 / (1.0 - beta)),
        batch=float(b_big),
        b_simple=b_simple,
    )


def temporal_snr_proxy(steps: npt.ArrayLike, grad_norm: npt.ArrayLike, window: int = 100) -> SnrSeries:
    """Rolling mean^2 / variance (ddof 1) of the grad norm over the last ``window`` finite samples,
    including the current one (causal). Only finite samples appear; the first window-1 are NaN.
    Capped at :data:`PROXY_MAX`. A proxy, labelled as such: it is not the gradient noise scale."""
    if window < 2:
        raise ValueError(f"window must be >= 2 samples, got {window}")
    norms = _as_array(grad_norm)
    step_array = np.asarray(steps, dtype=np.int64)
    if norms.ndim != 1 or step_array.shape != norms.shape:
        raise ValueError(f"steps and grad_norm must be 1-D of equal length, got {step_array.shape}, {norms.shape}")
    finite = np.isfinite(norms)
    y, kept_steps = norms[finite], step_array[finite]
    values = np.full(y.size, np.nan)
    if y.size >= window:
        # cumulative sums of centred values keep the variance's cancellation error small
        centre = float(np.mean(y))
        centred = y - centre
        sums = np.empty(y.size + 1)
        sums[0] = 0.0
        np.cumsum(centred, out=sums[1:])
        np.multiply(centred, centred, out=centred)
        squares = np.empty(y.size + 1)
        squares[0] = 0.0
        np.cumsum(centred, out=squares[1:])
        window_sum = sums[window:] - sums[:-window]
        variance = squares[window:] - squares[:-window]
        window_sum /= window  # now the centred window mean
        variance -= window_sum * window_sum * window
        variance /= window - 1
        mean = window_sum
        mean += centre
        mean *= mean  # now mean^2
        # floor the variance at mean^2 / PROXY_MAX (and at the smallest positive float)
        np.maximum(variance, mean / PROXY_MAX, out=variance)
        np.maximum(variance, 1e-300, out=variance)
        values[window - 1 :] = mean / variance
    return SnrSeries(
        steps=kept_steps,
        values=values,
        estimator="temporal_proxy",
        label=ESTIMATOR_LABELS["temporal_proxy"],
        window=window,
    )


def _rank_mean_square(view: RunView, steps: IntArray) -> FloatArray | None:
    """Mean over ranks of the local squared grad norm at ``steps`` (NaN where no rank logged)."""
    matrix = view.per_rank.get("grad_norm_local")
    if matrix is None or matrix.ranks.size < 2:
        return None
    if matrix.steps is steps or (matrix.steps.shape == steps.shape and np.array_equal(matrix.steps, steps)):
        return _aligned_rank_mean_square(matrix.values, matrix.present)
    columns = np.searchsorted(matrix.steps, steps)
    columns = np.minimum(columns, matrix.steps.size - 1)
    on_axis = matrix.steps[columns] == steps
    total = np.zeros(steps.size)
    count = np.zeros(steps.size)
    for row in range(matrix.ranks.size):  # one rank at a time: no ranks x steps temporaries
        local = matrix.values[row, columns]
        ok = on_axis & matrix.present[row, columns] & np.isfinite(local)
        total += np.where(ok, local * local, 0.0)
        count += ok
    mean = np.full(steps.size, np.nan)
    np.divide(total, count, out=mean, where=count > 0)
    return mean


def _aligned_rank_mean_square(values: FloatArray, present: npt.NDArray[np.bool_]) -> FloatArray:
    """:func:`_rank_mean_square` when the matrix has a column per step: the same sums, a block of
    steps at a time, with no gather."""
    ranks, n = values.shape
    mean = np.full(n, np.nan)
    for first in range(0, n, _BLOCK_ELEMENTS):
        stop = min(first + _BLOCK_ELEMENTS, n)
        total = np.zeros(stop - first)
        count = np.zeros(stop - first)
        for row in range(ranks):
            local = values[row, first:stop]
            ok = present[row, first:stop] & np.isfinite(local)
            total += np.where(ok, local * local, 0.0)
            count += ok
        np.divide(total, count, out=mean[first:stop], where=count > 0)
    return mean


def _logging_interval(steps: IntArray) -> int:
    """Median gap between logged steps (steps)."""
    return max(1, int(np.median(np.diff(steps)))) if steps.size > 1 else 1


def gradient_snr(view: RunView, proxy_window: int = 100, beta: float = 0.99) -> SnrSeries | None:
    """The best SNR a run's data allows: the two-batch estimator when the run has per-rank
    ``grad_norm_local`` (>= 2 ranks), the run-level ``grad_norm`` and ``meta`` batch sizes
    (``per_rank_batch_size`` < ``global_batch_size``); else the temporal proxy of ``grad_norm``;
    None without a grad norm. ``beta`` is the EMA decay per optimizer step (0.99: ~100 steps);
    ``proxy_window`` is in logged samples."""
    grad = view.series.get("grad_norm")
    if grad is None or grad.steps.size == 0:
        return None
    b_small, b_big = view.meta.get("per_rank_batch_size"), view.meta.get("global_batch_size")
    if isinstance(b_small, int | float) and isinstance(b_big, int | float) and 0 < b_small < b_big:
        local_sq = _rank_mean_square(view, grad.steps)
        if local_sq is not None and np.isfinite(local_sq).any():
            # beta is per optimizer step: a log written every N steps decays N steps' worth per sample
            per_sample = beta ** _logging_interval(grad.steps)
            return two_batch_snr(grad.steps, local_sq, grad.values**2, float(b_small), float(b_big), per_sample)
    return temporal_snr_proxy(grad.steps, grad.values, proxy_window)


def collapse_ratio(snr: SnrSeries, level_window: int = 255) -> tuple[FloatArray, FloatArray]:
    """(level, level / value) per sample: ``level`` is the causal rolling level of the SNR (the
    larger of the median of the last ``level_window`` finite samples and of the most recent
    level_window/4, refreshed every level_window/4 samples, from level_window/4 samples on; see
    :func:`stab_core.rolling_baseline.rolling_level`); a ratio of 3 means the SNR is a third of its
    recent level. NaN where undefined."""
    if level_window < 2:
        raise ValueError(f"level_window must be >= 2 samples, got {level_window}")
    level = rolling_level(snr.values, level_params(level_window))
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(snr.values > 0, level / snr.values, np.where(level > 0, np.inf, np.nan))
    return level, ratio


def detect_snr_collapse(snr: SnrSeries, factor: float = 3.0, level_window: int = 255) -> list[SnrCollapse]:
    """Runs of samples where the SNR fell to ``1/factor`` of its recent level or below
    (:func:`collapse_ratio`)."""
    if not factor > 1.0:
        raise ValueError(f"factor must be > 1, got {factor!r}")
    if level_window < 2:
        raise ValueError(f"level_window must be >= 2 samples, got {level_window}")
    values = np.asarray(snr.values, dtype=np.float64)
    windows = level_windows(values, level_params(level_window))

    def level_and_ratio(first: int, stop: int) -> tuple[FloatArray, FloatArray]:
        # collapse_ratio's level and ratio on samples first..stop-1
        level = windows.spread(windows.level, first, stop)
        chunk = values[first:stop]
        with np.errstate(divide="ignore", invalid="ignore"):
            ratio = np.where(chunk > 0, level / chunk, np.where(level > 0, np.inf, np.nan))
        return level, ratio

    found = []
    for first in range(0, values.size, _BLOCK_ELEMENTS):
        _, ratio = level_and_ratio(first, min(first + _BLOCK_ELEMENTS, values.size))
        with np.errstate(invalid="ignore"):
            found.append(np.flatnonzero(ratio >= factor) + first)
    below = np.concatenate(found) if found else np.empty(0, dtype=np.int64)
    if below.size == 0:
        return []
    # runs of consecutive indices
    breaks = np.flatnonzero(np.diff(below) > 1)
    firsts = below[np.concatenate(([0], breaks + 1))]
    lasts = below[np.concatenate((breaks, [below.size - 1]))]
    collapses: list[SnrCollapse] = []
    for first, last in zip(firsts.tolist(), lasts.tolist(), strict=True):
        level, ratio = level_and_ratio(first, last + 1)
        worst = int(np.argmax(ratio))
        collapses.append(
            SnrCollapse(
                start=int(snr.steps[first]),
                end=int(snr.steps[last]),
                min_step=int(snr.steps[first + worst]),
                min_value=float(values[first + worst]),
                level=float(level[0]),
                drop=float(ratio[worst]),
            )
        )
    return collapses


def snr_drop(snr: SnrSeries, before_step: int, lookback_steps: int, baseline_steps: int) -> SnrDrop:
    """How far the SNR fell in the ``lookback_steps`` before ``before_step`` (exclusive) below its level
    over the ``baseline_steps`` before that: level = median of the finite SNR in
    ``[before - lookback - baseline, before - lookback)``, drop = level / the lowest SNR in
    ``[before - lookback, before)``. Fixed windows in steps, so a slow trend over the run (the SNR
    falls as training proceeds) does not read as a collapse."""
    if lookback_steps < 1 or baseline_steps < 1:
        raise ValueError(f"lookback_steps and baseline_steps must be >= 1, got {lookback_steps}, {baseline_steps}")
    recent_from = before_step - lookback_steps
    a, b, c = np.searchsorted(snr.steps, [recent_from - baseline_steps, recent_from, before_step])
    baseline, recent = snr.values[a:b], snr.values[b:c]
    baseline = baseline[np.isfinite(baseline)]
    finite_recent = np.isfinite(recent)
    if baseline.size == 0 or not finite_recent.any():
        return SnrDrop(drop=math.nan, step=None, value=math.nan, level=math.nan, samples=0)
    level = float(np.median(baseline))
    lowest = b + int(np.argmin(np.where(finite_recent, recent, np.inf)))
    value = float(snr.values[lowest])
    # a zero SNR under a positive level is an infinite drop
    drop = level / value if value > 0 else (math.inf if level > 0 else math.nan)
    return SnrDrop(drop=drop, step=int(snr.steps[lowest]), value=value, level=level, samples=int(finite_recent.sum()))
