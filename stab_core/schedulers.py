"""Learning-rate schedules as one vectorised formula each, and metrics of a schedule (its largest
per-step change and its transition points).

Every schedule is a pure numpy function ``f(steps, total_steps, warmup_steps, ..., peak_lr)`` returning
the LR (in the optimizer's units) at each optimizer step. The torch schedulers
(:mod:`ingest.training.torch_schedulers`) call exactly that function, so a preview plotted from it is
exactly what trains.

Steps are optimizer steps counted from 0 (the scheduler's ``last_epoch``).

This module imports numpy only, so code that needs the formulas or the metrics (the decision tree,
the checklist, the pages' schedule previews) does not pay torch's import; the torch classes live in
:mod:`ingest.training.torch_schedulers`.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]

RESTART_WARMUP_MIN_FRACTION = 0.25
RESTART_WARMUP_MAX_FRACTION = 1.0 / 3.0
MAX_ADVISED_CYCLES = 5

TransitionKind = Literal["warmup_end", "cycle_restart", "lr_jump", "decay_start"]


# --------------------------------------------------------------------------------------------------
# Validation and advice
# --------------------------------------------------------------------------------------------------


def _require_int(name: str, value: int, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int | np.integer):
        raise ValueError(f"{name} must be an integer, got {value!r} ({type(value).__name__})")
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")


def _require_ratio(name: str, value: float) -> None:
    if not (math.isfinite(value) and 0.0 <= value <= 1.0):
        raise ValueError(f"{name} must lie in [0, 1], got {value!r}")


def _require_peak(peak_lr: float) -> None:
    if not (math.isfinite(peak_lr) and peak_lr >= 0.0):
        raise ValueError(f"peak_lr must be a finite LR >= 0, got {peak_lr!r}")


def cycle_boundaries(total_steps: int, num_cycles: int) -> npt.NDArray[np.int64]:
    """Start step of each cycle plus ``total_steps`` at the end: ``floor(k*T/n)`` for k = 0..n (steps)."""
    _require_int("total_steps", total_steps, 1)
    _require_int("num_cycles", num_cycles, 1)
    return (np.arange(num_cycles + 1, dtype=np.int64) * total_steps) // num_cycles


def validate_restart_schedule(
    total_steps: int,
    warmup_steps: int = 2000,
    restart_warmup_steps: int = 500,
    num_cycles: int = 3,
    min_lr_ratio: float = 0.1,
) -> None:
    """Raise ValueError when the warmup-cosine-restart settings cannot describe a schedule."""
    _require_int("total_steps", total_steps, 1)
    _require_int("num_cycles", num_cycles, 1)
    _require_int("warmup_steps", warmup_steps, 0)
    _require_int("restart_warmup_steps", restart_warmup_steps, 0)
    _require_ratio("min_lr_ratio", min_lr_ratio)
    if num_cycles > total_steps:
        raise ValueError(f"num_cycles ({num_cycles}) exceeds total_steps ({total_steps}): cycles would be empty")
    lengths = np.diff(cycle_boundaries(total_steps, num_cycles))
    if warmup_steps >= lengths[0]:
        raise ValueError(
            f"warmup_steps ({warmup_steps}) must be shorter than the first cycle ({int(lengths[0])} steps = "
            f"total_steps {total_steps} / num_cycles {num_cycles}); nothing would be left for the decay"
        )
    if num_cycles > 1 and restart_warmup_steps >= int(lengths[1:].min()):
        raise ValueError(
            f"restart_warmup_steps ({restart_warmup_steps}) must be shorter than a cycle "
            f"({int(lengths[1:].min())} steps); nothing would be left for the decay"
        )


def scheduler_warnings(
    total_steps: int,
    warmup_steps: int = 2000,
    restart_warmup_steps: int = 500,
    num_cycles: int = 3,
    min_lr_ratio: float = 0.1,
) -> list[str]:
    """The known pitfalls of valid warmup-cosine-restart settings, as sentences a UI can show.

    Raises ValueError for invalid settings (see :func:`validate_restart_schedule`). The pitfalls: a
    restart warmup outside 1/4-1/3 of the initial warmup (shorter re-creates the LR jump the restart
    warmup exists to prevent; longer wastes the cycle at low LR), more than 5 cycles (each restart is a
    perturbation and the cycles get too short to decay), and ``min_lr_ratio == 0`` (the LR reaches 0 at
    the end of each cycle, so a restart multiplies it by an unbounded factor).
    """
    validate_restart_schedule(total_steps, warmup_steps, restart_warmup_steps, num_cycles, min_lr_ratio)
    advice: list[str] = []
    if num_cycles > 1:
        low = RESTART_WARMUP_MIN_FRACTION * warmup_steps
        high = RESTART_WARMUP_MAX_FRACTION * warmup_steps
        if not low <= restart_warmup_steps <= high:
            advice.append(
                f"restart_warmup_steps = {restart_warmup_steps} is outside 1/4-1/3 of warmup_steps "
                f"({low:g}-{high:g} steps): a shorter restart warmup brings back the LR jump at each "
                "restart, a longer one spends the cycle at low LR"
            )
    if num_cycles > MAX_ADVISED_CYCLES:
        advice.append(
            f"num_cycles = {num_cycles} > {MAX_ADVISED_CYCLES}: every restart perturbs training and the "
            "cycles become too short to decay; use 2-5 cycles"
        )
    if min_lr_ratio == 0.0:
        advice.append(
            "min_lr_ratio = 0: the LR decays to 0 before each restart, so restarts multiply it by an "
            "unbounded factor; use about 0.1"
        )
    return advice


# --------------------------------------------------------------------------------------------------
# The schedules (vectorised)
# --------------------------------------------------------------------------------------------------


def _as_steps(steps: npt.ArrayLike) -> FloatArray:
    values = np.asarray(steps, dtype=np.float64)
    if not np.all(np.isfinite(values)) or np.any(values < 0):
        raise ValueError("steps must be finite and >= 0 (optimizer steps counted from 0)")
    return values


def _cosine(progress: FloatArray) -> FloatArray:
    """Half-cosine from 1 (progress 0) to 0 (progress 1)."""
    return 0.5 * (1.0 + np.cos(np.pi * progress))


def lr_at(
    steps: npt.ArrayLike,
    total_steps: int,
    warmup_steps: int = 2000,
    restart_warmup_steps: int = 500,
    num_cycles: int = 3,
    min_lr_ratio: float = 0.1,
    peak_lr: float = 1.0,
) -> FloatArray:
    """LR of the warmup-cosine-restart schedule at each step (same shape as ``steps``).

    Cycle k = 0..n-1 covers steps [floor(k*T/n), floor((k+1)*T/n)). At local step s of a cycle of
    length L with warmup w: cycle 0 warms up from 0 (``peak*s/w``), later cycles from the floor
    (``min_lr + (peak-min_lr)*s/w``) so the LR never jumps; then a cosine decay
    ``min_lr + (peak-min_lr)*(1+cos(pi*(s-w)/(L-w)))/2`` (SGDR, Loshchilov & Hutter 2017, with a
    warmup per cycle). ``min_lr = min_lr_ratio*peak_lr``; from step T on the LR holds ``min_lr``.
    """
    validate_restart_schedule(total_steps, warmup_steps, restart_warmup_steps, num_cycles, min_lr_ratio)
    _require_peak(peak_lr)
    step_values = _as_steps(steps)
    bounds = cycle_boundaries(total_steps, num_cycles).astype(np.float64)
    cycle = np.clip(np.searchsorted(bounds, step_values, side="right") - 1, 0, num_cycles - 1)
    start = bounds[cycle]
    length = bounds[cycle + 1] - start
    local = step_values - start
    warmup = np.where(cycle == 0, float(warmup_steps), float(restart_warmup_steps))
    warmup_floor = np.where(cycle == 0, 0.0, min_lr_ratio)
    min_lr = min_lr_ratio * peak_lr

    in_warmup = local < warmup
    warm_fraction = np.divide(local, warmup, out=np.zeros_like(local), where=warmup > 0)
    warm_lr = peak_lr * (warmup_floor + (1.0 - warmup_floor) * warm_fraction)
    progress = np.clip((local - warmup) / (length - warmup), 0.0, 1.0)
    decay_lr = min_lr + (peak_lr - min_lr) * _cosine(progress)
    lr = np.where(in_warmup, warm_lr, decay_lr)
    return np.asarray(np.where(step_values >= total_steps, min_lr, lr), dtype=np.float64)


def validate_single_cycle(total_steps: int, warmup_steps: int, min_lr_ratio: float, peak_lr: float) -> None:
    """Raise ValueError when one-cycle settings (warmup-cosine, WSD, inverse square root) cannot
    describe a schedule."""
    _require_int("total_steps", total_steps, 1)
    _require_int("warmup_steps", warmup_steps, 0)
    _require_ratio("min_lr_ratio", min_lr_ratio)
    _require_peak(peak_lr)
    if warmup_steps >= total_steps:
        raise ValueError(f"warmup_steps ({warmup_steps}) must be shorter than total_steps ({total_steps})")


def _linear_warmup(step_values: FloatArray, warmup_steps: int, peak_lr: float) -> FloatArray:
    if warmup_steps == 0:
        return np.full_like(step_values, peak_lr)
    return peak_lr * np.minimum(step_values / warmup_steps, 1.0)


def warmup_cosine_lr(
    steps: npt.ArrayLike,
    total_steps: int,
    warmup_steps: int = 2000,
    min_lr_ratio: float = 0.1,
    peak_lr: float = 1.0,
) -> FloatArray:
    """Baseline: linear warmup from 0, then one cosine decay to ``min_lr_ratio*peak_lr`` at T, held after.

    The common LLM default (e.g. Chinchilla, Hoffmann et al. 2022, decay to 10 % of peak).
    """
    validate_single_cycle(total_steps, warmup_steps, min_lr_ratio, peak_lr)
    step_values = _as_steps(steps)
    min_lr = min_lr_ratio * peak_lr
    progress = np.clip((step_values - warmup_steps) / (total_steps - warmup_steps), 0.0, 1.0)
    decay = min_lr + (peak_lr - min_lr) * _cosine(progress)
    warm = _linear_warmup(step_values, warmup_steps, peak_lr)
    return np.asarray(np.where(step_values < warmup_steps, warm, decay), dtype=np.float64)


def wsd_lr(
    steps: npt.ArrayLike,
    total_steps: int,
    warmup_steps: int = 2000,
    min_lr_ratio: float = 0.0,
    peak_lr: float = 1.0,
    decay_fraction: float = 0.1,
    decay_shape: Literal["linear", "1-sqrt"] = "linear",
) -> FloatArray:
    """Baseline: warmup-stable-decay (Hu et al. 2024, MiniCPM; Hägele et al. 2024).

    Linear warmup from 0, constant ``peak_lr`` until the last ``decay_fraction`` of the T steps, then a
    decay to ``min_lr_ratio*peak_lr`` at T: linear, or ``1-sqrt`` (``1 - sqrt(progress)``, the shape
    Hägele et al. found best). Held at the floor after T.
    """
    validate_single_cycle(total_steps, warmup_steps, min_lr_ratio, peak_lr)
    _require_ratio("decay_fraction", decay_fraction)
    if decay_shape not in ("linear", "1-sqrt"):
        raise ValueError(f"decay_shape must be 'linear' or '1-sqrt', got {decay_shape!r}")
    decay_steps = round(decay_fraction * total_steps)
    decay_start = total_steps - decay_steps
    if decay_start < warmup_steps:
        raise ValueError(
            f"the decay ({decay_steps} steps = decay_fraction {decay_fraction} of {total_steps}) would "
            f"start at step {decay_start}, before warmup ends at step {warmup_steps}"
        )
    step_values = _as_steps(steps)
    min_lr = min_lr_ratio * peak_lr
    progress = np.clip((step_values - decay_start) / max(decay_steps, 1), 0.0, 1.0)
    remaining = 1.0 - progress if decay_shape == "linear" else 1.0 - np.sqrt(progress)
    decayed = min_lr + (peak_lr - min_lr) * remaining
    warm = _linear_warmup(step_values, warmup_steps, peak_lr)
    return np.asarray(np.where(step_values < warmup_steps, warm, decayed), dtype=np.float64)


def inverse_sqrt_lr(
    steps: npt.ArrayLike,
    total_steps: int,
    warmup_steps: int = 2000,
    min_lr_ratio: float = 0.0,
    peak_lr: float = 1.0,
) -> FloatArray:
    """Baseline: inverse square root (Vaswani et al. 2017): ``peak*min(s/w, sqrt(w/s))``.

    Linear warmup to ``peak_lr`` at step w, then ``peak*sqrt(w/s)``, never below
    ``min_lr_ratio*peak_lr``; from step T on it holds its value at T. ``warmup_steps`` must be >= 1
    (it is the decay's time scale).
    """
    validate_single_cycle(total_steps, warmup_steps, min_lr_ratio, peak_lr)
    if warmup_steps < 1:
        raise ValueError("inverse_sqrt_lr needs warmup_steps >= 1: it sets the decay's time scale")
    step_values = np.minimum(_as_steps(steps), float(total_steps))
    decay = peak_lr * np.sqrt(warmup_steps / np.maximum(step_values, float(warmup_steps)))
    lr = np.where(step_values < warmup_steps, peak_lr * step_values / warmup_steps, decay)
    return np.asarray(np.maximum(lr, min_lr_ratio * peak_lr), dtype=np.float64)


SCHEDULE_FORMULAS: dict[str, Callable[..., FloatArray]] = {
    "warmup_cosine_restart": lr_at,
    "warmup_cosine": warmup_cosine_lr,
    "wsd": wsd_lr,
    "inverse_sqrt": inverse_sqrt_lr,
}
"""Every schedule by name; each is called as ``f(steps, total_steps, warmup_steps, ..., peak_lr=...)``."""


# --------------------------------------------------------------------------------------------------
# Metrics of a schedule (computed or logged, possibly every N steps)
# --------------------------------------------------------------------------------------------------

DEFAULT_FLOOR_RATIO = 0.1
"""Relative changes divide by max(previous LR, this fraction of the series' peak LR): a warmup from 0
doubles a near-zero LR every step without any consequence for stability, and must not dominate."""


@dataclass(frozen=True)
class Transition:
    """A point where an LR schedule changes phase.

    ``kind``: ``warmup_end`` (a rise stops: the peak after a warmup or restart warmup),
    ``cycle_restart`` (the LR rises again after decaying), ``lr_jump`` (an abrupt change between two
    logged samples, up or down), ``decay_start`` (a fall begins after a stable phase).
    ``step`` is the vertex of the phase change (the peak, the trough, the last stable step), or for an
    ``lr_jump`` the first logged step at the new LR. ``rel_change`` is the relative LR change across
    the phase that starts or ends here, ``(lr_after - lr_before) / max(lr_before, floor)``, over
    ``span_steps`` steps.
    """

    step: int
    kind: TransitionKind
    rel_change: float
    lr_before: float
    lr_after: float
    span_steps: int


def _clean_series(steps: npt.ArrayLike, lr: npt.ArrayLike) -> tuple[npt.NDArray[np.int64], FloatArray]:
    step_values = np.asarray(steps)
    lr_values = np.asarray(lr, dtype=np.float64)
    if step_values.ndim != 1 or lr_values.ndim != 1 or step_values.shape != lr_values.shape:
        raise ValueError(
            f"steps and lr must be 1-D arrays of the same length, got shapes {step_values.shape} and {lr_values.shape}"
        )
    finite = np.isfinite(lr_values)
    step_values, lr_values = step_values[finite], lr_values[finite]
    if step_values.size and not np.all(np.isfinite(step_values.astype(np.float64))):
        raise ValueError("steps must be finite")
    int_steps = step_values.astype(np.int64)
    if int_steps.size > 1 and np.any(np.diff(int_steps) <= 0):
        bad = int(np.argmax(np.diff(int_steps) <= 0)) + 1
        raise ValueError(
            f"steps must be strictly increasing; step {int(int_steps[bad])} at position {bad} follows "
            f"{int(int_steps[bad - 1])}"
        )
    return int_steps, lr_values


def _relative_changes(lr: FloatArray, floor_ratio: float) -> FloatArray:
    """Change of each logged interval relative to max(previous LR, floor_ratio * peak |LR|)."""
    floor = floor_ratio * float(np.max(np.abs(lr)))
    denominator = np.maximum(np.abs(lr[:-1]), floor)
    delta = np.diff(lr)
    return np.divide(delta, denominator, out=np.zeros_like(delta), where=denominator > 0)


def largest_lr_change(
    steps: npt.ArrayLike, lr: npt.ArrayLike, floor_ratio: float = DEFAULT_FLOOR_RATIO
) -> tuple[int, float]:
    """The largest per-step relative LR change: (step at the new LR, signed relative change per step).

    Per logged interval the change is ``(lr[i]-lr[i-1]) / max(lr[i-1], floor_ratio*peak)`` divided by
    the interval's length in steps, so on a log written every N steps it is the interval's average
    per-step change (a lower bound on a single-step jump hidden inside the interval). Samples with a
    non-finite LR are treated as not logged. Needs at least 2 logged samples.
    """
    _require_ratio("floor_ratio", floor_ratio)
    int_steps, lr_values = _clean_series(steps, lr)
    if lr_values.size < 2:
        raise ValueError(f"largest_lr_change needs at least 2 finite LR samples, got {lr_values.size}")
    per_step = _relative_changes(lr_values, floor_ratio) / np.diff(int_steps)
    index = int(np.argmax(np.abs(per_step)))
    return int(int_steps[index + 1]), float(per_step[index])


def _fill_short_flats(
    direction: npt.NDArray[np.int64],
    int_steps: npt.NDArray[np.int64],
    delta: FloatArray,
    max_flat_steps: int,
    quantum: float,
) -> npt.NDArray[np.int64]:
    """Treat a flat run between two moves in the same direction as part of that move when it is
    short (< ``max_flat_steps``) or, for an LR logged with few digits, when both moves are one or
    two logging quanta: a slowly changing LR written that way repeats values inside a ramp."""
    filled = direction.copy()
    for sign, first, last in _runs(direction):
        if sign != 0 or first == 0 or last == direction.size - 1:
            continue
        if direction[first - 1] != direction[last + 1]:
            continue
        short = int(int_steps[last + 1] - int_steps[first]) < max_flat_steps
        rounding = quantum > 0 and max(abs(delta[first - 1]), abs(delta[last + 1])) <= 2.5 * quantum
        if short or rounding:
            filled[first : last + 1] = direction[first - 1]
    return filled


def _runs(values: npt.NDArray[np.int64]) -> list[tuple[int, int, int]]:
    """(value, first index, last index) of each run of equal values."""
    if values.size == 0:
        return []
    edges = np.flatnonzero(np.diff(values)) + 1
    starts = np.concatenate(([0], edges))
    ends = np.concatenate((edges - 1, [values.size - 1]))
    return [(int(values[s]), int(s), int(e)) for s, e in zip(starts, ends, strict=True)]


def _logging_quantum(delta: FloatArray) -> float:
    """The LR's logging resolution when it was written with few digits (0 when it was not).

    A rounded slow ramp moves in equal steps of one quantum; it is recognised when at least 10
    changes exist and half of them have the same size (to 3 significant digits).
    """
    changes = np.abs(delta[delta != 0])
    if changes.size < 10:
        return 0.0
    magnitudes, counts = np.unique(np.round(np.log10(changes), 3), return_counts=True)
    return float(10.0 ** magnitudes[np.argmax(counts)]) if counts.max() * 2 >= changes.size else 0.0


def _jump_intervals(
    int_steps: npt.NDArray[np.int64], lr: FloatArray, rel: FloatArray, rel_change: float, jump_factor: float
) -> npt.NDArray[np.bool_]:
    """Intervals whose slope towers over the mean slope on both sides (a discontinuity, not a ramp
    and not a kink), and which exceed a few logging quanta when the LR was written with few digits."""
    delta = np.diff(lr)
    slope = np.abs(delta) / np.diff(int_steps)
    min_jump = 2.5 * _logging_quantum(delta)
    n = slope.size
    half_window = 5
    is_jump = np.zeros(n, dtype=bool)
    for i in np.flatnonzero((np.abs(rel) >= rel_change) & (np.abs(delta) > min_jump)):
        before = slope[max(0, i - half_window) : i]
        after = slope[i + 1 : i + 1 + half_window]
        side_means = [float(side.mean()) for side in (before, after) if side.size]
        is_jump[i] = slope[i] > jump_factor * max(side_means, default=0.0)
    return is_jump


def _is_decay_from_a_plateau(fall_steps: npt.NDArray[np.int64], fall_lr: FloatArray, stable_steps: int) -> bool:
    """Tell a genuine stable phase (WSD) from the top of a cosine logged with few digits, which also
    reads as flat for a while: a real plateau is long next to the decay (>= 1/4 of it), or the decay
    starts steeply (its first 10 % of steps take >= 5 % of the drop; a cosine's take 2.4 %)."""
    fall_span = int(fall_steps[-1] - fall_steps[0])
    if stable_steps >= 0.25 * fall_span:
        return True
    drop = float(fall_lr[0] - fall_lr[-1])
    early = float(fall_lr[0] - np.interp(fall_steps[0] + 0.1 * fall_span, fall_steps, fall_lr))
    return drop > 0 and early >= 0.05 * drop


def logged_lr_transitions(steps: npt.ArrayLike, lr: npt.ArrayLike) -> list[Transition]:
    """:func:`schedule_transitions` of a run's logged LR with the default thresholds, for the markers
    the charts draw: none for fewer than 3 samples or an LR the detector cannot read (repeated steps),
    which is no error for a log."""
    if np.asarray(steps).size < 3:
        return []
    try:
        return schedule_transitions(steps, lr)
    except ValueError:
        return []


def schedule_transitions(
    steps: npt.ArrayLike,
    lr: npt.ArrayLike,
    rel_change: float = 0.05,
    floor_ratio: float = DEFAULT_FLOOR_RATIO,
    jump_factor: float = 10.0,
) -> list[Transition]:
    """The transition points of an LR series (computed every step, or logged every N steps), by step.

    A rise followed by anything else ends a warmup (``warmup_end`` at the peak); a rise after a fall is
    a ``cycle_restart`` (at the trough, or at the landing step when the rise is abrupt; an abrupt rise
    has no ``warmup_end``); a fall after a stable phase of at least max(10 steps, 1 % of the series)
    is a ``decay_start`` when the phase is a real plateau, not the flat-looking top of a cosine logged
    with few digits (see :func:`_is_decay_from_a_plateau`); an interval whose relative change
    is at least ``rel_change`` and whose slope exceeds ``jump_factor`` times the mean slope of the
    5 intervals on either side is an ``lr_jump`` (a ramp's slopes are alike, a kink has the new slope
    on one side, a jump towers over both). Only
    phases whose relative change reaches ``rel_change`` count. Non-finite LR samples are ignored.
    """
    _require_ratio("floor_ratio", floor_ratio)
    if not (math.isfinite(rel_change) and rel_change > 0):
        raise ValueError(f"rel_change must be a positive fraction, got {rel_change!r}")
    if not (math.isfinite(jump_factor) and jump_factor >= 1):
        raise ValueError(f"jump_factor must be >= 1, got {jump_factor!r}")
    int_steps, lr_values = _clean_series(steps, lr)
    if lr_values.size < 2:
        return []
    peak = float(np.max(np.abs(lr_values)))
    floor = floor_ratio * peak
    rel = _relative_changes(lr_values, floor_ratio)
    # Only float64 noise counts as flat: the top of a cosine changes by ~(pi/L)^2 of the peak per step
    # and must not read as a stable phase.
    tolerance = 1e-12 * peak
    delta = np.diff(lr_values)
    direction = np.where(delta > tolerance, 1, np.where(delta < -tolerance, -1, 0)).astype(np.int64)
    span = int(int_steps[-1] - int_steps[0])
    min_stable_steps = max(10, span // 100)
    direction = _fill_short_flats(direction, int_steps, delta, min_stable_steps, _logging_quantum(delta))
    is_jump = _jump_intervals(int_steps, lr_values, rel, rel_change, jump_factor)

    def relative(before: float, after: float) -> float:
        return (after - before) / max(abs(before), floor) if max(abs(before), floor) > 0 else 0.0

    found: list[Transition] = []
    runs = _runs(direction)
    for position, (sign, first, last) in enumerate(runs):
        # run intervals first..last join samples first..last+1
        lr_before, lr_after = float(lr_values[first]), float(lr_values[last + 1])
        change = relative(lr_before, lr_after)
        if sign == 0 or abs(change) < rel_change:
            continue
        span_steps = int(int_steps[last + 1] - int_steps[first])
        abrupt = bool(np.all(is_jump[first : last + 1]))  # reported as lr_jump, not as a ramp's end
        previous_sign = runs[position - 1][0] if position > 0 else None
        if sign == 1 and not abrupt and last + 1 < lr_values.size - 1:
            found.append(Transition(int(int_steps[last + 1]), "warmup_end", change, lr_before, lr_after, span_steps))
        if sign == 1 and any(run[0] == -1 for run in runs[:position]):
            restart_step = int(int_steps[first + 1]) if is_jump[first] else int(int_steps[first])
            found.append(Transition(restart_step, "cycle_restart", change, lr_before, lr_after, span_steps))
        if sign == -1 and not abrupt and previous_sign == 0:
            _, stable_first, stable_last = runs[position - 1]
            stable_steps = int(int_steps[stable_last + 1] - int_steps[stable_first])
            fall = slice(first, last + 2)
            if stable_steps >= min_stable_steps and _is_decay_from_a_plateau(
                int_steps[fall], lr_values[fall], stable_steps
            ):
                found.append(Transition(int(int_steps[first]), "decay_start", change, lr_before, lr_after, span_steps))
    for i in np.flatnonzero(is_jump):
        found.append(
            Transition(
                int(int_steps[i + 1]),
                "lr_jump",
                float(rel[i]),
                float(lr_values[i]),
                float(lr_values[i + 1]),
                int(int_steps[i + 1] - int_steps[i]),
            )
        )
    found.sort(key=lambda t: (t.step, t.kind))
    return found
