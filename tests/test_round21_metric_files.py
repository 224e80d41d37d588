"""Issue #31 (docs/diagnosis.md, "Import: settings and counters"): metric files, JSON histories and HF dicts read wrong,
on synthetic files (own numbers): a wide record's per-layer diagnostics, a total loss over a term the alias table calls
the loss, a clock named with its unit, a flat statistic of a distribution, an episode counter, a namespaced policy
loss, a second HF session whose epoch starts again, the first param group's LR, and the scorer reading a
golden's metric name through the naming rules."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from bench.corpus_eval import LogScore, score_import
from ingest.formats import read_log
from ingest.formats.field_roles import DIAGNOSTICS_KEY, WIDE_RUN, diagnostic_fields, moved_fields
from stab_core.metrics import missing_reason, policy_loss_of


def _write(path: Path, lines: list[str]) -> Path:
    path.write_text("\n".join(lines) + "\n")
    return path


def _jsonl(path: Path, records: list[dict[str, object]]) -> Path:
    return _write(path, [json.dumps(r) for r in records])


def _wide_record(step: int) -> dict[str, object]:
    rec: dict[str, object] = {
        "step": step,
        "loss": 5.0 / (1 + step / 100),
        "lr": 1e-4,
        "grad_norm": 0.5 + step % 3 / 10,
    }
    rec["tokens_per_sec"] = 20000.0 + step
    rec["active_blocks"] = 4 if step < 200 else 8
    for layer in range(1, 21):  # per-layer values: a family of 20 indexed fields
        rec[f"attn_delta_layer_{layer}"] = 1.0 + layer / 10 + step / 1000
        rec[f"mlp_delta_layer_{layer}"] = 2.0 + layer / 10 - step / 1000
    for stat in ("mean", "std", "max"):  # statistics of an internal quantity
        rec[f"router_confidence_{stat}"] = 0.3 + step / 5000
    rec["val_avg_sparsity"] = 0.1 + step / 9000
    return rec


def test_a_wide_records_per_layer_values_and_statistics_are_diagnostics(tmp_path: Path) -> None:
    parsed = read_log([_jsonl(tmp_path / "train.jsonl", [_wide_record(s) for s in range(25, 500, 25)])])
    assert {"loss", "lr", "grad_norm", "throughput_tok_s", "active_blocks"} <= set(parsed.metrics)
    assert not [m for m in parsed.metrics if "layer" in m or "router" in m or "sparsity" in m], parsed.metrics
    kept = parsed.meta[DIAGNOSTICS_KEY]
    assert "attn_delta_layer_7" in kept and "router_confidence_std" in kept and "val_avg_sparsity" in kept
    assert kept["attn_delta_layer_1"] == pytest.approx(1.1 + 475 / 1000)  # the last value, under its own name


def test_a_narrow_record_keeps_its_statistics_and_indexed_fields() -> None:
    names = ["loss", "lr", "reward_std", "completions/mean_length", "beta_1", "beta_2", "beta_3"]
    assert len(names) < WIDE_RUN and diagnostic_fields(names) == []
    wide = [*names, *(f"head_entropy_{i}" for i in range(60)), "grad_norm_max", "val_loss_mean"]
    found = diagnostic_fields(wide)
    assert "beta_2" in found and "reward_std" not in found and "head_entropy_0" not in found  # a training word
    assert "grad_norm_max" not in found and "val_loss_mean" not in found and "loss" not in found


def test_a_total_loss_over_its_terms_is_the_loss_where_the_alias_loss_is_a_term(tmp_path: Path) -> None:
    records = [
        {
            "step": s,
            "lm_loss": 3.0 - s / 100,
            "aux_loss": 0.2,
            "distill_loss": 0.1 + s / 1000,
            "total_loss": 3.4 - s / 100,
        }
        for s in range(10, 110, 10)
    ]
    parsed = read_log([_jsonl(tmp_path / "metrics.jsonl", records)])
    assert parsed.series("loss")[1][0] == pytest.approx(3.3)  # total_loss: what the optimizer steps on
    assert parsed.series("lm_loss")[1][0] == pytest.approx(2.9)  # the term keeps its own name
    # a plain loss beside them stays the loss
    plain = [{**r, "loss": 1.0} for r in records]
    assert read_log([_jsonl(tmp_path / "plain.jsonl", plain)]).series("loss")[1][0] == pytest.approx(1.0)


def test_a_clock_named_with_its_unit_gives_the_step_time(tmp_path: Path) -> None:
    records = [{"step": s, "wall_s": 4.0 + 2.0 * s, "loss": 1.0 / (1 + s)} for s in range(0, 200, 20)]
    parsed = read_log([_jsonl(tmp_path / "train_log.jsonl", records)])
    assert "wall_s" not in parsed.metrics
    steps, values = parsed.series("step_time_s")
    assert steps.tolist()[0] == 20 and values == pytest.approx(np.full(9, 2.0))
    unix = [{"step": s, "wall_s": 1.7e9 + 2.0 * s, "loss": 1.0} for s in range(0, 200, 20)]
    assert "step_time_s" not in read_log([_jsonl(tmp_path / "unix.jsonl", unix)]).metrics


def test_a_flat_statistic_is_a_measure_and_an_episode_counter_is_progress() -> None:
    flat = np.zeros(20)
    moved = moved_fields({"clip_ratio/low_mean": flat, "completions/min_length": flat + 2, "eps": flat})
    assert set(moved) == {"eps"}  # a setting; the statistics stay series
    assert "gpu_mem_max_gb" in moved_fields({"gpu_mem_max_gb": flat + 7.5})  # a memory peak: a budget, flat
    assert "episode" in moved_fields({"episode": np.arange(4.0, 84.0, 4.0)})


def test_a_namespaced_policy_loss_is_the_runs_policy_loss() -> None:
    names = ["loss/policy_avg", "loss/value_avg", "objective/kl", "lr"]
    assert policy_loss_of(names) == "loss/policy_avg"
    assert "policy loss (loss/policy_avg)" in missing_reason("loss", names)
    assert policy_loss_of(["loss/value_avg", "policy/entropy_avg"]) is None


def test_a_second_hf_session_whose_epoch_starts_again_is_a_run(tmp_path: Path) -> None:
    lines = []
    for i in range(1, 13):
        lines.append(f"{{'loss': {3.0 - i / 20:.4f}, 'grad_norm': 0.2, 'learning_rate': 5e-4, 'epoch': {i / 100}}}")
        lines.append(f"{{'eval_loss': {3.1 - i / 20:.4f}, 'eval_runtime': 1.1, 'epoch': {i / 100}}}")
    for i in range(8):  # the file's next session: its epoch starts at ~0, below the first run's first
        lines.append(
            f"{{'loss': {2.7 - i / 30:.4f}, 'grad_norm': 0.1, 'learning_rate': 2.5e-5, 'epoch': {i / 87 + 2e-5}}}"
        )
    parsed = read_log([_write(tmp_path / "log_2024", lines)])
    assert len(parsed.segments) == 1
    assert parsed.series("loss")[0].tolist() == list(range(1, 13))
    assert parsed.segments[0].series("loss")[1][0] == pytest.approx(2.7)


def test_a_resume_whose_epoch_goes_back_but_not_below_the_first_is_one_run(tmp_path: Path) -> None:
    lines = [f"{{'loss': {3.0 - i / 20:.4f}, 'learning_rate': 5e-4, 'epoch': {i / 10}}}" for i in range(1, 11)]
    lines += [f"{{'loss': {2.6 - i / 20:.4f}, 'learning_rate': 5e-4, 'epoch': {i / 10}}}" for i in range(6, 15)]
    assert read_log([_write(tmp_path / "resumed.log", lines)]).segments == []


def test_the_first_param_group_is_the_runs_lr(tmp_path: Path) -> None:
    rows = ["epoch,train/box_loss,train/cls_loss,lr/pg0,lr/pg1,lr/pg2"]
    rows += [
        f"{e},{1.5 - e / 20:.3f},{2.0 - e / 10:.3f},{0.09 - e / 100:.4f},{0.001 * e:.4f},{0.001 * e:.4f}"
        for e in range(1, 8)
    ]
    parsed = read_log([_write(tmp_path / "results.csv", rows)])
    assert parsed.series("lr")[1][0] == pytest.approx(0.08)  # pg0, not the two groups that agree
    assert "lr/pg1" in parsed.metrics


def test_the_scorer_reads_a_golden_metric_by_its_canonical_name() -> None:
    golden = {
        "import": {
            "runs": [
                {
                    "metrics": ["loss", "tokens_per_s"],
                    "metrics_like": ["num_tokens"],
                    "records_metric": "loss",
                    "records": 3,
                    "first": {"tokens_per_s": 100.0},
                    "last": {},
                }
            ]
        }
    }
    steps = np.arange(3)
    series = {
        "loss": (steps, np.ones(3)),
        "throughput_tok_s": (steps, np.full(3, 100.0)),
        "tokens": (steps, steps * 1.0),
    }
    result = LogScore("synthetic")
    score_import(result, golden, [{"run": "r", "series": series, "events": []}])
    assert result.import_faults == {}, result.import_faults
