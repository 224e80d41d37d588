"""One run of ``stabscope experiment``: train it (real torch, CPU or CUDA), write it through
:class:`~ingest.training.monitor.StabilityMonitor`, fold it into the store, and measure it with
StabScope's own detector.

Every run has one *transition* at the middle of training: the schedule's second cycle starts there
(``WarmupCosineRestartScheduler`` with two cycles). Without the warmup-restart remedy the LR goes
from its floor back to its peak in one step there; the ``restart`` arms warm it up again over
``restart_warmup_steps``. What else happens at the transition is the mechanism:

- A: nothing else, at a high peak LR: the LR jump alone.
- B: ``outlier_steps`` batches of one repeated licence header (``experiment_data.TEMPLATE``) from
  the transition on, at a moderate peak LR.
- C: a top-1 mixture-of-experts model whose data switches from library code to test code at the
  transition, with the LR back at its peak; the router's expert load is logged every step
  (``expert_load_max_over_mean``).
- S: no transition and nothing provoked: after its warmup the LR stays at a high peak and nothing is
  decayed, so the spikes that come, come on their own, from the data (the runs of the early-warning
  measure, ``ingest.training.lead_time``). Its "transition" is the
  end of the warmup and its spike window the rest of the run; the restart arms do not apply.

Every run measures the gradient at two batch sizes: each batch is split into two halves, each half's
gradient is computed on its own (the same arithmetic as the whole batch: the loss is a mean, so the
batch's gradient is the mean of the halves'), and the halves are written as ranks 0 and 1 of the run
(``grad_norm_local``, per-rank batch = half the batch). The store's SNR is then the two-batch noise
scale estimate (``stab_core.snr.two_batch_snr``), not the temporal proxy.

Clipping arms clip the global gradient norm at ``max_norm`` (``clip_grad_norm``) or adaptively
(``ZClip``); the others log the norm unclipped.
"""

from __future__ import annotations

import math
import shutil
import tempfile
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ingest.errors import StabScopeError
from ingest.training.experiment_data import Corpus, cached_corpus, template_batch, validation_batches, window_batch
from ingest.training.experiment_results import ARMS, MECHANISMS, RunResult
from ingest.training.toy_model import BYTE_VOCAB, ModelShape, build_gpt, next_token_loss
from ingest.training.train_loop import StepOutcome, build_trainer, train_steps

if TYPE_CHECKING:
    import torch
    from torch import nn

PEAK_LR = {"A": 4e-2, "B": 6e-3, "C": 4e-2, "S": 1e-1}
"""AdamW peak LR per mechanism, set from single-seed trial runs (800 steps, seed 0): at A's 4e-2 the
one-step jump at the transition gave a detected loss spike (1.7x) without a restart warmup and none
with it (2e-2: no loss spike either way; 8e-2: spikes with the restart warmup too). B's 6e-3 leaves
the jump alone harmless, so the spike is the outlier batches'. S's 1e-1 after a 20-step warmup: at
3e-2 after 80 steps 16 seeds gave 1 loss spike in 800 steps; trials at 2e-2 and 5e-2 gave one in 1 of
3 seeds, 1e-1 two in seed 0; batches of 4 and 16 gave none (docs/experiments.md, "Spikes that come on
their own")."""
ADAM_BETA2 = 0.999
"""AdamW's second-moment decay: torch's default. Its slow second moment is what lets a sudden change
of the gradients (an LR jump, an outlier batch) take steps far larger than the LR."""
SNR_POINTS = 120
"""Points of the SNR trace kept per run (min/max buckets of the stored series)."""


