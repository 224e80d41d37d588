"""What defines a simulated run of the physical model (:mod:`stab_core.simulate.model`): the spec,
the injectable spike mechanisms, stragglers, gaps, warmup restarts and batch skips.

Units: steps are optimizer steps, batch sizes in samples (sequences of ``seq_len`` tokens), times in
seconds, losses in nats, LRs in optimizer units.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

from stab_core import causes
from stab_core.causes import Cause
from stab_core.runview import RunEvent
from stab_core.schedulers import SCHEDULE_FORMULAS

PER_RANK_METRICS: tuple[str, ...] = (
    "grad_norm_local",
    "loss",
    "step_time_s",
    "gpu_util",
    "gpu_mem_gb",
    "gpu_temp_c",
    "gpu_power_w",
)
"""Per-rank metrics of a spec by default (a spec chooses a subset)."""

OPTIONAL_PER_RANK_METRICS: tuple[str, ...] = ("throughput_tok_s", "expert_load_max_over_mean")
"""Per-rank metrics produced only when a spec asks for them: each rank's tokens/s, and each rank's
expert load max/mean (MoE specs only; the run-level series times a per-rank factor)."""


# --------------------------------------------------------------------------------------------------
# Injected mechanisms
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class LrJumpSpike:
    """Scenario A: a loss spike ``delay_steps`` after the schedule transition at ``step``.

    Height (nats) = min(``max_height``, ``sensitivity`` x (r - ``tolerance``)) where r is the largest
    one-step relative LR rise (``stab_core.schedulers.largest_lr_change``) from 2 logged steps before
    ``step`` to the onset; no spike when r <= ``tolerance`` (a warmup restart keeps r ~0.1).
    """

    cause: ClassVar[Cause] = causes.LR_TRANSITION
    step: int
    delay_steps: int = 8
    sensitivity: float = 0.15
    tolerance: float = 0.5
    max_height: float = 2.5
    rise_steps: int = 3
    recovery_steps: float = 40.0
    grad_factor: float = 4.0

    @property
    def onset(self) -> int:
        return self.step + self.delay_steps


@dataclass(frozen=True)
class DataOutlierSpike:
    """Scenario B: outlier data builds up over ``ramp_steps`` (tr(Sigma) x ``snr_drop``), then the loss
    spikes by ``height`` nats x lr/peak_lr at ``step`` (none when lr/peak_lr < ``lr_threshold``).

    ``diverge``: the loss never comes back (and turns NaN ``nan_after_steps`` after the peak if set).
    A ``BatchSkip`` covering ``step`` removes the outlier data and with it the spike.
    """

    cause: ClassVar[Cause] = causes.DATA_OUTLIER
    step: int
    snr_drop: float = 12.0
    ramp_steps: int = 120
    height: float = 1.2
    lr_threshold: float = 0.0
    diverge: bool = False
    nan_after_steps: int | None = None
    rise_steps: int = 4
    recovery_steps: float = 35.0
    grad_factor: float = 3.0

    @property
    def onset(self) -> int:
        return self.step


@dataclass(frozen=True)
class RouterSeesawSpike:
    """Scenario C: expert load max/mean oscillates (period ``period_steps``) with an amplitude growing
    to ``load_peak`` over ``lead_steps`` before the loss spikes by ``height`` nats at ``step``.
    Bias balancing switched on before the seesaw starts prevents it."""

    cause: ClassVar[Cause] = causes.ROUTER
    step: int
    lead_steps: int = 40
    load_peak: float = 3.2
    period_steps: float = 12.0
    height: float = 1.2
    rise_steps: int = 3
    recovery_steps: float = 40.0
    grad_factor: float = 3.0

    @property
    def onset(self) -> int:
        return self.step


@dataclass(frozen=True)
class RankFault:
    """Rank ``rank``'s local gradient is x ``grad_factor`` for ``duration_steps`` from ``step`` (a bad
    GPU or data shard; its loss rises by ``rank_loss_jump`` nats); the corrupted update spikes the
    loss by ``height`` nats one step later."""

    cause: ClassVar[Cause] = causes.RANK_FAULT
    step: int
    rank: int
    duration_steps: int = 3
    grad_factor: float = 12.0
    rank_loss_jump: float = 0.0
    height: float = 1.0
    rise_steps: int = 2
    recovery_steps: float = 25.0

    @property
    def onset(self) -> int:
        return self.step + 1


@dataclass(frozen=True)
class NumericalFault:
    """A numerical fault from ``step`` for ``duration_steps``: ``nan`` (loss and gradients NaN on every
    rank) or ``loss_scale_collapse`` (fp16 only: every step overflows, the loss scale halves to its
    floor, gradients are Inf, the loss rises by ``height`` nats). Not ``recovered``: NaN to the end."""

    cause: ClassVar[Cause] = causes.NUMERICAL
    step: int
    kind: Literal["nan", "loss_scale_collapse"] = "nan"
    duration_steps: int = 20
    recovered: bool = True
    height: float = 1.0
    rise_steps: int = 2
    recovery_steps: float = 20.0

    @property
    def onset(self) -> int:
        return self.step


Mechanism = LrJumpSpike | DataOutlierSpike | RouterSeesawSpike | RankFault | NumericalFault


@dataclass(frozen=True)
class Straggler:
    """Rank ``rank`` runs ``slowdown`` times slower (and hotter) on steps [start, end)."""

    rank: int
    start: int
    end: int
    slowdown: float = 1.3


@dataclass(frozen=True)
class RankGap:
    """Rank ``rank`` logged nothing on steps [start, end) (its samples are absent, not NaN)."""

    rank: int
    start: int
    end: int


@dataclass(frozen=True)
class WarmupRestart:
    """From ``step`` on, the LR is multiplied by ``lr_scale``, held at least at ``floor_ratio`` x
    peak_lr, and re-warmed linearly from 0 over ``warmup_steps`` (a warmup restart after a rollback
    or at a data switch)."""

    step: int
    warmup_steps: int
    lr_scale: float = 1.0
    floor_ratio: float = 0.0


@dataclass(frozen=True)
class BatchSkip:
    """At ``step`` the data loader skips ``batches`` batches (PaLM-style recovery): data-outlier
    mechanisms whose spike step lies in [step, step + batches) never happen."""

    step: int
    batches: int


# --------------------------------------------------------------------------------------------------
# The spec
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SimSpec:
    """Everything that defines a simulated run. Units: steps are optimizer steps, batch sizes in
    samples (sequences of ``seq_len`` tokens), times in seconds, losses in nats, LRs in optimizer units.

    ``seed``: when set, it is used instead of ``simulate_run``'s seed argument, so that paired runs
    (a scenario's before and after) share every random draw and are identical up to their fork.
    ``lr``: an explicit LR per simulated step (length ``steps // log_every``, rounded up), used
    instead of ``schedule``/``schedule_kwargs`` (a ``SCHEDULE_FORMULAS`` name and its keyword
    arguments; ``total_steps`` defaults to ``steps``).
    ``stop_step``: the job died or was killed here; nothing is logged from this step on.
    ``gaps``: step ranges [start, end) in which nothing was logged (e.g. lost logs).
    ``checkpoint_steps``: explicit checkpoint steps, instead of every ``checkpoint_interval_steps``.
    ``grad_norm_start`` / ``grad_norm_end``: expected global grad norm (L2) at step 0 and at the end,
    ``snr_end``: the gradient SNR at the global batch, B_big/B_simple, at the end; both ends assume
    the LR has decayed to 0 (with a floor, the final norm and SNR come out slightly higher).
    ``config``: the run's normalised config (``stab_core.checklist.CONFIG_KEYS``), kept in ``meta``.
    ``scenario``/``variant``: which playbook scenario and which side of it (``before``/``after``).
    """

    name: str
    steps: int
    world_size: int = 4
    per_rank_batch_size: int = 64
    seq_len: int = 4096
    gpus: int | None = None
    step_time_s: float = 2.0
    usd_per_gpu_hour: float = 2.0
    model: str = ""
    tags: tuple[str, ...] = ()
    seed: int | None = None
    log_every: int = 1
    stop_step: int | None = None
    precision: Literal["bf16", "fp16"] = "bf16"
    schedule: str = "warmup_cosine"
    schedule_kwargs: Mapping[str, Any] = field(default_factory=lambda: {"warmup_steps": 200, "min_lr_ratio": 0.1})
    peak_lr: float = 3e-4
    lr: Sequence[float] | None = None
    warmup_restarts: tuple[WarmupRestart, ...] = ()
    max_norm: float = 1.0
    loss_floor: float = 1.9
    loss_start: float = 10.8
    loss_exponent: float = 0.5
    loss_offset_steps: float = 30.0
    lr_loss_coef: float = 0.08
    loss_noise: float = 0.012
    rank_loss_noise: float = 0.04
    grad_norm_start: float = 4.0
    grad_norm_end: float = 0.25
    snr_end: float = 1.0
    noise_growth: float = 1.0
    grad_step_sigma: float = 0.15
    grad_dims: float = 2000.0
    rank_shard_sigma: float = 0.05
    num_experts: int = 1
    expert_load_base: float = 1.3
    bias_balancing_from: int | None = None
    checkpoint_interval_steps: int | None = 1000
    checkpoint_steps: tuple[int, ...] | None = None
    checkpoint_write_s: float = 60.0
    data_switch_steps: tuple[int, ...] = ()
    stragglers: tuple[Straggler, ...] = ()
    rank_gaps: tuple[RankGap, ...] = ()
    gaps: tuple[tuple[int, int], ...] = ()
    batch_skips: tuple[BatchSkip, ...] = ()
    loss_scale_window: int = 1000
    per_rank_metrics: tuple[str, ...] = PER_RANK_METRICS
    log_clip_coef: bool = True
    batch_provenance_logged: bool = False
    mechanisms: tuple[Mechanism, ...] = ()
    extra_events: tuple[RunEvent, ...] = ()
    config: Mapping[str, Any] | None = None
    scenario: str = ""
    variant: str = ""

    def __post_init__(self) -> None:
        if self.steps < 2 or self.world_size < 1 or self.log_every < 1:
            raise ValueError(
                f"{self.name}: steps must be >= 2, world_size >= 1 and log_every >= 1, got "
                f"{self.steps}, {self.world_size}, {self.log_every}"
            )
        if self.per_rank_batch_size < 1:
            raise ValueError(f"{self.name}: per_rank_batch_size must be >= 1, got {self.per_rank_batch_size}")
        known = PER_RANK_METRICS + OPTIONAL_PER_RANK_METRICS
        unknown = sorted(set(self.per_rank_metrics) - set(known))
        if unknown:
            raise ValueError(f"{self.name}: unknown per-rank metrics {unknown}; choose from {known}")
        if "expert_load_max_over_mean" in self.per_rank_metrics and self.num_experts < 2:
            raise ValueError(f"{self.name}: a per-rank expert load needs num_experts > 1")
        if self.schedule not in SCHEDULE_FORMULAS and self.lr is None:
            raise ValueError(
                f"{self.name}: unknown schedule {self.schedule!r}; choose from {sorted(SCHEDULE_FORMULAS)}"
            )
        if not (self.loss_start > self.loss_floor and self.loss_exponent > 0 and self.loss_offset_steps > 0):
            raise ValueError(f"{self.name}: need loss_start > loss_floor, loss_exponent > 0, loss_offset_steps > 0")
        if not (self.grad_norm_start > 0 and self.grad_norm_end > 0 and self.snr_end > 0 and self.grad_dims > 1):
            raise ValueError(f"{self.name}: grad norms and snr_end must be > 0 and grad_dims > 1")
        ranks = [m.rank for m in self.mechanisms if isinstance(m, RankFault)]
        ranks += [s.rank for s in self.stragglers] + [g.rank for g in self.rank_gaps]
        bad = [r for r in ranks if not 0 <= r < self.world_size]
        if bad:
            raise ValueError(f"{self.name}: ranks {bad} are outside 0..{self.world_size - 1}")
        for mechanism in self.mechanisms:
            if not 0 < mechanism.onset < self.steps:
                raise ValueError(f"{self.name}: {type(mechanism).__name__} at step {mechanism.step} is outside the run")
            collapse = isinstance(mechanism, NumericalFault) and mechanism.kind == "loss_scale_collapse"
            if collapse and self.precision != "fp16":
                raise ValueError(f"{self.name}: a loss-scale collapse needs precision='fp16'")

    @property
    def global_batch_size(self) -> int:
        """Samples per optimizer step over all data-parallel ranks."""
        return self.world_size * self.per_rank_batch_size

    @property
    def job_gpus(self) -> int:
        """GPUs in the job (``gpus``, or one per simulated rank)."""
        return self.gpus if self.gpus is not None else self.world_size
