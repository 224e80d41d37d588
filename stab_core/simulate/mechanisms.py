"""The injected spike mechanisms of the physical model (``stab_core.simulate.model``) turned into their
effects on the run, per logged step: the loss bump, the gradient growth, the noise rise, the expert-load
swing, the rank faults and the numerical masks; and whether each happens in this run at all (a warmup
restart removes an LR-jump spike, skipped batches a data outlier, bias balancing a router seesaw).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from stab_core.schedulers import largest_lr_change
from stab_core.simulate.output import BoolArray, FloatArray, InjectedSpike, IntArray
from stab_core.simulate.spec import (
    DataOutlierSpike,
    LrJumpSpike,
    Mechanism,
    NumericalFault,
    RankFault,
    RouterSeesawSpike,
    SimSpec,
)


def _spike_shape(t: FloatArray, onset: int, rise: int, recovery: float, *, diverge: bool) -> FloatArray:
    """0 before ``onset``, a linear rise to 1 at ``onset + rise - 1``, then exp(-dt/recovery), or 1
    for ever when ``diverge``."""
    rise = max(int(rise), 1)
    peak = onset + rise - 1
    rising = np.clip((t - onset + 1) / rise, 0.0, 1.0)
    after = np.ones_like(t) if diverge else np.exp(-np.maximum(t - peak, 0.0) / max(recovery, 1e-9))
    return np.asarray(np.where(t < onset, 0.0, np.where(t <= peak, rising, after)), dtype=np.float64)


@dataclass
class Effects:
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


def apply_mechanisms(spec: SimSpec, steps: IntArray, lr: FloatArray, stop: int) -> Effects:
    n = steps.size
    t = steps.astype(np.float64)
    effects = Effects(
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


def _mechanism_extras(mechanism: Mechanism, spec: SimSpec, t: FloatArray, effects: Effects) -> None:
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
