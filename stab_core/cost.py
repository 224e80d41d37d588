"""What instability costs: rollbacks in GPU-hours and USD, and checkpoint intervals that bound the loss.

Units are in the names: ``*_gpu_hours`` (GPU-hours: GPUs x wall hours), ``*_usd`` (US dollars),
``*_s`` (seconds), ``steps`` (optimizer steps). The interval functions take any one time unit and answer
in that unit.

Sources:
- Young, J. W. (1974), "A first order approximation to the optimum checkpoint interval", CACM 17(9):
  tau = sqrt(2*C*M).
- Daly, J. T. (2006), "A higher order estimate of the optimum checkpoint interval for restart dumps",
  FGCS 22(3): tau = sqrt(2CM) * (1 + sqrt(C/2M)/3 + (C/2M)/9) - C for C < 2M, else tau = M.
- DeepSeek-AI (2024), "DeepSeek-V3 Technical Report": 2.664M H800 GPU-hours of pre-training on 2,048
  GPUs, priced at $2 per GPU-hour.
- Llama Team, Meta (2024), "The Llama 3 Herd of Models", section 3.3.4: 419 unexpected interruptions
  in a 54-day snapshot of pre-training on 16,384 H100 GPUs.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

SECONDS_PER_HOUR = 3600.0


def _require_non_negative(name: str, value: float) -> None:
    if not (math.isfinite(value) and value >= 0.0):
        raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")


def _require_positive(name: str, value: float) -> None:
    if not (math.isfinite(value) and value > 0.0):
        raise ValueError(f"{name} must be a finite number > 0, got {value!r}")


@dataclass(frozen=True)
class GpuCost:
    """An amount of compute: ``gpu_hours`` (GPU-hours) and its price ``usd`` (US dollars)."""

    gpu_hours: float
    usd: float

    def __add__(self, other: GpuCost) -> GpuCost:
        return GpuCost(self.gpu_hours + other.gpu_hours, self.usd + other.usd)

    def times(self, count: float) -> GpuCost:
        """This cost ``count`` times (e.g. per rollback x rollbacks per run)."""
        _require_non_negative("count", count)
        return GpuCost(self.gpu_hours * count, self.usd * count)


ZERO_COST = GpuCost(0.0, 0.0)

DEFAULT_USD_PER_GPU_HOUR = 2.0
"""Price (USD per GPU-hour) used when a run's metadata has none: the DeepSeek-V3 report's $2/GPU-hour."""


@dataclass(frozen=True)
class CostInputs:
    """What a run's spikes are priced with, and where each figure came from.

    ``step_time_s`` (s per optimizer step; None = unknown, so nothing can be priced), ``gpus`` (count),
    ``usd_per_gpu_hour`` (USD). The ``*_source`` strings say where each came from, in words a page
    can show: ``"measured"``/``"metadata"``/``"wall times"``/``"unknown"`` for the step time,
    ``"metadata gpus"``/``"world_size"``/``"ranks logged"`` for the GPUs, ``"metadata"``/``"assumed"``
    for the price.
    """

    step_time_s: float | None
    step_time_source: str
    gpus: int
    gpus_source: str
    usd_per_gpu_hour: float
    usd_source: str

    @property
    def priced(self) -> bool:
        """True when every input is known, so a cost in GPU-hours and USD can be stated."""
        return self.step_time_s is not None

    def describe(self) -> str:
        """One line for a page: ``8 GPUs (metadata gpus) x 0.14 s/step (metadata) at $2/GPU-hour (assumed)``."""
        step = f"{self.step_time_s:.3g} s/step" if self.step_time_s is not None else "unknown s/step"
        return (
            f"{self.gpus:,} GPUs ({self.gpus_source}) x {step} ({self.step_time_source}) "
            f"at ${self.usd_per_gpu_hour:g}/GPU-hour ({self.usd_source})"
        )


def _positive_number(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) and value > 0 else None


def resolve_cost_inputs(
    meta: Mapping[str, object],
    ranks: int,
    *,
    measured_step_time_s: float | None,
    wall_step_time_s: float | None,
) -> CostInputs:
    """The one rule every page prices a run with.

    GPUs: ``meta['gpus']``, else ``meta['world_size']``, else the ranks logged (at least 1). Price:
    ``meta['usd_per_gpu_hour']``, else ``DEFAULT_USD_PER_GPU_HOUR`` labelled "assumed". Step time (s):
    the median logged ``step_time_s`` (``measured_step_time_s``), else ``meta['step_time_s']``, else the
    median spacing of the log's wall-clock times (``wall_step_time_s``), else unknown (never 1 s assumed).
    """
    step: float | None
    gpus_meta, world = _positive_number(meta.get("gpus")), _positive_number(meta.get("world_size"))
    if gpus_meta is not None:
        gpus, gpus_source = int(gpus_meta), "metadata gpus"
    elif world is not None:
        gpus, gpus_source = int(world), "world_size"
    else:
        gpus, gpus_source = max(int(ranks), 1), "ranks logged"
    usd = meta.get("usd_per_gpu_hour")
    if isinstance(usd, int | float) and not isinstance(usd, bool) and math.isfinite(usd) and usd >= 0:
        price, usd_source = float(usd), "metadata"
    else:
        price, usd_source = DEFAULT_USD_PER_GPU_HOUR, "assumed"
    candidates = (
        (_positive_number(measured_step_time_s), "measured"),
        (_positive_number(meta.get("step_time_s")), "metadata"),
        (_positive_number(wall_step_time_s), "wall times"),
    )
    step, step_source = next(((v, src) for v, src in candidates if v is not None), (None, "unknown"))
    return CostInputs(step, step_source, gpus, gpus_source, price, usd_source)


# --------------------------------------------------------------------------------------------------
# Presets
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TrainingBudget:
    """A training run's budget: ``gpus`` (count), ``total_gpu_hours`` (GPU-hours), ``usd_per_gpu_hour``."""

    name: str
    gpus: int
    total_gpu_hours: float
    usd_per_gpu_hour: float

    @property
    def total_usd(self) -> float:
        """The whole budget in US dollars."""
        return self.total_gpu_hours * self.usd_per_gpu_hour

    @property
    def wall_days(self) -> float:
        """Wall-clock days the budget lasts on ``gpus`` GPUs."""
        return self.total_gpu_hours / self.gpus / 24.0


