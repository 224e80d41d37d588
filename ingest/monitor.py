"""StabilityMonitor: the training side of ingest. A few lines in a training loop write each rank's shard.

::

    ddp_model = DistributedDataParallel(model, gradient_as_bucket_view=True)  # clipping: one norm a bucket
    params = list(ddp_model.parameters())  # listed once: parameters() walks the module tree each call
    monitor = StabilityMonitor(shard_dir, model=ddp_model, per_rank_batch_size=8, scheduler=sched, max_norm=1.0)
    for step in range(start, total):
        loss = ...; loss.backward()
        record = clip_grad_norm(params, 1.0)
        optimizer.step(); lr = sched.get_last_lr()[0]; sched.step()
        monitor.log(step, loss=loss, lr=lr, clip_stats=record)
        if (step + 1) % checkpoint_every == 0:
            monitor.sync()  # every rank: the rows of the steps the checkpoint holds are on disk
            ...  # save the checkpoint (rank 0), then
            monitor.checkpoint(step)
    monitor.close()  # every rank

Every rank writes its own metrics (``grad_norm_local``, ``step_time_s``, ``loss``, GPU figures) under
its rank; rank 0 alone writes the run-level series (rank -1: the cross-rank mean ``loss``, ``lr``,
``grad_norm`` ...), the run metadata (once) and the events. Rows are buffered by
:class:`ingest.shards.ShardWriter` and flushed every ``flush_interval_s`` seconds, so
``stabscope watch`` sees the run grow while it trains.

Under DDP a communication hook (:class:`GradNormHook`) measures each bucket before and after its
all-reduce, which gives the gradient norm at two batch sizes: a rank's own batch (``grad_norm_local``)
and the global batch (``grad_norm``), the inputs of the two-batch noise scale
(:mod:`stab_core.snr`; McCandlish et al. 2018, arXiv:1812.06162). The idea of measuring inside a DDP
comm hook follows k-diffusion's ``gns.py`` (Crowson).
"""

from __future__ import annotations

import math
import os
import time
import warnings
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ingest.errors import StabScopeError
from ingest.shards import ShardWriter
from stab_core.metrics import CANONICAL_METRICS, PER_RANK_METRICS, is_valid_metric_name

if TYPE_CHECKING:
    import torch
    import torch.distributed as dist
    from torch._C._distributed_c10d import GradBucket
    from torch.amp import GradScaler
    from torch.nn.parallel import DistributedDataParallel
    from torch.optim.lr_scheduler import LRScheduler

    from stab_core.clipping import ClipRecord, ZClip

GIB = float(2**30)

DECAY_STYLES: dict[str, str] = {
    "WarmupCosineRestartScheduler": "cosine",
    "WarmupCosineScheduler": "cosine",
    "WSDScheduler": "wsd",
    "InverseSqrtScheduler": "inverse_sqrt",
    "CosineAnnealingLR": "cosine",
    "CosineAnnealingWarmRestarts": "cosine",
    "LinearLR": "linear",
    "ConstantLR": "constant",
}
"""``lr_decay_style`` (the checklist's key) of known scheduler classes."""

_SCHEDULER_SETTINGS = (
    "total_steps",
    "warmup_steps",
    "restart_warmup_steps",
    "num_cycles",
    "min_lr_ratio",
    "decay_fraction",
    "decay_shape",
)


# --------------------------------------------------------------------------------------------------
# The DDP communication hook
# --------------------------------------------------------------------------------------------------


