"""The one min/max downsampling of a series: steps in equal buckets, each bucket's first step, mean of
its finite values, min and max with the step of each, and its count of non-finite values, so a
single-step spike survives any number of buckets."""

from __future__ import annotations

import numpy as np

from ingest.store.types import SeriesData


def downsample(
    metric: str,
    source: str,
    steps: np.ndarray,
    low: np.ndarray,
    high: np.ndarray,
    mean: np.ndarray,
    *,
    lo: int,
    hi: int,
    buckets: int,
    nonfinite: np.ndarray | None = None,
    nan_is_null: bool = False,
    valid: np.ndarray | None = None,
) -> SeriesData:
    """Steps in ``buckets`` equal step ranges over [lo, hi] (``floor((step - lo) * buckets / span)``,
    as the SQL groups them): first step, min of ``low`` and max of ``high`` with the step where each
    is (the first, on ties), mean of the finite ``mean``, and the non-finite count (``nonfinite`` per
    row when given, else the non-finite ``mean`` values). NaN orders above every number, as in DuckDB:
    a bucket holding a NaN has NaN as its max, and as its min only when it holds nothing else; with
    ``nan_is_null`` (NaN stands for SQL NULL) it is left out of both. ``valid`` marks the rows that hold a
    value (False: a value-less record, read as NaN): such a row counts for its bucket's first step only,
    and a bucket of them alone has NaN figures."""
    if steps.size == 0:
        no_counts = np.zeros(0, np.int64)
        return SeriesData(
            metric, steps, mean, low, high, source, bucketed=True, min_step=steps, max_step=steps, n_nonfinite=no_counts
        )
    # Bucket k holds the steps s with k * span <= (s - lo) * buckets < (k + 1) * span: it starts at
    # the first step >= lo + ceil(k * span / buckets). Empty buckets give repeated starts.
    span = hi - lo + 1
    bounds = lo - (-np.arange(buckets, dtype=np.int64) * span // buckets)
    starts = np.searchsorted(steps, bounds)
    starts = starts[np.r_[True, np.diff(starts) > 0] & (starts < steps.size)]
    finite = np.isfinite(mean)
    if finite.all():
        count = np.diff(np.r_[starts, steps.size])
        total = np.add.reduceat(mean, starts)
        nonfinite = np.zeros(starts.size, np.int64) if nonfinite is None else np.add.reduceat(nonfinite, starts)
    else:
        count = np.add.reduceat(finite.astype(np.int64), starts)
        total = np.add.reduceat(np.where(finite, mean, 0.0), starts)
        if nonfinite is None:
            nonfinite = ~finite if valid is None else ~finite & valid
        nonfinite = np.add.reduceat(nonfinite.astype(np.int64), starts)
    small = np.fmin.reduceat(low, starts)
    if valid is None:
        large = (np.fmax if nan_is_null else np.maximum).reduceat(high, starts)
    else:
        large = np.maximum.reduceat(np.where(valid, high, -np.inf), starts)
        large[np.add.reduceat(valid.astype(np.int64), starts) == 0] = np.nan
    return SeriesData(
        metric,
        steps[starts],
        np.divide(total, count, out=np.full(total.size, np.nan), where=count > 0),
        small,
        large,
        source,
        bucketed=True,
        min_step=steps[_first_equal(low, small, starts, valid)],
        max_step=steps[_first_equal(high, large, starts, valid)],
        n_nonfinite=nonfinite,
    )


def _first_equal(
    values: np.ndarray, per_bucket: np.ndarray, starts: np.ndarray, valid: np.ndarray | None = None
) -> np.ndarray:
    """Index of the first value of each bucket equal to the bucket's figure (NaN equals NaN; rows not
    ``valid`` equal nothing; a bucket without one, all NULL, points at its first row)."""
    ends = np.r_[starts[1:], values.size]
    wanted = np.repeat(per_bucket, ends - starts)
    equal = values == wanted
    if np.isnan(per_bucket).any():
        equal |= np.isnan(values) & np.isnan(wanted)
    if valid is not None:
        equal &= valid
    hits = np.flatnonzero(equal)
    if not hits.size:
        return starts
    first = hits[np.minimum(np.searchsorted(hits, starts), hits.size - 1)]
    return np.where(first < ends, first, starts)