DEEPSEEK_V3 = TrainingBudget(name="DeepSeek-V3", gpus=2048, total_gpu_hours=2.664e6, usd_per_gpu_hour=2.0)
"""DeepSeek-V3 pre-training: 2,048 H800 GPUs, 2.664M GPU-hours, $2/GPU-hour (technical report)."""


@dataclass(frozen=True)
class FailureRecord:
    """Observed interruptions of a fleet: ``interruptions`` (count) in ``days`` on ``gpus`` GPUs."""

    name: str
    gpus: int
    interruptions: int
    days: float

    @property
    def mtbf_hours(self) -> float:
        """Mean time between interruptions of the whole job (hours)."""
        return self.days * 24.0 / self.interruptions

    def mtbf_hours_at(self, gpus: int) -> float:
        """Job MTBF (hours) on ``gpus`` GPUs, assuming failures scale linearly with the GPU count."""
        _require_positive("gpus", gpus)
        return self.mtbf_hours * self.gpus / gpus


LLAMA3_405B_FAILURES = FailureRecord(name="Llama 3 405B", gpus=16384, interruptions=419, days=54.0)
"""Llama 3 405B pre-training: 419 unexpected interruptions in 54 days on 16,384 GPUs (MTBF 3.09 h)."""


# --------------------------------------------------------------------------------------------------
# Rollbacks and spikes
# --------------------------------------------------------------------------------------------------


