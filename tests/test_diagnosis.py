"""The decision tree: its data, drawing it, walking it by hand, and answering it from generated runs."""

from __future__ import annotations

from dataclasses import replace
from typing import Any, get_args

import numpy as np
import pytest

from stab_core.causes import CAUSES, Cause
from stab_core.decision_tree import DECISION_TREE, NODE_IDS, DiagnosisParams, build_tree
from stab_core.diagnosis import diagnose
from stab_core.runview import RankMatrix, RunEvent, RunView, Series
from stab_core.simulate import SyntheticRunSpec, synthetic_run
from stab_core.spikes import SpikeEvent, detect_spikes
from stab_core.tree_nodes import _leave_one_out_medians, prepare_context
from stab_core.tree_walk import tree_to_dot, walk_tree

# ------------------------------------------------------------------------------------ the tree as data


def test_tree_has_five_nodes_in_the_issue_order() -> None:
    assert [n.id for n in DECISION_TREE.nodes] == list(NODE_IDS)
    assert [n.number for n in DECISION_TREE.nodes] == [1, 2, 3, 4, 5]
    assert DECISION_TREE.root == "numerical"
    assert {leaf.cause for leaf in DECISION_TREE.leaves} == set(CAUSES)


def test_the_cause_vocabulary_is_spelled_once() -> None:
    """The Literal type, the tuple, the pages' colours and the JSON contract's names agree."""
    from pages.parts.chart_style import CAUSE_COLORS

    assert set(get_args(Cause)) == set(CAUSES) and len(CAUSES) == len(set(CAUSES))
    assert set(CAUSE_COLORS) == set(CAUSES)  # every cause has a colour, and no colour an unknown cause
    assert CAUSES[-1] == "unknown"


def test_every_edge_lands_on_a_node_or_leaf_and_every_answer_has_one() -> None:
    ids = {n.id for n in DECISION_TREE.nodes} | {leaf.id for leaf in DECISION_TREE.leaves}
    assert all(target in ids for _, target, _ in DECISION_TREE.edges())
    for node in DECISION_TREE.nodes[:4]:
        extra = {"yes, from the first step"} if node.id == "numerical" else set()
        assert {e.answer for e in node.edges} == {"yes", "no", "unknown"} | extra
        assert DECISION_TREE.leaf(node.target("yes")).cause != "unknown"
    assert DECISION_TREE.node("numerical").target("yes, from the first step") == "leaf_nonfinite_from_start"
    last = DECISION_TREE.node("snr_collapse")
    assert last.target("yes, recovered") == "leaf_data_outlier_recovered"
    assert last.target("yes, diverged") == "leaf_data_outlier_diverged"
    with pytest.raises(ValueError, match="no edge"):
        last.target("yes")


def test_thresholds_are_written_into_the_questions() -> None:
    tree = build_tree(DiagnosisParams(rank_ratio=5.0, snr_collapse_factor=4.0))
    assert "5x" in tree.node("rank_concentration").question
    assert tree.node("snr_collapse").thresholds["snr_collapse_factor"] == 4.0
    with pytest.raises(ValueError, match="rank_ratio"):
        DiagnosisParams(rank_ratio=1.0)


def test_tree_to_dot_highlights_exactly_the_path() -> None:
    plain = tree_to_dot()
    assert plain.startswith("digraph") and "penwidth=3" not in plain
    for node_id in NODE_IDS:
        assert f"  {node_id} [shape=diamond" in plain
    diagnosis = walk_tree({"numerical": "no", "lr_transition": "unknown", "rank_concentration": "yes"})
    dot = tree_to_dot(diagnosis)
    bold = [line for line in dot.splitlines() if "penwidth=3" in line]
    # no/unknown share targets: only the answer given is bold
    assert bold == [
        '  numerical -> lr_transition [label="no", penwidth=3, color=red];',
        '  lr_transition -> rank_concentration [label="unknown", penwidth=3, color=red];',
        '  rank_concentration -> leaf_rank_fault [label="yes", penwidth=3, color=red];',
    ]
    assert dot.count('fillcolor="#ffd966"') == 3 and dot.count('fillcolor="#f4cccc"') == 1
    by_ids = tree_to_dot(["numerical", "leaf_numerical"])
    assert '  numerical -> leaf_numerical [label="yes", penwidth=3, color=red];' in by_ids


