"""Root cause of a loss or grad-norm spike: the 5-node decision tree, as data, walked from a run's data.

The tree (asked in this order; the first "yes" ends the walk at its leaf; a node whose data is missing
is answered "unknown" and the walk continues):

1. Numerical fault? Non-finite loss/grad norm, NaN iterations, or a collapsing fp16 loss scale.
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

import itertools
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final, Literal, cast

import numpy as np
import numpy.typing as npt

from stab_core.runview import FloatArray, IntArray, RankMatrix, RunView, Series
from stab_core.schedulers import Transition, largest_lr_change, schedule_transitions
from stab_core.snr import SnrSeries, gradient_snr, snr_drop, temporal_snr_proxy
from stab_core.spikes import SpikeEvent

Answer = Literal["yes", "no", "unknown"]
Cause = Literal["numerical", "lr_transition", "rank_fault", "router", "data_outlier", "unknown"]
Evidence = dict[str, float | int | str | bool | None]

CAUSES: Final[tuple[str, ...]] = ("numerical", "lr_transition", "rank_fault", "router", "data_outlier", "unknown")

TRANSITION_EVENT_KINDS: Final = frozenset({"schedule_transition", "cycle_restart", "data_switch", "warmup_end"})
"""Logged run events that count as a schedule transition at node 2."""

TRANSITION_KINDS: Final = frozenset({"warmup_end", "cycle_restart", "lr_jump"})
"""Transitions found in the logged LR that count at node 2 (a ``decay_start`` lowers the LR: no)."""


@dataclass(frozen=True)
class DiagnosisParams:
    """Thresholds and windows of the tree. Windows are in optimizer steps, widened to a few logging
    intervals on sparse logs. Counted back from the spike's onset (its start, or the start of a
    grad-norm spike that led it).

    Node 1: ``loss_scale_collapse`` (the fp16 loss scale fell by at least this factor from its level,
    i.e. 3 halvings by default) or reached ``loss_scale_floor``; looked for over
    ``numerical_lookback_steps`` before the onset to the spike's end.
    Node 2: a per-step relative LR rise of at least ``lr_rel_change`` or a transition/event within
    ``lr_window_steps`` before the onset; transitions are found with relative change
    ``transition_rel_change``.
    Node 3: a rank ``rank_ratio`` times above the median of the other ranks, within
    ``rank_lookback_steps`` of the spike's beginning (onset - lookback .. start + lookback), and at
    most ``rank_max_fraction`` of the ranks (at least one) that far out.
    Node 4: the max over ``router_lead_steps`` before the onset to the peak of
    ``expert_load_max_over_mean``, over its median across the ``router_baseline_steps`` before that,
    at least ``router_jump``.
    Node 5: the lowest SNR in the ``snr_lookback_steps`` before the onset at least
    ``snr_collapse_factor`` below its median over the ``snr_baseline_steps`` before that (both widened
    to >= 10 logging intervals); :func:`~stab_core.analysis.analyze_run` also lists collapses over the
    whole run against a rolling level of ``snr_level_window`` samples. The SNR is the two-batch estimator (EMA
    ``ema_beta``) or the temporal proxy (``proxy_window`` samples).
    Confidence: each unknown node passed on the way multiplies it by ``unknown_penalty``.
    """

    loss_scale_collapse: float = 8.0
    loss_scale_floor: float = 1.0
    numerical_lookback_steps: int = 20
    lr_window_steps: int = 100
    lr_rel_change: float = 0.2
    transition_rel_change: float = 0.05
    rank_lookback_steps: int = 5
    rank_ratio: float = 3.0
    rank_max_fraction: float = 0.25
    router_lead_steps: int = 50
    router_baseline_steps: int = 500
    router_jump: float = 1.5
    snr_lookback_steps: int = 300
    snr_collapse_factor: float = 3.0
    snr_baseline_steps: int = 300
    snr_level_window: int = 255
    proxy_window: int = 100
    ema_beta: float = 0.99
    unknown_penalty: float = 0.8

    def __post_init__(self) -> None:
        for name in ("loss_scale_collapse", "rank_ratio", "router_jump", "snr_collapse_factor"):
            if not getattr(self, name) > 1.0:
                raise ValueError(f"DiagnosisParams.{name} must be > 1, got {getattr(self, name)!r}")
        if not 0.0 < self.rank_max_fraction <= 1.0:
            raise ValueError(f"DiagnosisParams.rank_max_fraction must be in (0, 1], got {self.rank_max_fraction}")
        if not 0.0 < self.unknown_penalty <= 1.0:
            raise ValueError(f"DiagnosisParams.unknown_penalty must be in (0, 1], got {self.unknown_penalty}")


# --------------------------------------------------------------------------------------------------
# The tree as data
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TreeEdge:
    """From a node to its next node or leaf, taken on ``answer`` (``yes``, ``no``, ``unknown``, or at
    node 5 ``yes, recovered`` / ``yes, diverged``)."""

    answer: str
    target: str


@dataclass(frozen=True)
class TreeNode:
    """A question of the tree: ``number`` 1-5, the data that answers it (``settled_by``) and the
    thresholds it applies."""

    id: str
    number: int
    title: str
    question: str
    settled_by: str
    thresholds: dict[str, float]
    edges: tuple[TreeEdge, ...]
    to_log: str = ""
    """What to log so that the node can be answered (said when it could not be)."""

    def target(self, answer: str) -> str:
        for edge in self.edges:
            if edge.answer == answer:
                return edge.target
        raise ValueError(f"node {self.id!r} has no edge for answer {answer!r}")


@dataclass(frozen=True)
class TreeLeaf:
    """An end of the walk: a cause and what to do. Actions may name evidence as ``{worst_rank}``."""

    id: str
    cause: Cause
    title: str
    actions: tuple[str, ...]


@dataclass(frozen=True)
class DecisionTree:
    """Nodes, leaves and edges: what a UI draws and what :func:`walk_tree` walks."""

    root: str
    nodes: tuple[TreeNode, ...]
    leaves: tuple[TreeLeaf, ...]

    def node(self, node_id: str) -> TreeNode:
        for node in self.nodes:
            if node.id == node_id:
                return node
        raise ValueError(f"no tree node {node_id!r}; nodes: {[n.id for n in self.nodes]}")

    def leaf(self, leaf_id: str) -> TreeLeaf:
        for leaf in self.leaves:
            if leaf.id == leaf_id:
                return leaf
        raise ValueError(f"no tree leaf {leaf_id!r}; leaves: {[leaf.id for leaf in self.leaves]}")

    def is_leaf(self, item_id: str) -> bool:
        return any(leaf.id == item_id for leaf in self.leaves)

    def edges(self) -> list[tuple[str, str, str]]:
        """(source, target, answer) for every edge."""
        return [(node.id, edge.target, edge.answer) for node in self.nodes for edge in node.edges]


NODE_IDS: Final[tuple[str, ...]] = ("numerical", "lr_transition", "rank_concentration", "router", "snr_collapse")

LEAF_ACTIONS: Final[dict[str, tuple[str, ...]]] = {
    "leaf_numerical": (
        "Roll back to the last checkpoint whose loss and weights are finite.",
        "Train in bf16 with fp32 master weights (or keep fp16 only with a working dynamic loss scaler).",
        "Check the loss scaling: a scale that keeps halving means overflowing activations or gradients.",
        "Skip the offending batch and any step whose gradients are non-finite.",
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
        "Roll back to a checkpoint ~100 steps before the spike (before step {start}).",
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
        "Lower the peak LR or lengthen the warmup: from step {start} the loss rose to {ratio:.2f}x its lowest "
        "value so far, with the LR at {lr_at_start:.3g}.",
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
}

ACTION_PREMISES: Final[dict[str, str]] = {
    LEAF_ACTIONS["leaf_numerical"][0]: "not_recovered",
    LEAF_ACTIONS["leaf_numerical"][1]: "fp16",
    LEAF_ACTIONS["leaf_numerical"][2]: "loss_scale_fell",
    LEAF_ACTIONS["leaf_numerical"][3]: "nonfinite_seen",
    LEAF_ACTIONS["leaf_lr_transition"][0]: "transition_is_restart",
    LEAF_ACTIONS["leaf_lr_transition"][1]: "transition_is_warmup_end",
    LEAF_ACTIONS["leaf_lr_transition"][2]: "transition_is_restart",
    LEAF_ACTIONS["leaf_lr_transition"][3]: "transition_is_data_switch",
    LEAF_ACTIONS["leaf_rank_fault"][2]: "not_recovered",
    LEAF_ACTIONS["leaf_data_outlier_recovered"][0]: "clip_absorbed",
    LEAF_ACTIONS["leaf_unknown"][0]: "signals_missing",
    LEAF_ACTIONS["leaf_early_instability"][0]: "lr_logged",
    LEAF_ACTIONS["leaf_early_instability"][2]: "not_recovered",
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
    _L["leaf_data_outlier_diverged"][0]: "Roll back to a checkpoint ~100 steps before the spike.",
    _L["leaf_unknown"][1]: "Inspect the batches where the spike began.",
}
"""What an action says when the numbers it names are not known (a walk by hand)."""

PremiseCheck = tuple[bool | None, Evidence]
"""A premise checked against a run: holds (True/False, None when the data cannot tell) and the numbers."""


def build_tree(params: DiagnosisParams | None = None) -> DecisionTree:
    """The decision tree with ``params``' thresholds written into its questions."""
    p = params if params is not None else DiagnosisParams()

    def chain(yes: str, nxt: str) -> tuple[TreeEdge, ...]:
        return (TreeEdge("yes", yes), TreeEdge("no", nxt), TreeEdge("unknown", nxt))

    nodes = (
        TreeNode(
            id="numerical",
            number=1,
            title="Numerical fault?",
            question=(
                "Is the loss or grad norm non-finite around the spike, are NaN iterations logged, or did "
                f"the fp16 loss scale collapse (fall {p.loss_scale_collapse:g}x or to <= {p.loss_scale_floor:g})?"
            ),
            settled_by="the spike's own series (always available); loss_scale for fp16 runs",
            thresholds={"loss_scale_collapse": p.loss_scale_collapse, "loss_scale_floor": p.loss_scale_floor},
            edges=chain("leaf_numerical", "lr_transition"),
            to_log="the loss at every step",
        ),
        TreeNode(
            id="lr_transition",
            number=2,
            title="Near a schedule transition?",
            question=(
                f"Within {p.lr_window_steps} steps before the spike, did the LR rise by >= "
                f"{p.lr_rel_change:.0%} per step, or did a warmup end, cycle restart, LR jump or data "
                "switch happen?"
            ),
            settled_by="the logged LR (lr) or schedule events (schedule_transition, cycle_restart, "
            "data_switch, warmup_end)",
            thresholds={"lr_window_steps": p.lr_window_steps, "lr_rel_change": p.lr_rel_change},
            edges=chain("leaf_lr_transition", "rank_concentration"),
            to_log="the learning rate (lr) at every logged step",
        ),
        TreeNode(
            id="rank_concentration",
            number=3,
            title="Concentrated on few ranks?",
            question=(
                f"Is one rank's local grad norm (or loss) >= {p.rank_ratio:g}x the median of the other "
                f"ranks, with at most {p.rank_max_fraction:.0%} of the ranks that far out?"
            ),
            settled_by="per-rank gradient norms (grad_norm_local, or any per-rank grad norm) or per-rank losses for "
            "at least 2 ranks around the spike",
            thresholds={"rank_ratio": p.rank_ratio, "rank_max_fraction": p.rank_max_fraction},
            edges=chain("leaf_rank_fault", "router"),
            to_log="per-rank gradient norms (grad_norm_local) or per-rank losses",
        ),
        TreeNode(
            id="router",
            number=4,
            title="MoE router seesaw?",
            question=(
                f"Did the expert load imbalance (max/mean) jump >= {p.router_jump:g}x over its level in "
                f"the {p.router_lead_steps} steps before the spike?"
            ),
            settled_by="expert_load_max_over_mean (MoE runs), or num_experts = 1 in the run's metadata for a "
            "dense model",
            thresholds={"router_jump": p.router_jump, "router_lead_steps": p.router_lead_steps},
            edges=chain("leaf_router", "snr_collapse"),
            to_log="the MoE expert load (expert_load_max_over_mean), or num_experts=1 in the run's metadata "
            "for a dense model",
        ),
        TreeNode(
            id="snr_collapse",
            number=5,
            title="SNR collapse before the spike?",
            question=(
                f"Did the gradient SNR fall >= {p.snr_collapse_factor:g}x below its recent level in the "
                f"{p.snr_lookback_steps} steps before the spike? (Then: did the loss recover?)"
            ),
            settled_by="run-level grad_norm (with per-rank grad_norm_local and meta batch sizes for the two-batch SNR)",
            thresholds={"snr_collapse_factor": p.snr_collapse_factor, "snr_lookback_steps": p.snr_lookback_steps},
            edges=(
                TreeEdge("yes, recovered", "leaf_data_outlier_recovered"),
                TreeEdge("yes, diverged", "leaf_data_outlier_diverged"),
                TreeEdge("no", "leaf_unknown"),
                TreeEdge("unknown", "leaf_unknown"),
            ),
            to_log="the global gradient norm before clipping (grad_norm)",
        ),
    )
    leaves = (
        TreeLeaf("leaf_numerical", "numerical", "Precision fault", LEAF_ACTIONS["leaf_numerical"]),
        TreeLeaf(
            "leaf_lr_transition",
            "lr_transition",
            "Scenario A: LR jump at a transition",
            LEAF_ACTIONS["leaf_lr_transition"],
        ),
        TreeLeaf("leaf_rank_fault", "rank_fault", "Hardware or data-shard fault", LEAF_ACTIONS["leaf_rank_fault"]),
        TreeLeaf("leaf_router", "router", "Scenario C: MoE router seesaw", LEAF_ACTIONS["leaf_router"]),
        TreeLeaf(
            "leaf_data_outlier_recovered",
            "data_outlier",
            "Scenario B: data-outlier resonance, recovered",
            LEAF_ACTIONS["leaf_data_outlier_recovered"],
        ),
        TreeLeaf(
            "leaf_data_outlier_diverged",
            "data_outlier",
            "Scenario B: data-outlier resonance, diverged",
            LEAF_ACTIONS["leaf_data_outlier_diverged"],
        ),
        TreeLeaf("leaf_unknown", "unknown", "Cause not identified", LEAF_ACTIONS["leaf_unknown"]),
    )
    return DecisionTree(root="numerical", nodes=nodes, leaves=leaves)


