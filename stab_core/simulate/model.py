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
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from stab_core.clipping import clip_coef
from stab_core.runview import RunEvent
from stab_core.schedulers import SCHEDULE_FORMULAS, cycle_boundaries, largest_lr_change
from stab_core.simulate.output import (
    BoolArray,
    Float32Array,
    FloatArray,
    InjectedSpike,
    IntArray,
    SimTruth,
    SimulatedRun,
)
from stab_core.simulate.spec import (
    DataOutlierSpike,
    LrJumpSpike,
    Mechanism,
    NumericalFault,
    RankFault,
    RouterSeesawSpike,
    SimSpec,
)

_FP16_MAX_SCALE_EXPONENT = 17
"""Loss scales above 2^17 overflow in the simulated fp16 run (then back off): dynamic scaling's cycle."""


# --------------------------------------------------------------------------------------------------
# Building blocks
# --------------------------------------------------------------------------------------------------


def _rng(seed: int, stream: int) -> np.random.Generator:
    """An independent generator per (seed, stream): each quantity draws from its own stream, so
    enabling one metric or mechanism never shifts the noise of another."""
    return np.random.default_rng(np.random.SeedSequence([seed, stream]))


def _normal32(seed: int, stream: int, shape: tuple[int, ...]) -> Float32Array:
    return _rng(seed, stream).standard_normal(shape, dtype=np.float32)


def _spike_shape(t: FloatArray, onset: int, rise: int, recovery: float, *, diverge: bool) -> FloatArray:
    """0 before ``onset``, a linear rise to 1 at ``onset + rise - 1``, then exp(-dt/recovery), or 1
    for ever when ``diverge``."""
    rise = max(int(rise), 1)
    peak = onset + rise - 1
    rising = np.clip((t - onset + 1) / rise, 0.0, 1.0)
    after = np.ones_like(t) if diverge else np.exp(-np.maximum(t - peak, 0.0) / max(recovery, 1e-9))
    return np.asarray(np.where(t < onset, 0.0, np.where(t <= peak, rising, after)), dtype=np.float64)


def _schedule_lr(spec: SimSpec, steps: IntArray) -> FloatArray:
    if spec.lr is not None:
        lr = np.asarray(spec.lr, dtype=np.float64)
        if lr.shape != steps.shape:
            raise ValueError(f"{spec.name}: lr has {lr.shape[0]} values for {steps.size} simulated steps")
    else:
        kwargs = dict(spec.schedule_kwargs)
        kwargs.setdefault("total_steps", spec.steps)
        lr = SCHEDULE_FORMULAS[spec.schedule](steps, peak_lr=spec.peak_lr, **kwargs)
    for restart in sorted(spec.warmup_restarts, key=lambda r: r.step):
        since = steps - restart.step
        ramp = np.clip((since + 1) / max(restart.warmup_steps, 1), 0.0, 1.0)
        scaled = np.maximum(lr * restart.lr_scale, restart.floor_ratio * spec.peak_lr)
        lr = np.where(since >= 0, scaled * ramp, lr)
    return np.asarray(lr, dtype=np.float64)


def _warmup_steps(spec: SimSpec) -> int:
    if spec.lr is not None:
        return 0
    return int(spec.schedule_kwargs.get("warmup_steps", 0))


def checkpoint_steps(spec: SimSpec) -> list[int]:
    """The steps at which ``spec`` writes a checkpoint."""
    if spec.checkpoint_steps is not None:
        return sorted(s for s in spec.checkpoint_steps if 0 < s < spec.steps)
    if not spec.checkpoint_interval_steps:
        return []
    return list(range(spec.checkpoint_interval_steps, spec.steps, spec.checkpoint_interval_steps))


