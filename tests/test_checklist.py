"""The pre-flight checklist: each item's pass / fail / unknown logic, run facts, and the Markdown."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from stab_core.checklist import (
    CHECKLIST,
    CONFIG_KEYS,
    RUN_FACT_KEYS,
    ItemResult,
    checklist_markdown,
    evaluate_checklist,
    failing_p0,
)
from stab_core.checklist_facts import run_facts
from stab_core.runview import RankMatrix, RunView, Series

GOOD_DENSE: dict[str, Any] = {
    "total_steps": 100_000,
    "warmup_steps": 2000,
    "peak_lr": 3e-4,
    "min_lr_ratio": 0.1,
    "num_cycles": 3,
    "restart_warmup_steps": 600,
    "max_norm": 1.0,
    "precision": "bf16",
    "fp32_master_weights": True,
    "nan_check": True,
    "checkpoint_interval_steps": 500,
    "checkpoint_write_s": 300.0,
    "step_time_s": 10.0,
    "gpus": 2048,
    "restore_rehearsed": True,
    "num_experts": 1,
    "per_rank_metrics_logged": True,
    "batch_provenance_logged": True,
}
GOOD_FACTS: dict[str, Any] = {"clip_ratio_logged": True, "clip_ratio": 0.02, "per_rank_metrics": True}


def by_id(results: list[ItemResult]) -> dict[str, ItemResult]:
    return {r.id: r for r in results}


def test_eight_items_p0_then_p1_each_with_why_and_how() -> None:
    assert [i.id for i in CHECKLIST] == [
        "warmup",
        "grad_clipping",
        "min_lr_ratio",
        "checkpoint_interval",
        "nonfinite_guard",
        "restart_warmup",
        "moe_router",
        "per_rank_provenance",
    ]
    assert [i.priority for i in CHECKLIST] == ["P0"] * 5 + ["P1"] * 3
    for item in CHECKLIST:
        assert item.why.endswith(".") and item.why.count(". ") == 0, item.id
        assert item.title and item.how_to_check


def test_a_good_dense_config_passes_everything() -> None:
    results = evaluate_checklist(GOOD_DENSE, GOOD_FACTS)
    statuses = {r.id: r.status for r in results}
    assert statuses == dict.fromkeys(statuses, "pass")
    assert by_id(results)["moe_router"].applicable is False
    assert failing_p0(results) == []


def test_no_config_no_metrics_leaves_everything_for_the_user() -> None:
    results = evaluate_checklist(None, None)
    assert {r.status for r in results} == {"unknown"}
    assert all(r.evidence for r in results)


def grade(item: str, config: dict[str, Any], facts: dict[str, Any] | None = None) -> ItemResult:
    return by_id(evaluate_checklist(config, facts))[item]


@pytest.mark.parametrize(
    ("warmup", "total", "status"),
    [(0, 1000, "fail"), (2000, 100_000, "pass"), (400, 1000, "fail"), (250, 1000, "pass"), (100, None, "pass")],
)
def test_warmup_length_vs_total_steps(warmup: int, total: int | None, status: str) -> None:
    result = grade("warmup", {"warmup_steps": warmup, "total_steps": total})
    assert result.status == status
    if total:
        assert f"{100 * warmup / total:.2f} %" in result.evidence[0] or warmup == 0


def test_warmup_read_from_the_run_when_the_config_is_silent() -> None:
    assert grade("warmup", {}, {"warmup_steps": 500, "total_steps": 10_000}).status == "pass"


@pytest.mark.parametrize(
    ("max_norm", "logged", "status"),
    [(1.0, True, "pass"), (0.0, True, "fail"), (50.0, True, "fail"), (1.0, False, "fail"), (1.0, None, "unknown")],
)
def test_clipping_needs_sane_max_norm_and_a_logged_ratio(max_norm: float, logged: bool | None, status: str) -> None:
    facts = {} if logged is None else {"clip_ratio_logged": logged}
    assert grade("grad_clipping", {"max_norm": max_norm}, facts).status == status


def test_saturated_clipping_fails_the_clipping_item() -> None:
    result = grade("grad_clipping", {"max_norm": 1.0}, {"clip_ratio_logged": True, "clip_ratio": 0.8})
    assert result.status == "fail"
    assert any("80 %" in e for e in result.evidence)


@pytest.mark.parametrize(
    ("config", "status"),
    [
        ({"min_lr_ratio": 0.1}, "pass"),
        ({"min_lr_ratio": 0.0}, "fail"),
        ({"min_lr": 3e-5, "peak_lr": 3e-4}, "pass"),
        ({"min_lr": 1e-7, "peak_lr": 3e-4}, "fail"),
        ({}, "unknown"),
    ],
)
def test_min_lr_ratio(config: dict[str, Any], status: str) -> None:
    assert grade("min_lr_ratio", config).status == status


def test_checkpoint_interval_against_daly() -> None:
    base = {"checkpoint_write_s": 600.0, "step_time_s": 12.0, "gpus": 6144, "restore_rehearsed": True}
    # MTBF at 6,144 GPUs = 3.09 h x 16384/6144 = 8.25 h; Daly for a 10 min write = 1.55 h = 465 steps.
    good = grade("checkpoint_interval", {**base, "checkpoint_interval_steps": 500})
    assert good.status == "pass"
    assert "1.55 h" in good.evidence[0] and "8.25 h" in good.evidence[0]
    too_long = grade("checkpoint_interval", {**base, "checkpoint_interval_steps": 2000})
    assert too_long.status == "fail"
    assert "3.33 h redone per failure" in too_long.evidence[1]
    too_short = grade("checkpoint_interval", {**base, "checkpoint_interval_steps": 100})
    assert too_short.status == "fail"


def test_checkpoint_interval_unknown_until_restore_rehearsed() -> None:
    config = {"checkpoint_interval_steps": 500, "checkpoint_write_s": 600.0, "step_time_s": 12.0, "gpus": 6144}
    assert grade("checkpoint_interval", config).status == "unknown"
    assert grade("checkpoint_interval", {**config, "restore_rehearsed": False}).status == "fail"
    assert grade("checkpoint_interval", {"checkpoint_enabled": False}).status == "fail"
    missing = grade("checkpoint_interval", {"checkpoint_interval_steps": 500})
    assert "checkpoint_write_s" in missing.evidence[0]


@pytest.mark.parametrize(
    ("config", "facts", "status"),
    [
        ({"precision": "bf16", "nan_check": True}, {}, "pass"),
        ({"precision": "bf16", "fp32_master_weights": False, "nan_check": True}, {}, "fail"),
        ({"precision": "fp16", "loss_scale_mode": "static", "nan_check": True}, {}, "fail"),
        ({"precision": "fp16", "loss_scale_mode": "dynamic"}, {"nonfinite_guard_logged": True}, "pass"),
        ({"precision": "fp16", "loss_scale_mode": "dynamic", "nan_check": False}, {}, "fail"),
        ({"precision": "bf16"}, {}, "unknown"),
    ],
)
def test_nonfinite_guard(config: dict[str, Any], facts: dict[str, Any], status: str) -> None:
    assert grade("nonfinite_guard", config, facts).status == status


@pytest.mark.parametrize(
    ("config", "facts", "status"),
    [
        ({"num_cycles": 3, "warmup_steps": 2000, "restart_warmup_steps": 500}, {}, "pass"),
        ({"num_cycles": 3, "warmup_steps": 2000, "restart_warmup_steps": 0}, {}, "fail"),
        ({"num_cycles": 3, "warmup_steps": 2000, "restart_warmup_steps": 1500}, {}, "fail"),
        ({"num_cycles": 8, "warmup_steps": 2000, "restart_warmup_steps": 500}, {}, "fail"),
        ({"num_cycles": 1}, {}, "pass"),
        ({"num_cycles": 1, "transition_steps": [3000], "warmup_steps": 300, "restart_warmup_steps": 100}, {}, "pass"),
        ({"num_cycles": 1}, {"max_lr_jump": 9.0, "max_lr_jump_step": 3000}, "fail"),
        ({}, {}, "unknown"),
    ],
)
def test_restart_warmup(config: dict[str, Any], facts: dict[str, Any], status: str) -> None:
    assert grade("restart_warmup", config, facts).status == status


def test_hard_lr_jump_in_the_data_names_its_step() -> None:
    result = grade("restart_warmup", {}, {"max_lr_jump": 9.0, "max_lr_jump_step": 3000})
    assert result.status == "fail"
    assert "900 %" in result.evidence[0] and "3,000" in result.evidence[0]


@pytest.mark.parametrize(
    ("config", "facts", "status"),
    [
        ({"num_experts": 64, "router_z_loss_coeff": 1e-3}, {"expert_load_logged": True}, "pass"),
        ({"num_experts": 64, "router_bias_balancing": True}, {"expert_load_logged": True}, "pass"),
        (
            {"num_experts": 64, "router_aux_loss_coeff": 1e-2, "router_z_loss_coeff": 0.0},
            {"expert_load_logged": True},
            "fail",
        ),
        ({"num_experts": 64, "router_z_loss_coeff": 1e-3}, {"expert_load_logged": False}, "fail"),
        ({"num_experts": 64}, {}, "unknown"),
        ({"num_experts": 1}, {}, "pass"),
    ],
)
def test_moe_router(config: dict[str, Any], facts: dict[str, Any], status: str) -> None:
    assert grade("moe_router", config, facts).status == status


def test_per_rank_and_provenance() -> None:
    assert grade("per_rank_provenance", {"batch_provenance_logged": True}, {"per_rank_metrics": True}).status == "pass"
    assert grade("per_rank_provenance", {}, {"per_rank_metrics": False}).status == "fail"
    assert grade("per_rank_provenance", {}, {"per_rank_metrics": True}).status == "unknown"


def test_bad_inputs_raise_clear_errors() -> None:
    with pytest.raises(ValueError, match="max_norm must be a number"):
        evaluate_checklist({"max_norm": "one"}, None)
    with pytest.raises(ValueError, match="unknown config keys"):
        evaluate_checklist({"clip_grad": 1.0}, None)


def test_key_lists_name_every_key_the_graders_read() -> None:
    assert "max_norm" in CONFIG_KEYS and "key_sources" in CONFIG_KEYS
    assert set(GOOD_FACTS) <= set(RUN_FACT_KEYS)


def test_evidence_names_the_source_key() -> None:
    result = grade("grad_clipping", {"max_norm": 1.0, "key_sources": {"max_norm": "clip_grad"}}, {})
    assert "(from clip_grad)" in result.evidence[0]


def test_markdown_verdict_and_task_list() -> None:
    config = {**GOOD_DENSE, "min_lr_ratio": 0.0}
    del config["restore_rehearsed"]
    text = checklist_markdown(evaluate_checklist(config, GOOD_FACTS), title="Launch review")
    assert text.startswith("# Launch review\n")
    assert "**Verdict: NOT READY: 1 P0 item(s) fail (min_lr_ratio).**" in text
    assert "- [ ] **LR floor above zero (min_lr_ratio > 0)** (`min_lr_ratio`): FAIL" in text
    assert "- [x] **Warmup configured** (`warmup`): PASS" in text
    assert "(`checkpoint_interval`): TO CHECK (tick by hand)" in text
    assert "(`moe_router`): PASS (not applicable)" in text
    assert text.count("  - Why: ") == 8
    ready = checklist_markdown(evaluate_checklist(GOOD_DENSE, GOOD_FACTS))
    assert "**Verdict: READY: every P0 item passes.**" in ready


def make_view(lr: np.ndarray, grad_norm: np.ndarray, *, per_rank: bool) -> RunView:
    steps = np.arange(lr.size, dtype=np.int64)
    series = {
        "lr": Series(steps, lr),
        "grad_norm": Series(steps, grad_norm),
        "loss": Series(steps, np.where(steps == 700, np.nan, 3.0)),
        "step_time_s": Series(steps, np.full(lr.size, 2.5)),
    }
    matrices = {}
    if per_rank:
        values = np.ones((4, lr.size))
        matrices["grad_norm_local"] = RankMatrix(np.arange(4), steps, values, np.ones_like(values, dtype=bool))
    return RunView("t", series=series, per_rank=matrices, meta={"max_norm": 1.0, "gpus": 64})


def test_run_facts_from_a_run_with_a_hard_lr_jump() -> None:
    steps = np.arange(1000)
    lr = np.where(steps < 100, steps / 100, np.where(steps < 600, 1.0 - 0.9 * (steps - 100) / 500, 1.0))
    grad_norm = np.where(steps % 4 == 0, 2.0, 0.5)  # a quarter of the steps above max_norm 1.0
    facts = run_facts(make_view(lr, grad_norm, per_rank=True))
    assert facts["max_lr_jump"] == pytest.approx(9.0, rel=0.02)
    assert facts["max_lr_jump_step"] == 600
    assert facts["warmup_steps"] == 100
    assert facts["clip_ratio"] == pytest.approx(0.25, abs=0.01)
    assert facts["clip_ratio_logged"] is True
    assert facts["per_rank_metrics"] is True
    assert facts["expert_load_logged"] is False
    assert facts["nonfinite_steps"] == 1
    assert facts["total_steps"] == 1000
    assert facts["step_time_s"] == 2.5
    assert facts["gpus"] == 64
    assert set(facts) <= set(RUN_FACT_KEYS)
    assert by_id(evaluate_checklist(None, facts))["restart_warmup"].status == "fail"


def test_run_facts_on_a_smooth_schedule_without_per_rank_data() -> None:
    steps = np.arange(1000)
    lr = np.minimum(steps / 100, 1.0) * (1 - 0.5 * steps / 1000)
    facts = run_facts(make_view(lr, np.full(1000, 0.3), per_rank=False))
    assert facts["max_lr_jump"] == 0.0
    assert facts["per_rank_metrics"] is False
    assert facts["clip_ratio"] == 0.0


@pytest.mark.parametrize(
    ("config", "end", "status"),
    [
        ({}, 0.0, "fail"),  # llm.c-like: the logged LR decays to 0, which answers the item with no config
        ({"min_lr_ratio": 0.1}, 0.0, "fail"),  # the data beats a config that claims a floor
        ({}, 0.1, "unknown"),  # ends at 10 % of its peak: no config floor to compare, tick by hand
        ({"min_lr_ratio": 0.1}, 0.1, "pass"),
        ({"min_lr_ratio": 0.0}, 0.1, "fail"),  # a config floor of 0 fails even before the run gets there
    ],
)
def test_lr_floor_answered_from_the_logged_lr(config: dict[str, Any], end: float, status: str) -> None:
    steps = np.arange(1000)
    peak = 6e-4
    lr = peak * np.where(steps < 100, steps / 100, 1 - (1 - end) * (steps - 100) / 899)
    facts = run_facts(make_view(lr, np.full(1000, 0.3), per_rank=False))
    assert facts["lr_peak"] == pytest.approx(peak) and facts["lr_floor_step"] == 999
    assert facts["lr_floor_ratio"] == pytest.approx(end, abs=1e-12)
    result = by_id(evaluate_checklist(config, facts))["min_lr_ratio"]
    assert result.status == status
    assert f"the logged LR ends at {end:.3g} x its peak 0.0006 (step 999)" in " ".join(result.evidence)
