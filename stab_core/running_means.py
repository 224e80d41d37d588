"""Loss series printed as the running mean of the epoch so far, turned back into per-batch terms.

Many consoles (segmentation/detection trainers, hand-written loops with an ``AverageMeter``) print
``loss = meter.avg``: the mean of every batch since the epoch started. Such a series restarts at each
epoch's first row (a mean over one or a few batches, as noisy as a single batch) and grows smoother as
the epoch goes on, so judging it row by row as if each row were one batch is wrong both ways: the
restart looks like a spike against the smooth late rows of the previous epoch, and a real spike
inside an epoch is diluted by the ``k`` batches before it (its ratio and recovery come out wrong).

Recognition uses the values alone: the absolute row-to-row change ``|m_k - m_{k-1}|`` is periodic in
the rows (one period per epoch), largest at the epoch's restart and shrinking roughly like ``1/k``
after it. A per-batch series (noise of constant size) and an exponential moving average (no restart)
show neither. When recognised, each row after an epoch's first is replaced by the mean of the batches
logged since the row before (``(k_j m_j - k_{j-1} m_{j-1}) / (k_j - k_{j-1})``, ``k`` counted in steps
from the epoch's first row, which is taken as one batch: a first row that held more batches makes the
recovered blocks closer to the running mean, never further, so the estimate errs toward saying less).
The epoch's first row is left out: it is a mean of too few batches to compare with the blocks.
"""

from __future__ import annotations

from dataclasses import replace
from itertools import pairwise
from typing import Final

import numpy as np

from stab_core.runview import FloatArray, IntArray, RunView, Series

MIN_EPOCHS: Final = 4  # complete periods the fold needs before a restart pattern counts
MIN_ROWS_PER_EPOCH: Final = 10  # a running mean printed fewer times an epoch shows too little decay to tell
DECAY_SLOPE: Final = -0.6  # log-log slope of the change profile; 1/k decay is -1, constant noise 0
DECAY_RATIO: Final = 4.0  # early-epoch change over late-epoch change, at least
RESET_RATIO: Final = 3.0  # the restart row's change over the late-epoch change, at least
PERIOD_SHARE: Final = 0.8  # share of epochs whose largest change falls at the restart
ROUNDING_SHARE: Final = 0.02  # the most a recovered block may move by the print's rounding, of the level


def _changes(values: FloatArray) -> FloatArray:
    """``|v_i - v_{i-1}|`` for each row (row 0: NaN). A printed mean rounded to a few digits stops
    moving late in an epoch: a zero change counts as half the smallest change seen (the print's
    quantum), so logs and ratios stay finite and a rounded series is judged by what it can show."""
    out = np.full(values.shape, np.nan)
    step = np.abs(np.diff(values))
    moved = step[step > 0]
    out[1:] = np.maximum(step, moved.min() / 2 if moved.size else 1e-12)
    return out


def _period(change: FloatArray) -> int | None:
    """The row period of the change pattern: the smallest lag whose autocorrelation of log-change is
    near the largest (a multiple of the period correlates as well as the period itself)."""
    z = np.log(change[1:])
    z = z - z.mean()
    n = z.size
    if n < MIN_EPOCHS * MIN_ROWS_PER_EPOCH or not np.any(z):
        return None
    spectrum = np.fft.rfft(z, 2 * n)
    acf = np.fft.irfft(spectrum * np.conj(spectrum))[:n]
    acf = acf / acf[0] / (n - np.arange(n)) * n  # unbiased: long lags are not penalised for fewer pairs
    top = n // MIN_EPOCHS
    lags = np.arange(MIN_ROWS_PER_EPOCH, top + 1)
    if lags.size == 0:
        return None
    best = float(acf[lags].max())
    if best < 0.25:
        return None
    return int(lags[np.argmax(acf[lags] >= 0.85 * best)])


