"""The median of each row of a 2-D array: what ``np.median(rows, axis=1)`` gives, bit for bit, at a fraction of its
cost on the sliding windows the detectors take over a long series (a ``sliding_window_view`` of 10^6 samples by
60). ``np.median`` copies the whole view and partitions every row at two places; here the rows are partitioned in
blocks that stay in the cache, at the middle only (docs/performance.md, goal 4)."""

from __future__ import annotations

from typing import Final

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]

BLOCK_ROWS: Final = 8192
"""Rows partitioned at a time: a block of 8192 windows of 60 samples is ~4 MB."""


def window_medians(rows: npt.ArrayLike) -> FloatArray:
    """The median of each row of ``rows`` (2-D, any float values): NaN for a row holding a NaN, the mean of the
    two middle values for an even row length, as ``np.median(rows, axis=1)``."""
    rows = np.asarray(rows, dtype=np.float64)
    n, width = rows.shape
    if n == 0 or width == 0:
        return np.asarray(np.median(rows, axis=1), dtype=np.float64)
    half = width // 2
    out = np.empty(n, dtype=np.float64)
    for start in range(0, n, BLOCK_ROWS):
        block = rows[start : start + BLOCK_ROWS]
        part = np.partition(block, half, axis=1)
        # an even length's lower middle is the largest value left of the middle one: a max over half the row
        # costs less than partitioning at a second place
        middle = part[:, half] if width % 2 else (part[:, :half].max(axis=1) + part[:, half]) / 2.0
        middle[np.isnan(block).any(axis=1)] = np.nan  # np.median's answer for a row holding a NaN
        out[start : start + block.shape[0]] = middle
    return out