DECISION_TREE: Final = build_tree()
"""The tree with the default thresholds."""


# --------------------------------------------------------------------------------------------------
# Walking it
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class NodeVisit:
    """One node on the path: its answer and the numbers behind it."""

    node: str
    number: int
    question: str
    answer: Answer
    evidence: Evidence = field(default_factory=dict)


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


@dataclass(frozen=True)
class Diagnosis:
    """Where the walk ended and why.

    ``cause``: one of :data:`CAUSES`. ``confidence`` (0-1): the strength of the deciding "yes" (0.6 at
    its threshold, 1 well beyond it or for a non-finite value), times ``unknown_penalty`` per unknown
    node passed; 0 for ``unknown`` (no cause is held). ``path``: the nodes visited in order.
    ``leaf``: the leaf id. ``actions``: what to do, each one whose premise holds in the run's data (or
    what to log where the data cannot tell). ``missing``: the data that would settle each unknown
    node. ``checks``: every action of the leaf with its premise and evidence. ``summary``: the
    verdict in one sentence. ``answered``: how many nodes on the path were answered yes/no.
    """

    cause: Cause
    confidence: float
    path: list[NodeVisit]
    leaf: str
    actions: list[str]
    missing: list[str]
    checks: list[ActionCheck] = field(default_factory=list)
    summary: str = ""

    @property
    def answered(self) -> int:
        return sum(visit.answer != "unknown" for visit in self.path)

    def visited_ids(self) -> list[str]:
        """Node ids of the path, then the leaf: what :func:`tree_to_dot` highlights."""
        return [visit.node for visit in self.path] + [self.leaf]


