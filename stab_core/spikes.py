"""Loss and grad-norm spike detection with a robust, causal baseline.

A sample is a spike candidate when it stands far above the median of the samples logged before it,
measured two ways at once:

* the modified z-score ``0.6745 * (x - median) / MAD`` of Iglewicz & Hoaglin (1993, "How to Detect
  and Handle Outliers", ASQC Basic References in Quality Control vol. 16, ch. 3), where 0.6745 is the
  0.75 quantile of the standard normal, so that ``MAD / 0.6745`` estimates sigma for normal data;
* a ratio rule: the value over its baseline median by at least a factor (large pre-training runs
  report loss spikes of 5-10x and Megatron-LM's rerun machinery flags a loss 10x its recent maximum;
  the modest single-step spikes of small public runs are 1.3-1.8x, so the loss default is 1.2x).

For losses, a sample at least twice the z threshold out needs only 1.1x its baseline (a very large
outlier of a quiet loss). Non-finite values are always flagged. Consecutive flagged samples, and
detections that follow each other within a few samples, merge into one :class:`SpikeEvent`.

Baselines are computed on the finite samples only, over a window of ``window`` *samples* (not steps),
so a log written every N steps and a log with gaps need no special handling. The window median is
refreshed every ``stride`` samples (a strided rolling median): cost O(n * window / stride), so a
10M-sample series stays cheap with the defaults, with a baseline that lags by at most ``stride - 1``
samples.
The MAD is floored so that a quantised series (a MAD of zero) or a numerically-zero series cannot
turn every wiggle into a spike.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Final

import numpy as np
import numpy.typing as npt
from numpy.lib.stride_tricks import sliding_window_view

from stab_core.runview import FloatArray, IntArray, Series

MAD_TO_Z: Final = 0.6745
"""Iglewicz-Hoaglin constant: the standard normal's 0.75 quantile (MAD/0.6745 estimates sigma)."""

_BLOCK_WINDOWS: Final = 1 << 12
"""Windows per block in the strided median (bounds memory to block * window floats)."""

_BLOCK_ELEMENTS: Final = 1 << 16
"""Samples per block wherever a per-sample pass is done in blocks: 512 KiB temporaries stay in cache
and are reused by the allocator, where whole-series temporaries (80 MB at 10M samples) each cost
fresh pages and a trip to memory."""

OUTLIER_Z_FACTOR: Final = 2.0
"""A sample this many times ``z_threshold`` out needs only ``recover_ratio`` over its level, not
``min_ratio``: the ratio rule is for noisy series, a quiet one's outlier is clear from its z."""

_QUANTUM_SAMPLE: Final = 200_000
"""Samples used to estimate a series' logging resolution (its smallest positive difference)."""


