"""Early warning, measured: does a score cross its threshold *before* a spike, and how often for nothing?

A predictor here is a causal score per logged sample (it uses only samples logged up to that one) and
a threshold. An alarm is the first sample of each excursion of the score to or above the threshold.
Against the spikes of a run (their first and last steps), with a horizon of K steps:

- an alarm at step a *warns* of a spike starting at s when s - K <= a < s (strictly before the spike);
- an alarm inside a spike (s <= a <= end) is neither a hit nor a false alarm: it came too late to warn;
- every other alarm is a false alarm.

Precision = alarms that warned / alarms outside spikes; recall = spikes warned / spikes; lead = s minus
the earliest warning alarm, in steps. Over several runs the counts are summed and the intervals come
from resampling runs (:func:`stab_core.bootstrap.bootstrap_ratio`), since alarms and spikes of one run
are not independent.

Scores (all causal, all ">= threshold means alarm"):

- :func:`snr_fall_score`: the gradient SNR's trailing level divided by its value (3 = fell to a third),
  the thesis's predictor;
- :func:`rising_zscore`: the causal rolling robust z-score of a series (grad norm, loss), the
  baselines any monitor already has.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from stab_core.analysis import RunAnalysis
from stab_core.bootstrap import DEFAULT_RESAMPLES, Interval, bootstrap_ratio
from stab_core.rolling_baseline import as_float_array, rolling_level, rolling_robust_zscore
from stab_core.runview import FloatArray, IntArray, RunView
from stab_core.spike_params import SpikeParams, level_params


@dataclass(frozen=True)
class RunWarnings:
    """One run's alarms scored against its spikes (counts; ``leads`` in steps, one per warned spike)."""

    alarms: int
    """Alarms outside spikes (the denominator of precision)."""
    warning_alarms: int
    """Of those, alarms that came within the horizon before a spike's start."""
    spikes: int
    warned: int
    """Spikes with at least one alarm in [start - horizon, start)."""
    leads: tuple[int, ...]

    @property
    def false_alarms(self) -> int:
        return self.alarms - self.warning_alarms


@dataclass(frozen=True)
class PredictorScore:
    """A predictor's precision and recall over runs, with bootstrap intervals (runs resampled)."""

    precision: Interval
    recall: Interval
    median_lead: float
    """Median lead of the warned spikes, in steps (NaN when none was warned)."""
    alarms: int
    false_alarms: int
    spikes: int
    warned: int
    runs: int


def _level_params(window: int) -> SpikeParams:
    if window < 4:
        raise ValueError(f"window must be >= 4 samples, got {window}")
    return level_params(window)


def snr_fall_score(snr: npt.ArrayLike, window: int = 64) -> FloatArray:
    """The trailing level of the SNR (median of the last ``window`` samples logged before each one,
    as :func:`stab_core.rolling_baseline.rolling_level`) divided by the SNR itself: 1 = at its level, 3 = fell
    to a third. NaN while fewer than window/4 samples precede or where the SNR is not finite; +inf
    where the SNR is <= 0 under a positive level."""
    x = as_float_array(snr, "snr")
    level = rolling_level(x, _level_params(window))
    with np.errstate(divide="ignore", invalid="ignore"):
        score = np.where(x > 0, level / x, np.where(level > 0, np.inf, np.nan))
    score[~np.isfinite(x)] = np.nan
    return score


def rising_zscore(values: npt.ArrayLike, window: int = 64) -> FloatArray:
    """The causal rolling modified z-score of ``values`` (each sample against the median and MAD of
    the samples logged before it; :func:`stab_core.rolling_baseline.rolling_robust_zscore`)."""
    x = as_float_array(values, "values")
    return rolling_robust_zscore(x, _level_params(window)).z


def alarm_steps(steps: npt.ArrayLike, score: npt.ArrayLike, threshold: float) -> IntArray:
    """Steps where ``score`` reaches ``threshold`` after being below it (or undefined): the first
    sample of each excursion. NaN never alarms."""
    s = np.asarray(steps, dtype=np.int64)
    x = as_float_array(score, "score")
    if s.shape != x.shape:
        raise ValueError(f"steps and score must have the same length, got {s.size} and {x.size}")
    with np.errstate(invalid="ignore"):
        above = x >= threshold
    previous = np.concatenate(([False], above[:-1]))
    return s[above & ~previous]


def score_run(alarms: npt.ArrayLike, spikes: Sequence[tuple[int, int]], horizon: int) -> RunWarnings:
    """Score one run's alarm steps against its spikes, each ``(first_step, last_step)``, with a
    horizon of ``horizon`` steps (see the module docstring)."""
    if horizon < 1:
        raise ValueError(f"horizon must be >= 1 step, got {horizon}")
    a = np.sort(np.asarray(alarms, dtype=np.int64))
    inside = np.zeros(a.size, dtype=bool)
    warning = np.zeros(a.size, dtype=bool)
    leads: list[int] = []
    warned = 0
    for start, end in spikes:
        if end < start:
            raise ValueError(f"a spike must end at or after its start, got ({start}, {end})")
        inside |= (a >= start) & (a <= end)
        before = (a >= start - horizon) & (a < start)
        warning |= before
        if before.any():
            warned += 1
            leads.append(int(start - a[before].min()))
    outside = ~inside
    return RunWarnings(
        alarms=int(outside.sum()),
        warning_alarms=int((warning & outside).sum()),
        spikes=len(spikes),
        warned=warned,
        leads=tuple(leads),
    )


