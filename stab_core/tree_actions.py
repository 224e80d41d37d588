"""The actions at each leaf of the decision tree (``stab_core.decision_tree``), the premises each rests
on, and which of them to say for a run: an action is said when its premise holds in the run's data, or
replaced by what to log when the data cannot tell. Nothing here reads a run.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final

from stab_core.spikes import times

Evidence = dict[str, float | int | str | bool | None]
"""The numbers behind an answer or a check, by name (JSON-ready)."""


LEAF_ACTIONS: Final[dict[str, tuple[str, ...]]] = {
    "leaf_numerical": (
        "Roll back to the last checkpoint whose loss and weights are finite.",
        "Train in bf16 with fp32 master weights (or keep fp16 only with a working dynamic loss scaler).",
        "Check the loss scaling: a scale that keeps halving means overflowing activations or gradients.",
        "Skip the offending batch and any step whose gradients are non-finite.",
    ),
    "leaf_nonfinite_from_start": (
        "Do not roll back or skip batches: no logged step before this one was finite, so there is no healthy "
        "state to return to and no single batch to blame.",
        "Run the first steps again in fp32 without fused or custom kernels (or on another build or GPU type): "
        "a build or kernel fault goes away, a data or initialisation fault stays.",
        "Check the first batches: NaN or inf inputs, token ids beyond the vocabulary, sequences whose every "
        "label is masked.",
        "Check the initialisation: every weight, and the first forward pass's activations, finite before any update.",
        "Check the loss itself: labels, masking and ignore_index (a mean over zero tokens is NaN).",
    ),
    "leaf_lr_transition": (
        "Add a warmup restart at the transition (step {transition_step}): re-ramp the LR instead of jumping.",
        "Lengthen the warmup or lower the peak LR: the spike began {steps_since_transition} steps after the "
        "warmup reached its peak LR.",
        "Size restart_warmup at 1/4-1/3 of the initial warmup (e.g. 500-700 steps for a 2,000-step warmup).",
        "For a data-recipe switch, re-warm the LR from a lower value as well.",
    ),
    "leaf_rank_fault": (
        "Inspect rank {worst_rank}'s node (GPU errors, ECC, thermals, interconnect) and its data shard.",
        "Re-run the step Megatron-style: a fault that follows the node is hardware, one that follows "
        "the data is a bad shard.",
        "Exclude the node or the shard, then resume from the last checkpoint.",
    ),
    "leaf_router": (
        "Add a router z-loss (coefficient ~1e-3, ST-MoE).",
        "Use auxiliary-loss-free load balancing (per-expert bias updates, DeepSeek-V3).",
        "Lower the router's learning rate.",
    ),
    "leaf_data_outlier_recovered": (
        "Keep gradient clipping on: it capped the grad norm ({clip_peak_grad_norm:.3g} before clipping) at "
        "max_norm {max_norm:g} during this spike.",
        "Find the batches around step {start} and skip or deduplicate them in the data pipeline.",
    ),
    "leaf_data_outlier_diverged": (
        "Roll back to the last checkpoint saved before the spike (step {checkpoint_step}).",
        "Skip the next 200-500 batches of the data stream, as PaLM did.",
        "Restart with a short LR warmup.",
        "Lower the peak LR.",
    ),
    "leaf_unknown": (
        "Log {missing_signals} and diagnose again: they settle the questions this log leaves open.",
        "Inspect the batches around step {start}.",
        "Re-run from the previous checkpoint to see whether the spike repeats (data) or not (transient).",
    ),
    "leaf_early_instability": (
        "Lower the peak LR or lengthen the warmup: from step {start} the loss rose to {ratio_x} the lowest "
        "level it held so far, with the LR at {lr_at_start:.3g}.",
        "Check the initialisation scale and the first batches (tokenizer, masking, labels): a healthy loss "
        "falls from the first steps.",
        "Restart from the beginning (or the last checkpoint before step {start}) with those changes: the loss "
        "has not come back to its level.",
    ),
}


@dataclass(frozen=True)
class Premise:
    """What an action takes for granted about the run: ``condition`` in words (shown when it cannot be
    checked, e.g. in a walk by hand) and ``otherwise`` (said instead of the action when the data
    cannot check it: what to log)."""

    name: str
    condition: str
    otherwise: str | None = None


PREMISES: Final[dict[str, Premise]] = {
    "clip_absorbed": Premise(
        "clip_absorbed",
        "the grad norm before clipping exceeded max_norm during the spike",
        "Record the run's max_norm (clip threshold) and log the grad norm before clipping: this log cannot "
        "tell whether clipping capped this spike.",
    ),
    "not_recovered": Premise("not_recovered", "the loss did not come back to its level"),
    "fp16": Premise(
        "fp16",
        "the run trains in fp16",
        "Record the run's precision (fp16 or bf16): moving to bf16 helps only an fp16 run.",
    ),
    # moving to bf16 (docs/diagnosis.md, "Actions and claims"): an fp16 run whose loss the incident hurt; a scaler that
    # skipped a few overflowing steps while the loss went on unharmed is working, and the action itself says to keep it
    "fp16_loss_felt": Premise(
        "fp16_loss_felt",
        "the run trains in fp16 and the incident hurt its loss (a non-finite value, or a loss that rose out of "
        "its scatter): a scaler that skipped overflowing steps while the loss went on unharmed is working",
        "Record the run's precision (fp16 or bf16): moving to bf16 helps only an fp16 run.",
    ),
    "loss_scale_fell": Premise(
        "loss_scale_fell",
        "the fp16 loss scale fell before the spike",
        "Log the fp16 loss scale: whether it kept halving cannot be told from this log.",
    ),
    "nonfinite_seen": Premise("nonfinite_seen", "non-finite values were logged around the spike"),
    "transition_is_restart": Premise(
        "transition_is_restart", "the transition is a restart, LR jump or data switch (not the initial warmup)"
    ),
    "transition_is_warmup_end": Premise("transition_is_warmup_end", "the transition is the end of the initial warmup"),
    "transition_is_data_switch": Premise("transition_is_data_switch", "the transition is a data-recipe switch"),
    "signals_missing": Premise("signals_missing", "some question of the tree could not be answered"),
    "lr_logged": Premise(
        "lr_logged",
        "the LR is logged",
        "Log the LR: whether the instability came with the warmup's rise cannot be told from this log.",
    ),
    "lr_rose_before": Premise(
        "lr_rose_before",
        "the logged LR rose (a warmup or a raised peak) before the instability",
        "Log the LR: whether the instability came with the warmup's rise cannot be told from this log.",
    ),
    "log_starts_at_beginning": Premise(
        "log_starts_at_beginning", "the log starts at the run's first steps (not a resumed run or an excerpt)"
    ),
    "onset_in_first_steps": Premise(
        "onset_in_first_steps",
        "the instability began in the run's first steps (its first ~10 %, the log starting at the beginning), "
        "on a loss that falls from them when healthy (not an RL or GAN objective, whose target moves)",
    ),
    "not_recovered_level": Premise(
        "not_recovered_level",
        "the loss did not come back to its level, and it has one to come back to (not an RL or GAN objective, "
        "whose target moves)",
    ),
    # no ``otherwise``: where no save was read, whether one exists cannot be told (a log's save lines are
    # not all read, so "this log records no checkpoint save" is no checked claim either): the re-run is
    # not said (issue #32: an action whose premise cannot be checked is not said)
    "checkpoint_before": Premise("checkpoint_before", "a checkpoint was saved before the spike"),
    # a roll-back names the save it returns to: the run's last one before the spike where saves are read;
    # where none is read the action says so instead of "~100 steps before", which names a save that may
    # not exist (docs/diagnosis.md, "Actions and claims"); where saves are read and none is before the spike, nothing is
    # said
    "last_checkpoint_before": Premise(
        "last_checkpoint_before",
        "a checkpoint was saved before the spike",
        "Roll back to the last checkpoint saved before step {start}, if there is one: no checkpoint save is "
        "read from this log, so which one cannot be told here.",
    ),
}

ACTION_PREMISES: Final[dict[str, str]] = {
    LEAF_ACTIONS["leaf_numerical"][0]: "not_recovered",
    LEAF_ACTIONS["leaf_numerical"][1]: "fp16_loss_felt",
    LEAF_ACTIONS["leaf_numerical"][2]: "loss_scale_fell",
    LEAF_ACTIONS["leaf_numerical"][3]: "nonfinite_seen",
    LEAF_ACTIONS["leaf_lr_transition"][0]: "transition_is_restart",
    LEAF_ACTIONS["leaf_lr_transition"][1]: "transition_is_warmup_end",
    LEAF_ACTIONS["leaf_lr_transition"][2]: "transition_is_restart",
    LEAF_ACTIONS["leaf_lr_transition"][3]: "transition_is_data_switch",
    LEAF_ACTIONS["leaf_rank_fault"][2]: "not_recovered",
    LEAF_ACTIONS["leaf_data_outlier_recovered"][0]: "clip_absorbed",
    LEAF_ACTIONS["leaf_data_outlier_diverged"][0]: "last_checkpoint_before",
    LEAF_ACTIONS["leaf_unknown"][0]: "signals_missing",
    LEAF_ACTIONS["leaf_unknown"][2]: "checkpoint_before",
    LEAF_ACTIONS["leaf_early_instability"][0]: "lr_rose_before",
    LEAF_ACTIONS["leaf_early_instability"][1]: "onset_in_first_steps",
    LEAF_ACTIONS["leaf_early_instability"][2]: "not_recovered_level",
}
"""The premise each action rests on (actions not listed rest on the verdict alone)."""

_L = LEAF_ACTIONS
GENERIC_ACTIONS: Final[dict[str, str]] = {
    _L["leaf_lr_transition"][0]: "Add a warmup restart at the transition: re-ramp the LR instead of jumping.",
    _L["leaf_lr_transition"][1]: "Lengthen the warmup or lower the peak LR.",
    _L["leaf_rank_fault"][
        0
    ]: "Inspect the outlier rank's node (GPU errors, ECC, thermals, interconnect) and its data shard.",
    _L["leaf_data_outlier_recovered"][0]: "Keep gradient clipping on.",
    _L["leaf_data_outlier_recovered"][1]: "Find the batches where the spike began and skip or deduplicate them in the "
    "data pipeline.",
    _L["leaf_data_outlier_diverged"][0]: "Roll back to the last checkpoint saved before the spike.",
    _L["leaf_unknown"][1]: "Inspect the batches where the spike began.",
}
"""What an action says when the numbers it names are not known (a walk by hand)."""

PremiseCheck = tuple[bool | None, Evidence]
"""A premise checked against a run: holds (True/False, None when the data cannot tell) and the numbers."""


@dataclass(frozen=True)
class ActionCheck:
    """An action and the premise it rests on, checked against the run: ``holds`` True (said), False
    (not said), None (the data cannot tell: ``otherwise`` was said instead, if the premise has one)."""

    action: str
    premise: str | None
    holds: bool | None
    evidence: Evidence = field(default_factory=dict)

    def to_json(self) -> dict[str, object]:
        return {"action": self.action, "premise": self.premise, "holds": self.holds, "evidence": dict(self.evidence)}


def _format(action: str, facts: Mapping[str, object]) -> str | None:
    """The action with its ``{placeholders}`` filled from ``facts``; None when one is not known (an
    action never names a step or rank it does not have)."""
    known = {key: value for key, value in facts.items() if value is not None}
    if isinstance(known.get("ratio"), int | float):
        known["ratio_x"] = times(float(known["ratio"]))  # type: ignore[arg-type]
    try:
        return action.format_map(known)
    except (KeyError, ValueError, TypeError):
        return None


def checked_actions(
    leaf_actions: Sequence[str],
    facts: Mapping[str, object],
    premises: Mapping[str, PremiseCheck],
    *,
    manual: bool = False,
) -> tuple[list[str], list[ActionCheck]]:
    """The actions to say and every action's check. ``premises`` maps premise names to their check on
    the run. In a walk by hand (``manual``) there is no run: an action whose premise is not in
    ``premises`` is said as "If <condition>: <action>", and actions that need a run's numbers (a
    step, a rank) are left out."""
    said: list[str] = []
    checks: list[ActionCheck] = []
    for template in leaf_actions:
        name = ACTION_PREMISES.get(template)
        text = _format(template, facts) or GENERIC_ACTIONS.get(template)
        if manual and name not in premises:
            if text is None:
                continue
            if name is not None:
                text = f"If {PREMISES[name].condition}: {text[0].lower()}{text[1:]}"
            said.append(text)
            checks.append(ActionCheck(text, name, None))
            continue
        holds, evidence = premises.get(name, (None, {})) if name is not None else (True, {})
        if holds is True and text is not None:
            said.append(text)
            checks.append(ActionCheck(text, name, True, evidence))
        elif holds is None and name is not None and PREMISES[name].otherwise is not None:
            otherwise = PREMISES[name].otherwise or ""
            instead = _format(otherwise, facts) or otherwise.replace("step {start}", "the spike")
            said.append(instead)
            checks.append(ActionCheck(instead, name, None, evidence))
        else:
            checks.append(ActionCheck(text or template, name, False if holds is not None else None, evidence))
    return said, checks