@dataclass(frozen=True)
class SpikeParams:
    """Thresholds of :func:`detect_spikes`. Windows and gaps are counted in logged samples.

    Attributes:
        window: samples in the rolling baseline (median and MAD).
        stride: the baseline is refreshed every ``stride`` samples; it lags by at most stride-1.
        min_history: finite samples needed before a finite value may be flagged (warm-up transients).
        z_threshold: modified z-score a sample must reach to be flagged.
        min_ratio: value / baseline median a sample must also reach (ignored when the baseline <= 0).
        recover_z: an event ends at the first finite sample whose z (against the baseline frozen at
            the event's start) is <= recover_z ...
        recover_ratio: ... or whose ratio to that baseline is <= recover_ratio (hysteresis band).
        merge_gap: a new detection at most this many samples after an event's recovery joins it.
        rel_mad_floor: MAD floor as a fraction of |baseline median|.
        outlier_ratio: a sample at least twice ``z_threshold`` out is flagged when it is this many
            times its baseline, below ``min_ratio`` (None: never; grad norms of a quiet run wander
            2x at z 12 with nothing lost).
        abs_mad_floor: absolute MAD floor (in the metric's units): below it a series is treated as
            numerically zero. The series' logging resolution (its smallest positive difference) is
            also a floor, so a series printed with 2 decimals has a MAD of at least 0.01.
    """

    window: int = 63
    stride: int = 16
    min_history: int = 16
    z_threshold: float = 6.0
    min_ratio: float = 1.2
    recover_z: float = 3.0
    recover_ratio: float = 1.1
    merge_gap: int = 3
    rel_mad_floor: float = 0.01
    abs_mad_floor: float = 1e-8
    outlier_ratio: float | None = 1.1

    def __post_init__(self) -> None:
        for name in ("window", "stride", "min_history"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"SpikeParams.{name} must be a positive integer, got {value!r}")
        if self.merge_gap < 0:
            raise ValueError(f"SpikeParams.merge_gap must be >= 0, got {self.merge_gap!r}")
        if self.stride > self.window:
            raise ValueError(f"SpikeParams.stride ({self.stride}) must not exceed window ({self.window})")
        if not (self.z_threshold > self.recover_z >= 0):
            raise ValueError(
                f"SpikeParams needs z_threshold > recover_z >= 0, got {self.z_threshold} and {self.recover_z}"
            )
        if not (self.min_ratio >= self.recover_ratio >= 1.0):
            raise ValueError(
                f"SpikeParams needs min_ratio >= recover_ratio >= 1, got {self.min_ratio} and {self.recover_ratio}"
            )
        if self.rel_mad_floor < 0 or self.abs_mad_floor < 0:
            raise ValueError("SpikeParams MAD floors must be >= 0")


LOSS_SPIKE_PARAMS: Final = SpikeParams()
"""Defaults for losses (nats): flagged at z >= 6 and >= 1.2x the baseline."""

GRAD_NORM_SPIKE_PARAMS: Final = SpikeParams(min_ratio=2.0, recover_ratio=1.5, outlier_ratio=None)
"""Defaults for gradient norms: a slow drift of the norm (1.4x over a fine-tune is common) is not a
spike; a batch that doubles it is."""


def default_spike_params(metric: str) -> SpikeParams:
    """The default thresholds for a canonical metric: grad-norm-like metrics vs everything else."""
    return GRAD_NORM_SPIKE_PARAMS if metric.split("/", 1)[0].startswith("grad_norm") else LOSS_SPIKE_PARAMS


@dataclass(frozen=True)
class SpikeEvent:
    """One spike: a run of flagged samples, merged, with its recovery. Steps are optimizer steps.

    Attributes:
        metric: the series it was found in (``loss``, ``grad_norm`` ...).
        start, peak, end: first flagged step, step of the largest value (the first non-finite one if
            any), last step out of the band before recovery (the last logged step if none).
        peak_value: the value at ``peak`` (may be NaN/inf).
        baseline: the causal baseline level (:class:`RollingBaseline`) frozen at ``start``.
        ratio: peak_value / baseline (inf when non-finite, NaN when the baseline is <= 0).
        z: modified z-score of the peak against the frozen baseline.
        duration: steps from ``start`` to the recovery step, or to the last logged step.
        recovered: back within the band (see :class:`SpikeParams`) before the series ends.
        recovery_step: first step back within the band, None if never.
        diverged: never recovered, or held a non-finite value.
        nonfinite: held at least one NaN/inf.
        steps_lost: steps from ``start`` until the value is back at or below ``baseline`` (progress
            restored), or to the last logged step if it never is (a lower bound for a diverged run).
        n_samples: logged samples from start to end inclusive.
        grad_norm_lead_steps: for a non-grad-norm spike, ``start`` minus the start of the grad-norm
            spike linked to it (>0: the grad norm spiked first, 0: same step, <0: after); None when
            no grad-norm spike is near or none was looked for.
        grad_norm_led: grad_norm_lead_steps > 0, None when unknown.
    """

    metric: str
    start: int
    peak: int
    end: int
    peak_value: float
    baseline: float
    ratio: float
    z: float
    duration: int
    recovered: bool
    recovery_step: int | None
    diverged: bool
    nonfinite: bool
    steps_lost: int
    n_samples: int
    grad_norm_lead_steps: int | None = None
    grad_norm_led: bool | None = None

    @property
    def until(self) -> int:
        """The step the event is over: its recovery step, else its last step."""
        return self.recovery_step if self.recovery_step is not None else self.end

    @property
    def onset(self) -> int:
        """The first step of the disturbance: the earlier of ``start`` and a leading grad-norm spike."""
        lead = self.grad_norm_lead_steps
        return self.start - lead if lead is not None and lead > 0 else self.start


