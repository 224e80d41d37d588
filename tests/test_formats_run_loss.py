"""Issues #31/#32 (docs/diagnosis.md, "Import: the loss"): one rule per family for which series is the run's ``loss``
where a log prints no plain loss, the same for a family's console and its CSV/JSON files (synthetic files in the
layouts Ultralytics' results.csv, OpenAI baselines' progress.csv and Chainer's LogReport write; own numbers)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ingest.formats import read_log
from ingest.formats.run_loss import stand_in_loss, summed_loss_parts


def _write(path: Path, lines: list[str]) -> Path:
    path.write_text("\n".join(lines) + "\n")
    return path


def test_a_yolo_results_csv_stores_the_sum_of_its_training_loss_parts_as_the_loss(tmp_path: Path) -> None:
    header = "epoch,time,train/box_loss,train/cls_loss,train/dfl_loss,metrics/mAP50(B),val/box_loss,lr/pg0"
    rows = [
        f"{e},{30.0 * e:.1f},{1.7 - e / 10:.2f},{3.6 - e / 5:.2f},{1.8 - e / 20:.2f},0.1,1.9,0.01" for e in range(1, 6)
    ]
    log = read_log([_write(tmp_path / "results.csv", [header, *rows])])
    steps, loss = log.series("loss")
    assert steps.tolist() == [1, 2, 3, 4, 5]
    want = [(1.7 - e / 10) + (3.6 - e / 5) + (1.8 - e / 20) for e in range(1, 6)]
    assert loss.tolist() == pytest.approx(want, abs=0.02)  # val/box_loss is the validator's: not a part
    assert "train/box_loss" in log.metrics  # each part keeps its own name


def test_a_baselines_progress_csv_stores_the_critic_loss_as_the_loss(tmp_path: Path) -> None:
    header = "train/loss_actor,rollout/return,train/loss_critic,total/epochs,total/steps"
    rows = [f"{-30.0 * e:.1f},{100.0 * e:.1f},{100.0 + e:.1f},{e},{2000 * e}" for e in range(1, 6)]
    log = read_log([_write(tmp_path / "progress.csv", [header, *rows])])
    steps, loss = log.series("loss")
    assert steps.tolist() == [2000 * e for e in range(1, 6)]
    assert loss.tolist() == [100.0 + e for e in range(1, 6)]  # the actor's -Q is never the loss


def test_a_chainer_gan_log_stores_the_generator_loss_as_the_loss(tmp_path: Path) -> None:
    records = [
        {"epoch": i // 8, "elapsed_time": 16.0 * i, "loss_gen": 1.0 + i / 10, "iteration": 100 * i, "loss_dis": 0.9}
        for i in range(1, 21)
    ]
    path = tmp_path / "log"
    path.write_text(json.dumps(records, indent=4))
    log = read_log([path])
    steps, loss = log.series("loss")
    assert steps.tolist() == [100 * i for i in range(1, 21)]
    assert loss.tolist() == pytest.approx([1.0 + i / 10 for i in range(1, 21)])
    assert "loss_gen" in log.metrics and "loss_dis" in log.metrics  # kept under their own names


def test_the_rules_apply_only_where_no_column_is_the_loss() -> None:
    assert summed_loss_parts(["train/box_loss", "train/obj_loss", "train/cls_loss", "val/box_loss"]) == [
        "train/box_loss",
        "train/obj_loss",
        "train/cls_loss",
    ]
    assert summed_loss_parts(["box", "obj", "cls", "labels"]) == ["box", "obj", "cls"]  # YOLOv5's console
    assert summed_loss_parts(["box", "obj", "cls", "total"]) == []  # the printed total is the loss
    assert summed_loss_parts(["train/box_loss", "train/loss"]) == []
    assert summed_loss_parts(["cls", "acc"]) == []  # a lone class column is no detector's loss
    assert summed_loss_parts(["train/box_loss", "train/cls_loss", "train/aux_loss"]) == []  # a part unknown
    assert stand_in_loss(["train/loss_actor", "train/loss_critic"]) == "train/loss_critic"
    assert stand_in_loss(["loss", "value_loss"]) is None
    assert stand_in_loss(["loss_gen", "loss_dis"]) == "loss_gen"
    assert stand_in_loss(["gen/loss", "dis/loss"]) == "gen/loss"  # Chainer's reporter keys
    assert stand_in_loss(["loss_gen", "psnr"]) is None  # a generator loss alone does not say GAN
