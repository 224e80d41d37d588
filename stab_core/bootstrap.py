"""Bootstrap confidence intervals for experiment figures (pure numpy: arrays in, intervals out).

The experiment runner (``stabscope experiment``) trains every arm on the same seeds, so a seed's runs
in two arms saw the same data in the same order: the difference between two arms is bootstrapped
over *seeds* (paired resampling of the per-seed differences), which is tighter than resampling each
arm on its own when seeds differ more than arms do. Intervals are percentile intervals (Efron &
Tibshirani 1993, "An Introduction to the Bootstrap", ch. 13): the ``(1-c)/2`` and ``(1+c)/2``
quantiles of the statistic over ``resamples`` resamples drawn with replacement.

Missing values (NaN: e.g. steps to recover of a run that had no spike) are left out: of one sample in
:func:`bootstrap_mean`, of the pair in :func:`bootstrap_paired_difference`. An interval of no data
is all NaN.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

DEFAULT_RESAMPLES = 10_000
"""Resamples per interval: the quantiles of a 95 % interval then move by well under 1 % of its width
between seeds of the generator."""


@dataclass(frozen=True)
class Interval:
    """A point estimate with its bootstrap confidence interval, in the statistic's own units.

    ``n``: how many values (or pairs) the estimate rests on; ``confidence``: the interval's level
    (0.95 = a 95 % interval). All three numbers are NaN when there was no data.
    """

    estimate: float
    low: float
    high: float
    n: int
    confidence: float = 0.95

    @property
    def excludes_zero(self) -> bool:
        """True when the whole interval lies on one side of 0 (a difference 'significant' at this level)."""
        return bool(self.low > 0.0 or self.high < 0.0)

    @property
    def empty(self) -> bool:
        return math.isnan(self.estimate)


def _finite(values: npt.ArrayLike) -> npt.NDArray[np.float64]:
    x = np.asarray(values, dtype=np.float64).ravel()
    return x[~np.isnan(x)]


def _check(resamples: int, confidence: float) -> None:
    if resamples < 1:
        raise ValueError(f"resamples must be >= 1, got {resamples}")
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must lie in (0, 1), got {confidence}")


def _percentile_interval(
    x: npt.NDArray[np.float64], resamples: int, confidence: float, seed: int
) -> tuple[float, float]:
    """The percentile interval of the mean of ``x`` (no NaN, at least one value)."""
    rng = np.random.default_rng(seed)
    picks = rng.integers(0, x.size, size=(resamples, x.size))
    means = x[picks].mean(axis=1)
    tail = (1.0 - confidence) / 2.0
    low, high = np.quantile(means, [tail, 1.0 - tail])
    return float(low), float(high)


def bootstrap_mean(
    values: npt.ArrayLike,
    *,
    resamples: int = DEFAULT_RESAMPLES,
    confidence: float = 0.95,
    seed: int = 0,
) -> Interval:
    """The mean of ``values`` (NaN left out) with its percentile bootstrap interval.

    A rate is the mean of 0/1 values (spiked, diverged), so this gives rates with intervals too.
    """
    _check(resamples, confidence)
    x = _finite(values)
    if x.size == 0:
        return Interval(math.nan, math.nan, math.nan, 0, confidence)
    low, high = _percentile_interval(x, resamples, confidence, seed)
    return Interval(float(x.mean()), low, high, int(x.size), confidence)


def bootstrap_paired_difference(
    arm: npt.ArrayLike,
    baseline: npt.ArrayLike,
    *,
    resamples: int = DEFAULT_RESAMPLES,
    confidence: float = 0.95,
    seed: int = 0,
) -> Interval:
    """Mean of ``arm[i] - baseline[i]`` over the pairs (seeds) where both are present, with its
    percentile interval from resampling the pairs. ``arm`` and ``baseline`` must be aligned by seed."""
    _check(resamples, confidence)
    a = np.asarray(arm, dtype=np.float64).ravel()
    b = np.asarray(baseline, dtype=np.float64).ravel()
    if a.shape != b.shape:
        raise ValueError(f"paired samples must have the same length, got {a.size} and {b.size}")
    both = ~(np.isnan(a) | np.isnan(b))
    return bootstrap_mean(a[both] - b[both], resamples=resamples, confidence=confidence, seed=seed)


def bootstrap_relative_change(
    arm: npt.ArrayLike,
    baseline: npt.ArrayLike,
    *,
    resamples: int = DEFAULT_RESAMPLES,
    confidence: float = 0.95,
    seed: int = 0,
) -> Interval:
    """``mean(arm) / mean(baseline) - 1`` over paired seeds (-0.9 = "down 90 %"), with its interval.

    Resamples whose baseline mean is 0 have no relative change and are left out of the quantiles; a
    sample whose baseline mean is 0 gives an empty interval.
    """
    _check(resamples, confidence)
    a = np.asarray(arm, dtype=np.float64).ravel()
    b = np.asarray(baseline, dtype=np.float64).ravel()
    if a.shape != b.shape:
        raise ValueError(f"paired samples must have the same length, got {a.size} and {b.size}")
    both = ~(np.isnan(a) | np.isnan(b))
    a, b = a[both], b[both]
    if a.size == 0 or b.mean() == 0.0:
        return Interval(math.nan, math.nan, math.nan, int(a.size), confidence)
    rng = np.random.default_rng(seed)
    picks = rng.integers(0, a.size, size=(resamples, a.size))
    base_means = b[picks].mean(axis=1)
    usable = base_means != 0.0
    ratios = a[picks].mean(axis=1)[usable] / base_means[usable] - 1.0
    tail = (1.0 - confidence) / 2.0
    low, high = np.quantile(ratios, [tail, 1.0 - tail])
    return Interval(float(a.mean() / b.mean() - 1.0), float(low), float(high), int(a.size), confidence)


def bootstrap_ratio(
    numerators: npt.ArrayLike,
    denominators: npt.ArrayLike,
    *,
    resamples: int = DEFAULT_RESAMPLES,
    confidence: float = 0.95,
    seed: int = 0,
) -> Interval:
    """sum(numerators) / sum(denominators) with a percentile interval from resampling the pairs
    (a cluster bootstrap: each pair is one run's counts, e.g. its warned spikes and its spikes), so
    runs with many events weigh as much as they count and events of one run stay together. Pairs with
    a zero denominator take part in the resampling; a resample whose denominators sum to zero is
    left out. ``n`` is the denominators' sum."""
    _check(resamples, confidence)
    num = np.asarray(numerators, dtype=np.float64).ravel()
    den = np.asarray(denominators, dtype=np.float64).ravel()
    if num.shape != den.shape:
        raise ValueError(f"numerators and denominators must have the same length, got {num.size} and {den.size}")
    total = float(den.sum())
    if num.size == 0 or total <= 0:
        return Interval(math.nan, math.nan, math.nan, int(total), confidence)
    rng = np.random.default_rng(seed)
    picks = rng.integers(0, num.size, size=(resamples, num.size))
    num_sums, den_sums = num[picks].sum(axis=1), den[picks].sum(axis=1)
    ratios = num_sums[den_sums > 0] / den_sums[den_sums > 0]
    tail = (1.0 - confidence) / 2.0
    low, high = np.quantile(ratios, [tail, 1.0 - tail])
    return Interval(float(num.sum()) / total, float(low), float(high), int(total), confidence)
