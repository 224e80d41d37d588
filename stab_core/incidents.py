"""What happened to a run, as a user acts on it: logging gaps, early instability, climbs, and incidents.

A loss spike and the grad-norm spike that comes with it are one incident, not two: counts, steps lost
and dollars are per incident. Steps where every logged metric is non-finite or absent, step time and
memory included, are a gap in the logging (or its end), not a numerical fault: a NaN loss from an
overflow leaves the step time, the LR and the memory finite.

The spike detector (:mod:`stab_core.spikes`) needs ``min_history`` samples before it can judge one;
:func:`early_rises` covers the samples before that (a loss that rises many-fold over its starting
value), and :func:`detect_climbs` a sustained rise over the lowest level reached, which a rolling
baseline follows up and so never flags.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Final, Literal

import numpy as np
import numpy.typing as npt

from stab_core.rolling_baseline import MAD_TO_Z
from stab_core.runview import FloatArray, IntArray, RankMatrix, RunView, Series
from stab_core.scanned_events import scanned_events
from stab_core.severity import Certainty, SeverityLevel
from stab_core.spikes import SpikeEvent, build_event
from stab_core.window_medians import window_medians

IncidentKind = Literal["spike", "early_instability", "climb"]

EARLY_MIN_RATIO: Final = 1.3
"""An early sample this many times the lowest loss before it is instability (a loss falls at the start)."""
CLIMB_MIN_RATIO: Final = 1.3
"""A smoothed loss this many times the lowest smoothed level reached is a climb ..."""
CLIMB_MIN_SAMPLES: Final = 8
"""... when it stays that high for at least this many logged samples."""
RECOVER_RATIO: Final = 1.1
"""An early rise or a climb has recovered once the loss is back within this factor of its level."""
CLIMB_SMOOTH: Final = 5
"""Samples in the trailing median that smooths the loss for :func:`detect_climbs` (one-sample spikes vanish)."""
EARLY_JUMP_RECENT: Final = 8
"""Samples before a sample that its early level and noise are taken from: the recent ones, since a
loss or grad norm falls fast in a run's first steps and a longer median would sit far above it."""
EARLY_JUMP_MIN_SAMPLES: Final = 3
"""Samples needed before the first one an early jump may be judged (a median of fewer is no level)."""
EARLY_JUMP_REL_FLOOR: Final = 0.05
"""Floor of an early level's MAD, as a fraction of the level: a few samples understate the noise."""
DIP_HELD_SAMPLES: Final = 63
"""Finite samples before a climb's lowest one whose median is the level the loss held before it (the spike
detector's window): a climb that only comes back to that level rose out of a dip, not over its level."""
DIP_MIN_SAMPLES: Final = 16
"""Fewer samples before the lowest one hold no level to judge a dip by (the detector's ``min_history``)."""
_CLIMB_MAX_POINTS: Final = 40_000
"""Above this many samples, climbs are looked for on block medians (a climb spans many samples)."""

_TRAINING_MATH: Final = frozenset(
    {"clip_coef", "num-zeros", "num_zeros", "router_z_loss", "expert_load_max_over_mean", "nonfinite_grads", "snr"}
)


def is_training_math(metric: str) -> bool:
    """True for metrics a numerical fault can turn non-finite (losses, gradient norms, the loss scale,
    router statistics); False for bookkeeping a fault leaves finite (step time, memory, LR, tokens,
    throughput, counters)."""
    base = metric.split("/", 1)[0]
    return "loss" in base or base.startswith("grad_norm") or base in _TRAINING_MATH


# --------------------------------------------------------------------------------------------------
# Logging gaps
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class LoggingGaps:
    """Where a run logged nothing usable: ``gaps`` are (first, last) step ranges with finite data after
    them; ``end`` is the first step of a trailing such range (logging stopped), None if it did not;
    ``dead_steps`` every such step (sorted)."""

    gaps: tuple[tuple[int, int], ...]
    end: int | None
    dead_steps: IntArray

    @property
    def any(self) -> bool:
        return self.dead_steps.size > 0


def _all_finite(values: FloatArray) -> bool:
    """One pass: a finite sum means every value is finite (an overflowing sum only sends the caller
    down the slower exact path)."""
    with np.errstate(invalid="ignore", over="ignore"):
        return bool(np.isfinite(np.add.reduce(values)))