@dataclass(frozen=True)
class ExperimentConfig:
    """One experiment. Steps are optimizer steps; ``batch`` counts sequences of ``shape.seq_len`` bytes.

    ``warmup_steps`` / ``restart_warmup_steps`` default to steps/10; ``spike_window`` (steps after the
    transition in which a detected spike counts) to steps/5.
    """

    experiment_id: str
    steps: int = 800
    seeds: int = 8
    mechanisms: tuple[str, ...] = ("A", "B", "C")
    arms: tuple[str, ...] = tuple(ARMS)
    shape: ModelShape = field(default_factory=ModelShape)
    experts: int = 4
    batch: int = 8
    warmup_steps: int | None = None
    restart_warmup_steps: int | None = None
    min_lr_ratio: float = 0.01
    max_norm: float = 1.0
    outlier_steps: int = 10
    spike_window: int | None = None
    val_batches: int = 16
    eval_every: int | None = None
    device: str = "cpu"
    jobs: int = 2

    def resolved(self) -> ExperimentConfig:
        """Defaults filled in and settings checked (raises StabScopeError)."""
        bad_mech = [m for m in self.mechanisms if m not in MECHANISMS]
        bad_arm = [a for a in self.arms if a not in ARMS]
        if bad_mech or not self.mechanisms:
            raise StabScopeError(f"--mechanism must be one of {', '.join(MECHANISMS)} or all, got {bad_mech}")
        if bad_arm or not self.arms:
            raise StabScopeError(f"arms must be among {', '.join(ARMS)}, got {bad_arm}")
        if self.steps < 100:
            raise StabScopeError(f"--steps {self.steps} is too short: the experiment needs at least 100 steps")
        if self.seeds < 1:
            raise StabScopeError(f"--seeds must be >= 1, got {self.seeds}")
        if self.device not in ("cpu", "cuda"):
            raise StabScopeError(f"--device must be cpu or cuda, got {self.device!r}")
        warmup = self.warmup_steps or max(self.steps // 10, 1)
        return replace(
            self,
            warmup_steps=warmup,
            restart_warmup_steps=self.restart_warmup_steps or warmup,
            spike_window=self.spike_window or max(self.steps // 5, 10),
            eval_every=self.eval_every or max(self.steps // 10, 1),
        )

    @property
    def transition_step(self) -> int:
        return self.steps // 2

    def as_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["mechanisms"], data["arms"] = list(self.mechanisms), list(self.arms)
        data["peak_lr"] = {m: PEAK_LR[m] for m in self.mechanisms}
        return data


@dataclass(frozen=True)
class RunSpec:
    """One (mechanism, arm, seed) of an experiment."""

    config: ExperimentConfig
    mechanism: str
    arm: str
    seed: int

    @property
    def seed_group(self) -> str:
        return f"exp-{self.config.experiment_id}-{self.mechanism}-{self.arm.replace('+', '-')}"

    @property
    def run_name(self) -> str:
        return f"{self.seed_group}-s{self.seed}"

    @property
    def restarts(self) -> bool:
        return self.arm.startswith("restart")

    @property
    def clipping(self) -> str | None:
        return {"clip": "norm", "zclip": "zclip", "restart+clip": "norm"}.get(self.arm)

    @property
    def shape(self) -> ModelShape:
        return replace(self.config.shape, experts=self.config.experts if self.mechanism == "C" else 0)

    @property
    def spontaneous(self) -> bool:
        return self.mechanism == "S"

    @property
    def batch(self) -> int:
        """Sequences per optimizer step (even: the two halves of the two-batch measure)."""
        return self.config.batch

    @property
    def warmup_steps(self) -> int:
        """The first warmup: S's is short (steps/40), the others' the config's."""
        assert self.config.warmup_steps is not None
        return max(self.config.steps // 40, 1) if self.spontaneous else self.config.warmup_steps

    @property
    def transition_step(self) -> int:
        """Where the measured window starts: the schedule switch, or for S the end of the warmup."""
        return self.warmup_steps if self.spontaneous else self.config.transition_step

    @property
    def spike_window(self) -> int:
        """Steps from ``transition_step`` in which a detected spike counts: for S the rest of the run."""
        if self.spontaneous:
            return self.config.steps - self.transition_step
        return self.config.spike_window or 1


def run_specs(config: ExperimentConfig) -> list[RunSpec]:
    """Every run, seed-major (each seed's runs of every mechanism and arm together), so a subset stopped
    early covers every mechanism and arm with fewer seeds, still paired."""
    return [
        RunSpec(config, mechanism, arm, seed)
        for seed in range(config.seeds)
        for mechanism in config.mechanisms
        for arm in config.arms
        if not (mechanism == "S" and arm.startswith("restart"))  # S has no transition to warm up at
    ]


# --------------------------------------------------------------------------------------------------
# Training
# --------------------------------------------------------------------------------------------------


def _batch(spec: RunSpec, corpus: Corpus, step: int) -> np.ndarray:
    """The bytes of ``step``: a function of (seed, step) only, so every arm of a seed sees the same."""
    config, length = spec.config, spec.shape.seq_len + 1
    start = config.transition_step
    if spec.mechanism == "B" and start <= step < start + config.outlier_steps:
        return template_batch(spec.batch, length)
    rng = np.random.default_rng([spec.seed, step, 7])
    if spec.mechanism == "C":
        split = corpus.train_phase2_start
        lo, hi = (split, None) if step >= start else (0, split)
        return window_batch(corpus.train, rng, spec.batch, length, lo, hi)
    return window_batch(corpus.train, rng, spec.batch, length)


def _evaluate(model: nn.Module, batches: list[torch.Tensor]) -> float:
    import torch

    model.eval()
    with torch.no_grad():
        losses = [float(next_token_loss(model, b)) for b in batches]
    model.train()
    return float(np.mean(losses))


def train_run(spec: RunSpec, shard_dir: Path, corpus: Corpus) -> tuple[float, float]:
    """Train ``spec`` from scratch, writing its shards to ``shard_dir``; returns (final validation loss
    in nats/byte, training wall time in s)."""
    import torch

    from ingest.training.monitor import StabilityMonitor
    from ingest.training.torch_clipping import ZClip

    config = spec.config
    device = torch.device(config.device)
    assert config.restart_warmup_steps is not None
    trainer = build_trainer(
        build_gpt(spec.shape, spec.seed).to(device),
        peak_lr=PEAK_LR[spec.mechanism],
        betas=(0.9, ADAM_BETA2),
        weight_decay=0.0 if spec.spontaneous else 0.1,
        total_steps=config.steps,
        warmup_steps=spec.warmup_steps,
        restart_warmup_steps=config.restart_warmup_steps if spec.restarts else 0,
        num_cycles=1 if spec.spontaneous else 2,
        min_lr_ratio=1.0 if spec.spontaneous else config.min_lr_ratio,  # S: constant after warmup
        clipper=ZClip() if spec.clipping == "zclip" else None,
        max_norm=config.max_norm if spec.clipping == "norm" else None,
        nonfinite="clip",
    )
    val = [
        torch.from_numpy(b).to(device)
        for b in validation_batches(corpus, config.val_batches, spec.batch, spec.shape.seq_len + 1)
    ]
    meta = {
        "source": "stabscope experiment",
        "experiment": config.experiment_id,
        "mechanism": spec.mechanism,
        "mechanism_text": MECHANISMS[spec.mechanism],
        "arm": spec.arm,
        "arm_text": ARMS[spec.arm],
        "seed": spec.seed,
        "seed_group": spec.seed_group,
        "transition_step": spec.transition_step,
        "two_batch": "ranks 0 and 1 are the two halves of each batch, measured in one process",
        "model": f"byte-level GPT, {spec.shape.n_layers} layers x d={spec.shape.d_model}"
        + (f", top-1 MoE with {spec.shape.experts} experts" if spec.shape.experts else ""),
        "data": f"Python standard library sources ({corpus.train_files} training files)",
        "precision": "fp32",
        "loss_unit": "nats/token",  # byte-level next-token cross-entropy (stab_core.loss_origin)
        "tags": ["experiment", f"mechanism:{spec.mechanism}", f"arm:{spec.arm}"],
    }
    half = spec.batch // 2
    monitor = StabilityMonitor(
        shard_dir,
        rank=0,
        world_size=2,
        per_rank_batch_size=half,
        global_batch_size=spec.batch,
        seq_len=spec.shape.seq_len,
        scheduler=trainer.scheduler,
        clipper=trainer.clipper,
        max_norm=config.max_norm if spec.clipping == "norm" else None,
        meta=meta,
        flush_interval_s=5.0,
    )
    second_half = StabilityMonitor(shard_dir, rank=1, world_size=2, per_rank_batch_size=half, flush_interval_s=5.0)
    val_loss = math.nan

    def log(done: StepOutcome) -> None:
        nonlocal val_loss
        extra: dict[str, float] = {"grad_norm_local": done.part_grad_norms[0]}
        if done.grad_norm is not None:
            extra["grad_norm"] = done.grad_norm
        if done.router_loads:
            extra["expert_load_max_over_mean"] = max(done.router_loads)
        finished = done.step + 1
        if finished % (config.eval_every or finished) == 0 or finished == config.steps:
            val_loss = _evaluate(trainer.model, val)
            extra["val_loss"] = val_loss
        monitor.log(done.step, loss=done.loss, lr=done.lr, clip_stats=done.clip, extra=extra)
        second_half.log(done.step, extra={"grad_norm_local": done.part_grad_norms[1]})

    def batch(step: int) -> torch.Tensor:
        return torch.from_numpy(_batch(spec, corpus, step)).to(device)

    started = time.monotonic()
    with monitor, second_half:
        train_steps(trainer, range(config.steps), batch, log, parts=2)
    return val_loss, time.monotonic() - started


# --------------------------------------------------------------------------------------------------
# Measuring a stored run
# --------------------------------------------------------------------------------------------------


def measure_run(store: Any, spec: RunSpec, val_loss: float, wall_time_s: float) -> RunResult:
    """``spec``'s run as the store's analyses see it: the loss-led incidents starting in the window
    after the transition, the peak ratio, divergence, and the SNR trace before the transition."""
    from stab_core.incidents import window_ratio
    from stab_core.runview import Series

    config = spec.config
    start = spec.transition_step
    window = spec.spike_window
    loss = store.read_series(spec.run_name, "loss")
    series = Series(np.asarray(loss.steps, np.int64), np.asarray(loss.values, np.float64))
    incidents = store.spikes(spec.run_name)
    after = [
        s
        for s in incidents
        if "loss" in s.get("metrics", [s["metric"]])
        and s.get("kind") != "early_instability"
        and start - 2 <= int(s["start"]) < start + window
    ]
    first = min(after, key=lambda s: int(s["start"])) if after else None
    ratio = window_ratio(series, start, start + window - 1)
    tail = series.values[-max(config.steps // 20, 1) :]
    diverged = (
        not np.all(np.isfinite(series.values))
        or not math.isfinite(val_loss)
        or float(np.median(tail)) > 0.9 * math.log(BYTE_VOCAB)
    )
    recovered = first is not None and bool(first.get("recovered")) and first.get("recovery_step") is not None
    snr = store.read_series(spec.run_name, "snr", end=start - 1, buckets=SNR_POINTS)
    return RunResult(
        mechanism=spec.mechanism,
        arm=spec.arm,
        seed=spec.seed,
        run=spec.run_name,
        transition_step=start,
        spiked=first is not None,
        peak_ratio=math.nan if ratio is None else ratio,
        steps_to_recover=int(first["recovery_step"]) - int(first["start"]) if first is not None and recovered else None,
        recovered=recovered,
        diverged=diverged,
        final_val_loss=val_loss,
        wall_time_s=wall_time_s,
        incidents=len(incidents),
        snr_steps=tuple(int(s) for s in snr.steps),
        snr_values=tuple(float(v) if math.isfinite(v) else None for v in snr.values),
    )


def run_and_measure(spec: RunSpec, store_root: str, cache_dir: str) -> RunResult:
    """Train ``spec``, fold its shards into the store at ``store_root`` (analysed as every product
    store is), measure it; the shards are removed once they are in the store."""
    from ingest.services.run_analyses import open_analysed_store

    corpus = cached_corpus(Path(cache_dir))
    shard_dir = Path(tempfile.mkdtemp(prefix=f"{spec.run_name}-", dir=cache_dir))
    try:
        val_loss, wall = train_run(spec, shard_dir, corpus)
        store = open_analysed_store(store_root)
        if store.has_run(spec.run_name):
            store.delete_run(spec.run_name)  # a re-run of the same experiment id replaces its runs
        store.compact(spec.run_name, shard_dir)
        return measure_run(store, spec, val_loss, wall)
    finally:
        shutil.rmtree(shard_dir, ignore_errors=True)
