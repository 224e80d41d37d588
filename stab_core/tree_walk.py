"""Walking the decision tree (``stab_core.decision_tree``) from its root: by hand with given answers,
or with answers read off a run (``stab_core.diagnosis``); the verdict (:class:`Diagnosis`) and the
tree's Graphviz drawing with the walked path highlighted. Nothing here reads a run.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import cast

from stab_core.causes import UNKNOWN, Cause
from stab_core.decision_tree import DECISION_TREE, Answer, DecisionTree, DiagnosisParams, TreeLeaf, TreeNode
from stab_core.tree_actions import ActionCheck, Evidence, PremiseCheck, checked_actions


@dataclass(frozen=True)
class NodeVisit:
    """One node on the path: its answer and the numbers behind it."""

    node: str
    number: int
    question: str
    answer: Answer
    evidence: Evidence = field(default_factory=dict)


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
    signature: Evidence | None = None
    """The evidence a cause rests on where no node of the path decided it (an early instability whose
    loss jumped before the grad norm moved: :func:`stab_core.diagnosis.diagnose_early`); None otherwise."""
    target_moves: bool = False
    """The run's loss has a moving target (an RL or GAN objective, a policy's loss beside its reward:
    :func:`stab_core.cause_candidates.target_moves`): no bad batch's shape is read on it (docs/diagnosis.md,
    "Causes")."""

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


def leaf_title(leaf: TreeLeaf, path: Sequence[NodeVisit]) -> str:
    """The leaf's title as its deciding node saw it: an LR transition that is a warm-up's end is the top of a
    ramp, no jump, so "LR jump" would name what the LR did not do; the param group whose rise it was is named where
    it is not the run's ``lr`` (``stab_core.lr_groups``; round 26 r26d, issue #32)."""
    deciding = next((v for v in path if v.node == "lr_transition" and v.answer == "yes"), None)
    if leaf.id != "leaf_lr_transition" or deciding is None:
        return leaf.title
    if deciding.evidence.get("transition_kind") != "warmup_end":
        return leaf.title
    group = deciding.evidence.get("lr_group")
    return "Scenario A: the LR's rise to its warm-up peak at a transition" + (
        f" (param group {group})" if isinstance(group, str) else ""
    )


def _summary(leaf: TreeLeaf, path: Sequence[NodeVisit]) -> str:
    answered = sum(visit.answer != "unknown" for visit in path)
    if leaf.cause != UNKNOWN:
        return f"{leaf_title(leaf, path)}."
    if answered == len(path):
        return f"No known cause matched: all {answered} questions of the tree were answered no."
    return (
        f"Cause not identified: {answered} of {len(path)} questions answered from the data, "
        f"{len(path) - answered} could not be (see what to log)."
    )


PremiseReader = Callable[[Sequence[NodeVisit]], tuple[dict[str, object], dict[str, PremiseCheck]]]
"""Given the path walked, the facts actions are written with and the premises checked on the run."""


SIGNAL_LOGGED_KEYS: dict[str, str] = {"snr_collapse": "grad_norm_logged"}
"""For a node that can be unknown although its signal is logged (too few samples), the evidence key that says
the signal is logged."""

NOT_ASKED_KEYS: dict[str, str] = {"router": "moe_named"}
"""For a node whose signal a run may not have at all, the evidence key that is False when nothing in the
run names it (no experts named: no MoE expert load to log); such an unknown is neither asked for nor said
to be lacking."""


def asks_to_log(node_id: str, evidence: Mapping[str, object]) -> bool:
    """Is an unknown answer at ``node_id`` one to ask the user to log (and to say the log lacks)? Not when
    the signal is logged (too few samples of it) nor when the run names nothing it would come from."""
    if evidence.get(SIGNAL_LOGGED_KEYS.get(node_id, "")) is True:
        return False
    return evidence.get(NOT_ASKED_KEYS.get(node_id, ""), True) is not False


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
            if asks_to_log(node.id, result.evidence):
                # a signal the run logs (too few samples of it is another matter), or one it cannot have, is
                # not one to ask for
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
    """Walk the tree by hand: ``answers`` maps node ids (``stab_core.decision_tree.NODE_IDS``) to
    ``yes``/``no``/``unknown`` (a node not given is ``unknown``); ``recovered`` picks the branch when node 5
    says yes."""
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