def _nonfinite_steps(view: RunView) -> IntArray:
    """Steps holding a non-finite value: of the run-level series (a step where every metric is
    non-finite holds one there too), or of the rank matrices for a run that logs none. A series whose
    sum is finite holds no non-finite value and costs one pass."""
    parts = []
    for s in view.series.values():
        if not _all_finite(s.values):
            parts.append(s.steps[~np.isfinite(s.values)])
    if not view.series:
        for matrix in view.per_rank.values():
            bad = matrix.present & ~np.isfinite(matrix.values)
            parts.append(matrix.steps[bad.any(axis=0)])
    return np.unique(np.concatenate(parts)) if parts else np.empty(0, np.int64)


def _logged_at(steps: IntArray, candidates: IntArray) -> tuple[npt.NDArray[np.bool_], npt.NDArray[np.intp]]:
    index = np.minimum(np.searchsorted(steps, candidates), max(steps.size - 1, 0))
    hit = steps[index] == candidates if steps.size else np.zeros(candidates.size, dtype=bool)
    return hit, index


def logging_gaps(view: RunView) -> LoggingGaps:
    """The steps at which every metric the run logged there is non-finite, at least one of them
    bookkeeping (:func:`is_training_math` False): the logger wrote placeholders, training did not
    blow up. Only steps holding some non-finite value are examined, so the cost follows them."""
    candidates = _nonfinite_steps(view)
    if candidates.size == 0:
        return LoggingGaps((), None, candidates)
    alive = np.zeros(candidates.size, dtype=bool)  # some finite value logged at the step
    bookkeeping_dead = np.zeros(candidates.size, dtype=bool)
    for name, series in view.series.items():
        hit, index = _logged_at(series.steps, candidates)
        finite = hit & np.isfinite(series.values[index]) if series.steps.size else hit
        alive |= finite
        if not is_training_math(name):
            bookkeeping_dead |= hit & ~finite
    for name, matrix in view.per_rank.items():
        hit, index = _logged_at(matrix.steps, candidates)
        columns = matrix.values[:, index] if matrix.steps.size else np.empty((0, candidates.size))
        present = matrix.present[:, index] if matrix.steps.size else columns.astype(bool)
        finite = (present & np.isfinite(columns)).any(axis=0) & hit
        dead = (present & ~np.isfinite(columns)).any(axis=0) & hit
        alive |= finite
        if not is_training_math(name):
            bookkeeping_dead |= dead
    dead_steps = candidates[~alive & bookkeeping_dead]
    if dead_steps.size == 0:
        return LoggingGaps((), None, dead_steps)
    last_alive = _last_finite_step(view)
    ranges: list[tuple[int, int]] = []
    # consecutive dead steps with no finite value logged between them form one range
    alive_between = np.zeros(max(dead_steps.size - 1, 0), dtype=bool)
    for series in view.series.values():
        finite_steps = series.steps[np.isfinite(series.values)]
        lo, hi = np.searchsorted(finite_steps, dead_steps[:-1], "right"), np.searchsorted(finite_steps, dead_steps[1:])
        alive_between |= hi > lo
    for matrix in view.per_rank.values():
        finite_steps = matrix.steps[(matrix.present & np.isfinite(matrix.values)).any(axis=0)]
        lo, hi = np.searchsorted(finite_steps, dead_steps[:-1], "right"), np.searchsorted(finite_steps, dead_steps[1:])
        alive_between |= hi > lo
    breaks = np.flatnonzero(alive_between) + 1
    for chunk in np.split(dead_steps, breaks):
        ranges.append((int(chunk[0]), int(chunk[-1])))
    end = None
    if last_alive is None or ranges[-1][0] > last_alive:
        end = ranges.pop()[0]
    return LoggingGaps(tuple(ranges), end, dead_steps)


def _last_finite_step(view: RunView) -> int | None:
    last: int | None = None
    for series in view.series.values():
        finite = np.flatnonzero(np.isfinite(series.values))
        if finite.size:
            step = int(series.steps[finite[-1]])
            last = step if last is None else max(last, step)
    for matrix in view.per_rank.values():
        columns = np.flatnonzero((matrix.present & np.isfinite(matrix.values)).any(axis=0))
        if columns.size:
            step = int(matrix.steps[columns[-1]])
            last = step if last is None else max(last, step)
    return last