# ------------------------------------------------------------------------------------ walking by hand


def test_manual_walk_with_unknowns() -> None:
    diagnosis = walk_tree(
        {
            "numerical": "no",
            "lr_transition": "no",
            "rank_concentration": "unknown",
            "router": "no",
            "snr_collapse": "yes",
        },
        recovered=True,
    )
    assert diagnosis.cause == "data_outlier" and diagnosis.leaf == "leaf_data_outlier_recovered"
    assert diagnosis.confidence == pytest.approx(0.8)
    assert diagnosis.missing == [DECISION_TREE.node("rank_concentration").settled_by]
    assert diagnosis.visited_ids() == [*NODE_IDS, "leaf_data_outlier_recovered"]
    # a walk by hand has no run: no action names a step it does not have, and the clipping action is
    # said with its premise, never as a fact (issue #20: no template text such as "around step of the spike")
    assert diagnosis.actions == [
        "If the grad norm before clipping exceeded max_norm during the spike: keep gradient clipping on.",
        "Find the batches where the spike began and skip or deduplicate them in the data pipeline.",
    ]
    assert not any("{" in a for a in diagnosis.actions)


def test_manual_walk_stops_at_the_first_yes_and_all_no_is_unknown() -> None:
    first = walk_tree({"numerical": "yes", "lr_transition": "yes"})
    assert first.cause == "numerical" and len(first.path) == 1 and first.confidence == 1.0
    none = walk_tree(dict.fromkeys(NODE_IDS, "no"))
    # no cause is held: confidence 0 (not "cause not identified, confidence 50%"), and the verdict says
    # that every question was answered no; there is nothing to log, so no "log the missing signals"
    assert none.cause == "unknown" and none.confidence == 0.0
    assert none.summary == "No known cause matched: all 5 questions of the tree were answered no."
    assert not any(a.startswith("Log ") for a in none.actions) and none.answered == 5
    blank = walk_tree({})
    assert blank.cause == "unknown" and blank.confidence == 0.0 and len(blank.missing) == 5
    diverged = walk_tree({"snr_collapse": "yes"}, recovered=False)
    assert diverged.leaf == "leaf_data_outlier_diverged"
    assert diverged.confidence == pytest.approx(0.8**4)


def test_manual_walk_rejects_bad_input() -> None:
    with pytest.raises(ValueError, match="unknown node ids"):
        walk_tree({"nodes": "yes"})
    with pytest.raises(ValueError, match="'yes', 'no' or 'unknown'"):
        walk_tree({"numerical": "maybe"})
    with pytest.raises(ValueError, match="recovered"):
        walk_tree({"snr_collapse": "yes"})


# ------------------------------------------------------------------------------------ answered from data


def test_leave_one_out_medians_known_answers() -> None:
    np.testing.assert_allclose(_leave_one_out_medians(np.array([1.0, 2.0, 3.0, 10.0])), [3, 3, 2, 2])
    np.testing.assert_allclose(_leave_one_out_medians(np.array([9.0, 1.0, 5.0])), [3, 7, 5])
    np.testing.assert_allclose(_leave_one_out_medians(np.array([2.0, 20.0])), [20, 2])


def _loss_spike_of(view: RunView, near: int) -> SpikeEvent:
    loss = view.series["loss"]
    grad = view.series["grad_norm"]
    events = detect_spikes(loss.steps, loss.values, "loss", grad_norm=grad)
    return min(events, key=lambda e: abs(e.start - near))


