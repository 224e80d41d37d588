"""Issues #31/#32 (docs/diagnosis.md, "Import: settings and counters"): epoch and timestamp fields are axes, not
metrics; a per-row ``time`` is the row's step time. Synthetic files in the layouts of a small trainer's CSV (no step
column, a per-epoch ``time``), a JSON Lines metrics file with a ``unix`` field, and a console whose step lines carry a
whole ``epoch`` (own numbers)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ingest.formats import FALLBACK_READERS, read_log


def test_a_falling_time_column_of_a_csv_without_a_step_column_is_each_rows_step_time(tmp_path: Path) -> None:
    seconds = [0.31, 0.07, 0.05, 0.06, 0.05, 0.08]
    rows = [f"{0.9 - i / 20:.4f},{0.3 + i / 50:.4f},{0.8 - i / 25:.4f},{s}" for i, s in enumerate(seconds)]
    path = tmp_path / "log.csv"
    path.write_text("\r\n".join(["training_loss, training_acc, val_loss, time", *rows]))
    parsed = read_log([path])
    steps, step_time = parsed.series("step_time_s")
    assert steps.tolist() == list(range(6)) and step_time.tolist() == pytest.approx(seconds)
    assert "time" not in parsed.metrics


def test_a_rising_time_column_stays_a_clock_not_a_per_row_time(tmp_path: Path) -> None:
    rows = [f"{e},{1.0 - e / 10},{3.0 * e + 1}" for e in range(1, 6)]
    path = tmp_path / "log.csv"
    path.write_text("\n".join(["epoch,loss,time", *rows]) + "\n")
    parsed = read_log([path])
    _, step_time = parsed.series("step_time_s")
    assert step_time.tolist() == pytest.approx([3.0] * 4)  # the clock's differences, not its readings


def test_a_unix_field_of_json_lines_is_the_wall_clock_not_a_metric(tmp_path: Path) -> None:
    path = tmp_path / "train.log"
    lines = [
        json.dumps({"step": s, "loss": 7.0 - s / 10, "lr": 1e-3, "grad_norm": 2.0 + s / 7, "unix": 1.7e9 + 5.5 * s})
        for s in range(1, 9)
    ]
    path.write_text("\n".join(lines) + "\n")
    parsed = read_log([path])
    assert "unix" not in parsed.metrics and {"loss", "lr", "grad_norm"} <= set(parsed.metrics)


def test_a_whole_epoch_on_a_consoles_step_lines_is_an_axis_not_a_metric(tmp_path: Path) -> None:
    lines = [
        f"step {s:05d}/00040 | loss: {6.0 - s / 20:.5f} | dt: {410 + s % 3}ms | epoch: {1 + s // 20} | total time: 0.1m"
        for s in range(40)
    ]
    path = tmp_path / "run.log"
    path.write_text("\n".join(lines) + "\n")
    parsed = read_log([path], reader_set=FALLBACK_READERS)  # the generic reader (llm.c's reader knows the layout)
    assert "epoch" not in parsed.metrics and "loss" in parsed.metrics


def test_a_fractional_epoch_on_step_lines_stays_a_metric(tmp_path: Path) -> None:
    lines = [f"step {s} | loss: {6.0 - s / 20:.5f} | epoch: {s / 16:.4f}" for s in range(1, 41)]
    path = tmp_path / "run.log"
    path.write_text("\n".join(lines) + "\n")
    assert "epoch" in read_log([path], reader_set=FALLBACK_READERS).metrics


def _epoch_blocks(epochs: int, blank_inside: bool) -> list[str]:
    lines = ["Using device: cuda", "Starting training"]
    for e in range(1, epochs + 1):
        lines += [f"Start ep num  {e}", f"epoch {e}:"]
        lines += [f"loss_D: {0.4 - e / 100:.3f}, loss_G_fake: {0.3 + e / 90:.3f},   "]
        lines += [""] if blank_inside else []
        lines += [f"loss_perturb: {6.0 / e:.3f}, loss_adv: {7.0 - e / 5:.3f}, ", ""]
    return lines


def test_a_record_printed_over_two_lines_keeps_both_lines_values(tmp_path: Path) -> None:
    path = tmp_path / "train.md"
    path.write_text("\n".join(_epoch_blocks(12, blank_inside=False)) + "\n")
    parsed = read_log([path], reader_set=FALLBACK_READERS)
    assert {"loss_D", "loss_G_fake", "loss_perturb", "loss_adv"} <= set(parsed.metrics)
    steps, perturb = parsed.series("loss_perturb")
    assert steps.tolist() == list(range(1, 13))
    assert perturb.tolist() == pytest.approx([6.0 / e for e in range(1, 13)], 1e-3)


def test_a_pair_line_after_a_blank_line_is_no_part_of_the_record_above(tmp_path: Path) -> None:
    path = tmp_path / "train.md"
    path.write_text("\n".join(_epoch_blocks(12, blank_inside=True)) + "\n")
    parsed = read_log([path], reader_set=FALLBACK_READERS)
    assert "loss_D" in parsed.metrics and "loss_perturb" not in parsed.metrics


def test_a_line_that_prints_its_own_epoch_is_no_part_of_the_record_above(tmp_path: Path) -> None:
    lines = []
    for e in range(1, 9):  # an epoch's summary line opens its block; its split lines follow
        lines.append(f"Epoch {e:3d} (40s)  train[vol={2.0 / e:.4f} surf={1.5 / e:.4f}]  val_avg={300 / e:.3f}")
        lines += [f"    val_split_{k}   loss={10.0 / e + k:.4f}  p={400 / e + k:.3f}" for k in range(3)]
    path = tmp_path / "train.log"
    path.write_text("\n".join(lines) + "\n")
    parsed = read_log([path], reader_set=FALLBACK_READERS)
    for name in ("vol", "surf", "val_avg"):
        if name in parsed.metrics:  # never the next epoch's value at the last split line of the epoch before
            _steps, values = parsed.series(name)
            assert values[0] == pytest.approx({"vol": 2.0, "surf": 1.5, "val_avg": 300.0}[name], 1e-3)
