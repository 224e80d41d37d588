"""The decision tree of a spike's root cause as data: its five nodes and seven leaves and their
thresholds. The actions at each leaf and their premises are in ``stab_core.tree_actions``; the walk
from the root (by hand, or answered from a run by ``stab_core.diagnosis``) and its Graphviz drawing in
``stab_core.tree_walk``. Nothing here reads a run.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, Literal

from stab_core.causes import DATA_OUTLIER, LR_TRANSITION, NUMERICAL, RANK_FAULT, ROUTER, UNKNOWN, Cause
from stab_core.tree_actions import LEAF_ACTIONS

Answer = Literal["yes", "no", "unknown"]


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
    """Nodes, leaves and edges: what a UI draws and what ``stab_core.tree_walk.walk_tree`` walks."""

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
                # "NaN" in a question every incident carries read, on a run that never had one, as if it had
                "Is the loss or grad norm non-finite around the spike, did the trainer count iterations with "
                "non-finite values, or did "
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
            settled_by="per-rank gradient norms (grad_norm_local, or any per-rank gradient norm) or per-rank losses "
            "for at least 2 ranks around the spike",
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

EARLY_INSTABILITY_LEAF: Final = TreeLeaf(
    "leaf_early_instability",
    UNKNOWN,
    "Early instability: the loss rose over its starting level",
    LEAF_ACTIONS["leaf_early_instability"],
)
"""The verdict on an incident in a run's first steps, before the tree has the history it needs: what
happened is known (the loss rose over its starting level), its root cause is not (cause ``unknown``)."""