@pytest.mark.parametrize(
    ("spike_class", "cause", "per_rank"),
    [
        ("numerical", "numerical", True),
        ("lr_transition", "lr_transition", False),
        ("rank_fault", "rank_fault", True),
        ("router", "router", False),
        ("data_outlier_recovered", "data_outlier", True),
        ("data_outlier_recovered", "data_outlier", False),
        ("data_outlier_diverged", "data_outlier", True),
        ("unknown", "unknown", True),
    ],
)
def test_each_injected_class_is_classified(spike_class: str, cause: str, per_rank: bool) -> None:
    run = synthetic_run(SyntheticRunSpec(classes=(spike_class,), per_rank=per_rank, lr_events=False), seed=7)
    view = run.to_view()
    (truth,) = run.truth.spikes
    spike = _loss_spike_of(view, truth.onset)
    assert abs(spike.start - truth.onset) <= 2
    diagnosis = diagnose(view, spike)
    assert diagnosis.cause == cause
    assert diagnosis.path[-1].answer == ("no" if cause == "unknown" else "yes")
    if cause == "data_outlier":
        expected_leaf = "leaf_data_outlier_" + ("recovered" if spike_class.endswith("recovered") else "diverged")
        assert diagnosis.leaf == expected_leaf
        assert diagnosis.path[-1].evidence["estimator"] == ("two_batch" if per_rank else "temporal_proxy")
    if not per_rank and len(diagnosis.path) >= 3:
        assert diagnosis.path[2].answer == "unknown"
        assert DECISION_TREE.node("rank_concentration").settled_by in diagnosis.missing


def test_evidence_names_the_bad_rank_and_the_transition() -> None:
    run = synthetic_run(SyntheticRunSpec(classes=("rank_fault",)), seed=3)
    view = run.to_view()
    diagnosis = diagnose(view, _loss_spike_of(view, run.truth.spikes[0].onset))
    rank_visit = diagnosis.path[-1]
    bad_rank = int(np.argmax(view.per_rank["grad_norm_local"].values[:, run.truth.spikes[0].onset]))
    assert rank_visit.evidence["worst_rank"] == bad_rank
    assert float(rank_visit.evidence["worst_ratio"]) > 10.0  # type: ignore[arg-type]
    assert rank_visit.evidence["outlier_ranks"] == 1
    assert f"Inspect rank {bad_rank}'s node" in diagnosis.actions[0]

    lr_run = synthetic_run(SyntheticRunSpec(classes=("lr_transition",), lr_events=False), seed=3)
    lr_view = lr_run.to_view()
    lr_diag = diagnose(lr_view, _loss_spike_of(lr_view, lr_run.truth.spikes[0].onset))
    evidence = lr_diag.path[1].evidence
    assert evidence["lr_change_step"] == lr_run.truth.spikes[0].onset - 10
    assert float(evidence["lr_rel_change"]) == pytest.approx(3.0, rel=0.05)  # type: ignore[arg-type]  # LR x4


def test_logged_events_settle_node_2_without_an_lr_series() -> None:
    run = synthetic_run(SyntheticRunSpec(classes=("unknown",)), seed=5)
    view = run.to_view()
    spike = _loss_spike_of(view, run.truth.spikes[0].onset)
    series = {k: v for k, v in view.series.items() if k != "lr"}
    no_lr = RunView("no-lr", series=series, per_rank=view.per_rank, meta=view.meta)
    assert diagnose(no_lr, spike).path[1].answer == "unknown"
    switch = RunEvent(step=spike.start - 30, kind="data_switch", label="new mixture")
    with_event = RunView("event", series=series, per_rank=view.per_rank, events=(switch,), meta=view.meta)
    diagnosis = diagnose(with_event, spike)
    assert diagnosis.cause == "lr_transition"
    assert diagnosis.path[1].evidence["transition_kind"] == "data_switch"
    assert diagnosis.path[1].evidence["steps_since_transition"] == 30


def test_loss_scale_collapse_is_numerical() -> None:
    run = synthetic_run(SyntheticRunSpec(classes=("numerical",), loss_scale=True), seed=2)
    view = run.to_view()
    spike = _loss_spike_of(view, run.truth.spikes[0].onset)
    assert not spike.nonfinite
    diagnosis = diagnose(view, spike)
    assert diagnosis.cause == "numerical"
    assert float(diagnosis.path[0].evidence["loss_scale_drop"]) >= 8.0  # type: ignore[arg-type]
    assert diagnosis.confidence == pytest.approx(0.85)


