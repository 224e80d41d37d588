"""The robust, causal rolling baseline that spike detection (``stab_core.spikes``) measures samples
against: the median and MAD of the samples logged before each one, and its modified z-score
``0.6745 * (x - median) / MAD`` (Iglewicz & Hoaglin 1993).

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
from dataclasses import dataclass
from typing import Final

import numpy as np
import numpy.typing as npt
from numpy.lib.stride_tricks import sliding_window_view

from stab_core.runview import FloatArray, IntArray
from stab_core.spike_params import LOSS_SPIKE_PARAMS, SpikeParams

MAD_TO_Z: Final = 0.6745
"""Iglewicz-Hoaglin constant: the standard normal's 0.75 quantile (MAD/0.6745 estimates sigma)."""

_BLOCK_WINDOWS: Final = 1 << 12
"""Windows per block in the strided median (bounds memory to block * window floats)."""

BLOCK_ELEMENTS: Final = 1 << 16
"""Samples per block wherever a per-sample pass is done in blocks: 512 KiB temporaries stay in cache
and are reused by the allocator, where whole-series temporaries (80 MB at 10M samples) each cost
fresh pages and a trip to memory."""
_QUANTUM_SAMPLE: Final = 200_000
"""Samples used to estimate a series' logging resolution (its smallest positive difference)."""


NOISE_MIN_SAMPLES: Final = 5
"""Finite samples needed to take a noise scale: 3 second differences, the fewest whose median ignores
one outlier among them. With fewer, an early rise must top every sample before it (the range of what
there is is the only band they give)."""


DESCENT_MIN_SAMPLES: Final = 3
"""Samples a fall from a run's first sample needs before its foot counts as a level (two are one step)."""
DESCENT_SLACK: Final = 1.01
"""A sample at most this factor above the one before still continues a descent (an initial loss repeated
to the fourth digit, 10.48134 -> 10.48144, has not turned)."""


def descends(values: FloatArray) -> bool:
    """Whether ``values`` (finite) are :data:`DESCENT_MIN_SAMPLES` or more samples, each at most
    :data:`DESCENT_SLACK` times the one before: the loss falling from its initial level."""
    return values.size >= DESCENT_MIN_SAMPLES and bool(np.all(values[1:] <= DESCENT_SLACK * values[:-1]))


def sample_noise(values: FloatArray) -> float:
    """The run's own per-sample noise as a MAD (same units as ``values``): the median absolute second
    difference of consecutive finite samples over sqrt(6) (x[i-1] - 2 x[i] + x[i+1] of independent
    noise has 6 times its variance). Second differences cancel a straight trend: a 10-step run whose
    loss falls 1.2 a step has a noise of ~0.07, not the 0.9 first differences would say; the median
    ignores the spikes themselves. 0 with fewer than :data:`NOISE_MIN_SAMPLES` finite samples (no
    scale: the ratio rules alone apply)."""
    x = values[np.isfinite(values)]
    if x.size < NOISE_MIN_SAMPLES:
        return 0.0
    return float(np.median(np.abs(np.diff(x, 2)))) / float(np.sqrt(6.0))


@dataclass(frozen=True)
class RollingBaseline:
    """Causal per-sample baseline: each entry uses only samples logged before it.

    ``level`` is max(median of the last ``window`` finite samples, median of the last ``stride``
    ones): on a rising trend the window median lags by half a window and the recent median does not;
    on a falling trend the window median is the higher, more cautious level. ``scale`` is the MAD of
    the last ``window`` finite samples, floored (see ``stab_core.spike_params.SpikeParams``). ``z`` is the modified
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
        rows = max(1, BLOCK_ELEMENTS // params.stride)
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
    windows = baseline_windows(x, params)
    finite = windows.finite if windows.finite is not None else np.ones(x.size, dtype=bool)
    level = _expand(windows.level, finite, params.stride)
    scale = _expand(windows.scale, finite, params.stride)
    z = x - level  # NaN where there is no level; inf - level for +inf samples, reset below
    z /= scale
    z *= MAD_TO_Z
    z[~finite] = np.nan
    return RollingBaseline(level=level, scale=scale, z=z)


@dataclass(frozen=True)
class BaselineWindows:
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


def baseline_windows(x: FloatArray, params: SpikeParams) -> BaselineWindows:
    """Level and floored MAD of each baseline window of ``x`` (see :func:`rolling_robust_zscore`)."""
    finite = np.isfinite(x)
    all_finite = bool(finite.all())
    finite_values = x if all_finite else x[finite]
    window_level, window_mad = _window_levels(finite_values, params, with_mad=True)
    resolution = _finite_resolution(finite_values)
    floor = np.maximum(params.rel_mad_floor * np.abs(window_level), max(params.abs_mad_floor, resolution))
    window_scale = np.fmax(window_mad, floor)
    bad = np.flatnonzero(~finite) if not all_finite else np.empty(0, dtype=np.int64)
    return BaselineWindows(window_level, window_scale, bad, None if all_finite else finite, params.stride)


def level_windows(values: npt.ArrayLike, params: SpikeParams) -> BaselineWindows:
    """The level of :func:`rolling_level` per window (``scale`` is empty), to spread over any range of
    samples with :meth:`BaselineWindows.spread` rather than over the whole series at once."""
    x = as_float_array(values, "values")
    finite = np.isfinite(x)
    all_finite = bool(finite.all())
    level, _ = _window_levels(x if all_finite else x[finite], params, with_mad=False)
    bad = np.flatnonzero(~finite) if not all_finite else np.empty(0, dtype=np.int64)
    return BaselineWindows(level, np.empty(0), bad, None if all_finite else finite, params.stride)
