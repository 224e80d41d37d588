"""Loss and grad-norm spike detection with a robust, causal baseline.

A sample is a spike candidate when it stands far above the median of the samples logged before it,
measured two ways at once:

* the modified z-score ``0.6745 * (x - median) / MAD`` of Iglewicz & Hoaglin (1993, "How to Detect
  and Handle Outliers", ASQC Basic References in Quality Control vol. 16, ch. 3), where 0.6745 is the
  0.75 quantile of the standard normal, so that ``MAD / 0.6745`` estimates sigma for normal data;
* a ratio rule: the value over its baseline median by at least a factor (large pre-training runs
  report loss spikes of 5-10x and Megatron-LM's rerun machinery flags a loss 10x its recent maximum;
  the modest single-step spikes of small public runs are 1.3-1.8x, so the loss default is 1.2x).

For losses, a sample at least twice the z threshold out needs only 1.1x its baseline (a very large
outlier of a quiet loss). Non-finite values are always flagged. Consecutive flagged samples, and
detections that follow each other within a few samples, merge into one :class:`SpikeEvent`.
The rolling baseline itself (levels, MADs, robust z-scores) is in ``stab_core.rolling_baseline``; the
thresholds in ``stab_core.spike_params``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Final

import numpy as np
import numpy.typing as npt

from stab_core.rolling_baseline import (
    BLOCK_ELEMENTS,
    MAD_TO_Z,
    BaselineWindows,
    as_float_array,
    baseline_windows,
)
from stab_core.runview import FloatArray, IntArray, Series
from stab_core.spike_params import SpikeParams, default_spike_params

OUTLIER_Z_FACTOR: Final = 2.0
"""A sample this many times ``z_threshold`` out needs only ``recover_ratio`` over its level, not
``min_ratio``: the ratio rule is for noisy series, a quiet one's outlier is clear from its z."""


def times(ratio: float) -> str:
    """A ratio as said: "1.27x"; from 10,000x up "5.1e+13x" (two decimals of a 10^13 ratio say nothing)."""
    return f"{ratio:.2f}x" if abs(ratio) < 1e4 else f"{ratio:.2g}x"


@dataclass(frozen=True)
class SpikeEvent:
    """One spike: a run of flagged samples, merged, with its recovery. Steps are optimizer steps.

    Attributes:
        metric: the series it was found in (``loss``, ``grad_norm`` ...).
        start, peak, end: first flagged step, step of the largest value (the first non-finite one if
            any), last step out of the band before recovery (the last logged step if none).
        peak_value: the value at ``peak`` (may be NaN/inf).
        baseline: the causal baseline level (``stab_core.rolling_baseline.RollingBaseline``) frozen at ``start``.
        ratio: peak_value / baseline (inf when non-finite, NaN when the baseline is <= 0).
        z: modified z-score of the peak against the frozen baseline.
        duration: steps from ``start`` to the recovery step, or to the last logged step.
        recovered: back within the band (see ``stab_core.spike_params.SpikeParams``) before the series ends.
        recovery_step: first step back within the band, None if never.
        diverged: never recovered, or held a non-finite value.
        nonfinite: held at least one NaN/inf.
        steps_lost: steps from ``start`` until the value is back at or below ``baseline`` (progress
            restored), or to the last logged step if it never is (a lower bound for a diverged run).
        n_samples: logged samples from start to end inclusive.
        longest_out: the most consecutive logged samples out of the band (None: ``n_samples``); under
            ``n_samples`` when later detections within ``merge_gap`` samples of a return joined the event.
        grad_norm_lead_steps: for a non-grad-norm spike, ``start`` minus the start of the grad-norm
            spike linked to it (>0: the grad norm spiked first, 0: same step, <0: after); None when
            no grad-norm spike is near or none was looked for.
        grad_norm_led: grad_norm_lead_steps > 0, None when unknown.
    """

    metric: str
    start: int
    peak: int
    end: int
    peak_value: float
    baseline: float
    ratio: float
    z: float
    duration: int
    recovered: bool
    recovery_step: int | None
    diverged: bool
    nonfinite: bool
    steps_lost: int
    n_samples: int
    grad_norm_lead_steps: int | None = None
    grad_norm_led: bool | None = None
    longest_out: int | None = None

    @property
    def until(self) -> int:
        """The step the event is over: its recovery step, else its last step."""
        return self.recovery_step if self.recovery_step is not None else self.end

    @property
    def onset(self) -> int:
        """The first step of the disturbance: the earlier of ``start`` and a leading grad-norm spike."""
        lead = self.grad_norm_lead_steps
        return self.start - lead if lead is not None and lead > 0 else self.start