def test_a_constant_loss_scale_of_one_is_no_collapse() -> None:
    """bf16 Megatron runs print ``loss scale: 1.0`` on every line: at the floor, but it never fell."""
    run = synthetic_run(SyntheticRunSpec(classes=("data_outlier_recovered",)), seed=2)
    base = run.to_view()
    spike = _loss_spike_of(base, run.truth.spikes[0].onset)
    loss = base.series["loss"]
    ones = Series(loss.steps, np.ones(loss.steps.size))
    view = RunView("bf16", series={**base.series, "loss_scale": ones}, per_rank=base.per_rank, meta=base.meta)
    node = diagnose(view, spike).path[0]
    assert node.answer == "no"
    assert node.evidence["loss_scale_min"] == 1.0 and node.evidence["loss_scale_drop"] == 1.0
    fell = Series(loss.steps, np.where(loss.steps < spike.start - 5, 2.0, 1.0))  # 2 -> 1: fell to the floor
    view = RunView("fp16", series={**base.series, "loss_scale": fell}, per_rank=base.per_rank, meta=base.meta)
    assert diagnose(view, spike).path[0].answer == "yes"


def test_dense_model_answers_router_no_and_per_rank_loss_is_used() -> None:
    steps = np.arange(2000)
    rng = np.random.default_rng(0)
    loss = 3.0 * (1 + 0.01 * rng.standard_normal(2000))
    loss[1500] *= 2.0
    rank_loss = np.tile(loss, (4, 1)) * (1 + 0.01 * rng.standard_normal((4, 2000)))
    rank_loss[1, 1500] *= 8.0
    view = RunView(
        "dense",
        series={"loss": Series(steps, loss)},
        per_rank={"loss": RankMatrix(np.arange(4), steps, rank_loss, np.ones((4, 2000), dtype=bool))},
        meta={"num_experts": 1},
    )
    (spike,) = detect_spikes(steps, loss)
    diagnosis = diagnose(view, spike, context=prepare_context(view))
    assert diagnosis.cause == "rank_fault"
    assert diagnosis.path[2].evidence["metric"] == "loss" and diagnosis.path[2].evidence["worst_rank"] == 1
    rank_loss[1, 1500] /= 8.0
    healthy = RunView(view.name, series=view.series, per_rank={"loss": view.per_rank["loss"]}, meta=view.meta)
    plain = diagnose(healthy, spike)
    assert plain.path[3].answer == "no" and plain.path[3].evidence == {"moe": False, "num_experts": 1}
    assert plain.path[4].answer == "unknown"  # no grad norm: no SNR
    assert plain.cause == "unknown"


def test_dense_rank_window_matches_the_column_loop() -> None:
    """The all-columns-at-once answer of node 3 equals a per-column loop with np.median of the others
    (ties, zeros, equal ranks included)."""
    from stab_core.tree_nodes import _dense_rank_outlier

    rng = np.random.default_rng(11)
    for _ in range(300):
        ranks, columns = int(rng.integers(2, 9)), int(rng.integers(1, 12))
        values = np.round(rng.exponential(1.0, (ranks, columns)), int(rng.integers(0, 3)))
        values[rng.integers(0, ranks), rng.integers(0, columns)] *= rng.choice([1.0, 5.0, 50.0])
        matrix = RankMatrix(np.arange(ranks) + 10, np.arange(columns) * 7, values, np.ones(values.shape, dtype=bool))
        best: tuple[float, int, int, int] | None = None
        for c in range(columns):
            others = [np.median(np.delete(values[:, c], r)) for r in range(ranks)]
            with np.errstate(divide="ignore", invalid="ignore"):
                ratios = np.nan_to_num(values[:, c] / np.array(others), nan=0.0, posinf=np.inf)
            worst = int(np.argmax(ratios))
            if best is None or ratios[worst] > best[0]:
                best = (float(ratios[worst]), 10 + worst, 7 * c, int((ratios >= 3.0).sum()))
        assert _dense_rank_outlier(matrix, 0, columns, 3.0) == best


# ------------------------------------------------------------------ actions rest on checked premises


def _incident(view: RunView, cause: str) -> dict[str, Any]:
    from stab_core.analysis import analyze_run

    found = [d for d in analyze_run(view).spike_dicts() if d["cause"] == cause and d["metric"] == "loss"]
    assert found, f"no {cause} incident"
    return found[0]


def _check(item: dict[str, Any], premise: str) -> dict[str, Any]:
    (check,) = [c for c in item["action_evidence"] if c["premise"] == premise]
    return check


def _outlier_run(**meta: Any) -> RunView:
    view = synthetic_run(SyntheticRunSpec(classes=("data_outlier_recovered",)), seed=3).to_view()
    merged = {k: v for k, v in {**view.meta, **meta}.items() if v is not None}
    return replace(view, meta=merged)