def epoch_starts(values: FloatArray) -> IntArray | None:
    """Row indices where a per-epoch running mean restarts, or None when ``values`` do not read as
    one (finite rows only; see the module docstring for the test)."""
    if values.size < MIN_EPOCHS * MIN_ROWS_PER_EPOCH or not np.isfinite(values).all():
        return None
    change = _changes(values)
    period = _period(change)
    if period is None:
        return None
    padded = np.full(-(-values.size // period) * period, np.nan)
    padded[: values.size] = change
    folded = np.nanmedian(padded.reshape(-1, period), axis=0)  # folded[j]: rows j, j + period, ...
    phase = int(np.nanargmax(folded))
    profile = np.roll(folded, -phase)  # profile[0]: the restart row's change, then rows 1, 2, ... after it
    after = profile[1:]
    late = float(np.median(after[len(after) // 2 :]))
    if late <= 0 or profile[0] < RESET_RATIO * late or np.median(after[:2]) < DECAY_RATIO * late:
        return None
    # the decay is measured where the changes stand above the print's rounding (a mean printed to three
    # digits stops moving late in the epoch: that floor is the print's, not the series'); the mean over
    # epochs, not the median, since a median of rounded changes is itself a multiple of the rounding
    mean = np.roll(np.nanmean(padded.reshape(-1, period), axis=0), -phase)[1:]
    above = mean > 3 * float(np.nanmin(change))
    if above.sum() < 4:
        return None
    slope = np.polyfit(np.log(np.arange(1, period)[above]), np.log(mean[above]), 1)[0]
    if slope > DECAY_SLOPE:
        return None
    starts = np.arange(phase, values.size, period)
    starts = starts[starts > 0]
    # each epoch's largest change must come at its restart (the row or the first rows after it: a first
    # batch near the mean moves the next row most), in most epochs, not only on the fold's median
    head = max(3, period // 10)
    hits = [int(np.argmax(change[s : s + period])) < head for s in starts if s + period <= values.size]
    if len(hits) < MIN_EPOCHS or np.mean(hits) < PERIOD_SHARE:
        return None
    return np.concatenate(([0], starts)).astype(np.int64)


def _rows_per_block(series: Series, starts: IntArray) -> int:
    """Rows each recovered block must span so that the print's rounding moves a block by under
    ``ROUNDING_SHARE`` of the loss's level: a block's error from rounding is up to ``k * quantum / span``
    (``k`` batches in the mean, ``span`` batches in the block), so a mean printed to three digits late
    in a long epoch needs blocks of many rows, one printed to six digits none."""
    steps, values = series.steps, series.values
    moved = np.abs(np.diff(values))
    moved = moved[moved > 0]
    quantum = float(moved.min()) if moved.size else 0.0  # the smallest change: the print's last digit at most
    level = float(np.median(np.abs(values)))
    epoch_steps = float(np.max(np.diff(np.append(steps[starts], steps[-1] + 1))))
    gaps = np.diff(steps)
    row_span = float(np.median(gaps[gaps > 0])) if gaps.size else 1.0
    if level <= 0:
        return 1
    need = epoch_steps * quantum / (ROUNDING_SHARE * level)  # batches a block must span
    return max(1, int(np.ceil(need / row_span)))


def per_batch_series(series: Series) -> Series | None:
    """``series`` in per-batch terms (block means between rows; epoch first rows left out) when it
    reads as a per-epoch running mean, else None. When rounding needs blocks of half an epoch or
    more, the epochs' last rows (each the mean of its whole epoch) stand for the epochs."""
    starts = epoch_starts(series.values)
    if starts is None:
        return None
    bounds = np.append(starts, series.values.size)
    every = _rows_per_block(series, starts)
    if every * 2 > int(np.median(np.diff(starts))):
        ends = bounds[1:] - 1
        return Series(series.steps[ends], series.values[ends])
    steps: list[int] = []
    values: list[float] = []
    for lo, hi in pairwise(bounds):
        rows = np.arange(lo, hi, every)
        s, m = series.steps[rows], series.values[rows]
        k = (s - series.steps[lo] + 1).astype(np.float64)  # batches in each row's mean, the first row taken as one
        block = (k[1:] * m[1:] - k[:-1] * m[:-1]) / (k[1:] - k[:-1])
        steps.extend(int(x) for x in s[1:])
        values.extend(float(x) for x in block)
    return Series(np.asarray(steps, dtype=np.int64), np.asarray(values, dtype=np.float64))


def per_batch_view(view: RunView) -> RunView:
    """``view`` with its loss in per-batch terms when the loss is a per-epoch running mean
    (``meta['loss_running_mean']`` set so the report can say so), else ``view`` itself."""
    loss = view.series.get("loss")
    blocks = per_batch_series(loss) if loss is not None else None
    if blocks is None:
        return view
    return replace(view, series={**view.series, "loss": blocks}, meta={**view.meta, "loss_running_mean": True})
