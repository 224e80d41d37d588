"""The physical model of a multi-rank pre-training run, with injectable spike mechanisms.

It produces the metrics StabScope reads (canonical names, ``stab_core.metrics``), per rank and per
run, vectorised over ranks x steps, with float32 per-rank arrays so that the benchmark's largest run
(256 ranks x 200k steps) fits in memory:

Loss: a power law in steps, L(t) = L_inf + A*(t + t0)^-alpha (Kaplan et al. 2020; Hoffmann et al.
2022), A set so that L(0) = ``loss_start``, plus ``lr_loss_coef`` x lr/peak_lr (the part of the loss
the LR noise holds up, which an LR decay anneals away and an LR jump brings back), plus per-step
noise common to all ranks and per-rank noise; the run-level loss is the mean over ranks.

LR: any schedule of ``stab_core.schedulers.SCHEDULE_FORMULAS`` (or an explicit array), with
optional warmup restarts (``WarmupRestart``) applied on top.

Gradients, by the two-batch noise-scale model (McCandlish et al. 2018, App. A.1): each rank's
gradient is G + xi_r, with xi_r isotropic noise of trace S/B_small in ``grad_dims`` effective
dimensions. Its squared norm |G|^2 + 2 G.xi_r + |xi_r|^2 is sampled from its exact mean and
variance, and the all-reduced gradient's squared norm is built from the same draws plus the
cross-rank terms, so that E|G_small|^2 = |G|^2 + S/B_small and E|G_big|^2 = |G|^2 + S/B_big hold
exactly. |G|^2 shrinks with the excess loss (from ``grad_norm_start`` to ``grad_norm_end``); S grows
as the LR decays (``noise_growth``): the gradient noise scale B_simple = S/|G|^2 rises through
training. Both fluctuate step to step (log-normal). Ranks differ by a fixed data-shard factor.

Operations: step time per rank (jitter, an optional straggler, a stall at each checkpoint write; the
run waits for the slowest rank), GPU utilisation, power, temperature and memory per rank; MoE expert
load max/mean and router z-loss; fp16 dynamic loss scaling (x2 every ``loss_scale_window`` clean
steps, /2 on an overflow, the step skipped); clip coefficients (torch convention,
``stab_core.clipping.clip_coef``); events (warmup ends, cycle restarts, checkpoints, data switches,
and whatever the spec adds, e.g. a rollback).

Injected mechanisms (each shapes the loss as a rise over ``rise_steps`` and an exponential recovery
with time constant ``recovery_steps``, or a plateau when it diverges; the true gradient grows by
``grad_factor`` from one step before the loss):

- ``LrJumpSpike`` (scenario A): the loss spikes after a schedule transition in proportion to the
  one-step relative LR rise found there; a warmup restart at the transition removes it.
- ``DataOutlierSpike`` (scenario B): a stretch of outlier data raises S by ``snr_drop`` over
  ``ramp_steps`` (the SNR collapses), then the loss spikes; recovered or diverged.
- ``RouterSeesawSpike`` (scenario C): expert load max/mean oscillates with growing amplitude for
  ``lead_steps``, then the loss spikes; bias balancing (``bias_balancing_from``) prevents it.
- ``RankFault``: one rank's local gradient is multiplied by ``grad_factor`` for a few steps
  (hardware or data-shard fault); the corrupted update spikes the loss.
- ``NumericalFault``: NaN loss and gradients, or an fp16 loss-scale collapse (repeated overflows).

What was injected is returned in ``SimulatedRun.truth`` only; nothing in ``per_rank``,
``run_level``, ``events`` or ``meta`` labels a cause, so analyses must find the spikes themselves.

Here: the loss and gradient model and the assembly of a run. The LR schedule and events are in
``schedule``, the mechanisms' effects in ``mechanisms``, step time, telemetry, fp16 scaling and MoE load
in ``operations``, the random streams in ``noise`` (all under ``stab_core.simulate``).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from stab_core.clipping import clip_coef
from stab_core.simulate.mechanisms import Effects, apply_mechanisms
from stab_core.simulate.noise import (
    S_CROSS,
    S_G_STEP,
    S_LOSS_RANK,
    S_LOSS_STEP,
    S_NORM,
    S_OFFDIAG,
    S_S_STEP,
    S_SHARD,
    normal32,
)
from stab_core.simulate.operations import add_moe, add_numerics, add_timing
from stab_core.simulate.output import (
    BoolArray,
    Float32Array,
    FloatArray,
    IntArray,
    SimTruth,
    SimulatedRun,
)
from stab_core.simulate.schedule import schedule_events, schedule_lr, warmup_steps
from stab_core.simulate.spec import (
    SimSpec,
)


def simulate_run(spec: SimSpec, seed: int = 0) -> SimulatedRun:
    """Simulate ``spec`` (module docstring) with noise from ``seed`` (``spec.seed`` wins when set).

    Deterministic: the same spec and seed give identical arrays.
    """
    seed = spec.seed if spec.seed is not None else seed
    all_steps = np.arange(0, spec.steps, spec.log_every, dtype=np.int64)
    t = all_steps.astype(np.float64)
    lr = schedule_lr(spec, all_steps)
    stop = spec.stop_step if spec.stop_step is not None else spec.steps
    effects = apply_mechanisms(spec, all_steps, lr, stop)

    loss_clean = _loss_law(spec, t, lr) + effects.loss_add
    g_sq, trace_sigma = _gradient_moments(spec, t, lr, seed)
    g_sq = g_sq * effects.grad_mult**2
    trace_sigma = trace_sigma * effects.noise_mult

    per_rank: dict[str, Float32Array] = {}
    run_level: dict[str, FloatArray] = {}
    _losses(spec, seed, loss_clean, effects, per_rank, run_level)
    _grad_norms(spec, seed, g_sq, trace_sigma, effects, per_rank, run_level)
    _clipping(spec, run_level)
    run_level["lr"] = lr
    run_level["tokens"] = (t + 1.0) * spec.global_batch_size * spec.seq_len
    events = schedule_events(spec)
    checkpoint_steps = {e.step for e in events if e.kind == "checkpoint"}
    add_timing(spec, seed, all_steps, checkpoint_steps, per_rank, run_level)
    add_numerics(spec, all_steps, effects, run_level)
    if spec.num_experts > 1:
        add_moe(spec, seed, t, effects, per_rank, run_level)
    _apply_nan(effects.nan_mask, per_rank, run_level)

    keep = all_steps < stop
    for start, end in spec.gaps:
        keep &= ~((all_steps >= start) & (all_steps < end))
    steps = all_steps[keep]
    per_rank = {k: _columns(v, keep) for k, v in per_rank.items()}
    run_level = {k: v[keep] for k, v in run_level.items()}
    present = _rank_presence(spec, steps, per_rank)
    truth = SimTruth(tuple(effects.truth), g_sq[keep], trace_sigma[keep], loss_clean[keep])
    return SimulatedRun(
        name=spec.name,
        steps=steps,
        per_rank=per_rank,
        run_level=run_level,
        events=[e for e in events if e.step < stop],
        meta=_meta(spec, seed),
        truth=truth,
        present_rank=present,
    )


def _columns(values: Float32Array, keep: BoolArray) -> Float32Array:
    """The kept steps of a ranks x steps array, without a copy when that is a prefix (the usual case)."""
    kept = int(keep.sum())
    if bool(keep[:kept].all()):
        return values[:, :kept]
    return np.compress(keep, values, axis=1)


def _loss_law(spec: SimSpec, t: FloatArray, lr: FloatArray) -> FloatArray:
    amplitude = (spec.loss_start - spec.loss_floor) * spec.loss_offset_steps**spec.loss_exponent
    law = spec.loss_floor + amplitude * (t + spec.loss_offset_steps) ** -spec.loss_exponent
    lr_fraction = lr / spec.peak_lr if spec.peak_lr > 0 else np.zeros_like(lr)
    return np.asarray(law + spec.lr_loss_coef * lr_fraction, dtype=np.float64)


def _gradient_moments(spec: SimSpec, t: FloatArray, lr: FloatArray, seed: int) -> tuple[FloatArray, FloatArray]:
    """|G|^2 and S = tr(Sigma) per step, before the mechanisms (see the module docstring)."""
    b_big = float(spec.global_batch_size)
    excess = ((t + spec.loss_offset_steps) / spec.loss_offset_steps) ** -spec.loss_exponent
    end_excess = ((spec.steps + spec.loss_offset_steps) / spec.loss_offset_steps) ** -spec.loss_exponent
    progress = np.clip((excess - end_excess) / (1.0 - end_excess), 0.0, 1.0)  # 1 at step 0, 0 at the end
    warm = t >= warmup_steps(spec)
    lr_fraction = np.where(warm, lr / spec.peak_lr if spec.peak_lr > 0 else 1.0, 1.0)
    growth = 1.0 + spec.noise_growth * np.clip(1.0 - lr_fraction, 0.0, 1.0)
    g_sq_end = spec.grad_norm_end**2 * spec.snr_end / (1.0 + spec.snr_end)
    s_end = g_sq_end * b_big / spec.snr_end
    # snr_end and grad_norm_end hold once the LR has decayed to 0: a constant reference, so that two
    # runs that share a prefix (before/after a fork) share its gradient statistics exactly
    s_base = s_end / (1.0 + spec.noise_growth)
    trace_sigma = s_base * growth
    g_sq_start = max(spec.grad_norm_start**2 - float(trace_sigma[0]) / b_big, g_sq_end)
    g_sq = g_sq_end * (g_sq_start / g_sq_end) ** progress
    sigma_g, sigma_s = spec.grad_step_sigma, spec.grad_step_sigma * 0.5
    n = t.size
    g_sq = g_sq * np.exp(sigma_g * normal32(seed, S_G_STEP, (n,)).astype(np.float64) - sigma_g**2 / 2)
    trace_sigma = trace_sigma * np.exp(sigma_s * normal32(seed, S_S_STEP, (n,)).astype(np.float64) - sigma_s**2 / 2)
    return np.asarray(g_sq, dtype=np.float64), np.asarray(trace_sigma, dtype=np.float64)


def _losses(
    spec: SimSpec,
    seed: int,
    loss_clean: FloatArray,
    effects: Effects,
    per_rank: dict[str, Float32Array],
    run_level: dict[str, FloatArray],
) -> None:
    n, ranks = loss_clean.size, spec.world_size
    common = loss_clean + spec.loss_noise * normal32(seed, S_LOSS_STEP, (n,)).astype(np.float64)
    if "loss" in spec.per_rank_metrics:
        rank_loss = normal32(seed, S_LOSS_RANK, (ranks, n))
        rank_loss *= np.float32(spec.rank_loss_noise)
        rank_loss += common.astype(np.float32)[None, :]
        for rank, window, _, jump in effects.rank_faults:
            rank_loss[rank, window] += np.float32(jump)
        per_rank["loss"] = rank_loss
        run_level["loss"] = rank_loss.mean(axis=0, dtype=np.float64)
    else:
        spread = spec.rank_loss_noise / math.sqrt(ranks)
        loss = common + spread * normal32(seed, S_LOSS_RANK, (n,)).astype(np.float64)
        for _, window, _, jump in effects.rank_faults:
            loss[window] += jump / ranks
        run_level["loss"] = loss


def _grad_norms(
    spec: SimSpec,
    seed: int,
    g_sq: FloatArray,
    trace_sigma: FloatArray,
    effects: Effects,
    per_rank: dict[str, Float32Array],
    run_level: dict[str, FloatArray],
) -> None:
    """Per-rank local and global squared norms from one set of draws (module docstring)."""
    n, w = g_sq.size, spec.world_size
    b_small, d = float(spec.per_rank_batch_size), spec.grad_dims
    shard = np.exp(spec.rank_shard_sigma * normal32(seed, S_SHARD, (w,)).astype(np.float64))
    shard /= shard.mean()  # mean exactly 1, so E over ranks of S_r is S
    noise_sq = trace_sigma / b_small  # E|xi_r|^2 / shard_r
    if "grad_norm_local" in spec.per_rank_metrics:
        # |xi_r|^2: mean S_r/B_small, sd sqrt(2/d) of it (chi-square in d dims)
        local_sq = normal32(seed, S_NORM, (w, n))
        local_sq *= np.float32(math.sqrt(2.0 / d))
        local_sq += np.float32(1.0)
        local_sq *= noise_sq.astype(np.float32)[None, :]
        local_sq *= shard.astype(np.float32)[:, None]
        mean_noise = local_sq.mean(axis=0, dtype=np.float64)
        # 2 G.xi_r: mean 0, sd 2 sqrt(|G|^2 S_r / (B_small d))
        cross = normal32(seed, S_CROSS, (w, n))
        cross *= (2.0 * np.sqrt(g_sq * noise_sq / d)).astype(np.float32)[None, :]
        cross *= np.sqrt(shard).astype(np.float32)[:, None]
        mean_cross = cross.mean(axis=0, dtype=np.float64)
        local_sq += cross
        del cross
        local_sq += g_sq.astype(np.float32)[None, :]
    else:
        local_sq = None
        mean_cross = 2.0 * np.sqrt(g_sq * noise_sq / (d * w)) * normal32(seed, S_CROSS, (n,)).astype(np.float64)
        mean_noise = noise_sq * (1.0 + math.sqrt(2.0 / (d * w)) * normal32(seed, S_NORM, (n,)).astype(np.float64))
    offdiag_sd = math.sqrt(2.0 * (w - 1) / d) * noise_sq / w
    offdiag = offdiag_sd * normal32(seed, S_OFFDIAG, (n,)).astype(np.float64)
    global_sq = g_sq + mean_cross + mean_noise / w + offdiag
    for rank, window, factor, _ in effects.rank_faults:
        base = local_sq[rank, window].astype(np.float64) if local_sq is not None else (g_sq + noise_sq)[window]
        c = factor - 1.0
        global_sq[window] += 2.0 * c * (base + (w - 1) * g_sq[window]) / w**2 + c * c * base / w**2
        if local_sq is not None:
            local_sq[rank, window] *= np.float32(factor**2)
    global_sq = np.maximum(global_sq, 1e-12)
    run_level["grad_norm"] = np.sqrt(global_sq)
    run_level["grad_norm"][effects.inf_grad_mask] = np.inf
    if local_sq is not None:
        np.maximum(local_sq, np.float32(1e-12), out=local_sq)
        np.sqrt(local_sq, out=local_sq)
        local_sq[:, effects.inf_grad_mask] = np.inf
        per_rank["grad_norm_local"] = local_sq


def _clipping(spec: SimSpec, run_level: dict[str, FloatArray]) -> None:
    if spec.max_norm <= 0:
        return
    norms = run_level["grad_norm"]
    coef = clip_coef(norms, spec.max_norm)
    if spec.log_clip_coef:
        run_level["clip_coef"] = coef
    with np.errstate(invalid="ignore"):  # an Inf norm clipped by 0 is NaN, as in torch
        run_level["grad_norm_clipped"] = norms * coef


def _apply_nan(mask: BoolArray, per_rank: dict[str, Float32Array], run_level: dict[str, FloatArray]) -> None:
    if not mask.any():
        return
    for name in ("loss", "grad_norm", "grad_norm_clipped", "clip_coef"):
        if name in run_level:
            run_level[name][mask] = np.nan
    for name in ("loss", "grad_norm_local"):
        if name in per_rank:
            per_rank[name][:, mask] = np.nan


def _rank_presence(spec: SimSpec, steps: IntArray, per_rank: dict[str, Float32Array]) -> BoolArray | None:
    if not spec.rank_gaps or not per_rank:
        return None
    present = np.ones((spec.world_size, steps.size), dtype=np.bool_)
    for gap in spec.rank_gaps:
        present[gap.rank, (steps >= gap.start) & (steps < gap.end)] = False
    for values in per_rank.values():
        values[~present] = np.nan
    return present


def _meta(spec: SimSpec, seed: int) -> dict[str, Any]:
    scheduler: dict[str, Any] = {"name": spec.schedule if spec.lr is None else "explicit", "peak_lr": spec.peak_lr}
    if spec.lr is None:
        scheduler.update({"total_steps": spec.steps, **dict(spec.schedule_kwargs)})
    if spec.warmup_restarts:
        scheduler["warmup_restarts"] = [
            {"step": r.step, "warmup_steps": r.warmup_steps, "lr_scale": r.lr_scale, "floor_ratio": r.floor_ratio}
            for r in spec.warmup_restarts
        ]
    meta: dict[str, Any] = {
        "source": "simulated (stab_core.simulate)",
        "seed": seed,
        "world_size": spec.world_size,
        "per_rank_batch_size": spec.per_rank_batch_size,
        "global_batch_size": spec.global_batch_size,
        "seq_len": spec.seq_len,
        "max_norm": spec.max_norm,
        "scheduler": scheduler,
        "gpus": spec.job_gpus,
        "usd_per_gpu_hour": spec.usd_per_gpu_hour,
        "step_time_s": spec.step_time_s,
        "model": spec.model,
        "tags": list(spec.tags),
        "precision": spec.precision,
        "num_experts": spec.num_experts,
        "moe": spec.num_experts > 1,
        "checkpoint_interval_steps": spec.checkpoint_interval_steps,
        "checkpoint_write_s": spec.checkpoint_write_s,
        "log_every": spec.log_every,
        "batch_provenance_logged": spec.batch_provenance_logged,
    }
    if spec.config is not None:
        meta["config"] = dict(spec.config)
    if spec.scenario:
        meta["scenario"] = spec.scenario
        meta["variant"] = spec.variant
    return meta
