"""``stab_core.window_medians``: the same numbers as ``np.median(rows, axis=1)`` (the detectors' sliding windows
moved to it for speed, docs/performance.md goal 4), on the shapes and values the detectors give it."""

from __future__ import annotations

import numpy as np
import pytest
from numpy.lib.stride_tricks import sliding_window_view

from stab_core.window_medians import BLOCK_ROWS, window_medians


@pytest.mark.parametrize("width", [1, 2, 3, 8, 16, 60, 63])
def test_sliding_windows_equal_numpy_median_bit_for_bit(width: int) -> None:
    rng = np.random.default_rng(width)
    x = rng.lognormal(size=2 * BLOCK_ROWS + 77)  # more than one block, and a partial last one
    x[rng.integers(0, x.size, 40)] = np.round(x[rng.integers(0, x.size, 40)], 1)  # ties
    rows = sliding_window_view(x, width)
    assert np.array_equal(window_medians(rows), np.median(rows, axis=1))


def test_a_row_holding_nan_is_nan_and_infinities_count_as_values() -> None:
    got = window_medians(np.array([[1.0, np.nan, 3.0], [1.0, np.inf, 3.0], [-np.inf, 2.0, np.inf]]))
    assert np.isnan(got[0]) and got[1] == 3.0 and got[2] == 2.0
    even = np.array([[-np.inf, np.inf, 2.0, 5.0], [4.0, 1.0, 3.0, 2.0]])
    assert np.array_equal(window_medians(even), np.median(even, axis=1))  # (2 + 5) / 2 and (2 + 3) / 2


def test_no_rows_and_a_reshaped_block_view() -> None:
    assert window_medians(np.zeros((0, 5))).shape == (0,)
    blocks = np.arange(100.0)[::-1].reshape(-1, 10)
    assert np.array_equal(window_medians(blocks), np.median(blocks, axis=1))


def test_medians_before_are_np_median_of_the_samples_before_each_index() -> None:
    from stab_core.window_medians import medians_before

    rng = np.random.default_rng(7)
    values = rng.lognormal(size=500)
    values[::37] = values[3]  # ties
    index = np.array([1, 2, 5, 59, 60, 61, 200, 499])
    want = [np.median(values[max(0, i - 60) : i]) for i in index]
    assert medians_before(values, index, 60).tolist() == want