def without_steps(view: RunView, dead_steps: IntArray) -> RunView:
    """``view`` with the samples at ``dead_steps`` removed from every series and rank matrix (they are
    absent, not evidence)."""
    if dead_steps.size == 0:
        return view
    series = {}
    for name, s in view.series.items():
        keep = ~np.isin(s.steps, dead_steps, assume_unique=True)
        series[name] = s if keep.all() else Series(s.steps[keep], s.values[keep])
    per_rank = {}
    for name, m in view.per_rank.items():
        keep = ~np.isin(m.steps, dead_steps, assume_unique=True)
        per_rank[name] = m if keep.all() else RankMatrix(m.ranks, m.steps[keep], m.values[:, keep], m.present[:, keep])
    return replace(view, series=series, per_rank=per_rank)


# --------------------------------------------------------------------------------------------------
# Early instability and climbs
# --------------------------------------------------------------------------------------------------


def _finite(steps: IntArray, values: FloatArray) -> tuple[IntArray, FloatArray]:
    if _all_finite(values):
        return steps, values
    keep = np.isfinite(values)
    return steps[keep], values[keep]


def _recovery(x: FloatArray, start: int, level: float) -> int | None:
    back = np.flatnonzero(x[start:] <= RECOVER_RATIO * level)
    return start + int(back[0]) if back.size else None


def _lowest_before(values: FloatArray) -> FloatArray:
    """For each index i, the lowest of values[:i] (NaN at 0)."""
    out = np.full(values.size, np.nan)
    if values.size > 1:
        out[1:] = np.minimum.accumulate(values[:-1])
    return out


def early_rises(
    steps: IntArray,
    values: FloatArray,
    history: int,
    metric: str = "loss",
    levels: Callable[[FloatArray], FloatArray] | None = None,
    band: Callable[[FloatArray], float] | None = None,
) -> list[SpikeEvent]:
    """Rises in the first ``history`` finite samples, where the spike detector has no baseline yet: a
    sample at least :data:`EARLY_MIN_RATIO` times the level before it: ``levels(first samples)`` per
    index (default: the lowest value before it; :func:`stab_core.early_rises.held_levels` is the level
    the loss held), and at least ``band(samples before it)`` above it (loss units: the run's noise band
    from what there is, :mod:`stab_core.early_rises`; None: no band). The event's baseline is that
    level; it recovers at the first sample back within :data:`RECOVER_RATIO` of it."""
    s, x = _finite(steps, values)
    events: list[SpikeEvent] = []
    i = 1
    limit = min(history, x.size)
    level_at = (levels or _lowest_before)(x[:limit])
    while i < limit:
        level = float(level_at[i])
        if level > 0 and x[i] >= EARLY_MIN_RATIO * level and (band is None or x[i] - level >= band(x[:i])):
            recovery = _recovery(x, i + 1, level)
            last = (recovery - 1) if recovery is not None else x.size - 1
            events.append(build_event(metric, s, x, i, last, recovery, level, max(abs(level) * 0.01, 1e-12)))
            if recovery is None:
                break
            i = recovery + 1
            continue
        i += 1
    return events


def early_jumps(
    steps: IntArray,
    values: FloatArray,
    limit: int,
    *,
    min_ratio: float,
    z_threshold: float,
    recover_ratio: float,
    metric: str = "grad_norm",
) -> list[SpikeEvent]:
    """Jumps in the first ``limit`` finite samples, where the spike detector's window is not yet full
    (its median then sits high on a falling series): a sample at least ``min_ratio`` times, and
    ``z_threshold`` modified z-scores above, the median of the :data:`EARLY_JUMP_RECENT` samples
    before it (MAD floored at :data:`EARLY_JUMP_REL_FLOOR` of that median). It recovers at the first
    later sample within ``recover_ratio`` of that median. A 20-step run is judged from its 4th sample."""
    s, x = _finite(steps, values)

    def flag(i: int) -> tuple[float, float] | None:
        recent = x[max(0, i - EARLY_JUMP_RECENT) : i]
        level = float(np.median(recent))
        scale = max(float(np.median(np.abs(recent - level))), EARLY_JUMP_REL_FLOOR * abs(level), 1e-12)
        jumped = level > 0 and x[i] >= min_ratio * level and MAD_TO_Z * (x[i] - level) / scale >= z_threshold
        return (level, scale) if jumped else None

    def back(after: FloatArray, level: float, _scale: float) -> npt.NDArray[np.bool_]:
        return after <= recover_ratio * level

    return scanned_events(s, x, EARLY_JUMP_MIN_SAMPLES, min(limit, x.size), metric, flag, back, resume=0)