def rollback_cost(total_gpu_hours: float, fraction_lost: float, usd_per_gpu_hour: float) -> GpuCost:
    """Cost of one rollback that throws away ``fraction_lost`` (0-1) of a ``total_gpu_hours`` run.

    DeepSeek-V3 (2.664M GPU-hours, $2/GPU-hour): a 2 % rollback is 53,280 GPU-hours = $106,560.
    """
    _require_non_negative("total_gpu_hours", total_gpu_hours)
    _require_non_negative("usd_per_gpu_hour", usd_per_gpu_hour)
    if not (math.isfinite(fraction_lost) and 0.0 <= fraction_lost <= 1.0):
        raise ValueError(f"fraction_lost must lie in [0, 1], got {fraction_lost!r}")
    gpu_hours = total_gpu_hours * fraction_lost
    return GpuCost(gpu_hours=gpu_hours, usd=gpu_hours * usd_per_gpu_hour)


def gpu_hours_for_steps(steps: float, step_time_s: float, gpus: int) -> float:
    """GPU-hours that ``steps`` optimizer steps of ``step_time_s`` seconds take on ``gpus`` GPUs."""
    _require_non_negative("steps", steps)
    _require_non_negative("step_time_s", step_time_s)
    _require_positive("gpus", gpus)
    return steps * step_time_s * gpus / SECONDS_PER_HOUR


def steps_cost(steps: float, step_time_s: float, gpus: int, usd_per_gpu_hour: float) -> GpuCost:
    """Price of ``steps`` optimizer steps of ``step_time_s`` seconds on ``gpus`` GPUs."""
    _require_non_negative("usd_per_gpu_hour", usd_per_gpu_hour)
    gpu_hours = gpu_hours_for_steps(steps, step_time_s, gpus)
    return GpuCost(gpu_hours=gpu_hours, usd=gpu_hours * usd_per_gpu_hour)


def rollback_cost_from_steps(
    steps_since_checkpoint: float,
    detection_delay_steps: float,
    restart_overhead_s: float,
    step_time_s: float,
    gpus: int,
    usd_per_gpu_hour: float,
) -> GpuCost:
    """Cost of one rollback measured in steps rather than as a fraction of the run.

    The work redone is the steps trained since the restored checkpoint up to the spike plus the steps
    it took to notice (``detection_delay_steps``); while the job restarts and reloads
    (``restart_overhead_s`` seconds) every GPU idles.
    """
    _require_non_negative("restart_overhead_s", restart_overhead_s)
    redone = steps_cost(steps_since_checkpoint + detection_delay_steps, step_time_s, gpus, usd_per_gpu_hour)
    idle_gpu_hours = restart_overhead_s * gpus / SECONDS_PER_HOUR
    return redone + GpuCost(idle_gpu_hours, idle_gpu_hours * usd_per_gpu_hour)


@dataclass(frozen=True)
class RunSpikeCost:
    """Rollbacks priced over a run: ``per_rollback`` and ``per_run`` (``spikes_per_run`` rollbacks),
    and ``budget_share`` = per-run GPU-hours / budget GPU-hours (0-1, may exceed 1)."""

    per_rollback: GpuCost
    spikes_per_run: float
    per_run: GpuCost
    budget_share: float


def run_spike_cost(per_rollback: GpuCost, spikes_per_run: float, budget_gpu_hours: float) -> RunSpikeCost:
    """``spikes_per_run`` rollbacks of ``per_rollback`` each, and their share of ``budget_gpu_hours``.

    DeepSeek-V3 scale: 3 rollbacks of 2 % = $319,680; 5 of 5 % = $1,332,000 (25 % of the budget).
    """
    _require_positive("budget_gpu_hours", budget_gpu_hours)
    per_run = per_rollback.times(spikes_per_run)
    return RunSpikeCost(
        per_rollback=per_rollback,
        spikes_per_run=spikes_per_run,
        per_run=per_run,
        budget_share=per_run.gpu_hours / budget_gpu_hours,
    )


