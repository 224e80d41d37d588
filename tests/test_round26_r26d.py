"""Round 26, r26d (issue #32: statements whose check is wrong; docs/diagnosis.md, "Rules added in round 26"): the
LR-rise signature read on every logged param group; overfitting's premise checked on every component's training
loss and the total. Synthetic series, no corpus file."""

from __future__ import annotations

import numpy as np

from stab_core.analysis import analyze_run
from stab_core.decision_tree import DECISION_TREE
from stab_core.findings import run_findings
from stab_core.lr_groups import is_param_group_lr, other_lr_groups
from stab_core.runview import RunView, Series
from stab_core.tree_walk import NodeResult, NodeVisit, leaf_title, walk_path

EPOCHS = np.arange(0, 50, dtype=np.int64)


def _finetune_view() -> RunView:
    """A YOLOv5 fine-tune's results.csv: the bias group ``lr`` (x/lr0) warms *down* 0.07 -> 0.0095 while the weight
    groups x/lr1 = x/lr2 ramp 0.0032 -> 0.0096 (epoch 2), then decay linearly; val/cls_loss blows up from epoch 3
    (2.5-8x) and is back at 15; the training loss falls slowly from an already trained model."""
    weights = np.where(EPOCHS <= 2, 0.0032 * (EPOCHS + 1), 0.00946 * (1.0 - (EPOCHS - 3) / 60.0))
    bias = weights.copy()
    bias[:3] = [0.0708, 0.0406, 0.0104]
    cls = np.full(EPOCHS.size, 0.00092) * (1.0 - EPOCHS / 200.0)
    cls[2:15] = [0.0014, 0.0025, 0.0033, 0.0024, 0.0075, 0.0017, 0.0016, 0.0014, 0.0013, 0.0015, 0.0048, 0.0014, 0.0021]
    box = 0.033 * (1.0 - EPOCHS / 300.0)
    train = 0.06 * (1.0 - EPOCHS / 150.0)
    series = {
        "loss": Series(EPOCHS, train),
        "val/cls_loss": Series(EPOCHS, cls),
        "val/box_loss": Series(EPOCHS, box),
        "lr": Series(EPOCHS, bias),
        "x/lr1": Series(EPOCHS, weights.copy()),
        "x/lr2": Series(EPOCHS, weights.copy()),
    }
    return RunView("yolov5-finetune", series, {})


def test_numbered_param_group_lrs_under_a_namespace_are_lr_groups() -> None:
    assert is_param_group_lr("x/lr1") and is_param_group_lr("lr/pg2") and is_param_group_lr("lr")
    assert not is_param_group_lr("x/lr_scale_factor") and not is_param_group_lr("train/box_loss")
    assert not is_param_group_lr("lr_scale") and is_param_group_lr("lr-SGD/pg1") and is_param_group_lr("lr_1")
    assert [name for name, _ in other_lr_groups(_finetune_view().series)] == ["x/lr1", "x/lr2"]


def test_a_warm_up_the_weight_groups_climb_is_read_while_the_bias_group_falls() -> None:
    [spike] = [s for s in analyze_run(_finetune_view()).spikes if s.incident and "val/cls_loss" in s.incident.metrics]
    node = next(v for v in spike.diagnosis.path if v.node == "lr_transition")
    assert node.answer == "yes" and node.evidence["lr_group"] == "x/lr1"
    cause = next(c for c in spike.to_dict()["claims"] if c["kind"] == "cause")["text"]
    # the LR's rise is said as a candidate cause, naming the group that rose; not "Cause unknown"
    assert "LR's rise" in cause and "x/lr1" in cause and not cause.startswith("Cause unknown")


def test_one_group_logged_alone_reads_as_before() -> None:
    view = _finetune_view()
    bias_only = RunView("bias", {k: v for k, v in view.series.items() if not k.startswith("x/")}, {})
    [spike] = [s for s in analyze_run(bias_only).spikes if s.incident and "val/cls_loss" in s.incident.metrics]
    node = next(v for v in spike.diagnosis.path if v.node == "lr_transition")
    assert node.answer == "no" and "lr_group" not in node.evidence


