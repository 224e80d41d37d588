"""Root cause of a loss or grad-norm spike: the 5-node decision tree (:mod:`stab_core.decision_tree`)
walked from a run's data (each node answered in ``stab_core.tree_nodes``), and each action's premise
checked on it (``stab_core.action_premises``).

The tree (asked in this order; the first "yes" ends the walk at its leaf; a node whose data is missing
is answered "unknown" and the walk continues):

1. Numerical fault? Non-finite loss/grad norm, iterations counted as non-finite, or a collapsing fp16 loss scale.
2. Near a schedule transition? A large relative LR rise, a warmup end / cycle restart / LR jump found
   in the logged LR (:func:`stab_core.schedulers.schedule_transitions`), or a logged event of kind
   ``schedule_transition``, ``cycle_restart``, ``data_switch`` or ``warmup_end`` shortly before.
3. Concentrated on few ranks? One rank's local grad norm (or loss) far above the median of the others.
4. MoE router seesaw? Expert load imbalance (max/mean) jumping before the spike.
5. SNR collapse before the spike? Then a data-outlier resonance, recovered or diverged.

Sources for the actions: PaLM (Chowdhery et al. 2022, sec. 5.1: restart ~100 steps before the spike
and skip ~200-500 batches); ST-MoE (Zoph et al. 2022: router z-loss, coefficient 1e-3); DeepSeek-V3
(Liu et al. 2024: auxiliary-loss-free balancing by per-expert bias); Megatron-LM's rerun state machine
(re-run a suspicious step to tell a transient hardware fault from a persistent data fault).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Final

import numpy as np

from stab_core.action_premises import RunFacts, action_facts, check_premises, run_facts
from stab_core.cause_candidates import target_moves
from stab_core.cause_signatures import LR_ROSE, early_jump_signature, lr_rise_signature
from stab_core.causes import DATA_OUTLIER, UNKNOWN, Cause
from stab_core.decision_tree import EARLY_INSTABILITY_LEAF, DiagnosisParams, build_tree
from stab_core.lr_groups import other_lr_groups
from stab_core.runview import RunView, Series
from stab_core.spikes import SpikeEvent, times
from stab_core.tree_actions import Evidence, PremiseCheck, checked_actions
from stab_core.tree_nodes import (
    DiagnosisContext,
    logging_interval,
    node_lr_transition,
    node_numerical,
    node_rank_concentration,
    node_router,
    node_snr_collapse,
    prepare_context,
)
from stab_core.tree_walk import Diagnosis, NodeResult, NodeVisit, walk_path

EARLY_JUMP_CONFIDENCE: Final = 0.6
"""The confidence of a cause read from an early instability's signature alone (a "yes" at its
threshold): the rest of the tree cannot be read in a run's first steps to make it firmer."""


def diagnose(
    view: RunView,
    spike: SpikeEvent,
    params: DiagnosisParams | None = None,
    context: DiagnosisContext | None = None,
    *,
    until: int | None = None,
    earlier: Sequence[tuple[int, int]] = (),
) -> Diagnosis:
    """Walk the tree for one spike (or incident, whose primary event ``spike`` is) from the run's data
    around it (see the module docstring), and check each action's premise on the data.

    ``until``: the incident's last step (default: the spike's recovery, else its end), the window in
    which clipping is looked for. ``earlier``: (start, until) of the run's earlier incidents; an SNR
    fall inside one of them (or inside the SNR's memory after it) is that incident's, not a precursor.
    ``context`` carries per-run work (the SNR and its level); pass the same one for every spike of a
    run, else it is computed here."""
    p = params if params is not None else DiagnosisParams()
    ctx = context if context is not None else prepare_context(view, p)
    last = until if until is not None else spike.until
    tree = build_tree(p)
    answerers: dict[str, Callable[[], NodeResult]] = {
        "numerical": lambda: node_numerical(view, spike, p),
        "lr_transition": lambda: node_lr_transition(view, spike, p, ctx),
        "rank_concentration": lambda: node_rank_concentration(view, spike, p),
        "router": lambda: node_router(view, spike, p),
        "snr_collapse": lambda: node_snr_collapse(spike, p, ctx, earlier),
    }

    def read_premises(path: Sequence[NodeVisit]) -> tuple[dict[str, object], dict[str, PremiseCheck]]:
        premises = check_premises(view, spike, last, path, ctx.facts or run_facts(view))
        return action_facts(spike, premises), premises

    walked = walk_path(
        tree,
        lambda node: answerers[node.id](),
        recovered=spike.recovered and not spike.diverged,
        unknown_penalty=p.unknown_penalty,
        read_premises=read_premises,
    )
    return replace(walked, target_moves=target_moves(view.meta, view.series))


EARLY_LR_SAMPLES: Final = 3
"""Logged LR samples before an early instability's onset within which the LR must have risen (and be
at its highest at the onset) for the LR to be its cause: a warmup still ramping as the loss blows up,
not one that ended long before."""


def _lr_rising_at(view: RunView, onset: int) -> tuple[bool, Evidence]:
    """The logged LR rose within :data:`EARLY_LR_SAMPLES` logged samples before ``onset`` and its top is at the
    onset or the logged sample before it (:func:`stab_core.cause_signatures.lr_rise_signature` over that short
    window), and the evidence: read on ``lr``, then on each other logged param group's LR
    (:func:`stab_core.lr_groups.other_lr_groups`; the first that rose is named as ``lr_group``)."""
    lr = view.series.get("lr")
    first: tuple[bool, Evidence] | None = None
    groups = [(None, lr)] if lr is not None and lr.steps.size >= 2 else []
    for name, series in [*groups, *other_lr_groups(view.series)]:
        rising, evidence = _group_rising_at(series, onset)
        if name is not None:
            evidence = {**evidence, "lr_group": name}
        if rising:
            return rising, evidence
        first = first or (rising, evidence)
    return first or (False, {"lr_rose": None})


