"""StabScope for the Hugging Face ``Trainer``: one callback writes the run's shards, no training-loop change.

::

    from ingest.training.hf_callback import StabScopeCallback
    trainer = Trainer(model, args, train_dataset=data, callbacks=[StabScopeCallback("/shards/job42")])
    trainer.train()  # then: stabscope compact /shards/job42 --run job42 (or watch)

What it records, at the Trainer's own step numbers (``state.global_step``: 1 after the first optimizer
step, as in ``trainer_state.json``, so a run imported from that file and one written by this callback
line up):

- every optimizer step, each rank: ``step_time_s`` (wall time since the previous step ended); rank 0
  also the LR the step used (``lr``) and, with ``include_num_input_tokens_seen``, the cumulative
  ``tokens``;
- every logging step (``logging_steps``; 1 records every step), rank 0: the Trainer's logged ``loss``
  (its mean over the ranks and the steps since the previous log), its ``grad_norm`` (the global L2
  norm before clipping) and, when clipping is on (``max_grad_norm`` > 0), the clip coefficient
  ``min(1, max_norm / (grad_norm + 1e-6))`` and the norm after clipping;
- once, rank 0: the run's settings as metadata (``max_norm``, ``precision``, ``world_size``,
  ``planned_steps``, batch sizes, LR schedule) and anything passed as ``meta``.

The Trainer measures no per-rank gradient norm (its norm is taken after the all-reduce), so none is
recorded. Transformers is imported here only: nothing else in ``ingest`` imports this module.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Mapping
from typing import Any

try:  # an optional extra: say which, rather than a bare ModuleNotFoundError
    from transformers import TrainerCallback, TrainerControl, TrainerState, TrainingArguments
except ImportError as exc:
    raise ImportError(f"{__name__} needs transformers, an optional extra: pip install 'stabscope[hf]'") from exc

from ingest.store.shards import ShardWriter
from stab_core.clipping import scalar_clip_coef

_DECAY_STYLES = {"cosine": "cosine", "cosine_with_restarts": "cosine", "linear": "linear", "constant": "constant"}
"""``lr_decay_style`` (the checklist's key) of the Trainer's ``lr_scheduler_type`` values."""


def precision_of(args: TrainingArguments) -> str:
    """``bf16``, ``fp16`` or ``fp32``: the mixed precision the Trainer's arguments ask for."""
    if getattr(args, "bf16", False):
        return "bf16"
    if getattr(args, "fp16", False):
        return "fp16"
    return "fp32"


def trainer_metadata(args: TrainingArguments, state: TrainerState, seq_len: int | None) -> dict[str, Any]:
    """The run's settings under the store's metadata keys (``max_norm`` 0 = clipping off)."""
    world_size = int(args.world_size)
    per_rank = int(args.per_device_train_batch_size)
    global_batch = per_rank * int(args.gradient_accumulation_steps) * world_size
    max_norm = float(args.max_grad_norm or 0.0)
    meta: dict[str, Any] = {
        "trainer": "transformers",
        "world_size": world_size,
        "precision": precision_of(args),
        "max_norm": max_norm,
        "clipping": {"method": "global_norm" if max_norm > 0 else "none", "max_norm": max_norm},
        "per_rank_batch_size": per_rank,
        "global_batch_size": global_batch,
        "gradient_accumulation_steps": int(args.gradient_accumulation_steps),
        "peak_lr": float(args.learning_rate),
        "per_rank_metrics_logged": True,
        "grad_norm_local_source": "none",
    }
    if state.max_steps and state.max_steps > 0:
        meta["planned_steps"] = meta["total_steps"] = int(state.max_steps)
    schedule = str(getattr(args.lr_scheduler_type, "value", args.lr_scheduler_type))
    meta["scheduler"] = schedule
    if schedule in _DECAY_STYLES:
        meta["lr_decay_style"] = _DECAY_STYLES[schedule]
    warmup = int(args.get_warmup_steps(state.max_steps)) if state.max_steps else 0
    if warmup:
        meta["warmup_steps"] = warmup
    if seq_len is not None:
        meta["seq_len"] = seq_len
        meta["tokens_per_step"] = global_batch * seq_len
    return meta


class StabScopeCallback(TrainerCallback):  # type: ignore[misc]
    """A ``transformers.TrainerCallback`` that writes the run's stability metrics as shards (module doc).

    ``shard_dir``: the run's shard directory or an ``s3://`` shard location, read by
    ``stabscope compact/watch``; every rank writes its own rank directory in it.
    ``seq_len``: tokens per sample, for ``tokens_per_step`` in the metadata (the Trainer does not know it).
    ``meta``: more run metadata (``tags``, ``usd_per_gpu_hour``, the model config ...).
    ``flush_interval_s``: how often buffered rows reach the shard (seconds).
    """

    def __init__(
        self,
        shard_dir: str | os.PathLike[str],
        *,
        seq_len: int | None = None,
        meta: Mapping[str, Any] | None = None,
        flush_interval_s: float = 2.0,
    ) -> None:
        self.shard_dir = shard_dir
        self.seq_len = seq_len
        self.meta = dict(meta or {})
        self.flush_interval_s = flush_interval_s
        self.writer: ShardWriter | None = None
        self._max_norm = 0.0
        self._is_rank0 = True
        self._last_step_end: float | None = None
        self._step_lr: float | None = None

    def on_train_begin(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any
    ) -> None:
        self._max_norm = float(args.max_grad_norm or 0.0)
        self._is_rank0 = bool(state.is_world_process_zero)
        self.writer = ShardWriter(self.shard_dir, int(args.process_index), flush_interval_s=self.flush_interval_s)
        if self._is_rank0:
            self.writer.write_meta({**trainer_metadata(args, state, self.seq_len), **self.meta})
        self._last_step_end = time.perf_counter()

    def on_optimizer_step(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any
    ) -> None:
        # after optimizer.step(), before the scheduler's step: the LR this step used (what the Trainer logs)
        optimizer = kwargs.get("optimizer")
        self._step_lr = float(optimizer.param_groups[0]["lr"]) if optimizer is not None else None

    def on_step_end(self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any) -> None:
        if self.writer is None:
            return
        now = time.perf_counter()
        step = int(state.global_step)
        rank_row = {} if self._last_step_end is None else {"step_time_s": now - self._last_step_end}
        run_row: dict[str, float] = {}
        if self._is_rank0:
            if self._step_lr is not None:
                run_row["lr"] = self._step_lr
            if state.num_input_tokens_seen:
                run_row["tokens"] = float(state.num_input_tokens_seen)
        self.writer.write(step, rank_row, run_level=run_row)
        self._last_step_end = now

    def on_log(
        self,
        args: TrainingArguments,
        state: TrainerState,
        control: TrainerControl,
        logs: Mapping[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        if self.writer is None or not self._is_rank0 or not logs or "loss" not in logs:
            return  # evaluation logs and the end-of-training summary are not a training step's
        row = {"loss": float(logs["loss"])}
        norm = logs.get("grad_norm")
        if isinstance(norm, (int, float)):
            row["grad_norm"] = float(norm)
            if self._max_norm > 0 and math.isfinite(norm):
                coef = scalar_clip_coef(float(norm), self._max_norm)
                row["clip_coef"] = coef
                row["grad_norm_clipped"] = float(norm) * coef
        self.writer.write(int(state.global_step), run_level=row)

    def on_save(self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any) -> None:
        if self.writer is not None:
            if self._is_rank0:
                self.writer.event(int(state.global_step), "checkpoint", f"checkpoint at step {state.global_step}")
            self.writer.flush()  # a crash after the checkpoint keeps the rows of the steps it holds

    def on_train_end(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any
    ) -> None:
        if self.writer is not None:
            self.writer.close()
            self.writer = None