def score_predictor(
    runs: Sequence[RunWarnings], *, resamples: int = DEFAULT_RESAMPLES, confidence: float = 0.95, seed: int = 0
) -> PredictorScore:
    """Precision and recall summed over ``runs``, with intervals from resampling runs."""
    hits = [r.warning_alarms for r in runs]
    alarms = [r.alarms for r in runs]
    warned = [r.warned for r in runs]
    spikes = [r.spikes for r in runs]
    leads = [lead for r in runs for lead in r.leads]
    return PredictorScore(
        precision=bootstrap_ratio(hits, alarms, resamples=resamples, confidence=confidence, seed=seed),
        recall=bootstrap_ratio(warned, spikes, resamples=resamples, confidence=confidence, seed=seed),
        median_lead=float(np.median(leads)) if leads else math.nan,
        alarms=sum(alarms),
        false_alarms=sum(alarms) - sum(hits),
        spikes=sum(spikes),
        warned=sum(warned),
        runs=len(runs),
    )


@dataclass(frozen=True)
class FallBefore:
    """The largest score in the ``lookback`` steps before a spike's start (``score``, at ``step``)
    and the first step of that window where the score reached the threshold (``crossed``; None when
    it did not): ``lead`` = start - crossed, in steps."""

    score: float
    step: int | None
    crossed: int | None
    lead: int | None


def fall_before(steps: npt.ArrayLike, score: npt.ArrayLike, start: int, lookback: int, threshold: float) -> FallBefore:
    """How far the score rose (for the SNR: how far it fell) in ``[start - lookback, start)``."""
    if lookback < 1:
        raise ValueError(f"lookback must be >= 1 step, got {lookback}")
    s = np.asarray(steps, dtype=np.int64)
    x = as_float_array(score, "score")
    window = (s >= start - lookback) & (s < start) & ~np.isnan(x)
    if not window.any():
        return FallBefore(score=math.nan, step=None, crossed=None, lead=None)
    ws, wx = s[window], x[window]
    worst = int(np.argmax(wx))
    over = np.flatnonzero(wx >= threshold)
    crossed = int(ws[over[0]]) if over.size else None
    return FallBefore(
        score=float(wx[worst]),
        step=int(ws[worst]),
        crossed=crossed,
        lead=start - crossed if crossed is not None else None,
    )


@dataclass(frozen=True)
class Predictor:
    """A score on one series and its alarm threshold: ``source`` is ``snr`` (the run's gradient SNR,
    scored by :func:`snr_fall_score`) or a run-level metric (``grad_norm``, ``loss``: scored by
    :func:`rising_zscore`); ``window`` in logged samples."""

    source: str
    threshold: float
    window: int = 64

    @property
    def name(self) -> str:
        kind = "SNR fall >=" if self.source == "snr" else f"{self.source} z >="
        return f"{kind} {self.threshold:g}"


DEFAULT_PREDICTORS: tuple[Predictor, ...] = (
    *(Predictor("snr", t) for t in (1.5, 2.0, 3.0)),
    *(Predictor("grad_norm", t) for t in (3.0, 6.0)),
    *(Predictor("loss", t) for t in (3.0, 6.0)),
)
"""The thesis's score at three depths of fall, against the z-scores any monitor already computes."""


def spike_spans(analysis: RunAnalysis, metric: str | None = None) -> list[tuple[int, int]]:
    """(onset, until) of each incident (of those that hold ``metric``, every one when None): from the
    earlier of its start and a leading grad-norm spike (so a grad-norm jump that opens the incident is
    part of it, not a warning of it) to its recovery step, else its last step."""
    return [
        (item.spike.onset, item.spike.until)
        for item in analysis.spikes
        if metric is None
        or metric == item.spike.metric
        or (item.incident is not None and metric in item.incident.metrics)
    ]


def run_warnings(
    view: RunView, analysis: RunAnalysis, predictors: Sequence[Predictor], horizon: int, metric: str | None = None
) -> dict[Predictor, RunWarnings | None]:
    """Each predictor's alarms on one run scored against the run's incidents (those holding ``metric``:
    ``loss`` for loss spikes; every incident when None); None where the run lacks the predictor's series."""
    spans = spike_spans(analysis, metric)
    out: dict[Predictor, RunWarnings | None] = {}
    for predictor in predictors:
        if predictor.source == "snr":
            if analysis.snr is None:
                out[predictor] = None
                continue
            steps, score = analysis.snr.steps, snr_fall_score(analysis.snr.values, predictor.window)
        else:
            series = view.series.get(predictor.source)
            if series is None:
                out[predictor] = None
                continue
            steps, score = series.steps, rising_zscore(series.values, predictor.window)
        out[predictor] = score_run(alarm_steps(steps, score, predictor.threshold), spans, horizon)
    return out
