"""The premises the decision tree's actions rest on (``stab_core.tree_actions``), checked on a run's
data around an incident: did clipping act, is the run fp16, did the loss scale fall, was the transition
the initial warmup's end, did the loss recover. ``stab_core.diagnosis`` says an action only when its
premise holds.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

import numpy as np

from stab_core.fell_from_start import fell_from_start
from stab_core.held_out import TRAINING_NONFINITE_KEYS, nonfinite_held_out_only
from stab_core.loss_origin import moving_target
from stab_core.metrics import signed_objective
from stab_core.runview import FloatArray, IntArray, RunView, Series
from stab_core.skipped_steps import skipped_update_steps
from stab_core.spikes import SpikeEvent
from stab_core.tree_actions import Evidence, PremiseCheck
from stab_core.tree_walk import NodeVisit
from stab_core.unfelt_outliers import loss_felt


def step_window(series: Series, lo: int, hi: int) -> tuple[IntArray, FloatArray]:
    """Samples with lo <= step <= hi."""
    a, b = np.searchsorted(series.steps, [lo, hi + 1])
    return series.steps[a:b], series.values[a:b]


@dataclass(frozen=True)
class RunFacts:
    """What the premises of actions read from the whole run, computed once per run: the first step at
    which the logged LR fell (None if it never did, or without an LR), the first step at which it rose
    (None likewise: a log whose LR never rises has no warmup to lengthen), whether the run is fp16, and
    where the log starts: its first logged loss step and the median logging interval (steps)."""

    lr_logged: bool
    first_lr_fall: int | None
    fp16: PremiseCheck
    first_lr_rise: int | None = None
    first_step: int | None = None
    log_interval: float | None = None


def lr_first_moves(lr: Series | None) -> tuple[bool, int | None, int | None]:
    """(at least 2 finite samples, the step of its first fall, the step of its first rise) of a logged LR."""
    if lr is None:
        return False, None, None
    finite = np.isfinite(lr.values)
    steps, values = lr.steps[finite], lr.values[finite]
    if values.size < 2:
        return False, None, None
    tolerance = 1e-12 * float(np.abs(values).max())
    falls = np.flatnonzero(np.diff(values) < -tolerance)
    rises = np.flatnonzero(np.diff(values) > tolerance)
    return True, int(steps[falls[0] + 1]) if falls.size else None, int(steps[rises[0] + 1]) if rises.size else None


def run_facts(view: RunView) -> RunFacts:
    logged, first_fall, first_rise = lr_first_moves(view.series.get("lr"))
    first_step, interval = _log_start(view)
    return RunFacts(
        lr_logged=logged,
        first_lr_fall=first_fall,
        fp16=_precision_premise(view),
        first_lr_rise=first_rise,
        first_step=first_step,
        log_interval=interval,
    )


def _log_start(view: RunView) -> tuple[int | None, float | None]:
    """The first step with a finite loss and the median interval (steps) between logged losses; Nones
    without two finite losses."""
    loss = view.series.get("loss")
    if loss is None:
        return None, None
    steps = loss.steps[np.isfinite(loss.values)]
    if steps.size < 2:
        return (int(steps[0]) if steps.size else None), None
    # the gaps as floats, the same median (steps are far under 2**53): numpy partitions an int64 array of equal
    # gaps with a few larger ones (a run logged at every step but four) ~25x slower than the float64 one, 0.18 s
    # of a 10^6-step analysis
    return int(steps[0]), float(np.median(np.diff(steps).astype(np.float64)))


LOG_START_INTERVALS = 2
"""A log starts at the run's beginning when its first logged step is within this many logging
intervals of step 0 (a console logged every 10 steps starts at 10; a chronicle pasted from step 31,000
at interval 1 is a resumed run, whose initialisation is long past)."""


def _lr_rose_before(facts: RunFacts, step: int) -> PremiseCheck:
    """Did the logged LR rise at or before ``step`` (a warmup to lengthen, a peak reached by a rise)? None
    without a usable LR."""
    evidence: Evidence = {"first_lr_rise": facts.first_lr_rise}
    if not facts.lr_logged:
        return None, evidence
    return facts.first_lr_rise is not None and facts.first_lr_rise <= step, evidence


def _log_starts_at_beginning(facts: RunFacts) -> PremiseCheck:
    """Does the log start at the run's first steps (so its initialisation and first batches are what the
    instability follows)? None without two finite losses."""
    evidence: Evidence = {"first_logged_step": facts.first_step, "logging_interval": facts.log_interval}
    if facts.first_step is None or facts.log_interval is None:
        return None, evidence
    return facts.first_step <= LOG_START_INTERVALS * max(facts.log_interval, 1.0), evidence


def _checkpoint_before(view: RunView, step: int) -> PremiseCheck:
    """Was a checkpoint saved before ``step``? From the run's ``checkpoint`` events (StabScope's monitor
    records each save), else from a stated ``checkpoint_interval_steps``; None when the run records
    neither (a log's saves are not read: whether one exists cannot be told)."""
    saves = sorted(e.step for e in view.events if e.kind == "checkpoint")
    if saves:
        before = [s for s in saves if s < step]
        return bool(before), {"checkpoint_step": before[-1] if before else None, "checkpoints_logged": len(saves)}
    interval = view.meta.get("checkpoint_interval_steps")
    if isinstance(interval, int) and not isinstance(interval, bool) and interval > 0:
        return step > interval, {"checkpoint_interval_steps": interval}
    return None, {"checkpoints_logged": 0}


RUN_START_FRACTION = 0.15
"""An onset is in the run's first steps within this fraction of its length: the "first ~10 % of the run"
of an early instability (the corpus facts' definition), with room for the "~" (10.7 % reads as early)."""


def run_length(view: RunView) -> tuple[int | None, str]:
    """The run's length in steps and where it comes from: the planned steps the log or user states,
    else the last logged loss step (None without either)."""
    for key in ("planned_steps", "total_steps"):
        value = view.meta.get(key)
        if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value) and value > 0:
            return int(value), key
    loss = view.series.get("loss")
    if loss is not None and loss.steps.size:
        return int(loss.steps[-1]), "last_logged_step"
    return None, "none"


