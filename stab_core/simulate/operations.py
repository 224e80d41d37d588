"""The operational side of a simulated run (``stab_core.simulate.model``): step time per rank (jitter,
a straggler, checkpoint stalls), GPU telemetry, fp16 dynamic loss scaling and the skipped steps, and
the MoE expert load and router z-loss."""

from __future__ import annotations

import numpy as np

from stab_core.simulate.mechanisms import Effects
from stab_core.simulate.noise import S_LOAD, S_RANK_BIAS, S_RANK_LOAD, S_TIME, normal32, rng
from stab_core.simulate.output import BoolArray, Float32Array, FloatArray, IntArray
from stab_core.simulate.spec import SimSpec

_FP16_MAX_SCALE_EXPONENT = 17
"""Loss scales above 2^17 overflow in the simulated fp16 run (then back off): dynamic scaling's cycle."""


def add_timing(
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
    compute = normal32(seed, S_TIME, (w, n))
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
    bias = rng(seed, S_RANK_BIAS).standard_normal((4, w)).astype(np.float32)
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


def add_numerics(spec: SimSpec, steps: IntArray, effects: Effects, run_level: dict[str, FloatArray]) -> None:
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


def add_moe(
    spec: SimSpec,
    seed: int,
    t: FloatArray,
    effects: Effects,
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
    noise = np.exp(0.08 * normal32(seed, S_LOAD, (t.size,)).astype(np.float64) - 0.0032)
    load = 1.0 + (base - 1.0) * early * noise + effects.load_add
    run_level["expert_load_max_over_mean"] = load
    run_level["router_z_loss"] = 1.5e-3 * (1.0 + 0.5 * np.exp(-t / 1000.0)) * (load - 1.0 + 0.3) / 0.6
    if "expert_load_max_over_mean" in spec.per_rank_metrics:
        rank_load = normal32(seed, S_RANK_LOAD, (spec.world_size, t.size))
        rank_load *= np.float32(0.03)
        np.exp(rank_load, out=rank_load)
        rank_load *= load.astype(np.float32)[None, :]
        per_rank["expert_load_max_over_mean"] = np.maximum(rank_load, np.float32(1.0))