def test_clipping_is_credited_only_when_the_pre_clip_norm_exceeded_max_norm() -> None:
    below = _incident(_outlier_run(max_norm=50.0), "data_outlier")
    check = _check(below, "clip_absorbed")
    assert check["holds"] is False and check["evidence"]["clip_peak_grad_norm"] < 50.0
    assert not any("clipping" in a.lower() for a in below["actions"])
    above = _incident(_outlier_run(max_norm=0.05), "data_outlier")
    check = _check(above, "clip_absorbed")
    assert check["holds"] is True and check["evidence"]["clip_peak_grad_norm"] > 0.05
    assert above["actions"][0].startswith("Keep gradient clipping on: it capped the grad norm (")
    assert "at max_norm 0.05 during this spike" in above["actions"][0]


def test_without_a_known_max_norm_stabscope_says_what_to_log_instead() -> None:
    unknown = _incident(_outlier_run(max_norm=None), "data_outlier")
    check = _check(unknown, "clip_absorbed")
    assert check["holds"] is None
    assert unknown["actions"][0].startswith("Record the run's max_norm (clip threshold)")
    assert not any(a.startswith("Keep gradient clipping on") for a in unknown["actions"])


def test_bf16_and_rollback_advice_rest_on_the_run() -> None:
    base = synthetic_run(SyntheticRunSpec(classes=("numerical",), loss_scale=True), seed=5).to_view()
    fp16 = _incident(base, "numerical")  # a dynamic loss scale that halves: an fp16 run
    assert _check(fp16, "fp16_loss_felt")["holds"] is True and any("bf16" in a for a in fp16["actions"])
    assert fp16["recovered"] and _check(fp16, "not_recovered")["holds"] is False
    assert not any(a.startswith("Roll back") for a in fp16["actions"])
    bf16 = _incident(replace(base, meta={**base.meta, "precision": "bf16"}), "numerical")
    assert _check(bf16, "fp16_loss_felt")["holds"] is False and not any("bf16" in a for a in bf16["actions"])


def test_node_3_reads_a_per_rank_grad_norm_and_one_rank_of_two_counts() -> None:
    # torchtitan's per-rank TensorBoard folders: each rank logs its own `grad_norm`; rank 1's jumps 14x at
    # step 1,798 while rank 0 stays flat (issue #21 item 4); the run-level series are the ranks' means
    from stab_core.analysis import analyze_run

    rng = np.random.default_rng(4)
    steps = np.arange(1, 3001, dtype=np.int64)
    per_rank = 1.0 + 0.02 * rng.standard_normal((2, steps.size))
    per_rank[1, 1797] *= 14.0
    loss = 3.0 + 0.01 * rng.standard_normal(steps.size)
    loss[1797:1800] *= 1.5
    view = RunView(
        "titan-ranks",
        series={"loss": Series(steps, loss), "grad_norm": Series(steps, per_rank.mean(axis=0))},
        per_rank={"grad_norm": RankMatrix(np.array([0, 1]), steps, per_rank, np.ones(per_rank.shape, dtype=bool))},
        meta={"num_experts": 1},
    )
    (item,) = [d for d in analyze_run(view).spike_dicts() if d["start"] <= 1798 <= d["until"]]
    node3 = next(p for p in item["path"] if p["node"] == "rank_concentration")
    assert node3["answer"] == "yes" and node3["evidence"]["metric"] == "grad_norm"
    assert node3["evidence"]["worst_rank"] == 1 and node3["evidence"]["worst_step"] == 1798
    assert node3["evidence"]["ranks"] == 2 and node3["evidence"]["outlier_ranks"] == 1
    assert item["cause"] == "rank_fault" and "Inspect rank 1's node" in item["actions"][0]


def _llmc_like(nan_from: int, steps: int = 200) -> RunView:
    """An llm.c-like run (loss and grad norm every step, LR warming up) whose loss and grad norm are NaN
    from ``nan_from`` on."""
    step = np.arange(steps)
    loss = np.where(step < nan_from, 11.0 - 0.02 * step, np.nan)
    norm = np.where(step < nan_from, 15.0 - 0.03 * step, np.nan)
    lr = np.minimum(1.0, (step + 1) / 100) * 6e-4
    series = {"loss": Series(step, loss), "grad_norm": Series(step, norm), "lr": Series(step, lr)}
    return RunView("llmc", series=series)