def _onset_in_first_steps(view: RunView, facts: RunFacts, step: int) -> PremiseCheck:
    """Did the instability begin in the run's first steps: the log starts at the beginning and the onset
    is within :data:`RUN_START_FRACTION` of the run's length? (An "early" incident of a sparsely logged
    run, e.g. 6 evaluations of which the 5th, at 40 % of the planned steps, jumps, is early only in
    samples: its initialisation and first batches are long behind it.)"""
    starts, evidence = _log_starts_at_beginning(facts)
    length, source = run_length(view)
    fraction = step / length if length else None
    evidence = {**evidence, "run_length": length, "run_length_from": source, "onset_fraction": fraction}
    if starts is False or (fraction is not None and fraction > RUN_START_FRACTION):
        return False, evidence
    if starts is None or fraction is None:
        return None, evidence
    return True, evidence


def _falls_when_healthy(view: RunView, check: PremiseCheck) -> PremiseCheck:
    """``check``, false where the run's loss has a moving target (an RL or GAN objective,
    :func:`stab_core.loss_origin.moving_target`): "a healthy loss falls from the first steps" and "its
    level" are a supervised loss's; a critic's or a generator's loss rises while the run is healthy."""
    if moving_target(view.meta, view.series):
        return False, {**check[1], "moving_target": True}
    return check


