"""The decision tree of a spike's root cause as data: its five nodes and seven leaves, the actions
at each leaf and the premises they rest on, the walk from the root (by hand or answered from a run by
:mod:`stab_core.diagnosis`) and its Graphviz drawing. Nothing here reads a run.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final, Literal, cast

from stab_core.causes import DATA_OUTLIER, LR_TRANSITION, NUMERICAL, RANK_FAULT, ROUTER, UNKNOWN, Cause

Answer = Literal["yes", "no", "unknown"]
Evidence = dict[str, float | int | str | bool | None]


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


NONFINITE_FROM_START: Final = "yes, from the first step"
"""Node 1's branch for a run whose loss is non-finite from its first logged step on (no finite loss before
the incident): nothing trained yet went wrong, so it is not a training instability."""
NONFINITE_START_LEAF: Final = "leaf_nonfinite_from_start"

NODE_IDS: Final[tuple[str, ...]] = ("numerical", "lr_transition", "rank_concentration", "router", "snr_collapse")

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
        "Lower the peak LR or lengthen the warmup: from step {start} the loss rose to {ratio:.2f}x the lowest "
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
            edges=(
                *chain("leaf_numerical", "lr_transition"),
                TreeEdge(NONFINITE_FROM_START, "leaf_nonfinite_from_start"),
            ),
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
        TreeLeaf("leaf_numerical", NUMERICAL, "Precision fault", LEAF_ACTIONS["leaf_numerical"]),
        TreeLeaf(
            NONFINITE_START_LEAF,
            NUMERICAL,
            "Non-finite from the first step: a build, kernel, data or initialisation fault, not a training instability",
            LEAF_ACTIONS[NONFINITE_START_LEAF],
        ),
        TreeLeaf(
            "leaf_lr_transition",
            LR_TRANSITION,
            "Scenario A: LR jump at a transition",
            LEAF_ACTIONS["leaf_lr_transition"],
        ),
        TreeLeaf("leaf_rank_fault", RANK_FAULT, "Hardware or data-shard fault", LEAF_ACTIONS["leaf_rank_fault"]),
        TreeLeaf("leaf_router", ROUTER, "Scenario C: MoE router seesaw", LEAF_ACTIONS["leaf_router"]),
        TreeLeaf(
            "leaf_data_outlier_recovered",
            DATA_OUTLIER,
            "Scenario B: data-outlier resonance, recovered",
            LEAF_ACTIONS["leaf_data_outlier_recovered"],
        ),
        TreeLeaf(
            "leaf_data_outlier_diverged",
            DATA_OUTLIER,
            "Scenario B: data-outlier resonance, diverged",
            LEAF_ACTIONS["leaf_data_outlier_diverged"],
        ),
        TreeLeaf("leaf_unknown", UNKNOWN, "Cause not identified", LEAF_ACTIONS["leaf_unknown"]),
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

    ``cause``: one of :data:`stab_core.causes.CAUSES`. ``confidence`` (0-1): the strength of the deciding "yes" (0.6 at
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
    """A node's answer from data: ``strength`` in [0.6, 1] for a yes (how far past the threshold);
    ``branch``: the edge to follow when it is not the answer itself (node 1's "yes, from the first step")."""

    answer: Answer
    evidence: Evidence
    strength: float = 1.0
    branch: str | None = None


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
            instead = PREMISES[name].otherwise or ""
            said.append(instead)
            checks.append(ActionCheck(instead, name, None, evidence))
        else:
            checks.append(ActionCheck(text or template, name, False if holds is not None else None, evidence))
    return said, checks


def _summary(leaf: TreeLeaf, path: Sequence[NodeVisit]) -> str:
    answered = sum(visit.answer != "unknown" for visit in path)
    if leaf.cause != UNKNOWN:
        return f"{leaf.title}."
    if answered == len(path):
        return f"No known cause matched: all {answered} questions of the tree were answered no."
    return (
        f"Cause not identified: {answered} of {len(path)} questions answered from the data, "
        f"{len(path) - answered} could not be (see what to log)."
    )


PremiseReader = Callable[[Sequence[NodeVisit]], tuple[dict[str, object], dict[str, PremiseCheck]]]
"""Given the path walked, the facts actions are written with and the premises checked on the run."""


def walk_path(
    tree: DecisionTree,
    answer_node: Callable[[TreeNode], NodeResult],
    *,
    recovered: bool | None,
    unknown_penalty: float,
    read_premises: PremiseReader | None,
) -> Diagnosis:
    """Walk from the root, asking ``answer_node`` at each node; ``recovered`` picks node 5's branch;
    ``read_premises`` None is a walk by hand (no run to check premises on)."""
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
        current = node.target(result.branch or label)
    leaf = tree.leaf(current)
    facts, premises = read_premises(path) if read_premises is not None else ({}, {})
    for visit in path:
        facts.update({k: v for k, v in visit.evidence.items() if v is not None})
    facts["missing_signals"] = "; ".join(to_log) if to_log else None
    premises["signals_missing"] = (bool(missing), {"missing": len(missing)})
    confidence = 0.0 if leaf.cause == UNKNOWN else strength * penalty
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

    return walk_path(tree, manual, recovered=recovered, unknown_penalty=unknown_penalty, read_premises=None)


EARLY_INSTABILITY_LEAF: Final = TreeLeaf(
    "leaf_early_instability",
    UNKNOWN,
    "Early instability: the loss rose over its starting level",
    LEAF_ACTIONS["leaf_early_instability"],
)
"""The verdict on an incident in a run's first steps, before the tree has the history it needs: what
happened is known (the loss rose over its starting level), its root cause is not (cause ``unknown``)."""


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
