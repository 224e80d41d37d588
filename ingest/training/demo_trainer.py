"""``stabscope demo-train``: real multi-process training that writes StabScope shards.

Each rank is a process (``torch.multiprocessing.spawn``, ``torch.distributed`` on gloo, one CPU
thread each) training the training side's toy GPT (:mod:`ingest.training.toy_model`, the experiment's
model) under DDP on tokens drawn from a Markov source
(first or second order), so the loss falls from ln(vocab) towards the source's entropy. It uses the
warmup-cosine-restart scheduler, global-norm clipping (or ZClip) and the :class:`StabilityMonitor`,
and checkpoints every ``checkpoint_every`` steps (``--resume`` continues from the latest one).

Provocations make a real instability the dashboard should find:

- ``lr-jump``: no restart warmup at the cycle boundary, so the LR jumps from its floor to a high
  peak in one step (the pitfall the restart warmup exists to prevent); the loss spikes after it.
- ``outlier-batch``: the last rank trains on one repeated template sequence, which the source
  never produces, for a few steps: that rank's loss and local gradient norm jump.

The benchmark of the monitor's cost (``bench.training``, goal 5) trains this model too. torch is
imported inside the functions, so ``stabscope`` commands that do not train pay nothing.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
import numpy.typing as npt

from ingest.errors import StabScopeError
from ingest.training.spawn import exit_rank, spawn_ranks
from ingest.training.toy_model import ModelShape

if TYPE_CHECKING:
    import torch
    from torch import nn

    from ingest.training.train_loop import StepOutcome, Trainer

Provocation = Literal["none", "lr-jump", "outlier-batch"]
ClipMethod = Literal["norm", "zclip"]
PROVOCATIONS: tuple[str, ...] = ("none", "lr-jump", "outlier-batch")
CHECKPOINT_DIR = "checkpoints"
OUTLIER_STEPS = 5
"""How many consecutive steps the outlier rank trains on the template (steps)."""
DEFAULT_PEAK_LR = 2e-3
"""AdamW peak LR of a normal demo run: the loss falls smoothly to near the source entropy."""
LR_JUMP_PEAK_LR = 0.15
"""``lr-jump``'s peak LR (75x the default). The first cycle's warmup ramps up to it and the model
survives; at the restart the LR jumps from the floor (1 % of the peak) to it in one step and the loss
spikes. Measured on 2 ranks x 240 steps, seeds 0-2: the loss peaks at 2.6-6.7x its pre-restart median
within 30 steps (a run without the provocation: 1.04-1.10x)."""
LR_JUMP_MIN_LR_RATIO = 0.01


# --------------------------------------------------------------------------------------------------
# Configuration
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class DemoConfig:
    """One demo run. Steps are optimizer steps; batch sizes count sequences of ``seq_len`` tokens.

    ``peak_lr`` (AdamW) defaults to ``DEFAULT_PEAK_LR`` (``LR_JUMP_PEAK_LR`` for ``lr-jump``),
    ``min_lr_ratio`` to 0.1 (``LR_JUMP_MIN_LR_RATIO`` for ``lr-jump``), ``warmup_steps`` to steps/10
    and ``restart_warmup_steps`` to warmup/3 (0 for ``lr-jump``).
    ``checkpoint_every``: steps between checkpoints (0 = none).
    """

    out: Path
    ranks: int = 2
    steps: int = 300
    provoke: Provocation = "none"
    seed: int = 0
    per_rank_batch_size: int = 8
    seq_len: int = 64
    vocab_size: int = 32
    d_model: int = 64
    n_layers: int = 2
    n_heads: int = 4
    markov_order: int = 1
    markov_branching: int = 3
    peak_lr: float | None = None
    num_cycles: int = 2
    warmup_steps: int | None = None
    restart_warmup_steps: int | None = None
    min_lr_ratio: float | None = None
    clip: ClipMethod = "norm"
    max_norm: float = 1.0
    checkpoint_every: int = 0
    resume: bool = False
    progress_every: int = 50

    def resolved(self) -> DemoConfig:
        """The config with every default filled in and checked (raises StabScopeError)."""
        if self.provoke not in PROVOCATIONS:
            raise StabScopeError(f"--provoke must be one of {', '.join(PROVOCATIONS)}, got {self.provoke!r}")
        if self.clip not in ("norm", "zclip"):
            raise StabScopeError(f"--clip must be 'norm' or 'zclip', got {self.clip!r}")
        if not 1 <= self.ranks <= 64:
            raise StabScopeError(f"--ranks must be between 1 and 64 processes, got {self.ranks}")
        if self.steps < 20 * self.num_cycles:
            raise StabScopeError(
                f"--steps {self.steps} is too short for {self.num_cycles} cycles: use at least {20 * self.num_cycles}"
            )
        if self.checkpoint_every < 0:
            raise StabScopeError(f"--checkpoint-every must be >= 0 steps, got {self.checkpoint_every}")
        warmup = self.warmup_steps if self.warmup_steps is not None else max(self.steps // 10, 1)
        restart = self.restart_warmup_steps
        if restart is None:
            restart = 0 if self.provoke == "lr-jump" else max(warmup // 3, 1)
        jump = self.provoke == "lr-jump"
        peak = self.peak_lr if self.peak_lr is not None else (LR_JUMP_PEAK_LR if jump else DEFAULT_PEAK_LR)
        if not (math.isfinite(peak) and peak > 0):
            raise StabScopeError(f"--peak-lr must be a positive learning rate, got {peak}")
        floor = self.min_lr_ratio if self.min_lr_ratio is not None else (LR_JUMP_MIN_LR_RATIO if jump else 0.1)
        return replace(
            self,
            out=Path(self.out),
            warmup_steps=warmup,
            restart_warmup_steps=restart,
            peak_lr=peak,
            min_lr_ratio=floor,
        )

    @property
    def cycle_starts(self) -> list[int]:
        """First step of each cycle after the first (the restarts), as the scheduler computes them."""
        from stab_core.schedulers import cycle_boundaries

        return [int(b) for b in cycle_boundaries(self.steps, self.num_cycles)[1:-1]]

    @property
    def outlier_steps(self) -> tuple[int, int]:
        """[first, end) steps of the outlier batches: 60 % into the run."""
        first = int(0.6 * self.steps)
        return first, first + OUTLIER_STEPS

    @property
    def outlier_rank(self) -> int:
        return self.ranks - 1

    @property
    def model_shape(self) -> ModelShape:
        """The toy GPT this run trains (:mod:`ingest.training.toy_model`, dense, over the source's tokens)."""
        return ModelShape(
            d_model=self.d_model,
            n_layers=self.n_layers,
            n_heads=self.n_heads,
            seq_len=self.seq_len,
            vocab=self.vocab_size,
        )


# --------------------------------------------------------------------------------------------------
# Data: a Markov source
# --------------------------------------------------------------------------------------------------


class MarkovSource:
    """Token sequences where each token depends on the ``order`` tokens before it: every context
    allows ``branching`` successors with Dirichlet(1) probabilities.

    ``entropy_nats`` is the mean conditional entropy over contexts (nats/token): the loss a perfect
    model approaches (contexts are close to uniformly visited); an untrained model starts near
    ln(vocab_size).
    """

    def __init__(self, vocab_size: int, branching: int, seed: int, order: int = 1) -> None:
        if not 2 <= branching <= vocab_size:
            raise StabScopeError(f"branching must lie in 2..vocab_size ({vocab_size}), got {branching}")
        if order not in (1, 2):
            raise StabScopeError(f"order must be 1 or 2 (tokens of context), got {order}")
        rng = np.random.default_rng([seed, 7919])
        contexts = vocab_size**order
        self.vocab_size = vocab_size
        self.order = order
        self.successors = np.stack([rng.choice(vocab_size, branching, replace=False) for _ in range(contexts)])
        self.probs = rng.dirichlet(np.ones(branching), size=contexts)
        self.cumulative = np.cumsum(self.probs, axis=1)
        self.cumulative[:, -1] = 1.0
        self.entropy_nats = float(np.mean(-np.sum(self.probs * np.log(self.probs), axis=1)))

    def sample(self, rng: np.random.Generator, batch: int, length: int) -> npt.NDArray[np.int64]:
        """``batch`` sequences of ``length`` tokens; the first ``order`` are uniform."""
        tokens = np.empty((batch, length), dtype=np.int64)
        tokens[:, : self.order] = rng.integers(0, self.vocab_size, size=(batch, self.order))
        last = self.successors.shape[1] - 1
        for t in range(self.order, length):
            context = tokens[:, t - 1] if self.order == 1 else tokens[:, t - 2] * self.vocab_size + tokens[:, t - 1]
            choice = (rng.random(batch)[:, None] > self.cumulative[context]).sum(axis=1)
            tokens[:, t] = self.successors[context, np.minimum(choice, last)]
        return tokens


def template_batch(config: DemoConfig, batch: int) -> npt.NDArray[np.int64]:
    """The outlier batch: one random sequence (fixed per seed), repeated in every row."""
    rng = np.random.default_rng([config.seed, 104729])
    row = rng.integers(0, config.vocab_size, size=config.seq_len + 1)
    return np.tile(row, (batch, 1))


def batch_tokens(config: DemoConfig, source: MarkovSource, rank: int, step: int) -> npt.NDArray[np.int64]:
    """Rank ``rank``'s input at ``step`` (``per_rank_batch_size`` x ``seq_len + 1`` token ids).

    A function of (seed, rank, step) alone, so a resumed run sees exactly the batches it would have.
    """
    first, end = config.outlier_steps
    if config.provoke == "outlier-batch" and rank == config.outlier_rank and first <= step < end:
        return template_batch(config, config.per_rank_batch_size)
    rng = np.random.default_rng([config.seed, rank, step])
    return source.sample(rng, config.per_rank_batch_size, config.seq_len + 1)


# --------------------------------------------------------------------------------------------------
# The training loop (one rank)
# --------------------------------------------------------------------------------------------------


def _build_trainer(config: DemoConfig, *, ddp: bool) -> Trainer:
    from ingest.training.torch_clipping import ZClip
    from ingest.training.toy_model import build_gpt
    from ingest.training.train_loop import build_trainer

    model = build_gpt(config.model_shape, config.seed)
    if ddp:
        from torch.nn.parallel import DistributedDataParallel

        model = DistributedDataParallel(model, gradient_as_bucket_view=True)
    assert config.peak_lr is not None and config.warmup_steps is not None
    assert config.restart_warmup_steps is not None and config.min_lr_ratio is not None
    return build_trainer(
        model,
        peak_lr=config.peak_lr,
        betas=(0.9, 0.95),
        weight_decay=0.1,
        total_steps=config.steps,
        warmup_steps=config.warmup_steps,
        restart_warmup_steps=config.restart_warmup_steps,
        num_cycles=config.num_cycles,
        min_lr_ratio=config.min_lr_ratio,
        clipper=ZClip(max_norm=config.max_norm * 10) if config.clip == "zclip" else None,
        max_norm=config.max_norm,
    )


def _unwrapped(model: nn.Module) -> nn.Module:
    inner = getattr(model, "module", model)
    assert hasattr(inner, "state_dict")
    return inner  # type: ignore[no-any-return]


def checkpoint_path(out: Path, step: int) -> Path:
    """Where the checkpoint holding ``step`` (the last completed optimizer step) lives."""
    return Path(out) / CHECKPOINT_DIR / f"step-{step:07d}.pt"


def latest_checkpoint(out: Path) -> Path | None:
    """The newest complete checkpoint under ``out`` (written atomically, so any listed one is whole)."""
    found = sorted((Path(out) / CHECKPOINT_DIR).glob("step-*.pt"))
    return found[-1] if found else None


def _save_checkpoint(trainer: Trainer, config: DemoConfig, step: int) -> Path:
    import torch

    target = checkpoint_path(config.out, step)
    target.parent.mkdir(parents=True, exist_ok=True)
    state = {
        "step": step,
        "model": _unwrapped(trainer.model).state_dict(),
        "optimizer": trainer.optimizer.state_dict(),
        "scheduler": trainer.scheduler.state_dict(),
        "clipper": None if trainer.clipper is None else trainer.clipper.state_dict(),
        "config": {k: str(v) if isinstance(v, Path) else v for k, v in asdict(config).items()},
    }
    tmp = target.with_suffix(f".tmp-{os.getpid()}")
    torch.save(state, tmp)
    os.replace(tmp, target)  # a kill mid-write leaves a .tmp file, never a torn checkpoint
    return target


def _restore(trainer: Trainer, path: Path) -> int:
    """Load a checkpoint; returns the last completed step it holds."""
    import torch

    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except (OSError, RuntimeError, EOFError) as exc:
        raise StabScopeError(f"cannot load checkpoint {path}: {exc}") from exc
    try:
        _unwrapped(trainer.model).load_state_dict(state["model"])
    except RuntimeError as exc:  # another model's weights: a checkpoint of an older demo or other sizes
        raise StabScopeError(f"checkpoint {path} holds a different model than this run's: {str(exc)[:300]}") from exc
    trainer.optimizer.load_state_dict(state["optimizer"])
    trainer.scheduler.load_state_dict(state["scheduler"])
    if trainer.clipper is not None:
        if state["clipper"] is None:
            raise StabScopeError(f"checkpoint {path} was written without ZClip; resume with --clip norm")
        trainer.clipper.load_state_dict(state["clipper"])
    return int(state["step"])


def train_rank(config: DemoConfig, rank: int, world_size: int, log: Callable[[str], None] | None = None) -> None:
    """Train one rank from step 0 (or the latest checkpoint with ``config.resume``) to ``config.steps``.

    Runs inside an initialised process group when ``world_size > 1`` (DDP + the monitor's hook).
    """
    import torch

    from ingest.training.monitor import StabilityMonitor
    from ingest.training.train_loop import train_steps

    config = config.resolved()
    distributed = world_size > 1
    trainer = _build_trainer(config, ddp=distributed)
    start = 0
    resumed_from = latest_checkpoint(config.out) if config.resume else None
    if resumed_from is not None:
        start = _restore(trainer, resumed_from) + 1
    source = MarkovSource(config.vocab_size, config.markov_branching, config.seed, config.markov_order)
    monitor = StabilityMonitor(
        config.out,
        model=trainer.model if distributed else None,
        rank=rank,
        world_size=world_size,
        per_rank_batch_size=config.per_rank_batch_size,
        seq_len=config.seq_len,
        scheduler=trainer.scheduler,
        clipper=trainer.clipper,
        max_norm=config.max_norm,
        meta=_run_meta(config, source),
        flush_interval_s=1.0,
    )
    if resumed_from is not None:
        monitor.event(start, "rollback", f"resumed from checkpoint {resumed_from.name}", checkpoint_step=start - 1)
    started = time.monotonic()

    def after(done: StepOutcome) -> None:
        assert done.clip is not None  # the demo always clips
        logged = monitor.log(done.step, loss=done.loss, lr=done.lr, clip_stats=done.clip)
        finished = done.step + 1
        if config.checkpoint_every and finished % config.checkpoint_every == 0 and finished < config.steps:
            # Metrics up to this step reach the shards before the checkpoint exists: a crash between
            # the two must not leave a resumable checkpoint whose earlier steps were never logged.
            # Every rank's, not only rank 0's: a rank that is behind would lose those steps; and
            # the run-level rows too, whose loss means wait for a batch that sync sends now.
            monitor.sync()
            if distributed:
                torch.distributed.barrier()
            if rank == 0:
                _save_checkpoint(trainer, config, done.step)
            monitor.checkpoint(done.step)
        if log is not None and rank == 0 and (finished % config.progress_every == 0 or finished == config.steps):
            log(
                f"step {finished}/{config.steps}  loss {logged.rank_metrics['loss']:.3f} (rank 0)  "
                f"lr {done.lr:.2e}  grad_norm {done.clip.total_norm:.2f}  ({time.monotonic() - started:.1f} s)"
            )

    def batch(step: int) -> torch.Tensor:
        return torch.from_numpy(batch_tokens(config, source, rank, step))

    with monitor:
        train_steps(trainer, range(start, config.steps), batch, after)


def _run_meta(config: DemoConfig, source: MarkovSource) -> dict[str, Any]:
    first, end = config.outlier_steps
    meta: dict[str, Any] = {
        "source": "stabscope demo-train",
        "model": f"toy GPT (causal, pre-LN), {config.n_layers} layers x d={config.d_model}, vocab {config.vocab_size}",
        "precision": "fp32",
        "loss_unit": "nats/token",  # the monitor logs next-token cross-entropy (stab_core.loss_origin)
        "provoke": config.provoke,
        "data": f"order-{config.markov_order} Markov source, {config.markov_branching} successors per context",
        "data_entropy_nats": source.entropy_nats,
        "checkpoint_enabled": config.checkpoint_every > 0,
        "tags": ["demo-train", f"provoke:{config.provoke}"],
    }
    if config.checkpoint_every:
        meta["checkpoint_interval_steps"] = config.checkpoint_every
    if config.provoke == "outlier-batch":
        meta["outlier_rank"], meta["outlier_steps"] = config.outlier_rank, [first, end]
    return meta


# --------------------------------------------------------------------------------------------------
# Launching ranks
# --------------------------------------------------------------------------------------------------


def _rank_main(rank: int, config: DemoConfig, rendezvous: str, verbose: bool) -> None:
    """One spawned rank of :func:`launch` (spawn passes its arguments positionally)."""
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    log = (lambda msg: print(msg, file=sys.stderr, flush=True)) if verbose else None
    if config.ranks == 1:
        train_rank(config, 0, 1, log)
        return
    dist.init_process_group("gloo", init_method=f"file://{rendezvous}", rank=rank, world_size=config.ranks)
    try:
        train_rank(config, rank, config.ranks, log)
        dist.barrier()
    finally:
        dist.destroy_process_group()
    exit_rank()


def launch(config: DemoConfig, *, verbose: bool = False) -> None:
    """Run ``config.ranks`` training processes (spawned, gloo) to completion; raises StabScopeError
    with the failing rank's error."""
    config = config.resolved()
    config.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="stabscope-rdzv-") as rdzv_dir:
        spawn_ranks(_rank_main, (config, str(Path(rdzv_dir) / "store"), verbose), config.ranks)