def _not_fallen(view: RunView, onset: int, until: int, check: PremiseCheck) -> PremiseCheck:
    """``check``, false where the training loss fell from its first steps and kept falling through the
    incident (:func:`stab_core.fell_from_start.fell_from_start`): "a healthy loss falls from the first steps"
    is then what the loss did (round 25, issue #32)."""
    fell, evidence = fell_from_start(view.series.get("loss"), onset, until)
    return (False if fell else check[0]), {**check[1], **evidence}


def _lr_never_fell_before(facts: RunFacts, step: int) -> bool | None:
    """True when the logged LR did not fall anywhere up to ``step`` (it is still in, or just out of, the
    initial warmup); None without a usable LR."""
    if not facts.lr_logged:
        return None
    return facts.first_lr_fall is None or facts.first_lr_fall > step


def _clip_premise(view: RunView, lo: int, hi: int) -> PremiseCheck:
    """Did clipping act in steps lo..hi? From a logged ``clip_coef`` (< 1 means it scaled the
    gradients), else from the pre-clip ``grad_norm`` against the run's ``max_norm``."""
    grad = view.series.get("grad_norm")
    evidence: Evidence = {"max_norm": None, "clip_peak_grad_norm": None, "clipped_steps": None}
    if grad is not None:
        norms = step_window(grad, lo, hi)[1]
        norms = norms[np.isfinite(norms)]
        if norms.size:
            evidence["clip_peak_grad_norm"] = float(norms.max())
    coef = view.series.get("clip_coef")
    if coef is not None:
        values = step_window(coef, lo, hi)[1]
        values = values[np.isfinite(values)]
        if values.size:
            clipped = int((values < 1.0 - 1e-6).sum())
            evidence["clipped_steps"] = clipped
            evidence["clip_coef_min"] = float(values.min())
            max_norm = view.meta.get("max_norm")
            if isinstance(max_norm, int | float) and max_norm > 0:
                evidence["max_norm"] = float(max_norm)
            return clipped > 0, evidence
    max_norm = view.meta.get("max_norm")
    if not (isinstance(max_norm, int | float) and math.isfinite(max_norm) and max_norm > 0):
        return None, evidence
    evidence["max_norm"] = float(max_norm)
    peak = evidence["clip_peak_grad_norm"]
    if not isinstance(peak, float):
        return None, evidence
    return peak > float(max_norm), evidence


def _precision_premise(view: RunView) -> PremiseCheck:
    """Is the run fp16? From meta ``precision`` (or ``fp16``/``bf16`` flags), else from the loss scale:
    a dynamic scale that moves means fp16, a constant 1.0 means no scaler (bf16/fp32); else from skipped
    updates (a non-finite grad norm the run went on from with its loss finite: a loss scaler's skip)."""
    precision = view.meta.get("precision")
    if isinstance(precision, str) and precision:
        return precision.lower() == "fp16", {"precision": precision, "source": "meta"}
    for flag, value in (("fp16", True), ("bf16", False)):
        if view.meta.get(flag) is True:
            return value, {"precision": flag, "source": f"meta {flag}"}
    scale = view.series.get("loss_scale")
    if scale is not None:
        values = scale.values[np.isfinite(scale.values) & (scale.values > 0)]  # <= 0: a placeholder
        if values.size:
            low, high = float(values.min()), float(values.max())
            if high > low or low > 1.0:
                return True, {"loss_scale_min": low, "loss_scale_max": high, "source": "loss_scale moves"}
            return False, {"loss_scale_min": low, "loss_scale_max": high, "source": "loss_scale constant 1"}
    grad = view.series.get("grad_norm")
    skipped = skipped_update_steps(grad, view.series.get("loss")) if grad is not None else []
    if skipped:
        # a non-finite grad norm the run went on from, its loss finite: an update a dynamic loss scaler
        # skipped, which only fp16 mixed precision runs (stab_core.skipped_steps; docs/diagnosis.md, "Actions and
        # claims")
        return True, {
            "first_skipped_step": skipped[0],
            "skipped_samples": len(skipped),
            "source": "non-finite grad norms skipped, the loss finite",
        }
    return None, {"precision": None}