class GradNormHook:
    """A DDP communication hook that all-reduces (averages) each gradient bucket like DDP's default
    hook, and records the bucket's L2 norm before the all-reduce (this rank's gradient) and after it
    (the gradient of the global batch).

    Squared bucket norms add up to the squared norm of the whole gradient, so :meth:`take` returns
    ``(sqrt(sum local_b^2), sqrt(sum global_b^2))`` over the buckets of the last synchronised backward
    pass. Norms stay on the device until :meth:`take` (one host sync per step). Registered with
    ``ddp_model.register_comm_hook`` on construction (before the first backward); DDP allows one
    hook per model.
    """

    grad_scaler: GradScaler | None = None
    """The job's ``torch.amp.GradScaler`` (fp16): its scale is divided out of the norms."""
    _scale: torch.Tensor | None = None
    """The loss scale the recorded backward pass ran with (None: not scaled)."""

    def __init__(
        self,
        ddp_model: DistributedDataParallel,
        process_group: dist.ProcessGroup | None = None,
        grad_scaler: GradScaler | None = None,
    ) -> None:
        import torch.distributed as dist
        from torch.nn.parallel import DistributedDataParallel

        if not isinstance(ddp_model, DistributedDataParallel):
            raise StabScopeError(
                f"the gradient-norm hook needs a DistributedDataParallel model, got {type(ddp_model).__name__}; "
                "wrap the model in DDP first, or pass model=None (no grad_norm_local without DDP)"
            )
        self.process_group = process_group
        self.grad_scaler = grad_scaler
        self.world_size = dist.get_world_size(process_group)
        self._local: list[torch.Tensor] = []
        self._global: list[torch.Tensor] = []
        self._pass_complete = False
        self.last_bucket_count = 0
        """How many buckets the last :meth:`take` summed over."""
        _resolve_hook_annotations()
        try:
            ddp_model.register_comm_hook(self, _grad_norm_comm_hook)
        except RuntimeError as exc:
            raise StabScopeError(
                f"cannot register the StabScope gradient-norm hook on this DDP model ({exc}); DDP allows one "
                "communication hook per model: remove the other one, or pass model=None"
            ) from exc

    def _record_local(self, buffer: torch.Tensor, is_last: bool) -> None:
        import torch

        if self._pass_complete or not self._local:  # a new backward pass: keep only the latest one
            self._local, self._global = [], []
            self._pass_complete = False
            self._scale = _loss_scale_now(self.grad_scaler)
        self._local.append(torch.linalg.vector_norm(buffer, dtype=torch.float32))
        self._pass_complete = is_last

    def _record_global(self, reduced: torch.Tensor) -> None:
        import torch

        self._global.append(torch.linalg.vector_norm(reduced, dtype=torch.float32))

    def take(self) -> tuple[float, float] | None:
        """(local, global) gradient L2 norms of the last synchronised backward; None when no bucket was
        all-reduced since the last call (e.g. inside ``no_sync`` accumulation). Clears the record."""
        import torch

        if not self._local or len(self._local) != len(self._global):
            self._local, self._global, self._pass_complete = [], [], False
            return None
        count = self.last_bucket_count = len(self._local)
        parts = self._local + self._global
        if self._scale is not None:
            parts.append(self._scale.to(device=parts[0].device, dtype=parts[0].dtype).reshape(()))
        # On the CPU there is nothing to transfer and a float each costs less than a stack; a GPU's
        # norms (and the loss scale) come in one stack and one host transfer. The few per-bucket
        # norms are then summed in Python (float32 -> float64 squares are exact; fsum rounds once).
        on_cpu = parts[0].device.type == "cpu"
        norms = [float(n) for n in parts] if on_cpu else torch.stack(parts).tolist()
        scale = norms.pop() if self._scale is not None else 1.0
        self._local, self._global, self._pass_complete, self._scale = [], [], False, None
        return _l2(norms[:count]) / scale, _l2(norms[count : 2 * count]) / scale


def _loss_scale_now(grad_scaler: GradScaler | None) -> torch.Tensor | None:
    """The scale a GradScaler multiplies the loss by now (a copy: ``update`` changes it in place), as
    a tensor on its device, read without a host sync; None without a scaler, or one that is off or
    has not scaled a loss yet."""
    if grad_scaler is None or not grad_scaler.is_enabled():
        return None
    scale = getattr(grad_scaler, "_scale", None)  # get_scale() would sync with the GPU every step
    return None if scale is None else scale.detach().clone()


def loss_scale_factor(hook_norm: float, clipper_norm: float) -> float:
    """The power of two by which the hook's global norm exceeds the clipper's pre-clip norm of the
    same gradient: the fp16 loss scale when the backward ran on scaled gradients and the clipper saw
    them unscaled, else 1.0 (equal norms, non-finite or zero ones, or a ratio that is no power of
    two, as when the clipper was given other parameters)."""
    if not (math.isfinite(hook_norm) and math.isfinite(clipper_norm)) or hook_norm <= 0 or clipper_norm <= 0:
        return 1.0
    ratio = hook_norm / clipper_norm
    power = round(math.log2(ratio))
    if power == 0 or abs(ratio / 2.0**power - 1.0) > 1e-4:
        return 1.0
    return 2.0**power


def _l2(norms: list[float]) -> float:
    """L2 norm of a vector from the L2 norms of its parts (NaN/inf propagate)."""
    return math.sqrt(math.fsum(x * x for x in norms))


def _grad_norm_comm_hook(state: GradNormHook, bucket: GradBucket) -> torch.futures.Future[torch.Tensor]:
    """Average the bucket across ranks (DDP does not pre-divide for a custom hook), measuring it on
    both sides of the all-reduce (on one rank there is nothing to reduce)."""
    import torch
    import torch.distributed as dist

    buffer = bucket.buffer()
    state._record_local(buffer, bucket.is_last())
    if state.world_size == 1:
        # The mean over one rank is the bucket itself: no collective, no Python callback, and its
        # global norm is the local one. DDP's default hook would still all-reduce it.
        state._global.append(state._local[-1])
        done: torch.futures.Future[torch.Tensor] = torch.futures.Future()
        done.set_result(buffer)
        return done
    group = state.process_group if state.process_group is not None else dist.group.WORLD
    future = dist.all_reduce(buffer, group=group, async_op=True).get_future()  # type: ignore[union-attr]

    def average(done: torch.futures.Future[list[torch.Tensor]]) -> torch.Tensor:
        reduced = done.value()[0].div_(state.world_size)
        state._record_global(reduced)
        return reduced

    averaged: torch.futures.Future[torch.Tensor] = future.then(average)
    return averaged