def test_a_run_non_finite_from_its_first_step_is_not_told_to_roll_back() -> None:
    """An llm.c run NaN from step 0 (#32 item 4): there is no finite checkpoint to roll back to and no
    batch to skip, and it did not diverge: it never trained on finite numbers. StabScope says so and
    names what to check (build, kernels, data, initialisation) instead."""
    from stab_core.analysis import outcome, verdict_words

    (incident,) = _analysed(_llmc_like(nan_from=0))
    assert incident["leaf"] == "leaf_nonfinite_from_start" and incident["cause"] == "numerical"
    assert incident["path"][0]["evidence"]["nonfinite_from_first_step"] is True
    actions = incident["actions"]
    assert actions[0].startswith("Do not roll back or skip batches")
    assert not any(a.startswith(("Roll back", "Skip the offending", "Log the fp16 loss scale")) for a in actions)
    assert any("initialisation" in a for a in actions) and any("fp32" in a for a in actions)
    assert verdict_words(incident).startswith("NON-FINITE FROM THE FIRST STEP")
    assert outcome(incident) == "non-finite from the first step"  # the pages' outcome column and headline
    assert "DIVERGED" not in verdict_words(incident)


def test_a_run_that_was_finite_first_keeps_the_precision_fault_and_its_rollback() -> None:
    (incident,) = [d for d in _analysed(_llmc_like(nan_from=150)) if d["metric"] == "loss"]
    assert incident["leaf"] == "leaf_numerical"
    assert incident["path"][0]["evidence"]["nonfinite_from_first_step"] is False
    assert any(
        a.startswith("Roll back to the last checkpoint whose loss and weights are finite") for a in incident["actions"]
    )


def _analysed(view: RunView) -> list[dict[str, Any]]:
    from stab_core.analysis import analyze_run

    return analyze_run(view).spike_dicts()


def _unknown_cause_run(*events: RunEvent, **meta: Any) -> RunView:
    """Loss only (no grad norm, no LR: the tree cannot name a cause), one 3-step spike at 600."""
    rng = np.random.default_rng(11)
    steps = np.arange(1000, dtype=np.int64)
    loss = 3.0 + 0.01 * rng.standard_normal(steps.size)
    loss[600:603] *= 1.6
    return RunView("loss-only", series={"loss": Series(steps, loss)}, events=tuple(events), meta=meta)


def test_a_rerun_from_a_checkpoint_is_said_with_the_checkpoint_it_needs() -> None:
    """Issue #32 item 4: "Re-run from the previous checkpoint" was said on logs that record no save. Said
    plainly only where the run records a checkpoint before the spike; with none recorded, said with the
    condition; with saves recorded only after it, not said. Round 10: with no save read, whether one
    exists cannot be told (a log's save lines are not all read, and the corpus's logs that print saves
    only after the spike made "If a checkpoint ... exists ...: this log records no checkpoint save" false),
    so the re-run is not said at all."""
    (bare,) = _analysed(_unknown_cause_run())
    assert bare["leaf"] == "leaf_unknown"
    assert _check(bare, "checkpoint_before")["holds"] is None
    assert not any("re-run" in a.lower() or "checkpoint" in a.lower() for a in bare["actions"])
    (saved,) = _analysed(_unknown_cause_run(RunEvent(500, "checkpoint")))
    assert _check(saved, "checkpoint_before") == {
        "action": _check(saved, "checkpoint_before")["action"],
        "premise": "checkpoint_before",
        "holds": True,
        "evidence": {"checkpoint_step": 500, "checkpoints_logged": 1},
    }
    assert any(a.startswith("Re-run from the previous checkpoint") for a in saved["actions"])
    (late,) = _analysed(_unknown_cause_run(RunEvent(800, "checkpoint")))
    assert _check(late, "checkpoint_before")["holds"] is False
    assert not any("re-run" in a.lower() for a in late["actions"])
    (every,) = _analysed(_unknown_cause_run(checkpoint_interval_steps=250))
    assert _check(every, "checkpoint_before")["holds"] is True