def _precision_change_premise(
    view: RunView, spike: SpikeEvent, until: int, fp16: PremiseCheck, nonfinite: bool, held_out_only: bool = False
) -> PremiseCheck:
    """Would moving to bf16 help? Only an fp16 run (``fp16``) whose loss the incident hurt: a non-finite value
    logged around it, a loss event, or a loss that rose more than its own scatter inside it
    (:func:`stab_core.unfelt_outliers.loss_felt`). A dynamic loss scaler that halved on a few overflowing
    steps while the loss went on unharmed (a grad-norm surge the loss fell through) is the working scaler
    the action itself names: no precision change is advised there (docs/diagnosis.md, "Actions and claims").
    Where whether the loss felt it cannot be told, the precision alone decides, as before. A non-finite value
    in a validation loss only (``held_out_only``) did not hurt the training loss by itself: whether it felt the
    incident is read from the training loss (round 22 f28d)."""
    holds, evidence = fp16
    loss = view.series.get("loss")
    last = max(until, spike.end)
    # a non-finite grad norm whose loss stayed finite from it on (at least one sample) did not reach the
    # loss: the update was skipped, the scaler the action names at work; whether the loss felt the incident
    # is then read from its rise alone, and where that cannot be read (an RL policy's signed loss near 0)
    # nothing shows harm (round 23 f29d, issue #32)
    grad_only = nonfinite and spike.metric == "grad_norm" and _finite_from(loss, spike.start, last)
    felt: bool | None = True if (nonfinite and not held_out_only and not grad_only) or spike.metric == "loss" else None
    if felt is None and loss is not None and loss.steps.size and not signed_objective(loss.values):
        felt = loss_felt(loss, spike.start, last)
    if (grad_only or held_out_only) and felt is None:
        # a validation pass that overflowed steps no optimizer: unless the training loss shows harm, the
        # premise (the incident hurt the loss trained on) fails, and the precision advice is not said
        # (round 24 f30c, issue #32)
        felt = False
    evidence = {**evidence, "loss_felt": felt, "nonfinite_grad_norm_only": grad_only}
    if felt is False:
        return False, evidence
    return holds, evidence


def _finite_from(loss: Series | None, start: int, until: int) -> bool:
    """Is every loss sample from ``start`` to ``until`` (steps, inclusive) finite, at least one logged?"""
    if loss is None:
        return False
    lo, hi = (int(i) for i in np.searchsorted(loss.steps, [start, until + 1]))
    values = loss.values[lo:hi]
    return bool(values.size) and bool(np.isfinite(values).all())


