"""Generic JSON records whose keys' roles their names alone do not give (issue #31; docs/diagnosis.md, "Import: metrics
files"): a ``time`` beside ``data_time`` is the step's duration, ``total_loss`` is the loss when no key
names it, a whole-number epoch beside a step counter and a cumulative ``elapsed_time`` are no
metrics, a per-record ``train_loss`` is no end-of-training summary, and a trainer-state dump too
deeply nested for Arrow still is one. Synthetic records in each layout, our own numbers."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ingest.formats import read_log


def _lines(path: Path, rows: list[dict[str, object]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_total_loss_is_the_loss_and_time_beside_data_time_is_the_step_time(tmp_path: Path) -> None:
    rows = [
        {"data_time": 0.002, "iteration": it, "loss_cls": 3.0 / n, "loss_box_reg": 1.0 / n, "lr": 1e-4,
         "time": 0.4 + 0.01 * (n % 3), "total_loss": 4.0 / n, "eta_seconds": 500.0 - 10 * n}
        for n, it in enumerate((9, 19, 29, 39), 1)
    ]  # fmt: skip
    log = read_log([_lines(tmp_path / "metrics.json", rows)])
    steps, loss = log.series("loss")
    assert list(steps) == [9, 19, 29, 39] and loss[0] == pytest.approx(4.0)
    assert "total_loss" not in log.metrics and "loss_cls" in log.metrics
    assert log.series("step_time_s")[1][0] == pytest.approx(0.41)
    assert "time" not in log.metrics


def test_total_loss_stays_itself_beside_a_loss(tmp_path: Path) -> None:
    rows = [{"step": s, "loss": 2.0 - s / 10, "total_loss": 3.0 - s / 10} for s in (1, 2, 3)]
    log = read_log([_lines(tmp_path / "log.jsonl", rows)])
    assert log.series("loss")[1][0] == pytest.approx(1.9)
    assert "total_loss" in log.metrics


def test_a_rising_time_without_data_time_stays_a_clock(tmp_path: Path) -> None:
    rows = [{"step": s, "loss": 2.0 - s / 10, "time": 1_700_000_000.0 + 5 * s} for s in (1, 2, 3)]
    log = read_log([_lines(tmp_path / "log.jsonl", rows)])
    assert "step_time_s" not in log.metrics and "time" not in log.metrics


def test_whole_epoch_and_elapsed_time_beside_an_iteration_are_no_metrics(tmp_path: Path) -> None:
    rows = [
        {"loss_gen": 2.0 + n / 7, "iteration": 50 * n, "loss_dis": 0.9 - n / 50, "epoch": n // 3,
         "elapsed_time": 6.25 * n}
        for n in range(1, 8)
    ]  # fmt: skip
    path = tmp_path / "log"
    path.write_text(json.dumps(rows, indent=4))  # one indented JSON array, Chainer's LogReport
    log = read_log([path])
    # the generator loss is also the run's loss (a GAN's, ingest.formats.run_loss)
    assert set(log.metrics) == {"loss", "loss_gen", "loss_dis", "step_time_s"}
    assert log.series("loss_dis")[1][-1] == pytest.approx(0.9 - 7 / 50, rel=1e-12)
    # the clock's increase over the 50 iterations between records: 6.25 s / 50 a step, from the second record
    steps, per_step = log.series("step_time_s")
    assert list(steps) == [100, 150, 200, 250, 300, 350] and per_step == pytest.approx([0.125] * 6)


def test_fractional_epoch_beside_a_step_is_no_metric(tmp_path: Path) -> None:
    # steps over steps per epoch is the step axis's companion, as the HF trainer-state (docs/diagnosis.md, "Import:
    # metrics files") reader always read it (this test said the opposite before)
    rows = [{"step": s, "loss": 2.0 - s / 10, "epoch": s / 8} for s in (1, 2, 3)]
    assert "epoch" not in read_log([_lines(tmp_path / "log.jsonl", rows)]).metrics


def test_one_record_an_epoch_with_train_loss_is_read_on_the_epoch_axis(tmp_path: Path) -> None:
    rows = [
        {"train_lr": 2e-4, "train_loss": 9.0 - e, "train_loss_ce": 1.5 - e / 10, "test_loss": 8.5 - e,
         "test_coco_eval_bbox": [0.1 * e, 0.2 * e], "epoch": e, "n_parameters": 1234567}
        for e in range(4)
    ]  # fmt: skip
    log = read_log([_lines(tmp_path / "log.txt", rows)])
    assert log.step_range == (0, 3)
    assert log.series("loss")[1][-1] == pytest.approx(6.0)
    assert log.series("val_loss")[1][0] == pytest.approx(8.5)
    assert "lr" in log.metrics
    assert "n_parameters" not in log.metrics and "epoch" not in log.metrics


def test_a_dump_too_deep_for_arrow_is_still_a_dump(tmp_path: Path) -> None:
    rows = [
        {"loss": 2.0 - i / 1000, "grad_norm": 1.0, "learning_rate": 1e-5, "global_step/max_steps": f"{i}/1200"}
        for i in range(1, 1201)
    ]
    # over a thousand objects in one line's log_history: Python's parser reads that line, not Arrow's
    dump = {"global_step": 1200, "log_history": [dict(r, step=n) for n, r in enumerate(rows, 1)]}
    log = read_log([_lines(tmp_path / "logging.jsonl", [*rows, dump])])
    assert log.step_range == (1, 1200)
    assert {"loss", "grad_norm", "lr"} <= set(log.metrics)


def test_a_record_whose_step_is_its_epoch_goes_to_the_end_of_that_epoch(tmp_path: Path) -> None:
    rows: list[dict[str, object]] = []
    for epoch in (1, 2):
        for it in (10, 20, 25):
            step = 25 * (epoch - 1) + it
            rows.append({"lr": 0.01, "data_time": 0.003, "loss": 3.0 / step, "time": 0.2, "epoch": epoch,
                         "iter": step, "step": step})  # fmt: skip
        # the validation record after the epoch: its step is the epoch number
        rows.append({"acc/top1": 0.3 * epoch, "data_time": 0.02, "time": 0.09, "step": epoch})
    log = read_log([_lines(tmp_path / "scalars.json", rows)])
    steps, acc = log.series("acc/top1")
    assert list(steps) == [25, 50] and list(acc) == pytest.approx([0.3, 0.6])
    assert list(log.series("step_time_s")[0]) == [10, 20, 25, 35, 45, 50]
    assert "epoch" not in log.metrics