def _parts(val_box_rises_with_train: bool) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """A detector's results.csv over 117 epochs: val/dfl_loss climbs 0.84 -> ~1.05 after epoch 3 while train/dfl_loss
    falls 1.19 -> 0.88; val/box_loss 0.52 -> ~0.75 with its big step at epochs 17-25. ``val_box_rises_with_train``: the
    training box loss rises over those same epochs (a warm-up pushing a fine-tuned model off its minimum), else it
    keeps falling (a model learning its training set)."""
    steps = np.arange(0, 117, dtype=np.int64)
    wobble = 0.01 * np.sin(steps * 1.7)
    t = steps.astype(float)
    val_dfl = np.where(t < 3, 0.95 - 0.035 * t, 0.84 + 0.21 * (1.0 - np.exp(-(t - 3) / 12.0))) + wobble
    train_dfl = 0.88 + 0.31 * np.exp(-t / 10.0) + wobble
    val_box = np.where(t < 17, 0.52 + 0.006 * t, np.where(t < 25, 0.62 + 0.03 * (t - 17), 0.85 - 0.001 * (t - 25)))
    val_box = val_box + wobble
    train_box = 0.6 * np.exp(-t / 3.0) + 0.6 - 0.0004 * t + wobble
    if val_box_rises_with_train:
        train_box = train_box + np.where((t >= 17) & (t < 35), 0.15, 0.0)
    train_cls = 4.0 * np.exp(-t / 6.0) + 0.4 + wobble
    val_cls = 4.0 * np.exp(-t / 6.0) + 0.5 + wobble
    series = {
        "val/dfl_loss": val_dfl,
        "train/dfl_loss": train_dfl,
        "val/box_loss": val_box,
        "train/box_loss": train_box,
        "val/cls_loss": val_cls,
        "train/cls_loss": train_cls,
        "loss": train_box + train_cls + train_dfl,
    }
    return {name: (steps, np.asarray(values, np.float64)) for name, values in series.items()}


def test_a_validation_rise_that_comes_with_a_training_rise_is_no_overfitting() -> None:
    assert run_findings(_parts(val_box_rises_with_train=True))["overfitting"] is None
    found = run_findings(_parts(val_box_rises_with_train=False))["overfitting"]
    assert found is not None  # the same val losses beside training losses that keep falling: overfitting


def _nan_loss_view(meta: dict[str, object]) -> RunView:
    """A loss falling 3 -> 2 over 400 steps that goes NaN for 3 samples at 300 and comes back; no loss scale logged."""
    steps = np.arange(0, 400, 2, dtype=np.int64)
    loss = 3.0 - steps / 400.0 + 0.02 * np.sin(steps * 0.7)
    loss[150:153] = np.nan
    return RunView("nan", {"loss": Series(steps, loss)}, meta=meta)


def _said_actions(view: RunView) -> list[str]:
    [spike] = [s for s in analyze_run(view).spikes if s.incident and s.incident.start >= 290]
    return list(spike.diagnosis.actions)


def test_the_fp16_loss_scale_is_asked_for_only_where_the_run_is_known_to_train_in_fp16() -> None:
    unknown = _said_actions(_nan_loss_view({}))
    assert not any("loss scale" in a for a in unknown)  # the precision is not known: record it first
    assert any(a.startswith("Record the run's precision") for a in unknown)
    assert any(a.startswith("Log the fp16 loss scale") for a in _said_actions(_nan_loss_view({"precision": "fp16"})))
    assert not any("loss scale" in a for a in _said_actions(_nan_loss_view({"precision": "bf16"})))


def test_a_warm_up_s_end_is_said_as_the_rise_to_its_peak_never_as_an_lr_jump() -> None:
    leaf = DECISION_TREE.leaf("leaf_lr_transition")
    numerical = NodeVisit("numerical", 1, "?", "no", {})
    warmup = NodeVisit("lr_transition", 2, "?", "yes", {"transition_kind": "warmup_end", "lr_group": "lr/pg1"})
    title = leaf_title(leaf, [numerical, warmup])
    assert "LR jump" not in title and "warm-up peak" in title and "lr/pg1" in title
    walked = walk_path(
        DECISION_TREE,
        lambda node: (
            NodeResult("no", {})
            if node.number == 1
            else NodeResult("yes", {"transition_kind": "warmup_end", "lr_rose": True})
        ),
        recovered=True,
        unknown_penalty=1.0,
        read_premises=None,
    )
    assert walked.leaf == "leaf_lr_transition" and "LR jump" not in walked.summary
    restart = NodeVisit("lr_transition", 2, "?", "yes", {"transition_kind": "cycle_restart"})
    assert leaf_title(leaf, [numerical, restart]) == leaf.title  # a restart's jump keeps its name
