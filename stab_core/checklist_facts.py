"""The pre-flight checklist's facts read off a run's own data (``RUN_FACT_KEYS`` of
``stab_core.checklist``): clipping, LR schedule, non-finite steps, per-rank and MoE logging."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from stab_core.clipping import clipping_stats
from stab_core.runview import RunView
from stab_core.schedulers import schedule_transitions


def run_facts(view: RunView) -> dict[str, Any]:
    """The checklist facts (``RUN_FACT_KEYS``) that a run's own data answers; absent keys stay unknown."""
    facts: dict[str, Any] = {}
    meta = view.meta
    if isinstance(meta.get("max_norm"), int | float) and not isinstance(meta.get("max_norm"), bool):
        facts["max_norm"] = float(meta["max_norm"])
    if isinstance(meta.get("gpus"), int) and not isinstance(meta.get("gpus"), bool):
        facts["gpus"] = int(meta["gpus"])
    if isinstance(meta.get("batch_provenance_logged"), bool):
        facts["batch_provenance_logged"] = meta["batch_provenance_logged"]
    facts["clip_ratio_logged"] = view.has("grad_norm") or view.has("clip_coef")
    facts["per_rank_metrics"] = any(m.ranks.size > 1 and bool(m.present.any()) for m in view.per_rank.values())
    facts["expert_load_logged"] = view.has("expert_load_max_over_mean")
    facts["nonfinite_guard_logged"] = any(
        view.has(name) for name in ("loss_scale", "nonfinite_grads", "skipped_iterations", "nan_iterations")
    )
    facts["nonfinite_steps"] = _nonfinite_steps(view)
    if view.has("lr"):
        facts.update(_lr_facts(view))
    if view.has("loss") or view.has("lr"):
        last = max(int(view.series[m].steps[-1]) for m in ("loss", "lr") if view.has(m))
        facts["total_steps"] = last + 1
    if view.has("step_time_s"):
        times = view.series["step_time_s"].values
        finite = times[np.isfinite(times)]
        if finite.size:
            facts["step_time_s"] = float(np.median(finite))
    ratio = _post_warmup_clip_ratio(view, facts.get("max_norm"), facts.get("warmup_steps", 0))
    if ratio is not None:
        facts["clip_ratio"] = ratio
    return facts


def _nonfinite_steps(view: RunView) -> int:
    bad: set[int] = set()
    for name in ("loss", "grad_norm"):
        if view.has(name):
            series = view.series[name]
            bad.update(int(s) for s in series.steps[~np.isfinite(series.values)])
    return len(bad)


def _lr_facts(view: RunView) -> dict[str, Any]:
    lr = view.series["lr"]
    facts: dict[str, Any] = {}
    transitions = schedule_transitions(lr.steps, lr.values)
    rises = [t for t in transitions if t.kind == "lr_jump" and t.rel_change > 0]
    if rises:
        biggest = max(rises, key=lambda t: t.rel_change)
        facts["max_lr_jump"] = float(biggest.rel_change)
        facts["max_lr_jump_step"] = int(biggest.step)
    else:
        facts["max_lr_jump"] = 0.0
    finite = np.isfinite(lr.values)
    values, steps = lr.values[finite], lr.steps[finite]
    if values.size and float(values.max()) > 0:
        facts["lr_first"] = float(values[0])
        facts["lr_first_step"] = int(steps[0])
        # the LR the run ends on: a dip that re-warms (a restart) is not the floor, the end of the decay is
        facts["lr_peak"] = float(values.max())
        facts["lr_floor_ratio"] = float(values[-1] / values.max())
        facts["lr_floor_step"] = int(steps[-1])
    first_peak = next((t for t in transitions if t.kind == "warmup_end"), None)
    if first_peak is not None and first_peak.lr_before < first_peak.lr_after:
        facts["warmup_steps"] = int(first_peak.step - lr.steps[0])
    return facts


def _post_warmup_clip_ratio(view: RunView, max_norm: float | None, warmup_steps: int) -> float | None:
    if not view.has("grad_norm") or max_norm is None or not (math.isfinite(max_norm) and max_norm > 0):
        return None
    norms = view.series["grad_norm"]
    keep = norms.steps >= warmup_steps
    if not keep.any():
        return None
    stats = clipping_stats(norms.values[keep], max_norm)
    return None if math.isnan(stats.overall_clip_ratio) else stats.overall_clip_ratio