def rollback_steps(spike_start_step: int, detected_step: int, checkpoint_steps: Sequence[int]) -> int:
    """Steps redone by rolling back to the last checkpoint at or before ``spike_start_step``.

    The state saved after a spike began may already be damaged, so the restore point is the last
    checkpoint before it; everything from there to the step where the spike was noticed
    (``detected_step``) is trained again. Raises ValueError when no checkpoint precedes the spike.
    """
    if detected_step < spike_start_step:
        raise ValueError(f"detected_step ({detected_step}) precedes spike_start_step ({spike_start_step})")
    earlier = [c for c in checkpoint_steps if c <= spike_start_step]
    if not earlier:
        raise ValueError(f"no checkpoint at or before step {spike_start_step}: the run would restart from scratch")
    return detected_step - max(earlier)


@dataclass(frozen=True)
class SpikeBill:
    """The detected spikes of one run, priced: ``steps_charged`` per spike (steps), ``per_spike`` and
    ``total`` costs, and how many of them diverged (each diverged spike is charged a rollback)."""

    steps_charged: tuple[float, ...]
    per_spike: tuple[GpuCost, ...]
    total: GpuCost
    diverged_count: int


def price_spikes(
    steps_lost: Sequence[float],
    diverged: Sequence[bool],
    *,
    step_time_s: float,
    gpus: int,
    usd_per_gpu_hour: float,
    rollback_steps_diverged: Sequence[float] | None = None,
    restart_overhead_s: float = 0.0,
) -> SpikeBill:
    """Price a run's spikes with its own step time (s) and GPU count.

    A recovered spike costs the ``steps_lost`` it spent out of its band (steps that made no progress).
    A diverged spike costs a rollback: ``rollback_steps_diverged[i]`` steps redone (see
    :func:`rollback_steps`; default: its ``steps_lost``) plus ``restart_overhead_s`` seconds of idle
    GPUs. The per-spike arrays are aligned with the spike events (``steps_lost`` and ``diverged``
    from ``stab_core.analysis``).
    """
    if len(steps_lost) != len(diverged):
        raise ValueError(f"steps_lost ({len(steps_lost)}) and diverged ({len(diverged)}) must align")
    rollbacks = list(steps_lost) if rollback_steps_diverged is None else list(rollback_steps_diverged)
    if len(rollbacks) != len(steps_lost):
        raise ValueError(f"rollback_steps_diverged ({len(rollbacks)}) must align with steps_lost ({len(steps_lost)})")
    charged: list[float] = []
    costs: list[GpuCost] = []
    for lost, is_diverged, redo in zip(steps_lost, diverged, rollbacks, strict=True):
        if is_diverged:
            cost = rollback_cost_from_steps(redo, 0.0, restart_overhead_s, step_time_s, gpus, usd_per_gpu_hour)
            charged.append(float(redo))
        else:
            cost = steps_cost(lost, step_time_s, gpus, usd_per_gpu_hour)
            charged.append(float(lost))
        costs.append(cost)
    total = ZERO_COST
    for cost in costs:
        total = total + cost
    return SpikeBill(
        steps_charged=tuple(charged),
        per_spike=tuple(costs),
        total=total,
        diverged_count=sum(bool(d) for d in diverged),
    )


# --------------------------------------------------------------------------------------------------
# Checkpoint intervals
# --------------------------------------------------------------------------------------------------


def young_interval(checkpoint_cost: float, mtbf: float) -> float:
    """Young's optimum checkpoint interval sqrt(2*C*M), in the unit of its arguments.

    ``checkpoint_cost`` C is the time to write one checkpoint, ``mtbf`` M the mean time between
    failures (or rollback-forcing spikes). C = 5 min, M = 180 min -> 42.43 min.
    """
    _require_non_negative("checkpoint_cost", checkpoint_cost)
    _require_positive("mtbf", mtbf)
    return math.sqrt(2.0 * checkpoint_cost * mtbf)


def daly_interval(checkpoint_cost: float, mtbf: float) -> float:
    """Daly's higher-order optimum interval, in the unit of its arguments.

    tau = sqrt(2CM) * (1 + sqrt(C/2M)/3 + (C/2M)/9) - C for C < 2M, else M.
    C = 5 min, M = 180 min -> 39.16 min; C = 5, M = 1440 -> 116.69 min.
    """
    _require_non_negative("checkpoint_cost", checkpoint_cost)
    _require_positive("mtbf", mtbf)
    if checkpoint_cost >= 2.0 * mtbf:
        return mtbf
    ratio = checkpoint_cost / (2.0 * mtbf)
    return math.sqrt(2.0 * checkpoint_cost * mtbf) * (1.0 + math.sqrt(ratio) / 3.0 + ratio / 9.0) - checkpoint_cost