def _smoothed(x: FloatArray) -> tuple[FloatArray, IntArray, int]:
    """Trailing median of :data:`CLIMB_SMOOTH` samples (medians of blocks of samples on long series),
    the index into ``x`` of each smoothed point's last sample, and the samples per point."""
    block = max(1, x.size // _CLIMB_MAX_POINTS)
    if block > 1:
        n = (x.size // block) * block
        points = window_medians(x[:n].reshape(-1, block))
        return points, np.arange(block - 1, n, block, dtype=np.int64), block
    padded = np.concatenate([np.full(CLIMB_SMOOTH - 1, x[0]), x])
    windows = np.lib.stride_tricks.sliding_window_view(padded, CLIMB_SMOOTH)
    return window_medians(windows), np.arange(x.size, dtype=np.int64), 1


def _out_of_band(smooth: FloatArray, floor: FloatArray, i: int, j: int, band: float, needed: int) -> tuple[int, int]:
    """The first stretch of at least ``needed`` points of ``smooth[i:j]`` at least ``band`` above the
    floor, as (first, end); (j, j) when there is none."""
    out = np.flatnonzero(smooth[i:j] - floor[i:j] >= band)
    if out.size >= needed:
        breaks = np.flatnonzero(np.diff(out) > 1)
        starts = np.concatenate([[0], breaks + 1])
        ends = np.concatenate([breaks + 1, [out.size]])
        for a, b in zip(starts, ends, strict=True):
            if b - a >= needed:
                return i + int(out[a]), i + int(out[b - 1]) + 1
    return j, j


def return_from_dip(x: FloatArray, bottom: int, high: FloatArray) -> bool:
    """Is a climb from sample ``bottom`` (the lowest of ``x``, finite samples in loss units) whose smoothed
    stretch is ``high`` only the loss's return to the level it held before a dip below it? True when the
    :data:`DIP_HELD_SAMPLES` samples before ``bottom`` held a level (the median of their first half within
    :data:`RECOVER_RATIO` of their second half's: not a loss still falling from its start) and the median
    of ``high`` is within :data:`RECOVER_RATIO` of that level: a run of easy batches pulled the smoothed
    loss below its level for a few samples, and the loss back at its level is no climb over the dip."""
    held = x[max(0, bottom - DIP_HELD_SAMPLES) : bottom]
    if held.size < DIP_MIN_SAMPLES or high.size == 0:
        return False
    half = held.size // 2
    first, second, level = float(np.median(held[:half])), float(np.median(held[half:])), float(np.median(held))
    if level <= 0.0 or first > RECOVER_RATIO * second:
        return False
    return float(np.median(high)) <= RECOVER_RATIO * level


def detect_climbs(
    steps: IntArray, values: FloatArray, metric: str = "loss", band: Callable[[FloatArray], float] | None = None
) -> list[SpikeEvent]:
    """Sustained rises: the smoothed series (:func:`_smoothed`) stays at least :data:`CLIMB_MIN_RATIO`
    times, and ``band(samples before the rise)`` above (loss units: the noise band of the run before
    it; None: no band), the lowest smoothed level reached before it for :data:`CLIMB_MIN_SAMPLES`
    samples or more.
    The event starts at the step where that lowest level was reached, has it as baseline, and recovers
    once the smoothed series is back within :data:`RECOVER_RATIO` of it."""
    s, x = _finite(steps, values)
    if x.size < CLIMB_MIN_SAMPLES + CLIMB_SMOOTH:
        return []
    smooth, last_index, block = _smoothed(x)
    floor = np.minimum.accumulate(smooth)
    with np.errstate(divide="ignore", invalid="ignore"):
        high = (floor > 0) & (smooth >= CLIMB_MIN_RATIO * floor)
    events: list[SpikeEvent] = []
    i = 0
    points_needed = max(1, math.ceil(CLIMB_MIN_SAMPLES / block))
    while i < smooth.size:
        if not high[i]:
            i += 1
            continue
        j = i
        while j < smooth.size and high[j]:
            j += 1
        if band is not None and j - i >= points_needed:
            # the band of the samples before the rise: up to where the floor was reached, or to the first
            # sample of the first high point where that is later (a floor reached in a run's first few
            # samples holds no noise to measure: on a loss swinging +-30% it gave no band at all)
            reached = int(last_index[int(np.flatnonzero(smooth[: i + 1] == floor[i])[-1])])
            rise = int(last_index[i]) - block * CLIMB_SMOOTH + 1
            i, j = _out_of_band(smooth, floor, i, j, band(x[: max(reached + 1, rise)]), points_needed)
        if j - i >= points_needed:
            level = float(floor[i])
            origin = int(last_index[int(np.flatnonzero(smooth[: i + 1] == level)[-1])])
            # the climb leaves the band after the lowest raw sample behind the lowest smoothed point
            lo = max(0, origin - max(block, CLIMB_SMOOTH) + 1)
            bottom = lo + int(np.argmin(x[lo : origin + 1]))
            level = float(x[bottom])
            if return_from_dip(x, bottom, smooth[i:j]):
                i = j
                continue
            # ... at the sample after the last one within the band before the smoothed series rose
            rise = int(last_index[i])
            inside = np.flatnonzero(x[bottom : rise + 1] <= RECOVER_RATIO * level)
            first = min(rise, bottom + int(inside[-1]) + 1) if inside.size else bottom
            high_end = int(last_index[j - 1])
            recovery = _recovery(x, max(first + 1, high_end), level)
            last = (recovery - 1) if recovery is not None else x.size - 1
            scale = max(abs(level) * 0.01, 1e-12)
            events.append(build_event(metric, s, x, first, max(first, last), recovery, level, scale))
            if recovery is None:
                break
            i = max(j, int(np.searchsorted(last_index, recovery)) + 1)
            continue
        i = j
    return events


# --------------------------------------------------------------------------------------------------
# Incidents
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Incident:
    """One thing that happened: ``members`` are the detected events in it (``primary`` first: the loss
    event if there is one, else the largest). ``co_moves``: for watched metrics with no detected member,
    their peak over their level inside the incident (e.g. the loss at 1.09x during a grad-norm spike).
    ``kind``: a ``spike`` from the detector, ``early_instability`` (begins before the detector has a
    full baseline: the first ``window`` samples) or a ``climb``. ``severity``: what it cost (blip,
    spike, divergence: :mod:`stab_core.severity`); ``certainty``: ``low`` when its level came from
    few samples (the first steps of a run, a short run)."""

    kind: IncidentKind
    members: tuple[SpikeEvent, ...]
    co_moves: dict[str, float] = field(default_factory=dict)
    severity: SeverityLevel = "spike"
    certainty: Certainty = "high"
    loss_recovered_at: int | None = None
    """The step the loss was back within the noise band of its trend from before the incident
    (:mod:`stab_core.severity`); None when it never was or the run logs no loss."""
    trend: tuple[float, int] | None = None
    """The level of the loss's trend before the incident and the samples it rests on (None: no loss
    before it); under ``NOISE_MIN_SAMPLES`` samples it has no noise band, only a level."""
    held: tuple[int, float] | None = None
    """(step, level) when ``loss_recovered_at`` is the step from which the loss stayed within 1.1x of its
    level before the rise, earlier than its trend's noise band (:mod:`stab_core.held_recovery`)."""
    fell_back: tuple[int, float] | None = None
    """(last step, loss level at the log's end) when the loss, not back to its level, fell back from its
    peak by most of its rise: a spike, not a divergence (:mod:`stab_core.fell_back`)."""

    short_level: bool = False
    """A rise never back from a level of fewer than NOISE_MIN_SAMPLES samples that the loss then held: no
    divergence, and no return either (:mod:`stab_core.short_levels`)."""

    print_floor: float | None = None
    """The loss's print resolution (0.0001 for 4 decimals) when the primary's level is under it (a loss printed
    0.0000-0.0001): no ratio against that level is said (:mod:`stab_core.quantised_levels`); None otherwise."""

    @property
    def primary(self) -> SpikeEvent:
        return self.members[0]

    @property
    def subject(self) -> SpikeEvent:
        """The member its diagnosis reads: a non-finite loss member if any (a rise that ran into NaN is
        dated from the rise, :func:`_led_into_nonfinite`, and diagnosed from the NaN), else the primary."""
        return next((m for m in self.members if m.metric == "loss" and m.nonfinite), self.primary)

    @property
    def said_recovery(
        self,
    ) -> tuple[int | None, tuple[float, int] | None, tuple[int, float] | None, tuple[int, float] | None, bool]:
        """What its recovery claim rests on: (``loss_recovered_at``, ``trend``, ``held``, ``fell_back``,
        ``short_level``)."""
        return self.loss_recovered_at, self.trend, self.held, self.fell_back, self.short_level

    @property
    def start(self) -> int:
        return min(m.start for m in self.members)

    @property
    def until(self) -> int:
        """The last step of the incident: the latest recovery (the loss's return to its trend
        included), or end when one never recovered."""
        last = max(m.until for m in self.members)
        return max(last, self.loss_recovered_at) if self.loss_recovered_at is not None else last

    @property
    def metrics(self) -> list[str]:
        return list(dict.fromkeys(m.metric for m in self.members))


def _primary_order(event: SpikeEvent) -> tuple[int, float]:
    ratio = event.ratio if math.isfinite(event.ratio) else math.inf
    return (0 if event.metric == "loss" else 1, -ratio)


def group_incidents(
    events: Sequence[tuple[SpikeEvent, IncidentKind]], join_steps: int, max_lead_steps: int
) -> list[tuple[IncidentKind, list[SpikeEvent]]]:
    """Events whose spans (start .. recovery) overlap or lie within ``join_steps`` of each other, or a
    grad-norm event that starts at most ``max_lead_steps`` before a loss event, are one incident. The
    kind is the first member's unless a detected ``spike`` is in it ... early instability wins over both."""
    ordered = sorted(events, key=lambda item: (item[0].start, item[0].metric != "grad_norm"))
    groups: list[tuple[IncidentKind, list[SpikeEvent]]] = []
    reach = -math.inf
    for event, kind in ordered:
        lead_ok = event.metric == "loss" and any(
            m.metric.startswith("grad_norm") and 0 <= event.start - m.start <= max_lead_steps
            for m in (groups[-1][1] if groups else [])
        )
        join = 0 if kind == "climb" or kind == "early_instability" else join_steps
        if groups and (event.start <= reach + join or lead_ok):
            old_kind, members = groups[-1]
            members.append(event)
            groups[-1] = (_merged_kind(old_kind, kind), members)
        else:
            groups.append((kind, [event]))
            reach = -math.inf
        reach = max(reach, event.until)
    return [(kind, _led_into_nonfinite(sorted(members, key=_primary_order))) for kind, members in groups]


def _led_into_nonfinite(members: list[SpikeEvent]) -> list[SpikeEvent]:
    """``members`` (primary first) with a finite loss rise that never came back and ran into the loss's
    non-finite member first: the blow-up began with the rise (5.47 -> 9.55 over five steps, then NaN), and
    the incident is dated from it, not from the first NaN (issue #32; docs/diagnosis.md, "Non-finite values")."""
    primary = members[0]
    if primary.metric != "loss" or not primary.nonfinite:
        return members
    rises = [
        m for m in members if m.metric == "loss" and not m.nonfinite and not m.recovered and m.start < primary.start
    ]
    if not rises:
        return members
    lead = min(rises, key=lambda m: m.start)
    return [lead, *(m for m in members if m is not lead)]


def _merged_kind(a: IncidentKind, b: IncidentKind) -> IncidentKind:
    for kind in ("early_instability", "spike", "climb"):
        if kind in (a, b):
            return kind  # type: ignore[return-value]
    return a


def window_ratio(series: Series | None, start: int, until: int, baseline: float | None = None) -> float | None:
    """The series' largest finite value in ``start..until`` over its median in the 63 samples before
    ``start`` (or over ``baseline``): how far a metric moved inside an incident. None without data."""
    if series is None or series.steps.size == 0:
        return None
    a, b = np.searchsorted(series.steps, [start, until + 1])
    inside = series.values[a:b]
    inside = inside[np.isfinite(inside)]
    if inside.size == 0:
        return None
    if baseline is None:
        before = series.values[max(0, a - 63) : a]
        before = before[np.isfinite(before)]
        if before.size == 0:
            return None
        baseline = float(np.median(before))
    return float(inside.max() / baseline) if baseline > 0 else None
