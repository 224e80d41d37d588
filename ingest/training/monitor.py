"""StabilityMonitor: a few lines in a training loop write each rank's shard.

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
:class:`ingest.store.shards.ShardWriter` and flushed every ``flush_interval_s`` seconds, so
``stabscope watch`` sees the run grow while it trains.

Under DDP a communication hook (:class:`ingest.training.ddp_hook.GradNormHook`) measures each bucket
before and after its all-reduce, which gives the gradient norm at two batch sizes: a rank's own batch
(``grad_norm_local``) and the global batch (``grad_norm``), the inputs of the two-batch noise scale.
The cross-rank loss mean travels in batched all-reduces (:mod:`ingest.training.loss_sync`); GPU
figures come from :mod:`ingest.training.gpu_sampler`; the metadata and schedule events from
:mod:`ingest.training.run_metadata`.
"""

from __future__ import annotations

import os
import time
import warnings
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch
import torch.distributed as dist

from ingest.errors import StabScopeError
from ingest.store.shards import ShardWriter
from ingest.training.ddp_hook import GradNormHook, loss_scale_factor
from ingest.training.gpu_sampler import GpuSampler
from ingest.training.loss_sync import LossMean, LossReducer
from ingest.training.run_metadata import clipping_metadata, schedule_events, scheduler_metadata
from stab_core.metrics import CANONICAL_METRICS, PER_RANK_METRICS, is_valid_metric_name

if TYPE_CHECKING:
    from torch.amp import GradScaler
    from torch.optim.lr_scheduler import LRScheduler

    from ingest.training.torch_clipping import ZClip
    from stab_core.clipping import ClipRecord

_FAILED_EXIT_WAIT_S = 1.0
"""How long a failed run's exit waits for the loss means already sent."""


@dataclass(frozen=True)
class MonitorRecord:
    """What :meth:`StabilityMonitor.log` recorded for one step.

    ``rank_metrics``: this rank's row (canonical names, e.g. ``grad_norm_local``, ``step_time_s``).
    ``run_metrics``: the run-level row (rank -1); computed on every rank, written by rank 0 only. Its
    cross-rank ``loss`` mean travels with later steps' losses (:class:`LossReducer`): reading it
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
    loss_mean: LossMean | None = field(default=None, repr=False, compare=False)

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
    cross-rank mean, without waiting and about every ``LOSS_MEAN_INTERVAL_S`` seconds of
    :mod:`ingest.training.loss_sync` (one collective for several fast steps, see
    :class:`~ingest.training.loss_sync.LossReducer`). A step's run-level row is written once its
    mean has arrived: within about that interval, by a later ``log``, ``flush`` or ``close``.

    ``shard_dir``: the run's shard directory, or an ``s3://bucket/prefix`` shard location (one segment
    object per flush, uploaded in the background; ``flush``/``sync``/``close`` wait for the uploads);
    ``stabscope compact/watch`` reads either.
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
        self._distributed = dist.is_available() and dist.is_initialized()
        self.process_group = process_group
        self.rank = rank if rank is not None else (dist.get_rank(process_group) if self._distributed else 0)
        self.world_size = (
            world_size if world_size is not None else (dist.get_world_size(process_group) if self._distributed else 1)
        )
        if not 0 <= self.rank < self.world_size:
            raise StabScopeError(f"rank {self.rank} is outside 0..{self.world_size - 1} (world size {self.world_size})")
        self._losses: LossReducer | None = None
        if self._distributed and dist.get_world_size(process_group) > 1:
            device = torch.device("cpu")
            if dist.get_backend(process_group) == "nccl":
                device = torch.device("cuda", torch.cuda.current_device())
            self._losses = LossReducer(self.rank, self.world_size, device, process_group)
        self.hook = GradNormHook(model, process_group, grad_scaler) if model is not None else None  # type: ignore[arg-type]
        self._warned_scaled = False
        self.per_rank_batch_size = per_rank_batch_size
        self.global_batch_size = global_batch_size or (
            per_rank_batch_size * self.world_size if per_rank_batch_size else None
        )
        self.seq_len = seq_len
        use_gpu = torch.cuda.is_available() and torch.cuda.is_initialized() if gpu is None else gpu  # type: ignore[no-untyped-call]
        self._gpu = GpuSampler(torch.cuda.current_device(), gpu_sample_interval_s) if use_gpu else None
        self._transitions = schedule_events(scheduler) if scheduler is not None else []
        self._last_step: int | None = None
        self._last_time: float | None = None
        self._pending: deque[tuple[MonitorRecord, float]] = deque()
        """Logged steps whose run-level row waits for its cross-rank loss mean, oldest first."""
        self.writer = ShardWriter(shard_dir, self.rank, flush_interval_s=flush_interval_s)
        if self.rank == 0:
            self.writer.write_meta(
                self._metadata(
                    scheduler, clipper, max_norm, dict(meta or {}), hooked=model is not None, use_gpu=use_gpu
                )
            )

    # ------------------------------------------------------------------ metadata

    def _metadata(
        self,
        scheduler: LRScheduler | None,
        clipper: ZClip | None,
        max_norm: float | None,
        extra: dict[str, Any],
        *,
        hooked: bool,
        use_gpu: bool,
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

    def _write_pending(self, *, wait: bool, without_mean: bool = False) -> None:
        """Write the run-level rows whose loss mean has arrived, in step order; with ``wait``, wait
        for the means already sent (every rank waits for its own, so its collectives complete). With
        ``without_mean`` (a failed run's exit), write the rest without their loss."""
        if self._losses is not None:
            self._losses.collect(wait=wait)
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