@dataclass(frozen=True)
class NodeResult:
    """A node's answer from data: ``strength`` in [0.6, 1] for a yes (how far past the threshold)."""

    answer: Answer
    evidence: Evidence
    strength: float = 1.0


def _format(action: str, facts: Mapping[str, object]) -> str | None:
    """The action with its ``{placeholders}`` filled from ``facts``; None when one is not known (an
    action never names a step or rank it does not have)."""
    known = {key: value for key, value in facts.items() if value is not None}
    try:
        return action.format_map(known)
    except (KeyError, ValueError, TypeError):
        return None


def checked_actions(
    leaf_actions: Sequence[str],
    facts: Mapping[str, object],
    premises: Mapping[str, PremiseCheck],
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
            instead = PREMISES[name].otherwise or ""
            said.append(instead)
            checks.append(ActionCheck(instead, name, None, evidence))
        else:
            checks.append(ActionCheck(text or template, name, False if holds is not None else None, evidence))
    return said, checks


def _summary(leaf: TreeLeaf, path: Sequence[NodeVisit]) -> str:
    answered = sum(visit.answer != "unknown" for visit in path)
    if leaf.cause != "unknown":
        return f"{leaf.title}."
    if answered == len(path):
        return f"No known cause matched: all {answered} questions of the tree were answered no."
    return (
        f"Cause not identified: {answered} of {len(path)} questions answered from the data, "
        f"{len(path) - answered} could not be (see what to log)."
    )


PremiseReader = Callable[[Sequence[NodeVisit]], tuple[dict[str, object], dict[str, PremiseCheck]]]
"""Given the path walked, the facts actions are written with and the premises checked on the run."""


def _walk(
    tree: DecisionTree,
    answer_node: Callable[[TreeNode], NodeResult],
    recovered: bool | None,
    unknown_penalty: float,
    read_premises: PremiseReader | None,
) -> Diagnosis:
    """Walk from the root; ``read_premises`` None is a walk by hand (no run to check premises on)."""
    path: list[NodeVisit] = []
    missing: list[str] = []
    to_log: list[str] = []
    penalty = 1.0
    current = tree.root
    strength = 1.0
    while not tree.is_leaf(current):
        node = tree.node(current)
        result = answer_node(node)
        path.append(NodeVisit(node.id, node.number, node.question, result.answer, result.evidence))
        label: str = result.answer
        if result.answer == "unknown":
            missing.append(node.settled_by)
            to_log.append(node.to_log or node.settled_by)
            penalty *= unknown_penalty
        elif result.answer == "yes":
            strength = result.strength
            if node.id == "snr_collapse":
                if recovered is None:
                    raise ValueError("node 5 answered yes: say whether the loss recovered (recovered=True/False)")
                label = "yes, recovered" if recovered else "yes, diverged"
        current = node.target(label)
    leaf = tree.leaf(current)
    facts, premises = read_premises(path) if read_premises is not None else ({}, {})
    for visit in path:
        facts.update({k: v for k, v in visit.evidence.items() if v is not None})
    facts["missing_signals"] = "; ".join(to_log) if to_log else None
    premises["signals_missing"] = (bool(missing), {"missing": len(missing)})
    confidence = 0.0 if leaf.cause == "unknown" else strength * penalty
    actions, checks = checked_actions(leaf.actions, facts, premises, manual=read_premises is None)
    return Diagnosis(
        cause=leaf.cause,
        confidence=float(min(1.0, max(0.0, confidence))),
        path=path,
        leaf=leaf.id,
        actions=actions,
        missing=missing,
        checks=checks,
        summary=_summary(leaf, path),
    )


def walk_tree(
    answers: Mapping[str, str],
    recovered: bool | None = None,
    tree: DecisionTree = DECISION_TREE,
    unknown_penalty: float = DiagnosisParams.unknown_penalty,
) -> Diagnosis:
    """Walk the tree by hand: ``answers`` maps node ids (:data:`NODE_IDS`) to ``yes``/``no``/``unknown``
    (a node not given is ``unknown``); ``recovered`` picks the branch when node 5 says yes."""
    unknown_ids = set(answers) - {node.id for node in tree.nodes}
    if unknown_ids:
        raise ValueError(f"unknown node ids {sorted(unknown_ids)}; the nodes are {[n.id for n in tree.nodes]}")
    for node_id, answer in answers.items():
        if answer not in ("yes", "no", "unknown"):
            raise ValueError(f"answer for {node_id!r} must be 'yes', 'no' or 'unknown', got {answer!r}")

    def manual(node: TreeNode) -> NodeResult:
        answer = cast(Answer, answers.get(node.id, "unknown"))
        return NodeResult(answer, {"manual": True}, 1.0)

    return _walk(tree, manual, recovered, unknown_penalty, None)


# --------------------------------------------------------------------------------------------------
# Answering the nodes from a run
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class DiagnosisContext:
    """Per-run work shared by every spike's diagnosis (compute once with :func:`prepare_context`)."""

    snr: SnrSeries | None
    lr_usable: bool
    grad_norm: Series | None = None
    facts: RunFacts | None = None


def prepare_context(
    view: RunView, params: DiagnosisParams | None = None, snr: SnrSeries | None = None
) -> DiagnosisContext:
    """The SNR (``snr``, else :func:`stab_core.snr.gradient_snr`) and whether the LR is usable."""
    p = params if params is not None else DiagnosisParams()
    chosen = snr if snr is not None else gradient_snr(view, p.proxy_window, p.ema_beta)
    lr = view.series.get("lr")
    lr_usable = lr is not None and int(np.isfinite(lr.values).sum()) >= 2
    return DiagnosisContext(
        snr=chosen, lr_usable=lr_usable, grad_norm=view.series.get("grad_norm"), facts=run_facts(view)
    )


def logging_interval(steps: IntArray) -> int:
    """Typical logging interval in steps: the median gap over ~1,000 evenly picked samples (cheap
    enough to ask per spike on a 10M-step run)."""
    if steps.size < 2:
        return 1
    pick = max(1, steps.size // 1_000)
    return max(1, int(np.median(np.diff(steps[::pick])) / pick))


def _window(series: Series, lo: int, hi: int) -> tuple[IntArray, FloatArray]:
    """Samples with lo <= step <= hi."""
    a, b = np.searchsorted(series.steps, [lo, hi + 1])
    return series.steps[a:b], series.values[a:b]


def _strength(value: float, threshold: float) -> float:
    """0.6 at the threshold rising to 1 at 4x it (log scale)."""
    if not math.isfinite(value):
        return 1.0
    return 0.6 + 0.4 * min(1.0, max(0.0, math.log(value / threshold) / math.log(4.0)))


def _count_nonfinite(view: RunView, metric: str, lo: int, hi: int) -> int | None:
    series = view.series.get(metric)
    if series is None:
        return None
    return int((~np.isfinite(_window(series, lo, hi)[1])).sum())


def _positive_total(view: RunView, metric: str, lo: int, hi: int) -> float | None:
    series = view.series.get(metric)
    if series is None:
        return None
    values = _window(series, lo, hi)[1]
    values = values[np.isfinite(values)]
    return float(values.sum()) if values.size else 0.0


def _node_numerical(view: RunView, spike: SpikeEvent, p: DiagnosisParams) -> NodeResult:
    lookback = max(
        p.numerical_lookback_steps,
        2 * logging_interval(view.series[spike.metric].steps) if spike.metric in view.series else 0,
    )
    lo, hi = spike.onset - lookback, spike.end
    evidence: Evidence = {
        "spike_nonfinite": spike.nonfinite,
        "nonfinite_loss": _count_nonfinite(view, "loss", lo, hi),
        "nonfinite_grad_norm": _count_nonfinite(view, "grad_norm", lo, hi),
        "nan_iterations": _positive_total(view, "nan_iterations", lo, hi),
        "nonfinite_grads": _positive_total(view, "nonfinite_grads", lo, hi),
        "loss_scale_level": None,
        "loss_scale_min": None,
        "loss_scale_drop": None,
    }
    collapsed = False
    scale = view.series.get("loss_scale")
    if scale is not None:
        recent = _window(scale, lo, hi)[1]
        before = _window(scale, lo - 10 * lookback, lo - 1)[1]
        recent, before = recent[np.isfinite(recent)], before[np.isfinite(before)]
        if recent.size:
            level = float(np.median(before)) if before.size else float(recent[0])
            low = float(recent.min())
            drop = level / low if low > 0 else math.inf
            evidence.update(loss_scale_level=level, loss_scale_min=low, loss_scale_drop=drop)
            # a bf16 run prints a constant scale of 1.0: the floor counts only when the scale fell to it
            collapsed = drop >= p.loss_scale_collapse or (low <= p.loss_scale_floor and level > low)
    counts = [evidence[k] for k in ("nonfinite_loss", "nonfinite_grad_norm", "nan_iterations", "nonfinite_grads")]
    nonfinite = spike.nonfinite or any(isinstance(c, int | float) and c > 0 for c in counts)
    if nonfinite:
        return NodeResult("yes", evidence, 1.0)
    if collapsed:
        return NodeResult("yes", evidence, 0.85)
    return NodeResult("no", evidence)


def _node_lr_transition(view: RunView, spike: SpikeEvent, p: DiagnosisParams, context: DiagnosisContext) -> NodeResult:
    lr = view.series.get("lr")
    transition_events = [event for event in view.events if event.kind in TRANSITION_EVENT_KINDS]
    if not context.lr_usable:
        lr = None
    if lr is None and not transition_events:
        return NodeResult("unknown", {"lr_logged": False, "transition_events": 0})
    window = p.lr_window_steps
    if lr is not None:
        window = max(window, 3 * logging_interval(lr.steps))
    onset = spike.onset
    evidence: Evidence = {"window_steps": window, "lr_rel_change": None, "lr_change_step": None}
    rel_change = 0.0
    transitions: list[Transition] = []
    if lr is not None:
        a, b = np.searchsorted(lr.steps, [onset - window, onset + 1])
        steps, values = lr.steps[max(0, a - 1) : b], lr.values[max(0, a - 1) : b]
        if np.isfinite(values).sum() >= 2:
            change_step, rel_change = largest_lr_change(steps, values)
            evidence.update(lr_rel_change=rel_change, lr_change_step=change_step)
        # transitions from a local slice (a warmup end needs the fall after it): O(window) per spike
        # rather than O(run) per run
        a, b = np.searchsorted(lr.steps, [onset - 2 * window, onset + window + 1])
        if np.isfinite(lr.values[a:b]).sum() >= 2:
            transitions = schedule_transitions(lr.steps[a:b], lr.values[a:b], rel_change=p.transition_rel_change)
    nearest: tuple[int, str] | None = None  # (step, kind) of the latest transition in the window
    for transition in transitions:
        rising = transition.kind in TRANSITION_KINDS and transition.rel_change > 0
        in_window = onset - window <= transition.step <= onset
        if rising and in_window and (nearest is None or transition.step > nearest[0]):
            nearest = (transition.step, transition.kind)
    for event in transition_events:
        if onset - window <= event.step <= onset and (nearest is None or event.step > nearest[0]):
            nearest = (event.step, event.kind)
    if nearest is not None:
        evidence.update(
            transition_step=nearest[0], transition_kind=nearest[1], steps_since_transition=onset - nearest[0]
        )
        closeness = 1.0 - (onset - nearest[0]) / window
        return NodeResult("yes", evidence, 0.7 + 0.3 * closeness)
    if rel_change >= p.lr_rel_change:
        evidence.update(transition_step=evidence["lr_change_step"], transition_kind="lr_rise")
        return NodeResult("yes", evidence, _strength(rel_change, p.lr_rel_change))
    return NodeResult("no", evidence)


def _leave_one_out_medians(values: FloatArray) -> FloatArray:
    """For each entry of ``values`` (1-D, finite, n >= 2) the median of all the others."""
    n = values.size
    order = np.argsort(values, kind="stable")
    ranked = values[order]
    position = np.empty(n, dtype=np.int64)
    position[order] = np.arange(n)

    def remaining(j: npt.NDArray[np.int64]) -> FloatArray:
        # j-th smallest once the entry itself is removed
        return ranked[np.where(j < position, j, j + 1)]

    m = n - 1
    if m % 2:
        return remaining(np.full(n, m // 2))
    return 0.5 * (remaining(np.full(n, m // 2 - 1)) + remaining(np.full(n, m // 2)))


RANK_EVIDENCE_METRICS: Final = ("grad_norm_local", "grad_norm", "loss")
"""Per-rank series node 3 reads first, in this order; after them any other per-rank gradient-norm or loss
series (a trainer's per-rank folders may log ``grad_norm`` or a namespaced loss per rank)."""


def is_rank_evidence(metric: str) -> bool:
    """A per-rank series node 3 can read: a gradient norm or a loss."""
    return metric.startswith("grad_norm") or "loss" in metric.split("/")[-1]


def _rank_matrix(view: RunView) -> tuple[str, RankMatrix] | None:
    others = sorted(name for name in view.per_rank if name not in RANK_EVIDENCE_METRICS and is_rank_evidence(name))
    for metric in (*RANK_EVIDENCE_METRICS, *others):
        matrix = view.per_rank.get(metric)
        if matrix is not None and matrix.ranks.size >= 2:
            return metric, matrix
    return None


def _dense_rank_outlier(matrix: RankMatrix, a: int, b: int, rank_ratio: float) -> tuple[float, int, int, int] | None:
    """The loop of :func:`_node_rank_concentration` over columns a..b-1 at once, when every rank logged a
    finite value in each of them (else None: the loop handles the rest). (ratio, rank, step, outliers)
    of the first column holding the largest ratio of a rank to the median of the others."""
    if b <= a:
        return None
    values = matrix.values[:, a:b]
    if values.shape[0] < 2 or not (matrix.present[:, a:b].all() and np.isfinite(values).all()):
        return None
    n = values.shape[0]
    order = np.argsort(values, axis=0, kind="stable")
    ranked = np.take_along_axis(values, order, axis=0)
    position = np.empty_like(order)
    np.put_along_axis(position, order, np.arange(n)[:, None], axis=0)

    def remaining(j: int) -> FloatArray:
        # j-th smallest of each column once the entry itself is removed
        return np.take_along_axis(ranked, np.where(j < position, j, j + 1), axis=0)

    m = n - 1
    medians = remaining(m // 2) if m % 2 else 0.5 * (remaining(m // 2 - 1) + remaining(m // 2))
    with np.errstate(divide="ignore", invalid="ignore"):
        ratios = values / medians
    ratios = np.where(np.isnan(ratios), 0.0, ratios)
    worst = np.argmax(ratios, axis=0)
    peaks = ratios[worst, np.arange(b - a)]
    column = int(np.argmax(peaks))
    outliers = int((ratios[:, column] >= rank_ratio).sum())
    return float(peaks[column]), int(matrix.ranks[worst[column]]), int(matrix.steps[a + column]), outliers


def _node_rank_concentration(view: RunView, spike: SpikeEvent, p: DiagnosisParams) -> NodeResult:
    found = _rank_matrix(view)
    if found is None:
        return NodeResult("unknown", {"ranks": int(max((m.ranks.size for m in view.per_rank.values()), default=0))})
    metric, matrix = found
    lookback = max(p.rank_lookback_steps, 2 * logging_interval(matrix.steps))
    # the fault shows where the spike begins; later samples of a long event are its aftermath
    a, b = np.searchsorted(matrix.steps, [spike.onset - lookback, spike.start + lookback + 1])
    allowed = max(1, math.floor(p.rank_max_fraction * matrix.ranks.size))
    best = _dense_rank_outlier(matrix, a, b, p.rank_ratio)
    for column in range(a, b) if best is None else ():
        present = matrix.present[:, column]
        values = matrix.values[present, column]
        ranks = matrix.ranks[present]
        if values.size < 2:
            continue
        finite = np.isfinite(values)
        if finite.sum() >= 2:
            medians = np.full(values.size, np.nan)
            # non-finite ranks compare with the finite others; they count as infinitely far out
            medians[finite] = _leave_one_out_medians(values[finite])
            medians[~finite] = np.median(values[finite])
        else:
            continue
        with np.errstate(divide="ignore", invalid="ignore"):
            ratios = np.where(finite, values / medians, np.inf)
        ratios = np.where(np.isnan(ratios), 0.0, ratios)
        worst = int(np.argmax(ratios))
        outliers = int((ratios >= p.rank_ratio).sum())
        if best is None or ratios[worst] > best[0]:
            best = (float(ratios[worst]), int(ranks[worst]), int(matrix.steps[column]), outliers)
    if best is None:
        return NodeResult("unknown", {"metric": metric, "ranks": int(matrix.ranks.size), "samples_in_window": 0})
    ratio, rank, step, outliers = best
    evidence: Evidence = {
        "metric": metric,
        "ranks": int(matrix.ranks.size),
        "worst_rank": rank,
        "worst_step": step,
        "worst_ratio": ratio,
        "outlier_ranks": outliers,
        "outlier_ranks_allowed": allowed,
    }
    if ratio >= p.rank_ratio and outliers <= allowed:
        return NodeResult("yes", evidence, _strength(ratio, p.rank_ratio))
    return NodeResult("no", evidence)


def _expert_load(view: RunView) -> tuple[IntArray, FloatArray] | None:
    series = view.series.get("expert_load_max_over_mean")
    if series is not None and series.steps.size:
        return series.steps, series.values
    matrix = view.per_rank.get("expert_load_max_over_mean")
    if matrix is not None and matrix.steps.size:
        masked = np.where(matrix.present, matrix.values, np.nan)
        return matrix.steps, np.fmax.reduce(masked, axis=0)  # NaN only where no rank logged
    return None


def _is_dense(meta: Mapping[str, object]) -> bool:
    experts = meta.get("num_experts")
    return meta.get("moe") is False or (isinstance(experts, int | float) and experts <= 1)


def _node_router(view: RunView, spike: SpikeEvent, p: DiagnosisParams) -> NodeResult:
    load = _expert_load(view)
    if load is None:
        if _is_dense(view.meta):
            return NodeResult("no", {"moe": False})
        return NodeResult("unknown", {"expert_load_logged": False})
    steps, values = load
    lead = max(p.router_lead_steps, 3 * logging_interval(steps))
    a, b, c = np.searchsorted(steps, [spike.onset - lead - p.router_baseline_steps, spike.onset - lead, spike.peak + 1])
    before, recent = values[a:b], values[b:c]
    before, recent = before[np.isfinite(before)], recent[np.isfinite(recent)]
    if before.size == 0 or recent.size == 0:
        return NodeResult("unknown", {"expert_load_logged": True, "samples_before": int(before.size)})
    level = float(np.median(before))
    peak = float(recent.max())
    jump = peak / level if level > 0 else math.inf
    evidence: Evidence = {"load_level": level, "load_peak": peak, "load_jump": jump, "lead_steps": lead}
    if jump >= p.router_jump:
        return NodeResult("yes", evidence, _strength(jump, p.router_jump))
    return NodeResult("no", evidence)


def _without_earlier(
    snr: SnrSeries, grad: Series | None, lo: int, hi: int, spans: Sequence[tuple[int, int]], interval: int
) -> tuple[SnrSeries, int]:
    """The SNR over lo..hi-1 without the samples of earlier incidents (``spans``), and how many grad-norm
    or SNR samples were left out. The temporal proxy is recomputed from the grad norm with those samples
    removed (one outlier stays in its rolling window for ``window`` samples: that tail is the earlier
    incident's, not a precursor); the two-batch estimate has the incidents' own samples masked."""
    if snr.estimator == "temporal_proxy" and grad is not None:
        a, b = np.searchsorted(grad.steps, [lo - 2 * snr.window * interval, hi])
        steps, values = grad.steps[a:b], grad.values[a:b]
        keep = np.ones(steps.size, dtype=bool)
        for start, end in spans:
            c, d = np.searchsorted(steps, [start, end + 1])
            keep[c:d] = False
        return temporal_snr_proxy(steps[keep], values[keep], snr.window), int((~keep).sum())
    a, b = np.searchsorted(snr.steps, [lo, hi])
    steps, masked = snr.steps[a:b], snr.values[a:b].copy()
    hidden = 0
    for start, end in spans:
        c, d = np.searchsorted(steps, [start, end + 1])
        hidden += int(np.isfinite(masked[c:d]).sum())
        masked[c:d] = np.nan
    return SnrSeries(steps, masked, snr.estimator, snr.label, snr.window, snr.batch), hidden


def _node_snr_collapse(
    spike: SpikeEvent, p: DiagnosisParams, context: DiagnosisContext, earlier: Sequence[tuple[int, int]] = ()
) -> NodeResult:
    snr = context.snr
    if snr is None or snr.steps.size == 0:
        return NodeResult("unknown", {"snr_available": False})
    interval = logging_interval(snr.steps)
    lookback = max(p.snr_lookback_steps, 10 * interval)
    baseline = max(p.snr_baseline_steps, 10 * interval)
    lo = spike.onset - lookback - baseline
    # an earlier incident's SNR fall (and the rolling window still carrying it) is its own, not a precursor
    spans = [(start, until) for start, until in earlier if start < spike.onset and until >= lo - 2 * snr.window]
    hidden = 0
    if spans:
        snr, hidden = _without_earlier(snr, context.grad_norm, lo, spike.onset, spans, interval)
    drop = snr_drop(snr, spike.onset, lookback, baseline)
    evidence: Evidence = {
        "estimator": snr.estimator,
        "snr_drop": drop.drop,
        "snr_min_step": drop.step,
        "snr_value": drop.value,
        "snr_level": drop.level,
        "lookback_steps": lookback,
        "baseline_steps": baseline,
        "samples": drop.samples,
        "recovered": spike.recovered,
        "recovery_step": spike.recovery_step,
        "earlier_incident_start": max(start for start, _ in spans) if spans else None,
        "samples_left_out_for_earlier_incidents": hidden,
    }
    if drop.samples == 0:
        return NodeResult("unknown", evidence)
    if drop.drop >= p.snr_collapse_factor:
        # the temporal proxy is a weaker witness than the two-batch noise scale
        discount = 1.0 if snr.estimator == "two_batch" else 0.9
        return NodeResult("yes", evidence, discount * _strength(drop.drop, p.snr_collapse_factor))
    return NodeResult("no", evidence)


@dataclass(frozen=True)
class RunFacts:
    """What the premises of actions read from the whole run, computed once per run: the first step at
    which the logged LR fell (None if it never did, or without an LR) and whether the run is fp16."""

    lr_logged: bool
    first_lr_fall: int | None
    fp16: PremiseCheck


def run_facts(view: RunView) -> RunFacts:
    lr = view.series.get("lr")
    first_fall = None
    logged = False
    if lr is not None:
        finite = np.isfinite(lr.values)
        steps, values = lr.steps[finite], lr.values[finite]
        logged = values.size >= 2
        if logged:
            tolerance = 1e-12 * float(np.abs(values).max())
            falls = np.flatnonzero(np.diff(values) < -tolerance)
            first_fall = int(steps[falls[0] + 1]) if falls.size else None
    return RunFacts(lr_logged=logged, first_lr_fall=first_fall, fp16=_precision_premise(view))


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
        norms = _window(grad, lo, hi)[1]
        norms = norms[np.isfinite(norms)]
        if norms.size:
            evidence["clip_peak_grad_norm"] = float(norms.max())
    coef = view.series.get("clip_coef")
    if coef is not None:
        values = _window(coef, lo, hi)[1]
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
    a dynamic scale that moves means fp16, a constant 1.0 means no scaler (bf16/fp32)."""
    precision = view.meta.get("precision")
    if isinstance(precision, str) and precision:
        return precision.lower() == "fp16", {"precision": precision, "source": "meta"}
    for flag, value in (("fp16", True), ("bf16", False)):
        if view.meta.get(flag) is True:
            return value, {"precision": flag, "source": f"meta {flag}"}
    scale = view.series.get("loss_scale")
    if scale is not None:
        values = scale.values[np.isfinite(scale.values)]
        if values.size:
            low, high = float(values.min()), float(values.max())
            if high > low or low > 1.0:
                return True, {"loss_scale_min": low, "loss_scale_max": high, "source": "loss_scale moves"}
            return False, {"loss_scale_min": low, "loss_scale_max": high, "source": "loss_scale constant 1"}
    return None, {"precision": None}


def _premises(
    view: RunView, spike: SpikeEvent, until: int, path: Sequence[NodeVisit], facts: RunFacts
) -> dict[str, PremiseCheck]:
    """Every premise an action may rest on, checked on the run around ``spike`` (onset .. ``until``)."""
    evidence = {visit.node: visit.evidence for visit in path}
    numerical = evidence.get("numerical", {})
    counts = [numerical.get(k) for k in ("nonfinite_loss", "nonfinite_grad_norm", "nan_iterations", "nonfinite_grads")]
    nonfinite = bool(spike.nonfinite) or any(isinstance(c, int | float) and c > 0 for c in counts)
    fp16 = facts.fp16
    drop = numerical.get("loss_scale_drop")
    if isinstance(drop, int | float):
        scale_fell: PremiseCheck = (drop >= 2.0, {"loss_scale_drop": drop})
    else:
        scale_fell = (False if fp16[0] is False else None, {"loss_scale_logged": "loss_scale" in view.series})
    transition = evidence.get("lr_transition", {})
    kind = transition.get("transition_kind")
    step = transition.get("transition_step")
    initial = _lr_never_fell_before(facts, int(step)) if isinstance(step, int) else None
    warmup = kind in ("warmup_end", "lr_rise") and initial is True
    about: Evidence = {"transition_kind": kind, "transition_step": step, "lr_never_fell_before": initial}
    recovered = spike.recovered and not spike.diverged
    lr = view.series.get("lr")
    lr_at_start = None
    if lr is not None:
        a = int(np.searchsorted(lr.steps, spike.start, side="right")) - 1
        if a >= 0 and math.isfinite(lr.values[a]):
            lr_at_start = float(lr.values[a])
    return {
        "not_recovered": (not recovered, {"recovered": recovered, "recovery_step": spike.recovery_step}),
        "fp16": fp16,
        "loss_scale_fell": scale_fell,
        "nonfinite_seen": (nonfinite, {"nonfinite": nonfinite}),
        "transition_is_restart": (kind is not None and not warmup, about),
        "transition_is_warmup_end": (warmup, about),
        "transition_is_data_switch": (kind == "data_switch", about),
        "clip_absorbed": _clip_premise(view, spike.onset, until),
        "lr_logged": (lr_at_start is not None, {"lr_at_start": lr_at_start}),
    }


def _facts(spike: SpikeEvent, premises: Mapping[str, PremiseCheck]) -> dict[str, object]:
    facts: dict[str, object] = {"start": spike.start, "ratio": spike.ratio if math.isfinite(spike.ratio) else None}
    for _, evidence in premises.values():
        facts.update({k: v for k, v in evidence.items() if v is not None})
    return facts


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
        "numerical": lambda: _node_numerical(view, spike, p),
        "lr_transition": lambda: _node_lr_transition(view, spike, p, ctx),
        "rank_concentration": lambda: _node_rank_concentration(view, spike, p),
        "router": lambda: _node_router(view, spike, p),
        "snr_collapse": lambda: _node_snr_collapse(spike, p, ctx, earlier),
    }

    def read_premises(path: Sequence[NodeVisit]) -> tuple[dict[str, object], dict[str, PremiseCheck]]:
        premises = _premises(view, spike, last, path, ctx.facts or run_facts(view))
        return _facts(spike, premises), premises

    return _walk(
        tree,
        lambda node: answerers[node.id](),
        spike.recovered and not spike.diverged,
        p.unknown_penalty,
        read_premises,
    )


EARLY_INSTABILITY_LEAF: Final = TreeLeaf(
    "leaf_early_instability",
    "unknown",
    "Early instability: the loss rose over its starting level",
    LEAF_ACTIONS["leaf_early_instability"],
)
"""The verdict on an incident in a run's first steps, before the tree has the history it needs: what
happened is known (the loss rose over its starting level), its root cause is not (cause ``unknown``)."""


def diagnose_early(
    view: RunView,
    spike: SpikeEvent,
    params: DiagnosisParams | None = None,
    *,
    until: int | None = None,
    facts: RunFacts | None = None,
) -> Diagnosis:
    """The verdict on an early-instability incident: node 1 is asked (a non-finite loss is a numerical
    fault whenever it happens, and then the whole tree is walked); otherwise the leaf is
    :data:`EARLY_INSTABILITY_LEAF`: cause ``unknown`` (confidence 0: the log shows the instability,
    not its cause), its actions checked on the run like any other."""
    p = params if params is not None else DiagnosisParams()
    numerical = _node_numerical(view, spike, p)
    if numerical.answer == "yes":
        return diagnose(view, spike, p, until=until)
    tree = build_tree(p)
    node = tree.node("numerical")
    path = [NodeVisit(node.id, node.number, node.question, numerical.answer, numerical.evidence)]
    last = until if until is not None else spike.until
    premises = _premises(view, spike, last, path, facts or run_facts(view))
    said = _facts(spike, premises)
    said.update({k: v for k, v in numerical.evidence.items() if v is not None})
    actions, checks = checked_actions(EARLY_INSTABILITY_LEAF.actions, said, premises)
    ratio = spike.ratio if math.isfinite(spike.ratio) else 5.2
    return Diagnosis(
        cause="unknown",
        confidence=0.0,
        path=path,
        leaf=EARLY_INSTABILITY_LEAF.id,
        actions=actions,
        missing=[],
        checks=checks,
        summary=(
            f"Early instability: from step {spike.start} the loss rose to {ratio:.2f}x its lowest value so far "
            f"(peak at step {spike.peak}), "
            + ("and came back to its level." if spike.recovered else "and has not come back to its level.")
        ),
    )


# --------------------------------------------------------------------------------------------------
# Drawing it
# --------------------------------------------------------------------------------------------------


def _dot_quote(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def tree_to_dot(path: Diagnosis | Sequence[str] | None = None, tree: DecisionTree = DECISION_TREE) -> str:
    """Graphviz DOT text of the tree; the nodes of ``path`` (a Diagnosis, or node/leaf ids in order)
    and the edges between consecutive ones are drawn bold and filled."""
    visited = path.visited_ids() if isinstance(path, Diagnosis) else list(path or [])
    on_path = set(visited)
    path_edges = set(itertools.pairwise(visited))
    # with a Diagnosis, only the edge of the answer given is drawn bold ("no" and "unknown" share targets)
    answers = {visit.node: visit.answer for visit in path.path} if isinstance(path, Diagnosis) else {}
    lines = ["digraph stability_tree {", "  rankdir=TB;", '  node [fontname="Helvetica"];']
    for node in tree.nodes:
        style = ', style="filled,bold", fillcolor="#ffd966", penwidth=2' if node.id in on_path else ""
        label = f"{node.number}. {node.title}"
        if node.id in answers:
            label += f"\n[{answers[node.id]}]"
        lines.append(f"  {node.id} [shape=diamond, label={_dot_quote(label)}{style}];")
    for leaf in tree.leaves:
        style = ', style="filled,bold", fillcolor="#f4cccc", penwidth=2' if leaf.id in on_path else ""
        lines.append(f"  {leaf.id} [shape=box, label={_dot_quote(leaf.title + chr(10) + leaf.cause)}{style}];")
    for source, target, answer in tree.edges():
        taken = (source, target) in path_edges and answer.startswith(answers.get(source, ""))
        style = ", penwidth=3, color=red" if taken else ""
        lines.append(f"  {source} -> {target} [label={_dot_quote(answer)}{style}];")
    lines.append("}")
    return "\n".join(lines) + "\n"