def _resolve_hook_annotations() -> None:
    """DDP compares the hook's annotations with the real ``dist.GradBucket`` and ``Future[Tensor]``
    objects; ``from __future__ import annotations`` leaves strings there, which DDP rejects."""
    import torch
    from torch._C._distributed_c10d import GradBucket

    _grad_norm_comm_hook.__annotations__.update({"bucket": GradBucket, "return": torch.futures.Future[torch.Tensor]})


# --------------------------------------------------------------------------------------------------
# GPU figures
# --------------------------------------------------------------------------------------------------


class _GpuSampler:
    """GPU memory every step (peak allocated since the previous step, GiB), NVML utilisation,
    temperature and power at most every ``interval_s`` seconds. NVML figures are dropped for good the
    first time NVML is unavailable (no ``pynvml``), so a step never pays for a failing query twice."""

    def __init__(self, device: int, interval_s: float) -> None:
        self.device = device
        self.interval_s = interval_s
        self._nvml = True
        self._last_sample = -math.inf

    def sample(self) -> dict[str, float]:
        import torch

        metrics = {"gpu_mem_gb": torch.cuda.max_memory_allocated(self.device) / GIB}
        torch.cuda.reset_peak_memory_stats(self.device)
        now = time.monotonic()
        if self._nvml and now - self._last_sample >= self.interval_s:
            self._last_sample = now
            try:
                metrics["gpu_util"] = float(torch.cuda.utilization(self.device))
                metrics["gpu_temp_c"] = float(torch.cuda.temperature(self.device))
                metrics["gpu_power_w"] = float(torch.cuda.power_draw(self.device)) / 1000.0  # NVML reports mW
            except (ModuleNotFoundError, ImportError, RuntimeError, ValueError):
                self._nvml = False
        return metrics


# --------------------------------------------------------------------------------------------------
# Metadata
# --------------------------------------------------------------------------------------------------


def scheduler_metadata(scheduler: LRScheduler) -> dict[str, Any]:
    """The scheduler's settings under the checklist's config keys (``peak_lr``, ``min_lr``,
    ``lr_decay_style``, ``total_steps``, ``warmup_steps`` ...), its class, its pitfall advice, and
    its transition points (``schedule_transitions``: kind -> steps; ``transition_steps``: all of them)."""
    name = type(scheduler).__name__
    meta: dict[str, Any] = {"scheduler": name}
    base_lrs = [float(lr) for lr in getattr(scheduler, "base_lrs", [])]
    if base_lrs:
        meta["peak_lr"] = base_lrs[0]
        if len(base_lrs) > 1:
            meta["peak_lrs"] = base_lrs
    for key in _SCHEDULER_SETTINGS:
        if hasattr(scheduler, key):
            meta[key] = getattr(scheduler, key)
    if "min_lr_ratio" in meta and base_lrs:
        meta["min_lr"] = float(meta["min_lr_ratio"]) * base_lrs[0]
    if name in DECAY_STYLES:
        meta["lr_decay_style"] = DECAY_STYLES[name]
    advice = getattr(scheduler, "advice", None)
    if advice:
        meta["scheduler_advice"] = list(advice)
    transitions = schedule_events(scheduler)
    if transitions:
        grouped: dict[str, list[int]] = {}
        for step, kind, _ in transitions:
            grouped.setdefault(kind, []).append(step)
        meta["schedule_transitions"] = grouped
        meta["transition_steps"] = sorted({step for step, _, _ in transitions})
    return meta


def schedule_events(scheduler: LRScheduler) -> list[tuple[int, str, str]]:
    """``(step, kind, label)`` of the scheduler's transitions, by step: what its ``transition_steps()``
    reports (WarmupCosineRestartScheduler). A restart without a restart warmup is one jump, labelled so,
    with no separate ``warmup_end``. Empty for schedulers that do not report transitions."""
    report = getattr(scheduler, "transition_steps", None)
    if not callable(report):
        return []
    points: Mapping[str, list[int]] = report()
    restarts = {int(s) for s in points.get("cycle_restart", [])}
    restart_warmup = int(getattr(scheduler, "restart_warmup_steps", 1))
    events: list[tuple[int, str, str]] = []
    for step in sorted(restarts):
        label = "cycle restart, LR jumps to peak (no restart warmup)" if restart_warmup == 0 else "cycle restart"
        events.append((step, "cycle_restart", label))
    for step in (int(s) for s in points.get("warmup_end", [])):
        if step not in restarts:
            events.append((step, "warmup_end", "warmup ends: LR at peak"))
    for kind, steps in points.items():
        if kind not in ("cycle_restart", "warmup_end"):
            events.extend((int(s), kind, kind.replace("_", " ")) for s in steps)
    return sorted(events)


