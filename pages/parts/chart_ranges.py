"""Default y ranges of the pages' chart panels: a range that warmup and far outliers do not set
(``robust_y_range``), the data's own span, and the range Plotly's autorange shows; all on linear or log
axes (log10 units, as Plotly takes them)."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from ingest.store import SeriesData

HEAD_FRACTION = 0.05
"""Share of the shown steps (the warmup's) left out of a panel's default y range."""
RANGE_PAD = 0.1
"""Padding of a default y range, as a share of its span, on each side."""
PEAK_STRETCH = 1.0
"""An incident peak up to this many spans above the default range stretches it; further out it is marked."""
MIN_RELATIVE_SPAN = 0.05
"""A default y range spans at least this share of the series' level (linear axes)."""
MIN_LOG_SPAN = 0.05
"""A default log y range spans at least this many decades."""


def data_y_span(curves: Sequence[tuple[str, SeriesData]], *, log_y: bool) -> tuple[float, float] | None:
    lows = [s.min[np.isfinite(s.min) & ((s.min > 0) if log_y else True)] for _, s in curves]
    highs = [s.max[np.isfinite(s.max)] for _, s in curves]
    lows, highs = [a for a in lows if a.size], [a for a in highs if a.size]
    if not lows or not highs:
        return None
    return float(min(a.min() for a in lows)), float(max(a.max() for a in highs))


def edge_of_range(y_range: tuple[float, float] | None, *, log_y: bool) -> float | None:
    """A y value just inside the top of the range (data units; the range is log10 units on a log axis)."""
    if y_range is None:
        return None
    y = y_range[1] - 0.04 * (y_range[1] - y_range[0])
    return float(10**y if log_y else y)


def robust_y_range(
    curves: Sequence[tuple[np.ndarray, np.ndarray]],
    peaks: Sequence[float] = (),
    *,
    log_y: bool = False,
    head_fraction: float = HEAD_FRACTION,
    min_span: float = 0.0,
) -> tuple[float, float] | None:
    """A y range for a panel that warmup and far outliers do not set.

    ``curves``: (steps, values) pairs drawn in the panel. The values from the first ``head_fraction`` of
    the shown steps are left out (the warmup's loss of 11 or grad norm of 15 would flatten a run that sits
    at 3.3 and 0.3), and the range spans the 0.5-99.5 % quantiles of the rest (at least
    ``MIN_RELATIVE_SPAN`` of their level), stretched to every value and incident peak (``peaks``, same
    units) within ``PEAK_STRETCH`` spans of it, padded by ``RANGE_PAD`` of the span. A value or peak
    further out stays off scale (``peak_markers`` marks an incident's at the edge). On a log axis
    (``log_y``) the range is in log10 units, as Plotly takes it, and only positive values count. None
    when no finite value is shown (let Plotly autorange). ``min_span``: the least span on a linear axis.
    """
    finite = [(np.asarray(s), np.asarray(v, dtype=np.float64)) for s, v in curves if np.size(s)]
    if not finite:
        return None
    first = min(float(s.min()) for s, _ in finite)
    last = max(float(s.max()) for s, _ in finite)
    cut = first + head_fraction * (last - first)

    def usable(v: np.ndarray) -> np.ndarray:
        keep = np.isfinite(v) & (v > 0) if log_y else np.isfinite(v)
        return np.log10(v[keep]) if log_y else v[keep]

    tail = np.concatenate([usable(v[s >= cut]) for s, v in finite])
    if not tail.size:  # everything shown is in the head (a zoom into the warmup): use it all
        tail = np.concatenate([usable(v) for _, v in finite])
    if not tail.size:
        return None
    low, high = (float(q) for q in np.quantile(tail, [0.005, 0.995]))
    span = high - low
    # never narrower than MIN_RELATIVE_SPAN of the level: a flat LR logged to 6 decimals would
    # otherwise fill the panel with its rounding steps
    least = MIN_LOG_SPAN if log_y else max(MIN_RELATIVE_SPAN * max(abs(low), abs(high)), min_span, 1e-12)
    if span < least:
        middle = (low + high) / 2
        low, high, span = middle - least / 2, middle + least / 2, least
    # near outliers and incident peaks (within PEAK_STRETCH spans) stay on the chart; far ones do not
    reach_low, reach_high = low - PEAK_STRETCH * span, high + PEAK_STRETCH * span
    usable_peaks = [math.log10(p) if log_y else p for p in peaks if math.isfinite(p) and (p > 0 or not log_y)]
    near = np.concatenate([tail, np.asarray(usable_peaks, dtype=np.float64)])
    near = near[(near >= reach_low) & (near <= reach_high)]
    low, high = min(low, float(near.min(initial=low))), max(high, float(near.max(initial=high)))
    lowest = float(tail.min())
    pad_low, pad_high = low - RANGE_PAD * span, high + RANGE_PAD * span
    if not log_y and lowest >= 0 > pad_low:  # a non-negative series (LR, norms) never needs a negative axis
        pad_low = 0.0
    return pad_low, pad_high


def autorange_of(span: tuple[float, float] | None, *, log_y: bool) -> tuple[float, float] | None:
    """The range Plotly's autorange will show (data extremes), in axis units, for placing edge markers."""
    if span is None:
        return None
    if log_y:
        if span[0] <= 0 or span[1] <= 0:
            return None
        return math.log10(span[0]), math.log10(span[1])
    return span