def check_premises(
    view: RunView, spike: SpikeEvent, until: int, path: Sequence[NodeVisit], facts: RunFacts
) -> dict[str, PremiseCheck]:
    """Every premise an action may rest on, checked on the run around ``spike`` (onset .. ``until``)."""
    evidence = {visit.node: visit.evidence for visit in path}
    numerical = evidence.get("numerical", {})
    counts = [numerical.get(k) for k in TRAINING_NONFINITE_KEYS]
    nonfinite = bool(spike.nonfinite) or any(isinstance(c, int | float) and c > 0 for c in counts)
    # a validation loss that overflowed while every training loss and grad norm stayed finite (round 22
    # f28d, issue #32): no training step was non-finite, so no batch or step is to be skipped, and no
    # training loss scale can have halved for it (YOLO validates in half precision)
    held_out_only = nonfinite_held_out_only(spike, numerical)
    fp16 = facts.fp16
    drop = numerical.get("loss_scale_drop")
    if isinstance(drop, int | float):
        scale_fell: PremiseCheck = (drop >= 2.0, {"loss_scale_drop": drop})
    else:
        # "log the fp16 loss scale" presumes fp16: only a run known to train in fp16 is asked for it; while the
        # precision is unknown, recording the precision (fp16_loss_felt's "otherwise") is what to log first, and a
        # loss scale the run may not have is not named (the goldens' must-not-say; round 26 r26d)
        unknown = None if not held_out_only and fp16[0] is True else False
        scale_fell = (
            False if fp16[0] is False else unknown,
            {"loss_scale_logged": "loss_scale" in view.series, "held_out_only": held_out_only, "fp16": fp16[0]},
        )
    transition = evidence.get("lr_transition", {})
    kind = transition.get("transition_kind")
    step = transition.get("transition_step")
    group, lr_facts = transition.get("lr_group"), facts
    if isinstance(group, str) and group in view.series:
        # node 2 read the rise on another param group than ``lr`` (stab_core.lr_groups): whether the transition
        # ends the initial warm-up is that group's history (YOLO's bias group falls through the weights' warm-up)
        logged, first_fall, _ = lr_first_moves(view.series[group])
        lr_facts = replace(facts, lr_logged=logged, first_lr_fall=first_fall)
    initial = _lr_never_fell_before(lr_facts, int(step)) if isinstance(step, int) else None
    warmup = kind in ("warmup_end", "lr_rise") and initial is True
    about: Evidence = {"transition_kind": kind, "transition_step": step, "lr_never_fell_before": initial}
    recovered = spike.recovered and not spike.diverged
    # one sample out on the log's last one, neither back nor diverged (``cut_off_at_log_end``): the run ended
    # during its incident, and nothing shows whether the loss would have come back (round 25, issue #32)
    ended_during = not spike.recovered and not spike.diverged and spike.n_samples == 1
    not_back: bool | None = None if ended_during else not recovered
    lr = view.series.get("lr")
    lr_at_start = None
    if lr is not None:
        a = int(np.searchsorted(lr.steps, spike.start, side="right")) - 1
        if a >= 0 and math.isfinite(lr.values[a]):
            lr_at_start = float(lr.values[a])
    return {
        "not_recovered": (
            not_back,
            {"recovered": recovered, "recovery_step": spike.recovery_step, "ended_during": ended_during},
        ),
        "fp16": fp16,
        "fp16_loss_felt": _precision_change_premise(view, spike, until, fp16, nonfinite, held_out_only),
        "loss_scale_fell": scale_fell,
        "nonfinite_seen": (nonfinite and not held_out_only, {"nonfinite": nonfinite, "held_out_only": held_out_only}),
        "transition_is_restart": (kind is not None and not warmup, about),
        "transition_is_warmup_end": (warmup, about),
        "transition_is_data_switch": (kind == "data_switch", about),
        "clip_absorbed": _clip_premise(view, spike.onset, until),
        "lr_logged": (lr_at_start is not None, {"lr_at_start": lr_at_start}),
        "lr_rose_before": _with(_lr_rose_before(facts, spike.start), {"lr_at_start": lr_at_start}),
        "log_starts_at_beginning": _log_starts_at_beginning(facts),
        "onset_in_first_steps": _falls_when_healthy(
            view, _not_fallen(view, spike.start, until, _onset_in_first_steps(view, facts, spike.start))
        ),
        "not_recovered_level": _falls_when_healthy(
            view, (not_back, {"recovered": recovered, "ended_during": ended_during})
        ),
        "checkpoint_before": _checkpoint_before(view, spike.start),
        "last_checkpoint_before": _checkpoint_before(view, spike.start),
    }


def _with(check: PremiseCheck, more: Evidence) -> PremiseCheck:
    return check[0], {**check[1], **more}


def action_facts(spike: SpikeEvent, premises: Mapping[str, PremiseCheck]) -> dict[str, object]:
    facts: dict[str, object] = {"start": spike.start, "ratio": spike.ratio if math.isfinite(spike.ratio) else None}
    for _, evidence in premises.values():
        facts.update({k: v for k, v in evidence.items() if v is not None})
    return facts
