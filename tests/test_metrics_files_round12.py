"""Metrics files the readers refused (issue #31; docs/diagnosis.md, "Import: metrics files"): a Lightning
``metrics.csv`` with dense rows (a near-tie with the wide CSV reader), a CSV with padded column names (Ultralytics
``results.csv``), and a JSON document that holds its log as a nested list of per-step objects (PEFT's method
comparison)."""

from __future__ import annotations

import json
from pathlib import Path

from ingest.formats import detect, read_log


def test_dense_lightning_metrics_csv_is_read_not_refused(tmp_path: Path) -> None:
    # CSVLogger with one training key logged on step only: dense rows, no _step/_epoch suffix
    path = tmp_path / "metrics.csv"
    path.write_text("epoch,loss,step\n0,2.5,49\n0,2.4,99\n1,2.3,149\n")
    assert detect([path])[0][0] == "lightning_csv"
    log = read_log([path])
    assert log.format == "lightning_csv"
    assert log.step_range == (49, 149)


def test_padded_csv_header_is_trimmed(tmp_path: Path) -> None:
    # Ultralytics results.csv: right-aligned names and cells, a whole-number epoch as the only counter
    path = tmp_path / "results.csv"
    path.write_text(
        "      epoch,  train/box_loss,   train/cls_loss,   val/box_loss\n"
        "          0,          1.6878,           3.3859,          2.335\n"
        "          1,           1.267,           1.9629,         2.2896\n"
        "          2,          1.1897,           1.7105,         1.9873\n"
    )
    log = read_log([path])
    assert log.step_range == (0, 2)
    assert {"train/box_loss", "train/cls_loss", "val/box_loss"} <= set(log.metrics)
    assert "epoch" not in log.metrics


def _peft_like(tmp_path: Path) -> Path:
    steps = [{"step": s, "loss": 1.0 / s, "grad_norm": 0.1 * s, "learning_rate": 4e-5} for s in (5, 10, 15)]
    steps.append({"train_runtime": 67.0, "train_loss": 0.2, "step": 15})  # the trainer's summary
    doc = {
        "run_info": {"total_time": 100.0, "train_config": {"max_steps": 15, "lr": 4e-5}},
        "train_info": {"status": "success", "train_time": 67.0, "metrics": steps},
        "meta_info": {"package_info": {"torch": "2.8"}},
    }
    path = tmp_path / "method--run.json"
    path.write_text(json.dumps(doc, indent=2))
    return path


def test_json_document_with_a_nested_list_of_step_objects_is_read_like_json_lines(tmp_path: Path) -> None:
    path = _peft_like(tmp_path)
    log = read_log([path])
    assert log.format == "jsonl"
    assert log.step_range == (5, 15)
    assert {"loss", "grad_norm", "lr"} <= set(log.metrics)
    assert "total_time" not in log.metrics and "train_time" not in log.metrics
    assert log.meta["train_summary"]["train_runtime"] == 67.0


def test_json_document_without_step_objects_is_not_taken(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"model": {"hidden": 512, "layers": [1, 2, 3]}, "lr": 3e-4}, indent=2))
    assert "jsonl" not in [name for name, _ in detect([path])]