def expected_waste_per_failure(interval: float, restart_time: float) -> float:
    """Expected time lost per failure at a checkpoint ``interval``: half an interval of work redone plus
    the ``restart_time``, in the unit of its arguments."""
    _require_non_negative("interval", interval)
    _require_non_negative("restart_time", restart_time)
    return interval / 2.0 + restart_time


def checkpoint_overhead_fraction(
    interval: float, checkpoint_cost: float, mtbf: float, restart_time: float = 0.0
) -> float:
    """Fraction of extra wall time spent writing checkpoints, redoing work and restarting, at ``interval``.

    Daly's (2006, eq. 13) complete model with exponentially distributed failures:
    wall/solve = (M/tau) * exp(R/M) * (exp((tau+C)/M) - 1), minus 1. To first order this is
    C/tau + tau/(2M) + (R+C)/M, minimised by Young's interval; its exact minimum is what Daly's interval
    approximates. All arguments in one time unit; the answer is a fraction (may exceed 1).
    """
    _require_positive("interval", interval)
    _require_non_negative("checkpoint_cost", checkpoint_cost)
    _require_positive("mtbf", mtbf)
    _require_non_negative("restart_time", restart_time)
    growth = math.expm1((interval + checkpoint_cost) / mtbf)
    return (mtbf / interval) * math.exp(restart_time / mtbf) * growth - 1.0


@dataclass(frozen=True)
class IntervalAdvice:
    """A checkpoint interval compared with the optimum (all times in hours, costs per run).

    ``current_hours`` and ``optimum_hours`` (Daly); ``waste_per_failure_hours`` at each (half an
    interval + restart); ``overhead_fraction`` at each; ``saving`` is what moving to the optimum saves
    over ``run_hours`` of wall time on ``gpus`` GPUs (GPU-hours and USD; negative if it costs more).
    """

    current_hours: float
    optimum_hours: float
    waste_per_failure_current_hours: float
    waste_per_failure_optimum_hours: float
    overhead_fraction_current: float
    overhead_fraction_optimum: float
    saving: GpuCost


def interval_advice(
    current_interval_hours: float,
    checkpoint_write_hours: float,
    mtbf_hours: float,
    restart_hours: float,
    run_hours: float,
    gpus: int,
    usd_per_gpu_hour: float,
) -> IntervalAdvice:
    """Compare a checkpoint interval with Daly's optimum and price the difference over a run.

    Hours throughout; overheads from :func:`checkpoint_overhead_fraction`; the saving is
    (overhead now - overhead at the optimum) x ``run_hours`` x ``gpus``.
    """
    _require_positive("run_hours", run_hours)
    _require_positive("gpus", gpus)
    _require_non_negative("usd_per_gpu_hour", usd_per_gpu_hour)
    optimum = daly_interval(checkpoint_write_hours, mtbf_hours)
    now = checkpoint_overhead_fraction(current_interval_hours, checkpoint_write_hours, mtbf_hours, restart_hours)
    best = checkpoint_overhead_fraction(optimum, checkpoint_write_hours, mtbf_hours, restart_hours)
    saved_gpu_hours = (now - best) * run_hours * gpus
    return IntervalAdvice(
        current_hours=current_interval_hours,
        optimum_hours=optimum,
        waste_per_failure_current_hours=expected_waste_per_failure(current_interval_hours, restart_hours),
        waste_per_failure_optimum_hours=expected_waste_per_failure(optimum, restart_hours),
        overhead_fraction_current=now,
        overhead_fraction_optimum=best,
        saving=GpuCost(saved_gpu_hours, saved_gpu_hours * usd_per_gpu_hour),
    )