# --------------------------------------------------------------------------------------------------
# CLI
# --------------------------------------------------------------------------------------------------


def cmd_demo_train(args: argparse.Namespace) -> int:
    """``stabscope demo-train``: train, then say how to ingest the shards."""
    config = DemoConfig(
        out=Path(args.out),
        ranks=args.ranks,
        steps=args.steps,
        provoke=args.provoke,
        seed=args.seed,
        per_rank_batch_size=args.batch_size,
        peak_lr=args.peak_lr,
        min_lr_ratio=args.min_lr_ratio,
        clip=args.clip,
        max_norm=args.max_norm,
        checkpoint_every=args.checkpoint_every,
        resume=args.resume,
    ).resolved()
    from ingest.store.shards import list_segments

    if list_segments(config.out) and not config.resume:
        raise StabScopeError(
            f"{config.out} already holds shards of a run: pass --resume to continue it, or choose a new --out"
        )
    if latest_checkpoint(config.out) is None and config.resume:
        print(f"no checkpoint under {config.out / CHECKPOINT_DIR}: starting from step 0", file=sys.stderr)
    print(
        f"training {config.ranks} ranks x {config.steps} steps (provoke {config.provoke}); shards in {config.out}",
        file=sys.stderr,
        flush=True,
    )
    started = time.monotonic()
    launch(config, verbose=not args.json)
    elapsed = time.monotonic() - started
    summary = {
        "out": str(config.out),
        "ranks": config.ranks,
        "steps": config.steps,
        "provoke": config.provoke,
        "seconds": round(elapsed, 1),
        "cycle_restarts": config.cycle_starts,
    }
    if args.json:
        print(json.dumps(summary))
    else:
        print(
            f"done in {elapsed:.0f} s. Ingest with: stabscope compact {config.out} --run NAME",
            file=sys.stderr,
        )
    return 0