def _validate_steps(steps: npt.ArrayLike, n: int) -> IntArray:
    step_array = np.asarray(steps)
    if step_array.ndim != 1 or step_array.shape[0] != n:
        raise ValueError(f"steps must be 1-D with one entry per value ({n}), got shape {step_array.shape}")
    int_steps = step_array.astype(np.int64, copy=False)
    if n > 1:
        not_increasing = int_steps[1:] <= int_steps[:-1]
        if not_increasing.any():
            bad = int(np.argmax(not_increasing)) + 1
            raise ValueError(
                f"steps must be strictly increasing; step {int(int_steps[bad])} at position {bad} "
                f"follows {int(int_steps[bad - 1])}"
            )
    return int_steps


def _flagged_indices(x: FloatArray, windows: BaselineWindows, params: SpikeParams) -> IntArray:
    """Indices of non-finite samples and of samples past both the z and the ratio rule, sorted.

    The same z as ``stab_core.rolling_baseline.rolling_robust_zscore``, operation for operation, a block
    of samples at a time."""
    found = [windows.bad]
    block = max(params.stride, BLOCK_ELEMENTS // params.stride * params.stride)
    for first in range(0, x.size, block):
        stop = min(first + block, x.size)
        values = x[first:stop]
        level = windows.spread(windows.level, first, stop)
        z = values - level
        z /= windows.spread(windows.scale, first, stop)
        z *= MAD_TO_Z
        with np.errstate(invalid="ignore"):
            hit = np.flatnonzero(z >= params.z_threshold)
        hit = hit[np.isfinite(values[hit])]
        hit_level = level[hit]
        ratio_ok = (hit_level <= 0) | (values[hit] >= params.min_ratio * hit_level)
        # a sample twice the z threshold out is flagged at the smaller recovery ratio: one very large
        # outlier of a quiet loss (0.6 nats over 2.9, z 14) need not be 1.2x its level as well
        if params.outlier_ratio is not None:
            far_out = z[hit] >= OUTLIER_Z_FACTOR * params.z_threshold
            ratio_ok |= far_out & (values[hit] >= params.outlier_ratio * hit_level)
        found.append(hit[ratio_ok] + first)
    return np.unique(np.concatenate(found)).astype(np.int64)


def _in_band(x: FloatArray, base: float, scale: float, params: SpikeParams) -> npt.NDArray[np.bool_]:
    """Finite samples back within the hysteresis band of a frozen baseline."""
    with np.errstate(invalid="ignore"):
        low_z = MAD_TO_Z * (x - base) / scale <= params.recover_z
        low_ratio = (base > 0) & (x <= params.recover_ratio * base)
    # an exact 0.0 under a positive level is a placeholder (a non-finite step dropped from the logged mean,
    # a skipped update's norm) or a collapse, never the series back at its level (docs/diagnosis.md, "Spike detector")
    real: npt.NDArray[np.bool_] = np.isfinite(x) & ((x != 0.0) | (base <= 0))
    return real & (low_z | low_ratio)


def _first_true_from(x: FloatArray, start: int, test: Callable[[FloatArray], npt.NDArray[np.bool_]]) -> int | None:
    """Index of the first sample >= start where ``test(chunk)`` holds, scanning in growing chunks so a
    short event costs little and a diverged one stays linear."""
    position, chunk = start, 64
    while position < x.size:
        hits = test(x[position : position + chunk])
        if hits.any():
            return position + int(np.argmax(hits))
        position += chunk
        chunk *= 4
    return None


def build_event(
    metric: str,
    steps: IntArray,
    x: FloatArray,
    first: int,
    last: int,
    recovery: int | None,
    base: float,
    scale: float,
) -> SpikeEvent:
    """The event of samples ``first..last`` (indices into ``steps``/``x``) judged against ``base``
    (the level before it) and ``scale`` (its spread), recovering at index ``recovery`` (None: never)."""
    segment = x[first : last + 1]
    bad = ~np.isfinite(segment)
    nonfinite = bool(bad.any())
    if nonfinite:
        peak_index = first + int(np.argmax(bad))
        z, ratio = math.inf, math.inf
    else:
        peak_index = first + int(np.argmax(segment))
        z = MAD_TO_Z * (float(x[peak_index]) - base) / scale if math.isfinite(base) else math.nan
        ratio = float(x[peak_index]) / base if base > 0 else math.nan
    start = int(steps[first])
    recovery_step = int(steps[recovery]) if recovery is not None else None
    until = recovery_step if recovery_step is not None else int(steps[-1])
    restored = None
    if math.isfinite(base):
        restored = _first_true_from(x, first + 1, lambda chunk: np.isfinite(chunk) & (chunk <= base))
    steps_lost = (int(steps[restored]) if restored is not None else int(steps[-1])) - start
    return SpikeEvent(
        metric=metric,
        start=start,
        peak=int(steps[peak_index]),
        end=int(steps[last]),
        peak_value=float(x[peak_index]),
        baseline=base,
        ratio=ratio,
        z=z,
        duration=until - start,
        recovered=recovery is not None,
        recovery_step=recovery_step,
        # a value gone non-finite with the series back finite in its band later is no divergence: weights
        # that went non-finite never give a finite loss or grad norm again (docs/diagnosis.md, "Spike detector")
        diverged=recovery is None,
        nonfinite=nonfinite,
        steps_lost=steps_lost,
        n_samples=last - first + 1,
    )


def detect_spikes(
    steps: npt.ArrayLike,
    values: npt.ArrayLike,
    metric: str = "loss",
    params: SpikeParams | None = None,
    *,
    grad_norm: Series | None = None,
    max_lead_steps: int = 50,
) -> list[SpikeEvent]:
    """Spike events of one series (upward spikes only: losses and norms hurt when they rise).

    ``steps``: strictly increasing optimizer steps; ``values``: the metric (NaN/inf allowed, always
    flagged). ``params`` defaults to ``stab_core.spike_params.default_spike_params`` of ``metric``. With ``grad_norm``
    (the run's grad-norm series), grad-norm spikes are detected too and linked to each event
    (:func:`link_grad_norm_lead`). Events come back sorted by start.
    """
    x = as_float_array(values, "values")
    int_steps = _validate_steps(steps, x.size)
    chosen = params if params is not None else default_spike_params(metric)
    if x.size == 0:
        return []
    windows = baseline_windows(x, chosen)
    flagged = _flagged_indices(x, windows, chosen)
    events: list[SpikeEvent] = []
    cursor = 0  # flagged[cursor:] are not yet inside an event
    while cursor < flagged.size:
        first = int(flagged[cursor])
        event_base, event_scale = windows.at(first)
        base, scale = event_base, event_scale
        if not math.isfinite(base):
            # a non-finite value before any baseline exists: judge recovery against the first finite values
            base, scale = math.inf, 1.0

        def back_in_band(chunk: FloatArray, base: float = base, scale: float = scale) -> npt.NDArray[np.bool_]:
            return _in_band(chunk, base, scale, chosen)

        last = first
        recovery = _first_true_from(x, first + 1, back_in_band)
        segment, longest = first, 0  # the most consecutive samples out: merged detections' returns split it
        bad = 0  # non-finite samples in the event so far
        while True:
            if recovery is None:
                last = x.size - 1
                break
            last = recovery - 1
            longest = max(longest, last + 1 - segment)
            bad += int(np.count_nonzero(~np.isfinite(x[segment:recovery])))
            later = flagged[np.searchsorted(flagged, recovery) :]
            if later.size == 0 or not _joins(x, int(later[0]), recovery, bad, chosen.merge_gap):
                break
            segment = int(later[0])
            recovery = _first_true_from(x, segment + 1, back_in_band)
        event = build_event(metric, int_steps, x, first, last, recovery, event_base, event_scale)
        events.append(
            replace(event, longest_out=longest) if recovery is not None and longest < last + 1 - first else event
        )
        cursor = int(np.searchsorted(flagged, last, side="right"))
    if grad_norm is not None and not metric.startswith("grad_norm"):
        grad_events = detect_spikes(grad_norm.steps, grad_norm.values, "grad_norm")
        events = link_grad_norm_lead(events, grad_events, max_lead_steps)
    return events


def _joins(x: FloatArray, later: int, recovery: int, bad: int, merge_gap: int) -> bool:
    """Whether the detection at ``later`` joins the event that returned at ``recovery``: within
    ``merge_gap`` samples; or, for a non-finite value after an event that held ``bad`` non-finite
    ones, within ``bad`` samples: the fault recurring, not a new incident (a loss printed as a running
    mean over the epoch stays NaN from a bad batch to the epoch's end and restarts finite at the next
    epoch's first line, which is no recovery)."""
    gap = later - recovery
    return gap < merge_gap or (bad > 0 and not math.isfinite(float(x[later])) and gap < bad)


def link_grad_norm_lead(
    events: list[SpikeEvent], grad_norm_events: list[SpikeEvent], max_lead_steps: int = 50
) -> list[SpikeEvent]:
    """Attach to each event the grad-norm spike that started closest to it: one starting at most
    ``max_lead_steps`` steps before the event's start, or inside the event (start..end)."""
    if max_lead_steps < 0:
        raise ValueError(f"max_lead_steps must be >= 0, got {max_lead_steps}")
    grad_starts = np.array([g.start for g in grad_norm_events], dtype=np.int64)
    linked: list[SpikeEvent] = []
    for event in events:
        lo = np.searchsorted(grad_starts, event.start - max_lead_steps, side="left")
        hi = np.searchsorted(grad_starts, event.end, side="right")
        if hi > lo:
            candidates = grad_starts[lo:hi]
            nearest = int(candidates[np.argmin(np.abs(candidates - event.start))])
            lead = event.start - nearest
            linked.append(replace(event, grad_norm_lead_steps=lead, grad_norm_led=lead > 0))
        else:
            linked.append(event)
    return linked


def event_at_step(
    steps: npt.ArrayLike,
    values: npt.ArrayLike,
    step: int,
    metric: str = "loss",
    params: SpikeParams | None = None,
) -> SpikeEvent:
    """The event a user points at: starting at the first logged sample at or after ``step``, judged
    against the causal baseline there, whether or not it crossed the detection thresholds (for
    "explain step N"). Its end and recovery follow the same band as :func:`detect_spikes`."""
    x = as_float_array(values, "values")
    int_steps = _validate_steps(steps, x.size)
    if x.size == 0:
        raise ValueError(f"no {metric} samples to explain step {step} with")
    first = int(np.searchsorted(int_steps, step))
    if first == x.size:
        raise ValueError(f"step {step} is after the last logged {metric} step ({int(int_steps[-1])})")
    chosen = params if params is not None else default_spike_params(metric)
    base, scale = baseline_windows(x, chosen).at(first)
    if not math.isfinite(base):
        raise ValueError(
            f"step {int(int_steps[first])} has no baseline yet: {metric} needs {chosen.min_history} "
            "finite samples before it"
        )
    recovery = _first_true_from(x, first + 1, lambda chunk: _in_band(chunk, base, scale, chosen))
    last = recovery - 1 if recovery is not None else x.size - 1
    return build_event(metric, int_steps, x, first, last, recovery, base, scale)
