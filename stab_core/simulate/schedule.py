"""The simulated run's LR schedule (with warmup restarts on top) and its logged events: warmup ends,
cycle restarts, data switches, checkpoints, batch skips (``stab_core.simulate.model``)."""

from __future__ import annotations

import numpy as np

from stab_core.runview import RunEvent
from stab_core.schedulers import SCHEDULE_FORMULAS, cycle_boundaries
from stab_core.simulate.output import FloatArray, IntArray
from stab_core.simulate.spec import SimSpec


def schedule_lr(spec: SimSpec, steps: IntArray) -> FloatArray:
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


def warmup_steps(spec: SimSpec) -> int:
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


def schedule_events(spec: SimSpec) -> list[RunEvent]:
    events: list[RunEvent] = []
    warmup = warmup_steps(spec)
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