def add_cli(add: Callable[..., argparse.ArgumentParser]) -> None:
    """Register ``demo-train`` through ingest.cli's ``add(name, fn, help)``."""
    p = add(
        "demo-train",
        cmd_demo_train,
        "train a small transformer LM on 2+ CPU processes (gloo) and write its shards",
    )
    p.add_argument("--ranks", type=int, default=2, help="training processes (default 2)")
    p.add_argument("--steps", type=int, default=300, help="optimizer steps (default 300)")
    p.add_argument("--out", required=True, help="shard directory to write (also holds checkpoints)")
    p.add_argument("--provoke", choices=PROVOCATIONS, default="none", help="instability to provoke (default none)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--batch-size", type=int, default=8, help="sequences per rank per step (default 8)")
    p.add_argument("--peak-lr", type=float, default=None, help="AdamW peak LR (default 2e-3; 0.15 for lr-jump)")
    p.add_argument("--min-lr-ratio", type=float, default=None, help="LR floor / peak (default 0.1; 0.01 for lr-jump)")
    p.add_argument("--clip", choices=("norm", "zclip"), default="norm", help="global-norm clipping or ZClip")
    p.add_argument("--max-norm", type=float, default=1.0, help="clipping threshold (L2 norm, default 1)")
    p.add_argument("--checkpoint-every", type=int, default=0, help="steps between checkpoints (0 = none)")
    p.add_argument("--resume", action="store_true", help="continue from the latest checkpoint under --out")
