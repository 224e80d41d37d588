"""StabScope for Lightning: one ``Callback`` writes the run's shards, no change to the LightningModule.

::

    from ingest.training.lightning_callback import StabScopeLightningCallback
    trainer = L.Trainer(gradient_clip_val=1.0, callbacks=[StabScopeLightningCallback("/shards/job42")])
    trainer.fit(module, data)  # then: stabscope compact /shards/job42 --run job42 (or watch)

It drives a :class:`~ingest.training.monitor.StabilityMonitor` on every rank, at Lightning's step
numbers (``trainer.global_step`` after the step: 1 after the first optimizer step). Every optimizer
step it records this rank's ``loss`` and ``step_time_s``, and on rank 0 the cross-rank mean loss, the
LR the step used, the global gradient L2 norm before clipping (measured in
``on_before_optimizer_step``, after AMP unscaling and the DDP all-reduce, before Lightning clips) and,
with ``gradient_clip_val`` by norm, the clip coefficient ``min(1, max_norm / (norm + 1e-6))`` and the
norm after clipping. The run's settings (``max_norm``, ``precision``, ``world_size``,
``planned_steps``, batch sizes) go to the metadata once. With ``accumulate_grad_batches`` > 1 a
step's loss is the mean of its micro-batches' losses as ``training_step`` returned them.

Lightning does not expose a rank's gradient norm before the all-reduce, so none is recorded. Lightning
is imported here only: nothing else in ``ingest`` imports this module.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from typing import Any

import torch

try:  # an optional extra: say which, rather than a bare ModuleNotFoundError
    from lightning.pytorch import Callback, LightningModule, Trainer
except ImportError as exc:
    raise ImportError(f"{__name__} needs Lightning, an optional extra: pip install 'stabscope[lightning]'") from exc

from ingest.training.monitor import StabilityMonitor
from stab_core.clipping import ClipRecord, scalar_clip_coef

_PRECISIONS = {"bf16": "bf16", "16": "fp16", "32": "fp32", "64": "fp64"}


def precision_name(precision: str | int) -> str:
    """``bf16``, ``fp16`` or ``fp32`` for Lightning's precision (``"bf16-mixed"``, ``"16-mixed"``, ``32`` ...)."""
    head = str(precision).split("-")[0]
    return _PRECISIONS.get(head, head)


def _max_norm(trainer: Trainer) -> float | None:
    value = trainer.gradient_clip_val
    algorithm = str(getattr(trainer.gradient_clip_algorithm, "value", trainer.gradient_clip_algorithm) or "norm")
    if value is None or float(value) <= 0 or algorithm != "norm":
        return None
    return float(value)


class StabScopeLightningCallback(Callback):  # type: ignore[misc]
    """A Lightning ``Callback`` that writes the run's stability metrics as shards (module doc).

    ``shard_dir``: the run's shard directory or an ``s3://`` shard location, read by
    ``stabscope compact/watch``. ``per_rank_batch_size``: samples per rank per step (default: the
    train dataloader's ``batch_size``). ``seq_len``: tokens per sample (gives ``tokens`` and
    ``throughput_tok_s``). ``meta``: more run metadata (``tags``, ``usd_per_gpu_hour`` ...).
    ``flush_interval_s``: how often buffered rows reach the shard (seconds).
    """

    def __init__(
        self,
        shard_dir: str | os.PathLike[str],
        *,
        per_rank_batch_size: int | None = None,
        seq_len: int | None = None,
        meta: Mapping[str, Any] | None = None,
        flush_interval_s: float = 2.0,
    ) -> None:
        self.shard_dir = shard_dir
        self.per_rank_batch_size = per_rank_batch_size
        self.seq_len = seq_len
        self.meta = dict(meta or {})
        self.flush_interval_s = flush_interval_s
        self.monitor: StabilityMonitor | None = None
        self._max_norm: float | None = None
        self._norm: float | None = None
        self._lr: float | None = None
        self._losses: list[float] = []
        self._last_step = -1

    def on_train_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self._max_norm = _max_norm(trainer)
        batch_size = self.per_rank_batch_size or getattr(trainer.train_dataloader, "batch_size", None)
        planned = (
            trainer.max_steps if trainer.max_steps and trainer.max_steps > 0 else trainer.estimated_stepping_batches
        )
        meta: dict[str, Any] = {"trainer": "lightning", "precision": precision_name(trainer.precision)}
        if isinstance(planned, (int, float)) and math.isfinite(planned) and planned > 0:
            meta["planned_steps"] = meta["total_steps"] = int(planned)
        if trainer.accumulate_grad_batches > 1:
            meta["gradient_accumulation_steps"] = int(trainer.accumulate_grad_batches)
        global_batch = None
        if batch_size:
            global_batch = int(batch_size) * trainer.world_size * int(trainer.accumulate_grad_batches)
            if self.seq_len is not None:
                meta["tokens_per_step"] = global_batch * self.seq_len
        self.monitor = StabilityMonitor(
            self.shard_dir,
            rank=trainer.global_rank,
            world_size=trainer.world_size,
            per_rank_batch_size=int(batch_size) if batch_size else None,
            global_batch_size=global_batch,
            seq_len=self.seq_len,
            max_norm=self._max_norm,
            meta={**meta, **self.meta},
            flush_interval_s=self.flush_interval_s,
        )
        self._last_step = trainer.global_step

    def on_before_optimizer_step(
        self, trainer: Trainer, pl_module: LightningModule, optimizer: torch.optim.Optimizer
    ) -> None:
        # Lightning clips right after this hook: the gradients here are the ones the clipper measures
        grads = [p.grad for p in pl_module.parameters() if p.grad is not None]
        self._norm = float(torch.nn.utils.get_total_norm(grads, 2.0)) if grads else None
        self._lr = float(optimizer.param_groups[0]["lr"])

    def on_train_batch_end(
        self, trainer: Trainer, pl_module: LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        loss = outputs.get("loss") if isinstance(outputs, Mapping) else outputs
        if isinstance(loss, torch.Tensor):
            self._losses.append(float(loss.detach()))
        step = trainer.global_step
        if self.monitor is None or step == self._last_step:
            return  # a micro-batch of gradient accumulation: the optimizer has not stepped yet
        self._last_step = step
        clip = None
        if self._norm is not None:
            limit = self._max_norm if self._max_norm is not None else math.inf
            coef = scalar_clip_coef(self._norm, limit) if self._max_norm is not None else 1.0
            finite = math.isfinite(self._norm)
            clip = ClipRecord(self._norm, self._norm * coef, coef, coef < 1.0, not finite, limit)
        loss_mean = sum(self._losses) / len(self._losses) if self._losses else None
        self.monitor.log(step, loss=loss_mean, lr=self._lr, clip_stats=clip)
        self._losses.clear()
        self._norm = None

    def on_save_checkpoint(self, trainer: Trainer, pl_module: LightningModule, checkpoint: dict[str, Any]) -> None:
        if self.monitor is not None:
            self.monitor.sync()  # every rank saves: the rows of the steps the checkpoint holds are on disk
            self.monitor.checkpoint(trainer.global_step)

    def on_train_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if self.monitor is not None:
            self.monitor.close()
            self.monitor = None

    def on_exception(self, trainer: Trainer, pl_module: LightningModule, exception: BaseException) -> None:
        if self.monitor is not None:
            self.monitor.__exit__(type(exception), exception, exception.__traceback__)
            self.monitor = None
