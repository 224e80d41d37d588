"""The run metadata a training run states about its LR scheduler and its clipping, and the scheduler's
transitions as run events (``warmup_end``, ``cycle_restart``), under the keys the checklist and the
pages read (``peak_lr``, ``lr_decay_style``, ``max_norm`` ...).

Reads the scheduler and the clipper through their attributes (``base_lrs``, ``transition_steps()``,
``state_dict()``), so it needs no torch import of its own.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from torch.optim.lr_scheduler import LRScheduler

    from ingest.training.torch_clipping import ZClip

DECAY_STYLES: dict[str, str] = {
    "WarmupCosineRestartScheduler": "cosine",
    "WarmupCosineScheduler": "cosine",
    "WSDScheduler": "wsd",
    "InverseSqrtScheduler": "inverse_sqrt",
    "CosineAnnealingLR": "cosine",
    "CosineAnnealingWarmRestarts": "cosine",
    "LinearLR": "linear",
    "ConstantLR": "constant",
}
"""``lr_decay_style`` (the checklist's key) of known scheduler classes."""

_SCHEDULER_SETTINGS = (
    "total_steps",
    "warmup_steps",
    "restart_warmup_steps",
    "num_cycles",
    "min_lr_ratio",
    "decay_fraction",
    "decay_shape",
)
"""Scheduler attributes copied into the metadata under their own names, where the scheduler has them."""


def scheduler_metadata(scheduler: LRScheduler) -> dict[str, Any]:
    """The scheduler's settings under the checklist's config keys (``peak_lr``, ``min_lr``,
    ``lr_decay_style``, ``total_steps``, ``warmup_steps`` ...), its class, its pitfall advice, and
    its transition points (``schedule_transitions``: kind -> steps; ``transition_steps``: all of them)."""
    name = type(scheduler).__name__
    meta: dict[str, Any] = {"scheduler": name}
    base_lrs = [float(lr) for lr in getattr(scheduler, "base_lrs", [])]
    if base_lrs:
        meta["peak_lr"] = base_lrs[0]
        if len(base_lrs) > 1:
            meta["peak_lrs"] = base_lrs
    for key in _SCHEDULER_SETTINGS:
        if hasattr(scheduler, key):
            meta[key] = getattr(scheduler, key)
    if "min_lr_ratio" in meta and base_lrs:
        meta["min_lr"] = float(meta["min_lr_ratio"]) * base_lrs[0]
    if name in DECAY_STYLES:
        meta["lr_decay_style"] = DECAY_STYLES[name]
    advice = getattr(scheduler, "advice", None)
    if advice:
        meta["scheduler_advice"] = list(advice)
    transitions = schedule_events(scheduler)
    if transitions:
        grouped: dict[str, list[int]] = {}
        for step, kind, _ in transitions:
            grouped.setdefault(kind, []).append(step)
        meta["schedule_transitions"] = grouped
        meta["transition_steps"] = sorted({step for step, _, _ in transitions})
    return meta


def schedule_events(scheduler: LRScheduler) -> list[tuple[int, str, str]]:
    """``(step, kind, label)`` of the scheduler's transitions, by step: what its ``transition_steps()``
    reports (WarmupCosineRestartScheduler). A restart without a restart warmup is one jump, labelled so,
    with no separate ``warmup_end``. Empty for schedulers that do not report transitions."""
    report = getattr(scheduler, "transition_steps", None)
    if not callable(report):
        return []
    points: Mapping[str, list[int]] = report()
    restarts = {int(s) for s in points.get("cycle_restart", [])}
    restart_warmup = int(getattr(scheduler, "restart_warmup_steps", 1))
    events: list[tuple[int, str, str]] = []
    for step in sorted(restarts):
        label = "cycle restart, LR jumps to peak (no restart warmup)" if restart_warmup == 0 else "cycle restart"
        events.append((step, "cycle_restart", label))
    for step in (int(s) for s in points.get("warmup_end", [])):
        if step not in restarts:
            events.append((step, "warmup_end", "warmup ends: LR at peak"))
    for kind, steps in points.items():
        if kind not in ("cycle_restart", "warmup_end"):
            events.extend((int(s), kind, kind.replace("_", " ")) for s in steps)
    return sorted(events)


def clipping_metadata(clipper: ZClip | None, max_norm: float | None) -> dict[str, Any]:
    """Clipping settings: ``max_norm`` (the checklist's key; 0 = off) and a ``clipping`` description."""
    if clipper is not None:
        settings = {k: v for k, v in clipper.state_dict().items() if k in ("alpha", "z_thresh", "warmup_steps", "eps")}
        limit = clipper.max_norm if clipper.max_norm is not None else max_norm
        return {
            "clipping": {"method": "zclip", **settings, "max_norm": limit, "nonfinite": clipper.nonfinite},
            "max_norm": 0.0 if limit is None else float(limit),
        }
    if max_norm is not None:
        return {"clipping": {"method": "global_norm", "max_norm": float(max_norm)}, "max_norm": float(max_norm)}
    return {"clipping": {"method": "none"}, "max_norm": 0.0}