def _group_rising_at(lr: Series, onset: int) -> tuple[bool, Evidence]:
    """:func:`_lr_rising_at` on one logged LR."""
    window = EARLY_LR_SAMPLES * logging_interval(lr.steps)
    rose, evidence = lr_rise_signature(lr, onset, window)
    peak, at_onset = evidence.get("lr_window_peak"), evidence.get("lr_at_onset")
    # still at its highest at the onset: a schedule already decaying (a warmup that ended 3 samples of
    # 500 steps before) is not ramping into the blow-up. A top one logged sample before the onset is the
    # ramp's: a log of one row per epoch cannot tell the ramp's last step from the onset (YOLO's per-iteration
    # warm-up peaks inside the epoch before the first decayed row; round 26 r26d)
    a, b = np.searchsorted(lr.steps, [onset - window, onset + 1])
    values = lr.values[max(0, a - 1) : b]
    values = values[np.isfinite(values)]
    at_top = isinstance(peak, float) and isinstance(at_onset, float) and at_onset >= peak * (1.0 - LR_ROSE)
    if not at_top and values.size >= 2 and isinstance(peak, float):
        at_top = bool(values[-2] >= peak * (1.0 - LR_ROSE))
    return rose is True and at_top, {**evidence, "window_steps": window}


def diagnose_early(
    view: RunView,
    spike: SpikeEvent,
    params: DiagnosisParams | None = None,
    *,
    until: int | None = None,
    facts: RunFacts | None = None,
    context: DiagnosisContext | None = None,
) -> Diagnosis:
    """The verdict on an early-instability incident. The causes whose signature a run's first steps can
    show are looked for: node 1 (a non-finite loss is a numerical fault whenever it happens) and node 2
    (a "yes" there with the LR still rising within :data:`EARLY_LR_SAMPLES` logged samples of the onset:
    a blow-up inside a warmup ramp, whose cause stays ``unknown`` with the rise as its evidence); a
    "yes" of node 1 walks the whole tree. Otherwise the cause is ``data_outlier`` when the loss jumped at
    once and the grad norm had not moved first (:func:`stab_core.cause_signatures.early_jump_signature`:
    a bad batch), else ``unknown`` (confidence 0: the log shows the instability, not its cause). The
    leaf is
    :data:`EARLY_INSTABILITY_LEAF`, its actions checked on the run like any other; ``signature`` holds
    the evidence of the cause."""
    p = params if params is not None else DiagnosisParams()
    numerical = node_numerical(view, spike, p)
    if numerical.answer == "yes":
        return diagnose(view, spike, p, context, until=until)
    ctx = context if context is not None else prepare_context(view, p)
    lr_answer = node_lr_transition(view, spike, p, ctx)
    lr_rising, lr_signature = _lr_rising_at(view, spike.onset)
    tree = build_tree(p)
    node = tree.node("numerical")
    path = [NodeVisit(node.id, node.number, node.question, numerical.answer, numerical.evidence)]
    lr_node = tree.node("lr_transition")
    path.append(NodeVisit(lr_node.id, lr_node.number, lr_node.question, lr_answer.answer, lr_answer.evidence))
    loss = view.series.get("loss")
    moves = target_moves(view.meta, view.series)  # an RL or GAN loss's jump is no bad batch's signature
    jumped, signature = (
        early_jump_signature(spike, loss, view.series.get("grad_norm"))
        if loss is not None and spike.metric == "loss" and not lr_rising and not moves
        else (None, {})
    )
    cause: Cause = DATA_OUTLIER if jumped else UNKNOWN
    ramping = lr_rising and lr_answer.answer == "yes"
    if ramping:
        # a blow-up inside a warmup ramp: a ramp too steep and a bad batch look alike in the first steps,
        # and a linear ramp is no jump or restart the tree names (../shared's megds perf log rules an LR
        # transition out there); said as unknown, with the rise as its evidence
        signature = {**lr_signature, "warmup_ramping": True}
    last = until if until is not None else spike.until
    premises = check_premises(view, spike, last, path, facts or run_facts(view))
    said = action_facts(spike, premises)
    said.update({k: v for k, v in numerical.evidence.items() if v is not None})
    actions, checks = checked_actions(EARLY_INSTABILITY_LEAF.actions, said, premises)
    ratio = spike.ratio if math.isfinite(spike.ratio) else 5.2
    return Diagnosis(
        cause=cause,
        confidence=EARLY_JUMP_CONFIDENCE if jumped else 0.0,
        path=path,
        leaf=EARLY_INSTABILITY_LEAF.id,
        actions=actions,
        missing=[],
        checks=checks,
        summary=(
            f"Early instability: from step {spike.start} the loss rose to {times(ratio)} the lowest level it held "
            f"so far (peak at step {spike.peak}), "
            + ("and came back to its level." if spike.recovered else "and has not come back to its level.")
        ),
        # an abrupt jump whose lead over the grad norm cannot be told is said as such, not as "no signature"
        signature=signature if jumped or ramping or (jumped is None and "loss_led" in signature) else None,
        target_moves=moves,
    )