def clipping_metadata(clipper: ZClip | None, max_norm: float | None) -> dict[str, Any]:
    """Clipping settings: ``max_norm`` (the checklist's key; 0 = off) and a ``clipping`` description."""
    if clipper is not None:
        settings = {k: v for k, v in clipper.state_dict().items() if k in ("alpha", "z_thresh", "warmup_steps", "eps")}
        limit = clipper.max_norm if clipper.max_norm is not None else max_norm
        return {
            "clipping": {"method": "zclip", **settings, "max_norm": limit, "nonfinite": clipper.nonfinite},
            "max_norm": 0.0 if limit is None else float(limit),
        }
    if max_norm is not None:
        return {"clipping": {"method": "global_norm", "max_norm": float(max_norm)}, "max_norm": float(max_norm)}
    return {"clipping": {"method": "none"}, "max_norm": 0.0}


# --------------------------------------------------------------------------------------------------
# The monitor
# --------------------------------------------------------------------------------------------------


LOSS_MEAN_INTERVAL_S = 0.5
"""About how often (rank 0's wall time) the ranks all-reduce the losses logged since the last time."""
_MAX_LOSS_BATCH = 64
"""Most steps one loss all-reduce carries (bounds how far the run-level rows lag on fast steps)."""
_PROPOSAL_LEAD = 8
"""A batch proposes the size of the batch this many after it, so a rank may run that many batches
ahead of the slowest before it waits for a proposal."""
_MAX_BATCHES_IN_FLIGHT = 100
"""Loss all-reduces that may be outstanding before ``log`` waits (a rank that far behind is stuck,
and the rows must not pile up)."""
_FAILED_EXIT_WAIT_S = 1.0
"""How long a failed run's exit waits for the loss means already sent."""


class _LossMean:
    """The cross-rank mean of one step's loss: known once the all-reduce carrying it has arrived."""

    def __init__(self, step: int) -> None:
        self.step = step
        self.batch: _LossBatch | None = None
        """The all-reduce carrying this loss; None until the batch it belongs to is full."""
        self.mean: float | None = None

    def arrived(self) -> bool:
        """True once the mean can be read without waiting."""
        return self.mean is not None or (self.batch is not None and self.batch.arrived())

    def value(self) -> float:
        if self.mean is None:
            if self.batch is None:
                raise StabScopeError(
                    f"the cross-rank loss mean of step {self.step} is all-reduced together with the next "
                    f"steps' losses (about every {LOSS_MEAN_INTERVAL_S} s) and has not been sent yet: read "
                    "it after the monitor's close(), or read this rank's loss from rank_metrics"
                )
            self.batch.finish()
        assert self.mean is not None
        return self.mean


class _LossBatch:
    """One asynchronous all-reduce of several steps' losses, plus rank 0's proposal for the size of a
    later batch (the other ranks add 0, so the sum is rank 0's number, the same on every rank)."""

    def __init__(
        self, means: list[_LossMean], losses: list[float], proposal: int, world_size: int, device: Any, group: Any
    ) -> None:
        import torch
        import torch.distributed as dist

        self._means = means
        for mean in means:
            mean.batch = self
        self._tensor = torch.tensor([*losses, float(proposal)], dtype=torch.float64, device=device)
        self._work = dist.all_reduce(self._tensor, group=group, async_op=True)
        self._world_size = world_size
        self.proposal = 0

    def arrived(self) -> bool:
        return self._work is None or bool(self._work.is_completed())

    def finish(self) -> None:
        """Wait for the all-reduce and hand each step its mean."""
        if self._work is None:
            return
        self._work.wait()
        self._work = None
        *sums, proposal = self._tensor.tolist()
        for mean, total in zip(self._means, sums, strict=True):
            mean.mean = total / self._world_size
        self.proposal = int(proposal)