@dataclass(frozen=True)
class RollingBaseline:
    """Causal per-sample baseline: each entry uses only samples logged before it.

    ``level`` is max(median of the last ``window`` finite samples, median of the last ``stride``
    ones): on a rising trend the window median lags by half a window and the recent median does not;
    on a falling trend the window median is the higher, more cautious level. ``scale`` is the MAD of
    the last ``window`` finite samples, floored (see :class:`SpikeParams`). ``z`` is the modified
    z-score against ``level``. All three are NaN where fewer than ``min_history`` finite samples
    precede; ``z`` is also NaN for non-finite samples.
    """

    level: FloatArray
    scale: FloatArray
    z: FloatArray


def as_float_array(values: npt.ArrayLike, name: str) -> FloatArray:
    array = np.asarray(values, dtype=np.float64)
    if array.ndim != 1:
        raise ValueError(f"{name} must be 1-D, got shape {array.shape}")
    return array


def level_params(window: int) -> SpikeParams:
    """Thresholds for a rolling level of a series other than the loss (the SNR, an early-warning score):
    ``window`` samples, refreshed every window/4, from window/4 samples on."""
    stride = max(1, window // 4)
    return SpikeParams(window=window, stride=stride, min_history=stride)


def _validate_steps(steps: npt.ArrayLike, n: int) -> IntArray:
    step_array = np.asarray(steps)
    if step_array.ndim != 1 or step_array.shape[0] != n:
        raise ValueError(f"steps must be 1-D with one entry per value ({n}), got shape {step_array.shape}")
    int_steps = step_array.astype(np.int64, copy=False)
    if n > 1:
        not_increasing = int_steps[1:] <= int_steps[:-1]
        if not_increasing.any():
            bad = int(np.argmax(not_increasing)) + 1
            raise ValueError(
                f"steps must be strictly increasing; step {int(int_steps[bad])} at position {bad} "
                f"follows {int(int_steps[bad - 1])}"
            )
    return int_steps


def robust_zscore(values: npt.ArrayLike, mad_floor: float = 0.0) -> FloatArray:
    """Modified z-scores ``0.6745 * (x - median) / MAD`` over the whole array (Iglewicz & Hoaglin 1993).

    Median and MAD ignore non-finite values; those get a NaN score. The MAD is floored at
    ``mad_floor`` (same units as ``values``); with a MAD of 0 a value equal to the median scores 0 and
    any other value +/-inf. Example: [1, 2, 3, 4, 100] -> [-1.349, -0.6745, 0, 0.6745, 65.43].
    """
    x = as_float_array(values, "values")
    finite = np.isfinite(x)
    if not finite.any():
        raise ValueError("robust_zscore needs at least one finite value")
    median = float(np.median(x[finite]))
    mad = max(float(np.median(np.abs(x[finite] - median))), float(mad_floor))
    deviation = np.where(finite, x - median, np.nan)
    if mad > 0:
        return MAD_TO_Z * deviation / mad
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(deviation == 0, 0.0, MAD_TO_Z * deviation / 0.0)


def robust_zscore_columns(matrix: npt.ArrayLike, mad_floor: npt.ArrayLike = 0.0, min_finite: int = 1) -> FloatArray:
    """:func:`robust_zscore` of every column of a 2-D array at once (e.g. ranks x step buckets).

    ``mad_floor`` is a scalar or one floor per column; columns with fewer than ``min_finite`` finite
    values are all NaN. Identical, column by column, to calling :func:`robust_zscore` on each.
    """
    x = np.asarray(matrix, dtype=np.float64)
    if x.ndim != 2:
        raise ValueError(f"matrix must be 2-D (rows x columns), got shape {x.shape}")
    finite = np.isfinite(x)
    masked = np.where(finite, x, np.nan)
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN columns
        median = np.nanmedian(masked, axis=0)
        mad = np.maximum(np.nanmedian(np.abs(masked - median), axis=0), np.broadcast_to(mad_floor, median.shape))
        deviation = masked - median
        z = np.where(mad > 0, MAD_TO_Z * deviation / mad, np.where(deviation == 0, 0.0, MAD_TO_Z * deviation / 0.0))
    z[:, finite.sum(axis=0) < max(min_finite, 1)] = np.nan
    return np.asarray(z, dtype=np.float64)


def _window_median(rows: FloatArray) -> FloatArray:
    """Exact median of each row, partitioning ``rows`` in place."""
    width = rows.shape[1]
    upper = width // 2
    if width % 2:
        rows.partition(upper, axis=1)
        return rows[:, upper].copy()
    rows.partition([upper - 1, upper], axis=1)
    return 0.5 * (rows[:, upper - 1] + rows[:, upper])


def _strided_median_mad(
    finite_values: FloatArray, ends: IntArray, window: int, with_mad: bool = True
) -> tuple[FloatArray, FloatArray]:
    """Median and MAD (NaN unless ``with_mad``) of ``finite_values[max(0, e - window):e]`` for each
    window end ``e``."""
    medians = np.empty(ends.size)
    mads = np.full(ends.size, np.nan)
    short = ends < window
    for k in np.flatnonzero(short):
        chunk = finite_values[: ends[k]]
        medians[k] = np.median(chunk)
        if with_mad:
            mads[k] = np.median(np.abs(chunk - medians[k]))
    full = np.flatnonzero(~short)
    if full.size:
        windows = sliding_window_view(finite_values, window)
        for first in range(0, full.size, _BLOCK_WINDOWS):
            index = full[first : first + _BLOCK_WINDOWS]
            rows = windows[ends[index] - window]  # fancy indexing copies: safe to partition in place
            median = _window_median(rows)
            medians[index] = median
            if with_mad:
                np.subtract(rows, median[:, None], out=rows)
                np.abs(rows, out=rows)
                mads[index] = _window_median(rows)
    return medians, mads


def logging_resolution(values: npt.ArrayLike) -> float:
    """Smallest positive difference between distinct finite values (a strided sample of at most
    200k of them): the resolution the series was printed with, ~0 for unrounded floats."""
    x = as_float_array(values, "values")
    return _finite_resolution(x[np.isfinite(x)])


def _finite_resolution(x: FloatArray) -> float:
    """:func:`logging_resolution` of values already known to be finite (no n-sized filtering copy)."""
    if x.size < 2:
        return 0.0
    step = max(1, x.size // _QUANTUM_SAMPLE)
    distinct = np.unique(x[::step])
    if distinct.size < 2:
        return 0.0
    return float(np.min(np.diff(distinct)))


def _window_ends(n_finite: int, params: SpikeParams) -> IntArray:
    """Window k ends (exclusive) at finite sample stride*(k+1) and serves the finite samples
    stride*(k+1) .. stride*(k+2)-1."""
    return params.stride * np.arange(1, max(n_finite - 1, 0) // params.stride + 1, dtype=np.int64)


def _window_levels(finite_values: FloatArray, params: SpikeParams, *, with_mad: bool) -> tuple[FloatArray, FloatArray]:
    """Level and raw MAD of each window (:func:`_window_ends`); NaN where it holds fewer than
    ``min_history`` samples."""
    ends = _window_ends(finite_values.size, params)
    usable = ends >= params.min_history
    median = np.full(ends.size, np.nan)
    mad = np.full(ends.size, np.nan)
    median[usable], mad[usable] = _strided_median_mad(finite_values, ends[usable], params.window, with_mad)
    if ends.size:
        blocks = finite_values[: ends[-1]].reshape(-1, params.stride)
        recent = np.empty(blocks.shape[0])
        rows = max(1, _BLOCK_ELEMENTS // params.stride)
        for first in range(0, blocks.shape[0], rows):
            recent[first : first + rows] = _window_median(blocks[first : first + rows].copy())
        level = np.fmax(median, recent)
        level[~usable] = np.nan
    else:
        level = median
    return level, mad


def _expand(per_window: FloatArray, finite: npt.NDArray[np.bool_], stride: int) -> FloatArray:
    """Per-sample values from per-window ones: finite sample j takes window j // stride - 1; a
    non-finite sample takes the window serving the next finite sample; NaN where none."""
    n_finite = int(finite.sum()) if not finite.all() else finite.size
    dense = np.full(n_finite, np.nan)
    covered = min(per_window.size * stride, max(n_finite - stride, 0))
    if covered:
        # broadcast each window's value over its stride of samples, without a temporary
        whole = covered // stride
        dense[stride : stride + whole * stride].reshape(whole, stride)[:] = per_window[:whole, None]
        dense[stride + whole * stride : stride + covered] = per_window[min(whole, per_window.size - 1)]
    if n_finite == finite.size:
        return dense
    out = np.empty(finite.size)
    out[finite] = dense
    bad = np.flatnonzero(~finite)
    history = bad - np.arange(bad.size)  # finite samples logged before each non-finite one
    slot = np.minimum(history // stride - 1, per_window.size - 1)
    out[bad] = np.nan
    out[bad[slot >= 0]] = per_window[slot[slot >= 0]]
    return out


def rolling_level(values: npt.ArrayLike, params: SpikeParams) -> FloatArray:
    """Just the ``level`` of :func:`rolling_robust_zscore` (no MAD: half the cost)."""
    x = as_float_array(values, "values")
    finite = np.isfinite(x)
    level, _ = _window_levels(x[finite], params, with_mad=False)
    return _expand(level, finite, params.stride)


def rolling_robust_zscore(values: npt.ArrayLike, params: SpikeParams = LOSS_SPIKE_PARAMS) -> RollingBaseline:
    """Causal rolling modified z-scores: each sample against the level and MAD of the finite samples
    logged before it (see :class:`RollingBaseline`), refreshed every ``params.stride`` samples."""
    x = as_float_array(values, "values")
    windows = _baseline_windows(x, params)
    finite = windows.finite if windows.finite is not None else np.ones(x.size, dtype=bool)
    level = _expand(windows.level, finite, params.stride)
    scale = _expand(windows.scale, finite, params.stride)
    z = x - level  # NaN where there is no level; inf - level for +inf samples, reset below
    z /= scale
    z *= MAD_TO_Z
    z[~finite] = np.nan
    return RollingBaseline(level=level, scale=scale, z=z)


@dataclass(frozen=True)
class _BaselineWindows:
    """The :class:`RollingBaseline` before it is spread over the samples: ``level`` and floored
    ``scale`` per window (:func:`_window_ends`), the positions of the non-finite samples (``bad``,
    sorted) and the finite mask (None when every sample is finite)."""

    level: FloatArray
    scale: FloatArray
    bad: IntArray
    finite: npt.NDArray[np.bool_] | None
    stride: int

    def slots(self, index: IntArray) -> IntArray:
        """Window serving each sample of ``index`` (sorted), -1 where none: finite sample j (in finite
        order) takes window j // stride - 1; a non-finite one the window serving the next finite one."""
        history = index - np.searchsorted(self.bad, index) if self.bad.size else index
        return np.minimum(history // self.stride - 1, self.level.size - 1)

    def at(self, i: int) -> tuple[float, float]:
        """(level, scale) of sample ``i``: what :class:`RollingBaseline` holds there."""
        slot = int(self.slots(np.array([i], dtype=np.int64))[0])
        if slot < 0:
            return math.nan, math.nan
        return float(self.level[slot]), float(self.scale[slot])

    def spread(self, per_window: FloatArray, first: int, stop: int) -> FloatArray:
        """``per_window`` spread over samples first..stop-1 (as :func:`_expand` does for all of them)."""
        stride = self.stride
        before, inside = np.searchsorted(self.bad, [first, stop]) if self.bad.size else (0, 0)
        if before == inside and per_window.size:
            # every sample finite: sample first + k is finite sample first - before + k
            first, stop = first - before, stop - before
            lo = first // stride - 1
            hi = (stop - 1) // stride  # one past the slot of the last sample
            # the slots lo..hi-1, each over its stride of samples; NaN for the samples before window 0
            values = np.repeat(per_window[max(lo, 0) : hi], stride)
            head = min(stop, stride) - first if lo < 0 else 0
            if head > 0:
                values = np.concatenate((np.full(head, np.nan), values))
            skip = 0 if lo < 0 else first - (lo + 1) * stride
            return values[skip : skip + stop - first]
        slot = self.slots(np.arange(first, stop, dtype=np.int64))
        out = per_window[np.maximum(slot, 0)] if per_window.size else np.empty(stop - first)
        out[slot < 0] = np.nan
        return out


def _baseline_windows(x: FloatArray, params: SpikeParams) -> _BaselineWindows:
    """Level and floored MAD of each baseline window of ``x`` (see :func:`rolling_robust_zscore`)."""
    finite = np.isfinite(x)
    all_finite = bool(finite.all())
    finite_values = x if all_finite else x[finite]
    window_level, window_mad = _window_levels(finite_values, params, with_mad=True)
    resolution = _finite_resolution(finite_values)
    floor = np.maximum(params.rel_mad_floor * np.abs(window_level), max(params.abs_mad_floor, resolution))
    window_scale = np.fmax(window_mad, floor)
    bad = np.flatnonzero(~finite) if not all_finite else np.empty(0, dtype=np.int64)
    return _BaselineWindows(window_level, window_scale, bad, None if all_finite else finite, params.stride)


def level_windows(values: npt.ArrayLike, params: SpikeParams) -> _BaselineWindows:
    """The level of :func:`rolling_level` per window (``scale`` is empty), to spread over any range of
    samples with :meth:`_BaselineWindows.spread` rather than over the whole series at once."""
    x = as_float_array(values, "values")
    finite = np.isfinite(x)
    all_finite = bool(finite.all())
    level, _ = _window_levels(x if all_finite else x[finite], params, with_mad=False)
    bad = np.flatnonzero(~finite) if not all_finite else np.empty(0, dtype=np.int64)
    return _BaselineWindows(level, np.empty(0), bad, None if all_finite else finite, params.stride)


def _flagged_indices(x: FloatArray, windows: _BaselineWindows, params: SpikeParams) -> IntArray:
    """Indices of non-finite samples and of samples past both the z and the ratio rule, sorted.

    The same z as :func:`rolling_robust_zscore`, operation for operation, a block of samples at a time."""
    found = [windows.bad]
    block = max(params.stride, _BLOCK_ELEMENTS // params.stride * params.stride)
    for first in range(0, x.size, block):
        stop = min(first + block, x.size)
        values = x[first:stop]
        level = windows.spread(windows.level, first, stop)
        z = values - level
        z /= windows.spread(windows.scale, first, stop)
        z *= MAD_TO_Z
        with np.errstate(invalid="ignore"):
            hit = np.flatnonzero(z >= params.z_threshold)
        hit = hit[np.isfinite(values[hit])]
        hit_level = level[hit]
        ratio_ok = (hit_level <= 0) | (values[hit] >= params.min_ratio * hit_level)
        # a sample twice the z threshold out is flagged at the smaller recovery ratio: one very large
        # outlier of a quiet loss (0.6 nats over 2.9, z 14) need not be 1.2x its level as well
        if params.outlier_ratio is not None:
            far_out = z[hit] >= OUTLIER_Z_FACTOR * params.z_threshold
            ratio_ok |= far_out & (values[hit] >= params.outlier_ratio * hit_level)
        found.append(hit[ratio_ok] + first)
    return np.unique(np.concatenate(found)).astype(np.int64)


def _in_band(x: FloatArray, base: float, scale: float, params: SpikeParams) -> npt.NDArray[np.bool_]:
    """Finite samples back within the hysteresis band of a frozen baseline."""
    with np.errstate(invalid="ignore"):
        low_z = MAD_TO_Z * (x - base) / scale <= params.recover_z
        low_ratio = (base > 0) & (x <= params.recover_ratio * base)
    return np.isfinite(x) & (low_z | low_ratio)


def _first_true_from(x: FloatArray, start: int, test: Callable[[FloatArray], npt.NDArray[np.bool_]]) -> int | None:
    """Index of the first sample >= start where ``test(chunk)`` holds, scanning in growing chunks so a
    short event costs little and a diverged one stays linear."""
    position, chunk = start, 64
    while position < x.size:
        hits = test(x[position : position + chunk])
        if hits.any():
            return position + int(np.argmax(hits))
        position += chunk
        chunk *= 4
    return None


def build_event(
    metric: str,
    steps: IntArray,
    x: FloatArray,
    first: int,
    last: int,
    recovery: int | None,
    base: float,
    scale: float,
) -> SpikeEvent:
    """The event of samples ``first..last`` (indices into ``steps``/``x``) judged against ``base``
    (the level before it) and ``scale`` (its spread), recovering at index ``recovery`` (None: never)."""
    segment = x[first : last + 1]
    bad = ~np.isfinite(segment)
    nonfinite = bool(bad.any())
    if nonfinite:
        peak_index = first + int(np.argmax(bad))
        z, ratio = math.inf, math.inf
    else:
        peak_index = first + int(np.argmax(segment))
        z = MAD_TO_Z * (float(x[peak_index]) - base) / scale if math.isfinite(base) else math.nan
        ratio = float(x[peak_index]) / base if base > 0 else math.nan
    start = int(steps[first])
    recovery_step = int(steps[recovery]) if recovery is not None else None
    until = recovery_step if recovery_step is not None else int(steps[-1])
    restored = None
    if math.isfinite(base):
        restored = _first_true_from(x, first + 1, lambda chunk: np.isfinite(chunk) & (chunk <= base))
    steps_lost = (int(steps[restored]) if restored is not None else int(steps[-1])) - start
    return SpikeEvent(
        metric=metric,
        start=start,
        peak=int(steps[peak_index]),
        end=int(steps[last]),
        peak_value=float(x[peak_index]),
        baseline=base,
        ratio=ratio,
        z=z,
        duration=until - start,
        recovered=recovery is not None,
        recovery_step=recovery_step,
        diverged=recovery is None or nonfinite,
        nonfinite=nonfinite,
        steps_lost=steps_lost,
        n_samples=last - first + 1,
    )


def detect_spikes(
    steps: npt.ArrayLike,
    values: npt.ArrayLike,
    metric: str = "loss",
    params: SpikeParams | None = None,
    *,
    grad_norm: Series | None = None,
    max_lead_steps: int = 50,
) -> list[SpikeEvent]:
    """Spike events of one series (upward spikes only: losses and norms hurt when they rise).

    ``steps``: strictly increasing optimizer steps; ``values``: the metric (NaN/inf allowed, always
    flagged). ``params`` defaults to :func:`default_spike_params` of ``metric``. With ``grad_norm``
    (the run's grad-norm series), grad-norm spikes are detected too and linked to each event
    (:func:`link_grad_norm_lead`). Events come back sorted by start.
    """
    x = as_float_array(values, "values")
    int_steps = _validate_steps(steps, x.size)
    chosen = params if params is not None else default_spike_params(metric)
    if x.size == 0:
        return []
    windows = _baseline_windows(x, chosen)
    flagged = _flagged_indices(x, windows, chosen)
    events: list[SpikeEvent] = []
    cursor = 0  # flagged[cursor:] are not yet inside an event
    while cursor < flagged.size:
        first = int(flagged[cursor])
        event_base, event_scale = windows.at(first)
        base, scale = event_base, event_scale
        if not math.isfinite(base):
            # a non-finite value before any baseline exists: judge recovery against the first finite values
            base, scale = math.inf, 1.0

        def back_in_band(chunk: FloatArray, base: float = base, scale: float = scale) -> npt.NDArray[np.bool_]:
            return _in_band(chunk, base, scale, chosen)

        last = first
        recovery = _first_true_from(x, first + 1, back_in_band)
        while True:
            if recovery is None:
                last = x.size - 1
                break
            last = recovery - 1
            later = flagged[np.searchsorted(flagged, recovery) :]
            if later.size == 0 or int(later[0]) - recovery >= chosen.merge_gap:
                break
            recovery = _first_true_from(x, int(later[0]) + 1, back_in_band)
        events.append(build_event(metric, int_steps, x, first, last, recovery, event_base, event_scale))
        cursor = int(np.searchsorted(flagged, last, side="right"))
    if grad_norm is not None and not metric.startswith("grad_norm"):
        grad_events = detect_spikes(grad_norm.steps, grad_norm.values, "grad_norm")
        events = link_grad_norm_lead(events, grad_events, max_lead_steps)
    return events


def link_grad_norm_lead(
    events: list[SpikeEvent], grad_norm_events: list[SpikeEvent], max_lead_steps: int = 50
) -> list[SpikeEvent]:
    """Attach to each event the grad-norm spike that started closest to it: one starting at most
    ``max_lead_steps`` steps before the event's start, or inside the event (start..end)."""
    if max_lead_steps < 0:
        raise ValueError(f"max_lead_steps must be >= 0, got {max_lead_steps}")
    grad_starts = np.array([g.start for g in grad_norm_events], dtype=np.int64)
    linked: list[SpikeEvent] = []
    for event in events:
        lo = np.searchsorted(grad_starts, event.start - max_lead_steps, side="left")
        hi = np.searchsorted(grad_starts, event.end, side="right")
        if hi > lo:
            candidates = grad_starts[lo:hi]
            nearest = int(candidates[np.argmin(np.abs(candidates - event.start))])
            lead = event.start - nearest
            linked.append(replace(event, grad_norm_lead_steps=lead, grad_norm_led=lead > 0))
        else:
            linked.append(event)
    return linked


def event_at_step(
    steps: npt.ArrayLike,
    values: npt.ArrayLike,
    step: int,
    metric: str = "loss",
    params: SpikeParams | None = None,
) -> SpikeEvent:
    """The event a user points at: starting at the first logged sample at or after ``step``, judged
    against the causal baseline there, whether or not it crossed the detection thresholds (for
    "explain step N"). Its end and recovery follow the same band as :func:`detect_spikes`."""
    x = as_float_array(values, "values")
    int_steps = _validate_steps(steps, x.size)
    if x.size == 0:
        raise ValueError(f"no {metric} samples to explain step {step} with")
    first = int(np.searchsorted(int_steps, step))
    if first == x.size:
        raise ValueError(f"step {step} is after the last logged {metric} step ({int(int_steps[-1])})")
    chosen = params if params is not None else default_spike_params(metric)
    base, scale = _baseline_windows(x, chosen).at(first)
    if not math.isfinite(base):
        raise ValueError(
            f"step {int(int_steps[first])} has no baseline yet: {metric} needs {chosen.min_history} "
            "finite samples before it"
        )
    recovery = _first_true_from(x, first + 1, lambda chunk: _in_band(chunk, base, scale, chosen))
    last = recovery - 1 if recovery is not None else x.size - 1
    return build_event(metric, int_steps, x, first, last, recovery, base, scale)