def _schedule_events(spec: SimSpec) -> list[RunEvent]:
    events: list[RunEvent] = []
    warmup = _warmup_steps(spec)
    if warmup > 0:
        events.append(RunEvent(warmup, "warmup_end", "warmup ends"))
    kwargs = spec.schedule_kwargs
    if spec.lr is None and spec.schedule == "warmup_cosine_restart" and int(kwargs.get("num_cycles", 3)) > 1:
        total = int(kwargs.get("total_steps", spec.steps))
        restart_warmup = int(kwargs.get("restart_warmup_steps", 500))
        for start in cycle_boundaries(total, int(kwargs.get("num_cycles", 3)))[1:-1]:
            events.append(RunEvent(int(start), "cycle_restart", "LR cycle restart"))
            if restart_warmup > 0:
                events.append(RunEvent(int(start) + restart_warmup, "warmup_end", "restart warmup ends"))
    for restart in spec.warmup_restarts:
        detail = {"warmup_steps": restart.warmup_steps, "lr_scale": restart.lr_scale}
        events.append(RunEvent(restart.step, "cycle_restart", "warmup restart", detail))
        events.append(RunEvent(restart.step + restart.warmup_steps, "warmup_end", "restart warmup ends"))
    for step in spec.data_switch_steps:
        events.append(RunEvent(step, "data_switch", "data recipe switch"))
    for step in checkpoint_steps(spec):
        events.append(RunEvent(step, "checkpoint", "checkpoint saved", {"write_s": spec.checkpoint_write_s}))
    for skip in spec.batch_skips:
        events.append(RunEvent(skip.step, "skip_batches", f"skipped {skip.batches} batches", {"batches": skip.batches}))
    events.extend(spec.extra_events)
    return sorted(events, key=lambda e: (e.step, e.kind))


# --------------------------------------------------------------------------------------------------
# Mechanisms -> effects on the run
# --------------------------------------------------------------------------------------------------


@dataclass
class _Effects:
    """What the injected mechanisms do, per logged step (float64, length n)."""

    loss_add: FloatArray
    grad_mult: FloatArray
    noise_mult: FloatArray
    load_add: FloatArray
    nan_mask: BoolArray
    overflow_mask: BoolArray
    inf_grad_mask: BoolArray
    rank_faults: list[tuple[int, BoolArray, float, float]]
    truth: list[InjectedSpike]


def _lr_jump(mechanism: LrJumpSpike, steps: IntArray, lr: FloatArray) -> float:
    a = int(np.searchsorted(steps, mechanism.step)) - 2
    b = int(np.searchsorted(steps, mechanism.onset, side="right"))
    window = slice(max(a, 0), b)
    if b - max(a, 0) < 2:
        return 0.0
    return max(0.0, largest_lr_change(steps[window], lr[window])[1])


def _suppression(mechanism: Mechanism, spec: SimSpec, steps: IntArray, lr: FloatArray) -> tuple[float, str | None]:
    """(height in nats, reason it does not happen or None) of a mechanism in this run."""
    if isinstance(mechanism, LrJumpSpike):
        jump = _lr_jump(mechanism, steps, lr)
        height = min(mechanism.max_height, mechanism.sensitivity * (jump - mechanism.tolerance))
        if height <= 0:
            return 0.0, f"one-step LR rise {jump:.2f} <= tolerance {mechanism.tolerance}"
        return height, None
    if isinstance(mechanism, DataOutlierSpike):
        for skip in spec.batch_skips:
            if skip.step <= mechanism.step < skip.step + skip.batches:
                return 0.0, f"its batches were skipped at step {skip.step}"
        at = int(np.clip(np.searchsorted(steps, mechanism.step), 0, steps.size - 1))
        lr_fraction = float(lr[at] / spec.peak_lr) if spec.peak_lr > 0 else 0.0
        if lr_fraction < mechanism.lr_threshold:
            return 0.0, f"LR at {lr_fraction:.2f} of peak is below the threshold {mechanism.lr_threshold}"
        return mechanism.height, None
    if isinstance(mechanism, RouterSeesawSpike):
        start = mechanism.step - mechanism.lead_steps
        if spec.bias_balancing_from is not None and spec.bias_balancing_from <= start:
            return 0.0, f"bias balancing on from step {spec.bias_balancing_from}"
        return mechanism.height, None
    return mechanism.height, None