class _LossReducer:
    """The cross-rank mean of every logged loss, without a collective on every step.

    One scalar all-reduce a step cost 4-7% of the 2-rank gloo demo's 27 ms step (each rank pinned to
    a core; the collective's threads share it with the training step), whether ``log`` waited for it
    or not. So the losses of about ``LOSS_MEAN_INTERVAL_S`` seconds of steps go in one all-reduce:
    one a step for steps that long or longer, up to ``_MAX_LOSS_BATCH`` for fast ones.

    Every rank must cut its batches at the same steps, and only rank 0's clock decides: the first
    ``_PROPOSAL_LEAD`` batches hold one step each, and each batch carries rank 0's proposal for the
    size of the batch that many after it. Every rank reads a proposal before it needs it; a rank
    waits for one only when it runs that many batches ahead of another (DDP keeps ranks within a
    step of each other).
    """

    def __init__(self, rank: int, world_size: int, device: Any, group: Any) -> None:
        self._rank, self._world_size, self._device, self._group = rank, world_size, device, group
        self._sizes: deque[int] = deque([1] * _PROPOSAL_LEAD)
        """Agreed sizes of the next batches, the one being filled first."""
        self._filling: list[tuple[_LossMean, float]] = []
        self._in_flight: deque[_LossBatch] = deque()
        self._step_times: deque[float] = deque(maxlen=8)
        self.reductions = 0
        """How many all-reduces of losses this rank has started."""

    def add(self, step: int, loss: float, step_time: float | None) -> _LossMean:
        """Queue this step's loss; sends the batch once it holds the agreed number of steps."""
        if step_time is not None:
            self._step_times.append(step_time)
        mean = _LossMean(step)
        self._filling.append((mean, loss))
        if len(self._filling) >= self._next_size():
            self._sizes.popleft()
            self._send()
        return mean

    def collect(self, wait: bool) -> None:
        """Read the batches that arrived (all sent ones with ``wait``), in order: their proposals
        are the sizes of later batches."""
        while self._in_flight and (
            wait or self._in_flight[0].arrived() or len(self._in_flight) > _MAX_BATCHES_IN_FLIGHT
        ):
            batch = self._in_flight.popleft()
            batch.finish()
            self._sizes.append(batch.proposal)

    def settle(self, timeout_s: float) -> None:
        """Read the batches that arrive within ``timeout_s`` (a failed run's exit: a batch that a
        failed rank never joined does not arrive)."""
        deadline = time.monotonic() + timeout_s
        while self._in_flight and time.monotonic() < deadline:
            self.collect(wait=False)
            if self._in_flight and not self._in_flight[0].arrived():
                time.sleep(0.01)

    def send_the_rest(self) -> None:
        """Send the losses of a batch that is not full yet (``sync`` and ``close``, which every rank
        calls after the same steps, so every rank sends the same rest and skips the same size)."""
        if self._filling:
            self._sizes.popleft()
            self._send()

    def _next_size(self) -> int:
        while not self._sizes:  # the batch that proposes it was sent _PROPOSAL_LEAD batches ago
            self.collect(wait=False)
            if not self._sizes:
                self._in_flight[0].finish()
        return self._sizes[0]

    def _send(self) -> None:
        means = [mean for mean, _ in self._filling]
        losses = [loss for _, loss in self._filling]
        self._filling = []
        proposal = self._proposal() if self._rank == 0 else 0
        self._in_flight.append(_LossBatch(means, losses, proposal, self._world_size, self._device, self._group))
        self.reductions += 1

    def _proposal(self) -> int:
        if not self._step_times:
            return 1
        typical = sorted(self._step_times)[len(self._step_times) // 2]
        return max(1, min(_MAX_LOSS_BATCH, round(LOSS_MEAN_INTERVAL_S / max(typical, 1e-9))))


@dataclass(frozen=True)
class MonitorRecord:
    """What :meth:`StabilityMonitor.log` recorded for one step.

    ``rank_metrics``: this rank's row (canonical names, e.g. ``grad_norm_local``, ``step_time_s``).
    ``run_metrics``: the run-level row (rank -1); computed on every rank, written by rank 0 only. Its
    cross-rank ``loss`` mean travels with later steps' losses (:class:`_LossReducer`): reading it
    waits for that all-reduce, and raises a :class:`StabScopeError` if its batch has not been sent
    yet (it has after ``close``). ``partial_run_metrics`` is the same row without that mean.
    ``local_grad_norm`` / ``global_grad_norm``: the DDP hook's norms (L2, before clipping; None
    without a DDP model). ``events``: the ``(kind, label)`` of the schedule transitions logged here.
    """

    step: int
    rank_metrics: dict[str, float]
    partial_run_metrics: dict[str, float] = field(repr=False)
    local_grad_norm: float | None = None
    global_grad_norm: float | None = None
    events: tuple[tuple[str, str], ...] = field(default_factory=tuple)
    loss_mean: _LossMean | None = field(default=None, repr=False, compare=False)

    @property
    def run_metrics(self) -> dict[str, float]:
        if self.loss_mean is None:
            return self.partial_run_metrics
        return {**self.partial_run_metrics, "loss": self.loss_mean.value()}


def _as_float(name: str, value: Any) -> float:
    if hasattr(value, "detach"):
        value = value.detach()
    try:
        return float(value)
    except (TypeError, ValueError):
        raise StabScopeError(f"{name} must be a number or a one-element tensor, got {value!r}") from None


def _check_extra_name(name: str) -> None:
    if not is_valid_metric_name(name) or (name not in CANONICAL_METRICS and "/" not in name):
        raise StabScopeError(
            f"metric {name!r} is not a canonical name ({', '.join(sorted(CANONICAL_METRICS))}) nor a "
            "namespaced extra such as 'grad_norm/layer.3'"
        )


class StabilityMonitor:
    """Writes one rank's stability metrics, the run metadata and events as shards (see module doc).

    Create it once per rank, after ``init_process_group`` and after wrapping the model in DDP, and call
    :meth:`log` once per optimizer step on *every* rank, and :meth:`close` on every rank: under a
    process group of more than one rank the ranks all-reduce their losses so rank 0 can write the
    cross-rank mean, without waiting and about every ``LOSS_MEAN_INTERVAL_S`` seconds (one collective
    for several fast steps, see :class:`_LossReducer`). A step's run-level row is written once its
    mean has arrived: within about that interval, by a later ``log``, ``flush`` or ``close``.

    ``shard_dir``: the run's shard directory (``stabscope compact/watch`` reads it).
    ``model``: a DDP model to measure ``grad_norm_local`` and the global norm on (a comm hook is
    registered); None for single-process training or when another hook is needed.
    ``per_rank_batch_size`` / ``global_batch_size``: samples per rank / per optimizer step, the two
    batch sizes of the noise scale (the global one defaults to per-rank x world size).
    ``seq_len``: tokens per sample (gives ``tokens`` and ``throughput_tok_s`` with the batch sizes).
    ``scheduler``, ``clipper`` / ``max_norm``: their settings go to the metadata; the scheduler's
    transitions become ``warmup_end`` / ``cycle_restart`` events when the run reaches them.
    ``meta``: anything else for the run metadata (``usd_per_gpu_hour``, ``tags``, model config ...).
    ``gpu``: record GPU figures; default: when CUDA is initialised in this process.
    ``grad_scaler``: the ``torch.amp.GradScaler`` of an fp16 job. The hook measures the gradients
    while they are still multiplied by the loss scale; with the scaler it divides the scale out.
    Without it, a step logged with ``clip_stats`` is corrected too (the clipper's norm of the
    unscaled gradient gives the scale), and a warning says so once.
    """

    def __init__(
        self,
        shard_dir: str | os.PathLike[str],
        *,
        model: torch.nn.Module | None = None,
        rank: int | None = None,
        world_size: int | None = None,
        per_rank_batch_size: int | None = None,
        global_batch_size: int | None = None,
        seq_len: int | None = None,
        scheduler: LRScheduler | None = None,
        clipper: ZClip | None = None,
        max_norm: float | None = None,
        meta: Mapping[str, Any] | None = None,
        flush_interval_s: float = 2.0,
        gpu: bool | None = None,
        gpu_sample_interval_s: float = 1.0,
        process_group: dist.ProcessGroup | None = None,
        grad_scaler: GradScaler | None = None,
    ) -> None:
        import torch
        import torch.distributed as dist

        self._distributed = dist.is_available() and dist.is_initialized()
        self.process_group = process_group
        self.rank = rank if rank is not None else (dist.get_rank(process_group) if self._distributed else 0)
        self.world_size = (
            world_size if world_size is not None else (dist.get_world_size(process_group) if self._distributed else 1)
        )
        if not 0 <= self.rank < self.world_size:
            raise StabScopeError(f"rank {self.rank} is outside 0..{self.world_size - 1} (world size {self.world_size})")
        self._losses: _LossReducer | None = None
        if self._distributed and dist.get_world_size(process_group) > 1:
            device = torch.device("cpu")
            if dist.get_backend(process_group) == "nccl":
                device = torch.device("cuda", torch.cuda.current_device())
            self._losses = _LossReducer(self.rank, self.world_size, device, process_group)
        self.hook = GradNormHook(model, process_group, grad_scaler) if model is not None else None  # type: ignore[arg-type]
        self._warned_scaled = False
        self.per_rank_batch_size = per_rank_batch_size
        self.global_batch_size = global_batch_size or (
            per_rank_batch_size * self.world_size if per_rank_batch_size else None
        )
        self.seq_len = seq_len
        use_gpu = torch.cuda.is_available() and torch.cuda.is_initialized() if gpu is None else gpu  # type: ignore[no-untyped-call]
        self._gpu = _GpuSampler(torch.cuda.current_device(), gpu_sample_interval_s) if use_gpu else None
        self._transitions = schedule_events(scheduler) if scheduler is not None else []
        self._last_step: int | None = None
        self._last_time: float | None = None
        self._pending: deque[tuple[MonitorRecord, float]] = deque()
        """Logged steps whose run-level row waits for its cross-rank loss mean, oldest first."""
        self.writer = ShardWriter(shard_dir, self.rank, flush_interval_s=flush_interval_s)
        if self.rank == 0:
            self.writer.write_meta(
                self._metadata(scheduler, clipper, max_norm, model is not None, use_gpu, dict(meta or {}))
            )

    # ------------------------------------------------------------------ metadata

    def _metadata(
        self,
        scheduler: LRScheduler | None,
        clipper: ZClip | None,
        max_norm: float | None,
        hooked: bool,
        use_gpu: bool,
        extra: dict[str, Any],
    ) -> dict[str, Any]:
        meta: dict[str, Any] = {"world_size": self.world_size, "per_rank_metrics_logged": True}
        if self.per_rank_batch_size is not None:
            meta["per_rank_batch_size"] = self.per_rank_batch_size
        if self.global_batch_size is not None:
            meta["global_batch_size"] = self.global_batch_size
        if self.seq_len is not None:
            meta["seq_len"] = self.seq_len
        if use_gpu:
            meta["gpus"] = self.world_size
        meta["grad_norm_local_source"] = "ddp_comm_hook" if hooked else "none"
        if scheduler is not None:
            meta.update(scheduler_metadata(scheduler))
        meta.update(clipping_metadata(clipper, max_norm))
        meta.update(extra)
        return meta

    # ------------------------------------------------------------------ per step

    def log(
        self,
        step: int,
        *,
        loss: float | torch.Tensor | None = None,
        lr: float | None = None,
        clip_stats: ClipRecord | None = None,
        extra: Mapping[str, float] | None = None,
    ) -> MonitorRecord:
        """Record optimizer step ``step`` (call after ``optimizer.step()``, on every rank).

        ``loss``: this rank's loss (nats/token); written per rank, and its cross-rank mean as the
        run-level ``loss``. ``lr``: the LR this step used. ``clip_stats``: the clipper's record (its
        pre-clip ``grad_norm``, ``grad_norm_clipped``, ``clip_coef``, ``nonfinite_grads``); without it
        the hook's global norm is the run-level ``grad_norm``. ``extra``: more canonical or namespaced
        metrics (per-rank names go to this rank's row, the rest to the run-level row).
        ``step_time_s`` is the wall time since the previous ``log`` call (absent on the first).
        """
        now = time.perf_counter()
        step = self._check_step(step)
        rank_metrics: dict[str, float] = {}
        run_metrics: dict[str, float] = {}
        step_time = None if self._last_time is None else now - self._last_time
        if step_time is not None:
            rank_metrics["step_time_s"] = step_time
        norms = self.hook.take() if self.hook is not None else None
        if norms is not None and clip_stats is not None and self.hook.grad_scaler is None:  # type: ignore[union-attr]
            norms = self._unscaled(norms, clip_stats.total_norm)
        if norms is not None:
            rank_metrics["grad_norm_local"] = norms[0]
            run_metrics["grad_norm"] = norms[1]
        if loss is not None:
            rank_metrics["loss"] = _as_float("loss", loss)
            if self._losses is None:
                run_metrics["loss"] = rank_metrics["loss"]
        if lr is not None:
            run_metrics["lr"] = _as_float("lr", lr)
        if clip_stats is not None:
            run_metrics.update(clip_stats.as_metrics())
        self._add_throughput(step, step_time, rank_metrics, run_metrics)
        if self._gpu is not None:
            rank_metrics.update(self._gpu.sample())
        for name, value in (extra or {}).items():
            _check_extra_name(name)
            (rank_metrics if name in PER_RANK_METRICS else run_metrics)[name] = _as_float(name, value)
        # Queued once every argument is checked: a call that raises must not leave a loss that the
        # other ranks' batches lack.
        loss_mean = None
        if loss is not None and self._losses is not None:
            loss_mean = self._losses.add(step, rank_metrics["loss"], step_time)
        events = self._reached_transitions(step)
        wall_time = time.time()
        record = MonitorRecord(
            step=step,
            rank_metrics=rank_metrics,
            partial_run_metrics=run_metrics,
            local_grad_norm=None if norms is None else norms[0],
            global_grad_norm=None if norms is None else norms[1],
            events=events,
            loss_mean=loss_mean,
        )
        self.writer.write(step, rank_metrics, wall_time=wall_time)
        self._pending.append((record, wall_time))
        self._write_pending(wait=False)
        self._last_step, self._last_time = step, now
        return record

    def _unscaled(self, norms: tuple[float, float], clipper_norm: float) -> tuple[float, float]:
        """The hook's norms without an fp16 loss scale it was not told of: the clipper's norm of the
        same (unscaled) gradient gives the scale exactly (a power of two)."""
        factor = loss_scale_factor(norms[1], clipper_norm)
        if factor == 1.0:
            return norms
        if not self._warned_scaled:
            self._warned_scaled = True
            warnings.warn(
                f"the DDP hook measured gradients {factor:g}x the clipper's: the backward ran on "
                "loss-scaled gradients (fp16 GradScaler). grad_norm_local is divided by that scale; "
                "pass grad_scaler=scaler to StabilityMonitor so that steps without clip_stats are too",
                RuntimeWarning,
                stacklevel=3,
            )
        return norms[0] / factor, norms[1] / factor

    def _write_pending(self, wait: bool, without_mean: bool = False) -> None:
        """Write the run-level rows whose loss mean has arrived, in step order; with ``wait``, wait
        for the means already sent (every rank waits for its own, so its collectives complete). With
        ``without_mean`` (a failed run's exit), write the rest without their loss."""
        if self._losses is not None:
            self._losses.collect(wait)
        while self._pending:
            record, wall_time = self._pending[0]
            mean = record.loss_mean
            arrived = mean is None or mean.arrived()
            if not arrived and not without_mean:
                return
            self._pending.popleft()
            if self.rank == 0:
                row = record.run_metrics if arrived else record.partial_run_metrics
                self.writer.write(record.step, run_level=row, wall_time=wall_time)

    def _check_step(self, step: int) -> int:
        if isinstance(step, bool) or not isinstance(step, int) or step < 0:
            raise StabScopeError(f"step must be an optimizer step count >= 0 (int), got {step!r}")
        if self._last_step is not None and step <= self._last_step:
            raise StabScopeError(
                f"step {step} does not follow the previous logged step {self._last_step}: log each optimizer "
                "step once, in order (a resumed run needs a new StabilityMonitor)"
            )
        return step

    def _add_throughput(
        self, step: int, step_time: float | None, rank_metrics: dict[str, float], run_metrics: dict[str, float]
    ) -> None:
        if self.seq_len is None or self.global_batch_size is None:
            return
        run_metrics["tokens"] = float((step + 1) * self.global_batch_size * self.seq_len)
        if step_time is not None and step_time > 0 and self.per_rank_batch_size is not None:
            rank_metrics["throughput_tok_s"] = self.per_rank_batch_size * self.seq_len / step_time

    def _reached_transitions(self, step: int) -> tuple[tuple[str, str], ...]:
        """Transitions in (previous logged step, step]; the first call reports only ``step`` itself, so
        a resumed run does not repeat the ones it passed before."""
        after = step - 1 if self._last_step is None else self._last_step
        reached = tuple((kind, label) for at, kind, label in self._transitions if after < at <= step)
        if self.rank == 0:
            for kind, label in reached:
                self.writer.event(step, kind, label)
        return reached

    # ------------------------------------------------------------------ events and lifetime

    def event(self, step: int, kind: str, label: str = "", **detail: Any) -> None:
        """Record a run event (``data_switch``, ``rollback`` ...) at ``step``; rank 0 writes it."""
        if not kind or not is_valid_metric_name(kind):
            raise StabScopeError(f"event kind must be a short name such as 'data_switch', got {kind!r}")
        if self.rank == 0:
            self.writer.event(step, kind, label, **detail)

    def checkpoint(self, step: int, label: str = "", **detail: Any) -> None:
        """Record that a checkpoint holding ``step`` was written, and flush so a crash keeps the record."""
        self.event(step, "checkpoint", label or f"checkpoint at step {step}", **detail)
        self.flush()

    def flush(self) -> None:
        """Write buffered rows and events now, waiting for the loss means already sent. The run-level
        rows of the last steps (about ``LOSS_MEAN_INTERVAL_S`` seconds) wait for their batch: only
        ``sync`` and ``close`` send a batch early, since every rank must send it and a flush may be
        one rank's."""
        self._write_pending(wait=True)
        self.writer.flush()

    def sync(self) -> None:
        """Write every row logged so far, the run-level ones with their loss mean: call it on every
        rank after the same step, before saving a checkpoint, so that a crash after the checkpoint
        cannot lose the run-level rows of the steps it holds (a :meth:`flush` leaves the last
        ``LOSS_MEAN_INTERVAL_S`` seconds of them waiting for their batch)."""
        if self._losses is not None:
            self._losses.send_the_rest()
        self.flush()

    def close(self) -> None:
        """Send the last losses, write every row and close this rank's segment (call it on every
        rank; the DDP hook keeps averaging gradients). A second call does nothing."""
        if self._losses is not None:
            self._losses.send_the_rest()
        self._write_pending(wait=True)
        self.writer.close()

    def __enter__(self) -> StabilityMonitor:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, *exc: object) -> None:
        if exc_type is None:
            self.close()
            return
        # A failed step may have left the ranks at different steps: a new collective could pair
        # with another rank's unrelated one, or wait for a rank that is gone. Keep every row, with
        # the means that arrive within a second.
        if self._losses is not None:
            self._losses.settle(_FAILED_EXIT_WAIT_S)
        self._write_pending(wait=False, without_mean=True)
        self.writer.close()
