"""The median of each row of a 2-D array: what ``np.median(rows, axis=1)`` gives, bit for bit, at a fraction of its
cost on the sliding windows the detectors take over a long series (a ``sliding_window_view`` of 10^6 samples by
60). ``np.median`` copies the whole view and partitions every row at two places; here the rows are partitioned in
blocks that stay in the cache, at the middle only (docs/performance.md, goal 4).

Most rules judge a sliding median only where it could pass their test (a row at 1.15x its level, the lowest level
a loss held): :func:`median_floors` bounds every window's median from below at a tenth of the cost, so that a
rule takes the exact median (:func:`window_medians_at`, the same numbers) only of the windows the bound leaves
in doubt. The answers stay those of the full sliding median; only the windows that cannot matter are skipped."""

from __future__ import annotations

from typing import Final

import numpy as np
import numpy.typing as npt
from numpy.lib.stride_tricks import sliding_window_view

FloatArray = npt.NDArray[np.float64]

BLOCK_ROWS: Final = 8192
"""Rows partitioned at a time: a block of 8192 windows of 60 samples is ~4 MB."""
FLOOR_SHARE: Final = 4
FLOOR_MIN_STRIDE: Final = 8
"""Windows of ``width`` samples share one bound in :func:`median_floors` in groups of ``width // FLOOR_SHARE``
(at least ``FLOOR_MIN_STRIDE``: a row partitioned costs more than its samples on short windows): the bound is the
middle of their union (1.25x a window's samples), a few ranks under each median, at ~1/10 of the exact
medians' cost."""
CEILING_GROUPS: Final = 16
"""Groups of windows with the lowest bounds whose exact medians bound :func:`lowest_window_median` from above:
on a stationary noisy loss the lowest median is among them, and few other windows remain in doubt."""


def _middles(block: FloatArray, width: int) -> FloatArray:
    """The middle of ``width`` samples taken in each row of ``block`` (``width`` or more samples a row): the
    ``width // 2``-th smallest for an odd ``width``, the mean of it and the one under it for an even one, as
    ``np.median`` does. On rows of ``width`` samples this is their median."""
    half = width // 2
    part = np.partition(block, half, axis=1)
    if width % 2:
        return np.asarray(part[:, half], dtype=np.float64)
    # an even length's lower middle is the largest value left of the middle one: a max over half the row
    # costs less than partitioning at a second place
    return np.asarray((part[:, :half].max(axis=1) + part[:, half]) / 2.0, dtype=np.float64)


def window_medians(rows: npt.ArrayLike) -> FloatArray:
    """The median of each row of ``rows`` (2-D, any float values): NaN for a row holding a NaN, the mean of the
    two middle values for an even row length, as ``np.median(rows, axis=1)``."""
    rows = np.asarray(rows, dtype=np.float64)
    n, width = rows.shape
    if n == 0 or width == 0:
        return np.asarray(np.median(rows, axis=1), dtype=np.float64)
    out = np.empty(n, dtype=np.float64)
    for start in range(0, n, BLOCK_ROWS):
        block = rows[start : start + BLOCK_ROWS]
        middle = _middles(block, width)
        middle[np.isnan(block).any(axis=1)] = np.nan  # np.median's answer for a row holding a NaN
        out[start : start + block.shape[0]] = middle
    return out


def window_medians_at(values: FloatArray, width: int, starts: npt.ArrayLike) -> FloatArray:
    """The median of ``values[k : k + width]`` for each ``k`` of ``starts`` (each 0 to ``values.size - width``):
    the numbers :func:`window_medians` gives those windows, a block of them copied at a time."""
    starts = np.asarray(starts, dtype=np.int64)
    out = np.empty(starts.size, dtype=np.float64)
    if starts.size == 0:
        return out
    rows = sliding_window_view(values, width)
    for first in range(0, starts.size, BLOCK_ROWS):
        out[first : first + BLOCK_ROWS] = window_medians(rows[starts[first : first + BLOCK_ROWS]])
    return out


def medians_before(values: FloatArray, index: npt.ArrayLike, window: int) -> FloatArray:
    """The median of the (up to) ``window`` samples of ``values`` before each ``index`` (each >= 1): of
    ``values[i - window : i]``, or of all before ``i`` where fewer came, as ``np.median`` gives them."""
    index = np.asarray(index, dtype=np.int64)
    out = np.empty(index.size, dtype=np.float64)
    full = index >= window
    for k in np.flatnonzero(~full):
        out[k] = np.median(values[: index[k]])
    out[full] = window_medians_at(values, window, index[full] - window)
    return out


def _stride(width: int) -> int:
    """Windows a group of :func:`median_floors` shares one bound over."""
    return max(FLOOR_MIN_STRIDE, width // FLOOR_SHARE)


def median_floors(values: FloatArray, width: int) -> FloatArray:
    """For each window ``values[k : k + width]`` (k = 0 to ``values.size - width``) a value at or under its
    median (any value for a window holding a NaN, whose median is NaN): the middle of ``width`` samples
    (:func:`_middles`) taken in the union of the ``stride`` (:func:`_stride`) windows from
    ``stride * (k // stride)`` on. A window's i-th smallest sample is at least the i-th smallest of any set
    holding it, and the mean of two middles is monotone in each (rounded sums are), so the bound holds bit for
    bit, infinities included."""
    windows = values.size - width + 1
    if windows <= 0:
        return np.empty(0, dtype=np.float64)
    stride = _stride(width)
    groups = -(-windows // stride)
    span = width + stride - 1
    # the last group's union runs past the end: +inf there adds to the union without lowering its middles
    padded = np.concatenate([values, np.full(max(0, (groups - 1) * stride + span - values.size), np.inf)])
    unions = sliding_window_view(padded, span)[::stride]
    lows = np.empty(groups, dtype=np.float64)
    for start in range(0, groups, BLOCK_ROWS):
        lows[start : start + BLOCK_ROWS] = _middles(unions[start : start + BLOCK_ROWS], width)
    # partitioned, a NaN is the largest value: the bound of a window without one stands; NaN as the middle
    # (most of the union NaN, or -inf and +inf as its two middles) bounds nothing
    lows[np.isnan(lows)] = -np.inf
    return np.repeat(lows, stride)[:windows]


def lowest_window_median(values: FloatArray, width: int) -> tuple[int, float]:
    """The first window ``values[k : k + width]`` with the lowest median and that median, as ``np.argmin`` of
    :func:`window_medians` over every window (``values`` finite, at least ``width`` samples). Exact medians are
    taken of the windows of the :data:`CEILING_GROUPS` groups with the lowest bounds
    (:func:`median_floors`), then of every other window whose bound is no higher than the lowest of those: no
    other window can hold the lowest median."""
    floors = median_floors(values, width)
    stride = _stride(width)
    groups = floors[::stride]  # one bound a group
    low = np.argpartition(groups, min(CEILING_GROUPS, groups.size) - 1)[:CEILING_GROUPS]
    lowest = (low[:, None] * stride + np.arange(stride)).ravel()
    ceiling = float(window_medians_at(values, width, lowest[lowest < floors.size]).min())
    maybe = np.flatnonzero(floors <= ceiling)
    medians = window_medians_at(values, width, maybe)
    best = int(np.argmin(medians))
    return int(maybe[best]), float(medians[best])