def _apply_mechanisms(spec: SimSpec, steps: IntArray, lr: FloatArray, stop: int) -> _Effects:
    n = steps.size
    t = steps.astype(np.float64)
    effects = _Effects(
        loss_add=np.zeros(n),
        grad_mult=np.ones(n),
        noise_mult=np.ones(n),
        load_add=np.zeros(n),
        nan_mask=np.zeros(n, dtype=np.bool_),
        overflow_mask=np.zeros(n, dtype=np.bool_),
        inf_grad_mask=np.zeros(n, dtype=np.bool_),
        rank_faults=[],
        truth=[],
    )
    for mechanism in spec.mechanisms:
        height, suppressed = _suppression(mechanism, spec, steps, lr)
        name = type(mechanism).__name__
        onset = mechanism.onset
        peak = onset + max(mechanism.rise_steps, 1) - 1
        rank = mechanism.rank if isinstance(mechanism, RankFault) else None
        if suppressed is not None:
            effects.truth.append(
                InjectedSpike(mechanism.cause, onset, peak, 0.0, rank=rank, suppressed=suppressed, mechanism=name)
            )
            continue
        diverge = isinstance(mechanism, DataOutlierSpike) and mechanism.diverge
        if isinstance(mechanism, NumericalFault) and not mechanism.recovered:
            diverge = True
        shape = _spike_shape(t, onset, mechanism.rise_steps, mechanism.recovery_steps, diverge=diverge)
        if diverge:
            # a diverging run keeps climbing for a while, then sits on a high plateau
            shape = shape * (1.0 + 0.6 * (1.0 - np.exp(-np.maximum(t - peak, 0.0) / 150.0)))
        effects.loss_add += height * shape
        factor = getattr(mechanism, "grad_factor", 2.0)
        lead_shape = _spike_shape(t, onset - 1, mechanism.rise_steps, mechanism.recovery_steps, diverge=diverge)
        effects.grad_mult *= 1.0 + (factor - 1.0) * np.minimum(lead_shape, 1.0)
        _mechanism_extras(mechanism, spec, t, effects)
        recovered = not diverge
        if diverge and stop <= peak:
            recovered = False
        effects.truth.append(
            InjectedSpike(mechanism.cause, onset, peak, float(height), recovered=recovered, rank=rank, mechanism=name)
        )
    return effects


def _mechanism_extras(mechanism: Mechanism, spec: SimSpec, t: FloatArray, effects: _Effects) -> None:
    """The mechanism-specific signature beyond the loss bump and the gradient growth."""
    if isinstance(mechanism, DataOutlierSpike):
        start = mechanism.step - mechanism.ramp_steps
        ramp = np.clip((t - start) / max(mechanism.ramp_steps, 1), 0.0, 1.0)
        tail = np.ones_like(t) if mechanism.diverge else np.exp(-np.maximum(t - mechanism.step, 0.0) / 30.0)
        build = np.where(t <= mechanism.step, ramp, tail)
        effects.noise_mult *= 1.0 + (mechanism.snr_drop - 1.0) * build
        if mechanism.diverge and mechanism.nan_after_steps is not None:
            effects.nan_mask |= t >= mechanism.step + mechanism.rise_steps + mechanism.nan_after_steps
    elif isinstance(mechanism, RouterSeesawSpike):
        start = mechanism.step - mechanism.lead_steps
        growth = np.clip((t - start) / max(mechanism.lead_steps, 1), 0.0, 1.0)
        decay = np.exp(-np.maximum(t - mechanism.step, 0.0) / 60.0)
        swing = 0.5 * (1.0 + np.sin(2.0 * np.pi * (t - start) / mechanism.period_steps))
        amplitude = (mechanism.load_peak - spec.expert_load_base) * np.where(t <= mechanism.step, growth, decay)
        effects.load_add += np.where(t >= start, amplitude * (0.45 + 0.55 * swing), 0.0)
    elif isinstance(mechanism, RankFault):
        window = (t >= mechanism.step) & (t < mechanism.step + mechanism.duration_steps)
        effects.rank_faults.append((mechanism.rank, window, mechanism.grad_factor, mechanism.rank_loss_jump))
    elif isinstance(mechanism, NumericalFault):
        end = math.inf if not mechanism.recovered else mechanism.step + mechanism.duration_steps
        window = (t >= mechanism.step) & (t < end)
        if mechanism.kind == "nan":
            effects.nan_mask |= window
        else:
            effects.overflow_mask |= window
            effects.inf_grad_mask |= window
            if not mechanism.recovered:
                effects.nan_mask |= t >= mechanism.step + mechanism.duration_steps


# --------------------------------------------------------------------------------------------------
# The simulation
# --------------------------------------------------------------------------------------------------

