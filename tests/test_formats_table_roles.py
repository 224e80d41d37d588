"""Issue #31 (docs/diagnosis.md, "Import: metrics files"): the roles of table columns that are not plain metrics, on
synthetic files in the layouts the trainers and tools write (own numbers): counters are axes, one param group's lr is
the run's lr, ``(B)`` is bytes only on memory, a sweep table holds one run per column."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from ingest.formats import detect, read_log
from ingest.formats.aliases import canonical_name
from ingest.formats.csv_sweep import metric_of, sweep_setting


def _write(path: Path, lines: list[str]) -> Path:
    path.write_text("\n".join(lines) + "\n")
    return path


def test_lightning_epoch_column_is_an_axis_not_a_metric(tmp_path: Path) -> None:
    path = _write(
        tmp_path / "metrics.csv", ["epoch,step,val_loss"] + [f"{e},{100 * e + 99},{1.0 - e / 50}" for e in range(6)]
    )
    parsed = read_log([path])
    assert parsed.format == "lightning_csv"
    assert parsed.metrics == ["val_loss"]
    assert parsed.series("val_loss")[0].tolist() == [99, 199, 299, 399, 499, 599]


def test_an_epoch_column_beside_the_step_is_no_metric_in_a_plain_csv(tmp_path: Path) -> None:
    path = _write(
        tmp_path / "train.csv", ["iteration,epoch,loss"] + [f"{i},{i // 4},{3 - i / 10}" for i in range(1, 9)]
    )
    assert read_log([path]).metrics == ["loss"]


def test_keras_csvlogger_epoch_is_the_axis(tmp_path: Path) -> None:
    rows = [f"{e},{0.5 + e / 20},{2.0 - e / 10},{0.5 + e / 25},{2.1 - e / 12}" for e in range(5)]
    path = _write(tmp_path / "training.log", ["epoch,accuracy,loss,val_accuracy,val_loss", *rows])
    parsed = read_log([path])
    assert "epoch" not in parsed.metrics and {"loss", "val_loss"} <= set(parsed.metrics)
    assert parsed.series("loss")[0].tolist() == [0, 1, 2, 3, 4]


YOLO_HEADER = (
    "epoch,train/box_loss,train/cls_loss,train/dfl_loss,metrics/precision(B),metrics/recall(B),"
    "metrics/mAP50(B),metrics/mAP50-95(B),val/box_loss,val/cls_loss,val/dfl_loss,lr/pg0,lr/pg1,lr/pg2"
)


def _yolo(tmp_path: Path) -> Path:
    rows = []
    for e in range(6):
        bias = 0.09 - 0.015 * e if e < 3 else 0.001 * (6 - e)  # the bias group's own warm-up
        weights = 0.0005 * (e + 1) if e < 3 else 0.001 * (6 - e)
        rows.append(
            f"{e:>20},{1.5 - e / 20:>12},{3.0 - e / 5:>12},{2.0 - e / 30:>12},{0.2 + e / 20:>12},{0.25 + e / 20:>12},"
            f"{0.1 + e / 10:>12},{0.05 + e / 20:>12},{2.2 - e / 10:>12},{2.8 - e / 5:>12},{3.1 - e / 10:>12},"
            f"{bias:>12},{weights:>12},{weights:>12}"
        )
    header = ",".join(f"{c:>20}" for c in YOLO_HEADER.split(","))
    return _write(tmp_path / "results.csv", [header, *rows])


def test_yolo_param_group_lrs_give_the_run_one_lr(tmp_path: Path) -> None:
    parsed = read_log([_yolo(tmp_path)])
    assert "epoch" not in parsed.metrics
    # the first param group is the run's lr (the canonical lr; docs/diagnosis.md, "Import: metrics files"), though pg1
    # and pg2 (weights, BN weights) share a schedule and pg0 (biases) warms up from its own value
    assert parsed.series("lr")[1].tolist() == pytest.approx([0.09, 0.075, 0.06, 0.003, 0.002, 0.001])
    assert "lr/pg1" in parsed.metrics and "lr/pg2" in parsed.metrics and "lr/pg0" not in parsed.metrics


def test_yolo_box_suffix_is_a_label_not_bytes(tmp_path: Path) -> None:
    parsed = read_log([_yolo(tmp_path)])
    precision = [m for m in parsed.metrics if "precision" in m]
    assert len(precision) == 1 and not precision[0].endswith("_gb")
    assert parsed.series(precision[0])[1][0] == pytest.approx(0.2)
    assert (canonical_name("peak memory (B)")[1] or "").lower() == "b"  # on memory the letter is still bytes


def test_param_groups_that_never_agree_give_the_first_group(tmp_path: Path) -> None:
    rows = [f"{s},{3 - s / 10},{1e-3 * s},{2e-3 * s}" for s in range(1, 6)]
    path = _write(tmp_path / "run.csv", ["step,loss,lr-AdamW/pg1,lr-AdamW/pg2", *rows])
    parsed = read_log([path])
    assert parsed.series("lr")[1].tolist() == pytest.approx([1e-3 * s for s in range(1, 6)])
    assert any(m.endswith("pg2") for m in parsed.metrics)


def test_sweep_csv_is_one_run_per_column(tmp_path: Path) -> None:
    rows = [f"{4.5 - s / 10:.4f},{4.6 - s / 8:.4f},{4.4 - s / 20:.4f}" for s in range(12)]
    path = _write(
        tmp_path / "learning_rate_error.csv", ["learning_rate_0.001,learning_rate_0.01,learning_rate_0.1", *rows]
    )
    assert detect([path])[0][0] == "csv_sweep"
    parsed = read_log([path])
    runs = [parsed, *parsed.segments]
    assert [r.meta["run_label"] for r in runs] == ["learning_rate_0.001", "learning_rate_0.01", "learning_rate_0.1"]
    assert all(r.metrics == ["loss"] for r in runs)  # an "error" above 1 is no rate: the loss
    assert runs[1].series("loss")[0].tolist() == list(range(1, 13))  # the 1-based row number
    assert runs[2].series("loss")[1][0] == pytest.approx(4.4)


def test_sweep_header_rules() -> None:
    assert sweep_setting(["lr=0.1", "lr=0.3"]) == "lr"
    assert sweep_setting(["seed_1", "seed_2", "seed_3"]) == "seed"
    assert sweep_setting(["loss", "val_loss"]) is None
    assert sweep_setting(["lr_0.1", "lr_0.1"]) is None  # the same value twice is no sweep
    assert sweep_setting(["lr_0.1", "wd_0.1"]) is None

    assert metric_of(Path("seed_val_loss.csv"), "seed", np.array([2.0])) == "val_loss"
    assert metric_of(Path("lr_error.csv"), "lr", np.array([0.3, 0.2])) == "error"  # a rate stays a rate
    assert metric_of(Path("lr.csv"), "lr", np.array([0.3])) == "value"


def test_tensorboard_json_export_is_read(tmp_path: Path) -> None:
    path = tmp_path / "run-train-tag-loss.json"
    path.write_text(json.dumps([[1.7e9 + s, 10 * s, 3.0 - s / 10] for s in range(1, 6)]))
    parsed = read_log([path])
    assert parsed.metrics == ["loss"]
    assert parsed.series("loss")[0].tolist() == [10, 20, 30, 40, 50]


def test_sacred_metrics_json_is_one_series_per_name(tmp_path: Path) -> None:
    stamps = [f"2024-03-0{d}T10:00:00.000000" for d in range(1, 5)]
    doc = {
        "training.loss": {"steps": [0, 10, 20, 30], "values": [2.5, 2.25, 2.0, 1.75], "timestamps": stamps},
        "validation.loss": {"steps": [10, 30], "values": [2.4, 2.1], "timestamps": stamps[1::2]},
    }
    path = tmp_path / "metrics.json"
    path.write_text(json.dumps(doc))
    parsed = read_log([path])
    assert parsed.format == "scalar_json"
    assert "loss" in parsed.metrics and parsed.series("loss")[0].tolist() == [0, 10, 20, 30]
    assert len(parsed.metrics) == 2
    assert parsed.table["wall_time"][0].as_py() is not None


def test_wandb_run_history_csv_keeps_its_clocks_off_the_metrics(tmp_path: Path) -> None:
    rows = [f"{s},{1.5 + s},{1.7e9 + s},{3.2 - s / 10},{1e-4 * (s + 1)}" for s in range(5)]
    path = _write(tmp_path / "history.csv", ["_step,_runtime,_timestamp,train/loss,train/lr", *rows])
    parsed = read_log([path])
    # _runtime is W&B's elapsed clock: no metric itself, its increase per step is the step time (round 25, #31)
    assert parsed.metrics == ["loss", "lr", "step_time_s"]
    assert parsed.series("step_time_s")[1].tolist() == pytest.approx([1.0] * 4)
    assert parsed.table["wall_time"][0].as_py() == pytest.approx(1.7e9)


def test_a_lone_mlflow_metric_file_is_named_by_its_path(tmp_path: Path) -> None:
    folder = tmp_path / "mlruns" / "0" / "abc" / "metrics" / "val"
    folder.mkdir(parents=True)
    path = _write(folder / "loss", [f"{1700000000000 + 1000 * s} {2.5 - s / 10} {s}" for s in range(4)])
    parsed = read_log([path])
    assert parsed.format == "mlflow" and parsed.metrics == ["val_loss"]


def test_fastai_csvlogger_reads_its_losses(tmp_path: Path) -> None:
    rows = [f"{e},{1.2 - e / 10:.6f},{1.0 - e / 20:.6f},{0.7 + e / 50:.6f},00:{11 + e:02d}" for e in range(4)]
    path = _write(tmp_path / "history.csv", ["epoch,train_loss,valid_loss,accuracy,time", *rows])
    parsed = read_log([path])
    assert {"loss", "val_loss"} <= set(parsed.metrics) and "epoch" not in parsed.metrics
    assert parsed.series("val_loss")[0].tolist() == [0, 1, 2, 3]
