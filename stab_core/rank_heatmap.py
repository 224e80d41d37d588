"""The rank x step heatmap: each rank's mean of a per-rank metric in step columns.

Two stages, the same whether the rows come from a run in memory (a ``RankMatrix``, as the analyses
hold it) or from the store's rank buckets materialised at compaction:

1. :func:`step_buckets`: each rank's steps in fixed-width buckets (``step // width``, aligned on
   absolute steps, so a bucket never moves as the run grows): per bucket its first logged step and the
   mean of its finite values (NaN when it has none).
2. :func:`heatmap_columns`: those buckets grouped into ``buckets`` columns of the span [lo, hi] by
   their first step; a column's value is the unweighted mean of its buckets' finite means, its step the
   first step of its first bucket in the highest rank that logged in it.

Pure numpy: arrays in, arrays out.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np
import numpy.typing as npt

from stab_core.runview import RankMatrix

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]


class RankHeatmap(NamedTuple):
    """``matrix[i, j]``: rank ``ranks[i]``'s mean in column j (the metric's unit; NaN where the rank
    logged no finite value there); ``steps[j]``: the first logged step of column j as the highest rank
    that logged in it saw it (-1 for a column no rank logged in)."""

    ranks: IntArray
    steps: IntArray
    matrix: FloatArray


def step_buckets(
    steps: npt.NDArray[np.integer[Any]], values: npt.NDArray[np.floating[Any]], *, width: int
) -> tuple[IntArray, FloatArray]:
    """One rank's logged ``steps`` (ascending) and ``values`` in buckets of ``width`` steps: per bucket
    that holds a step, (its first step, the mean of its finite values or NaN). A NaN value (a logged
    NaN, or a record without a value) counts for the first step and not for the mean."""
    logged: IntArray = np.asarray(steps, np.int64)
    if logged.size == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.float64)
    bucket = np.floor_divide(logged, width)
    starts = np.r_[0, np.flatnonzero(np.diff(bucket)) + 1]
    finite = np.isfinite(values)
    counts = np.add.reduceat(finite.astype(np.int64), starts)
    totals = np.add.reduceat(np.where(finite, np.asarray(values, np.float64), 0.0), starts)
    means: FloatArray = np.divide(totals, counts, out=np.full(totals.size, np.nan), where=counts > 0)
    return logged[starts], means


def heatmap_columns(
    ranks: npt.NDArray[np.integer[Any]],
    first_steps: npt.NDArray[np.integer[Any]],
    means: npt.NDArray[np.floating[Any]],
    *,
    lo: int,
    hi: int,
    buckets: int,
) -> RankHeatmap:
    """The heatmap of per-rank step buckets (one entry per bucket: its rank, first step and mean, sorted
    by rank then step) over steps [lo, hi] in at most ``buckets`` columns. Buckets whose first step is
    outside [lo, hi] are left out; a rank with no bucket left has no row."""
    ranks = np.asarray(ranks, np.int64)
    first = np.asarray(first_steps, np.int64)
    means = np.asarray(means, np.float64)
    if first.size and not (lo <= first.min() and first.max() <= hi):
        inside = (first >= lo) & (first <= hi)
        first, ranks, means = first[inside], ranks[inside], means[inside]
    if not first.size:
        return RankHeatmap(np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros((0, 0)))
    cols = (first - lo) * buckets // (hi - lo + 1)
    starts = np.flatnonzero(np.r_[True, (ranks[1:] != ranks[:-1]) | (cols[1:] != cols[:-1])])
    have = ~np.isnan(means)  # a bucket without a finite value is left out of its column's mean
    count = np.add.reduceat(have.astype(np.int64), starts)
    total = np.add.reduceat(np.where(have, means, 0.0), starts)
    column_means = np.divide(total, count, out=np.full(total.size, np.nan), where=count > 0)
    row_ranks, row_cols = ranks[starts], cols[starts]
    unique_ranks = np.unique(row_ranks)
    ncols = int(row_cols.max()) + 1
    matrix = np.full((unique_ranks.size, ncols), np.nan)
    matrix[np.searchsorted(unique_ranks, row_ranks), row_cols] = column_means
    column_steps = np.full(ncols, -1, np.int64)
    column_steps[row_cols] = first[starts]
    return RankHeatmap(unique_ranks, column_steps, matrix)


def rank_heatmap(matrix: RankMatrix, *, width: int, lo: int, hi: int, buckets: int) -> RankHeatmap:
    """The heatmap of a per-rank metric held in memory: each rank's logged cells (``present``) in step
    buckets of ``width`` steps (:func:`step_buckets`), then in ``buckets`` columns of [lo, hi]
    (:func:`heatmap_columns`). Equal to the store's ``read_rank_heatmap`` of the same rows when ``width``
    is the run's ``heat_bucket`` and [lo, hi] its first and last step (up to the rounding of a bucket
    the store summed in two pieces)."""
    ranks: list[IntArray] = []
    firsts: list[IntArray] = []
    means: list[FloatArray] = []
    order = np.argsort(matrix.ranks, kind="stable")
    for i in order.tolist():
        logged = matrix.present[i]
        first, mean = step_buckets(matrix.steps[logged], matrix.values[i, logged], width=width)
        ranks.append(np.full(first.size, int(matrix.ranks[i]), np.int64))
        firsts.append(first)
        means.append(mean)
    if not firsts:
        return heatmap_columns(np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0), lo=lo, hi=hi, buckets=buckets)
    return heatmap_columns(
        np.concatenate(ranks), np.concatenate(firsts), np.concatenate(means), lo=lo, hi=hi, buckets=buckets
    )