# One random stream per quantity (see _rng).
_S_LOSS_STEP, _S_LOSS_RANK, _S_G_STEP, _S_S_STEP, _S_SHARD = 1, 2, 3, 4, 5
_S_CROSS, _S_NORM, _S_OFFDIAG, _S_TIME, _S_TELEMETRY = 6, 7, 8, 9, 10
_S_LOAD, _S_RANK_BIAS, _S_RANK_LOAD = 11, 12, 13


def simulate_run(spec: SimSpec, seed: int = 0) -> SimulatedRun:
    """Simulate ``spec`` (module docstring) with noise from ``seed`` (``spec.seed`` wins when set).

    Deterministic: the same spec and seed give identical arrays.
    """
    seed = spec.seed if spec.seed is not None else seed
    all_steps = np.arange(0, spec.steps, spec.log_every, dtype=np.int64)
    t = all_steps.astype(np.float64)
    lr = _schedule_lr(spec, all_steps)
    stop = spec.stop_step if spec.stop_step is not None else spec.steps
    effects = _apply_mechanisms(spec, all_steps, lr, stop)

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
    events = _schedule_events(spec)
    checkpoint_steps = {e.step for e in events if e.kind == "checkpoint"}
    _timing(spec, seed, all_steps, checkpoint_steps, per_rank, run_level)
    _numerics(spec, all_steps, effects, run_level)
    if spec.num_experts > 1:
        _moe(spec, seed, t, effects, per_rank, run_level)
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
    warm = t >= _warmup_steps(spec)
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
    g_sq = g_sq * np.exp(sigma_g * _normal32(seed, _S_G_STEP, (n,)).astype(np.float64) - sigma_g**2 / 2)
    trace_sigma = trace_sigma * np.exp(sigma_s * _normal32(seed, _S_S_STEP, (n,)).astype(np.float64) - sigma_s**2 / 2)
    return np.asarray(g_sq, dtype=np.float64), np.asarray(trace_sigma, dtype=np.float64)


def _losses(
    spec: SimSpec,
    seed: int,
    loss_clean: FloatArray,
    effects: _Effects,
    per_rank: dict[str, Float32Array],
    run_level: dict[str, FloatArray],
) -> None:
    n, ranks = loss_clean.size, spec.world_size
    common = loss_clean + spec.loss_noise * _normal32(seed, _S_LOSS_STEP, (n,)).astype(np.float64)
    if "loss" in spec.per_rank_metrics:
        rank_loss = _normal32(seed, _S_LOSS_RANK, (ranks, n))
        rank_loss *= np.float32(spec.rank_loss_noise)
        rank_loss += common.astype(np.float32)[None, :]
        for rank, window, _, jump in effects.rank_faults:
            rank_loss[rank, window] += np.float32(jump)
        per_rank["loss"] = rank_loss
        run_level["loss"] = rank_loss.mean(axis=0, dtype=np.float64)
    else:
        spread = spec.rank_loss_noise / math.sqrt(ranks)
        loss = common + spread * _normal32(seed, _S_LOSS_RANK, (n,)).astype(np.float64)
        for _, window, _, jump in effects.rank_faults:
            loss[window] += jump / ranks
        run_level["loss"] = loss


def _grad_norms(
    spec: SimSpec,
    seed: int,
    g_sq: FloatArray,
    trace_sigma: FloatArray,
    effects: _Effects,
    per_rank: dict[str, Float32Array],
    run_level: dict[str, FloatArray],
) -> None:
    """Per-rank local and global squared norms from one set of draws (module docstring)."""
    n, w = g_sq.size, spec.world_size
    b_small, d = float(spec.per_rank_batch_size), spec.grad_dims
    shard = np.exp(spec.rank_shard_sigma * _normal32(seed, _S_SHARD, (w,)).astype(np.float64))
    shard /= shard.mean()  # mean exactly 1, so E over ranks of S_r is S
    noise_sq = trace_sigma / b_small  # E|xi_r|^2 / shard_r
    if "grad_norm_local" in spec.per_rank_metrics:
        # |xi_r|^2: mean S_r/B_small, sd sqrt(2/d) of it (chi-square in d dims)
        local_sq = _normal32(seed, _S_NORM, (w, n))
        local_sq *= np.float32(math.sqrt(2.0 / d))
        local_sq += np.float32(1.0)
        local_sq *= noise_sq.astype(np.float32)[None, :]
        local_sq *= shard.astype(np.float32)[:, None]
        mean_noise = local_sq.mean(axis=0, dtype=np.float64)
        # 2 G.xi_r: mean 0, sd 2 sqrt(|G|^2 S_r / (B_small d))
        cross = _normal32(seed, _S_CROSS, (w, n))
        cross *= (2.0 * np.sqrt(g_sq * noise_sq / d)).astype(np.float32)[None, :]
        cross *= np.sqrt(shard).astype(np.float32)[:, None]
        mean_cross = cross.mean(axis=0, dtype=np.float64)
        local_sq += cross
        del cross
        local_sq += g_sq.astype(np.float32)[None, :]
    else:
        local_sq = None
        mean_cross = 2.0 * np.sqrt(g_sq * noise_sq / (d * w)) * _normal32(seed, _S_CROSS, (n,)).astype(np.float64)
        mean_noise = noise_sq * (1.0 + math.sqrt(2.0 / (d * w)) * _normal32(seed, _S_NORM, (n,)).astype(np.float64))
    offdiag_sd = math.sqrt(2.0 * (w - 1) / d) * noise_sq / w
    offdiag = offdiag_sd * _normal32(seed, _S_OFFDIAG, (n,)).astype(np.float64)
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


def _timing(
    spec: SimSpec,
    seed: int,
    steps: IntArray,
    checkpoint_steps: set[int],
    per_rank: dict[str, Float32Array],
    run_level: dict[str, FloatArray],
) -> None:
    """Compute time per rank (jitter, stragglers), the checkpoint stall, the run's step time (the
    slowest rank plus a little communication), and the GPU telemetry that follows from them."""
    n, w = steps.size, spec.world_size
    compute = _normal32(seed, _S_TIME, (w, n))
    compute *= np.float32(0.015)
    np.exp(compute, out=compute)
    compute *= np.float32(spec.step_time_s * 0.95)
    hot = np.zeros((w, n), dtype=np.float32) if "gpu_temp_c" in spec.per_rank_metrics else None
    for straggler in spec.stragglers:
        window = (steps >= straggler.start) & (steps < straggler.end)
        compute[straggler.rank, window] *= np.float32(straggler.slowdown)
        if hot is not None:
            hot[straggler.rank, window] = np.float32(12.0)
    stall = np.zeros(n)
    if checkpoint_steps:
        stall[np.isin(steps, np.fromiter(checkpoint_steps, dtype=np.int64))] = spec.checkpoint_write_s
    slowest = compute.max(axis=0).astype(np.float64)
    step_time = slowest * 1.02 + stall
    run_level["step_time_s"] = step_time
    run_level["throughput_tok_s"] = spec.global_batch_size * spec.seq_len / step_time
    busy = compute / step_time.astype(np.float32)[None, :]  # fraction of the step each GPU computes
    if "step_time_s" in spec.per_rank_metrics:
        per_rank["step_time_s"] = compute + stall.astype(np.float32)[None, :]
    if "throughput_tok_s" in spec.per_rank_metrics:
        # each rank's own batch over its own time: a straggler's tokens/s falls with its compute
        per_rank["throughput_tok_s"] = np.float32(spec.per_rank_batch_size * spec.seq_len) / (
            compute + stall.astype(np.float32)[None, :]
        )
    del compute
    bias = _rng(seed, _S_RANK_BIAS).standard_normal((4, w)).astype(np.float32)
    if "gpu_util" in spec.per_rank_metrics:
        per_rank["gpu_util"] = np.minimum(busy * np.float32(99.0), np.float32(100.0))
    power = None
    if "gpu_power_w" in spec.per_rank_metrics or hot is not None:
        power = busy * np.float32(560.0)
        power += np.float32(140.0) + np.float32(8.0) * bias[0][:, None]
        if "gpu_power_w" in spec.per_rank_metrics:
            per_rank["gpu_power_w"] = power
    if hot is not None and power is not None:
        temp = power * np.float32(0.045)
        temp += np.float32(38.0) + np.float32(2.5) * bias[1][:, None]
        temp += hot
        per_rank["gpu_temp_c"] = temp
    if "gpu_mem_gb" in spec.per_rank_metrics:
        mem = np.empty((w, n), dtype=np.float32)
        mem[:] = (np.float32(62.0) + np.float32(0.8) * bias[2])[:, None]
        per_rank["gpu_mem_gb"] = mem


def _numerics(spec: SimSpec, steps: IntArray, effects: _Effects, run_level: dict[str, FloatArray]) -> None:
    """fp16 dynamic loss scaling and the count of skipped (non-finite) steps per logged step."""
    nonfinite = effects.nan_mask | effects.inf_grad_mask
    if spec.precision == "fp16":
        scale, overflow = _dynamic_loss_scale(steps, effects.overflow_mask, spec.loss_scale_window)
        run_level["loss_scale"] = scale
        nonfinite |= overflow
    run_level["nonfinite_grads"] = nonfinite.astype(np.float64)


def _dynamic_loss_scale(steps: IntArray, forced: BoolArray, window: int) -> tuple[FloatArray, BoolArray]:
    """The fp16 loss scale after each step, and which steps overflowed (and were skipped).

    Starts at 2^16; after ``window`` clean steps it doubles; an overflow halves it (floor 1). Steps in
    ``forced`` overflow; otherwise a doubling beyond 2^17 (the gradients' headroom here) overflows at
    once and backs off, which gives dynamic scaling's periodic overflow every ``window`` steps.
    """
    n = steps.size
    scale = np.empty(n)
    overflow = np.zeros(n, dtype=np.bool_)
    cap = 2.0**_FP16_MAX_SCALE_EXPONENT
    forced_at = np.flatnonzero(forced)
    current, clean_since = 2.0**16, int(steps[0]) if n else 0
    i = 0
    while i < n:
        if forced[i]:
            current = max(current / 2.0, 1.0)
            scale[i], overflow[i], clean_since = current, True, int(steps[i]) + 1
            i += 1
            continue
        later = forced_at[forced_at > i]
        stop = int(later[0]) if later.size else n
        span = steps[i:stop]
        doublings = (span - clean_since) // window
        values = current * 2.0 ** doublings.astype(np.float64)
        over = np.flatnonzero(values > cap)
        k = int(over[0]) if over.size else span.size
        scale[i : i + k] = values[:k]
        if k < span.size:
            current = float(values[k]) / 2.0  # the doubling overflowed: back to where it was
            scale[i + k], overflow[i + k], clean_since = current, True, int(span[k]) + 1
            i += k + 1
        else:
            if k:
                current = float(values[-1])
                clean_since += window * int(doublings[-1])
            i = stop
    return scale, overflow


def _moe(
    spec: SimSpec,
    seed: int,
    t: FloatArray,
    effects: _Effects,
    per_rank: dict[str, Float32Array],
    run_level: dict[str, FloatArray],
) -> None:
    """Expert load max/mean: imbalance that settles after the first few hundred steps, log-normal
    noise, lower once bias balancing is on, plus any seesaw; router z-loss follows the imbalance.
    Per rank (when asked for): the run's imbalance, each rank's router seeing its own tokens."""
    base = np.full_like(t, spec.expert_load_base)
    if spec.bias_balancing_from is not None:
        switched = np.clip((t - spec.bias_balancing_from) / 50.0, 0.0, 1.0)
        base = base + (1.08 - spec.expert_load_base) * switched
    early = 1.0 + 1.5 * np.exp(-t / 300.0)
    noise = np.exp(0.08 * _normal32(seed, _S_LOAD, (t.size,)).astype(np.float64) - 0.0032)
    load = 1.0 + (base - 1.0) * early * noise + effects.load_add
    run_level["expert_load_max_over_mean"] = load
    run_level["router_z_loss"] = 1.5e-3 * (1.0 + 0.5 * np.exp(-t / 1000.0)) * (load - 1.0 + 0.3) / 0.6
    if "expert_load_max_over_mean" in spec.per_rank_metrics:
        rank_load = _normal32(seed, _S_RANK_LOAD, (spec.world_size, t.size))
        rank_load *= np.float32(0.03)
        np.exp(rank_load, out=rank_load)
        rank_load *= load.astype(np.float32)[None, :]
        per_rank["expert_load_max_over_mean"] = np.maximum(rank_load, np.float32(1.0))


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
