"""Text consoles the readers refused (issue #31; docs/diagnosis.md, "Import: steps, epochs and runs"): an epoch counter
printed ``Epoch [E/N]`` is the step axis when no finer counter exists; split words in any case name the metric (``Train
Loss``, ``Validation L1``); a one-item list is its item (``LR: [0.001]``); a step counter restarting each epoch
with the epoch printed (``Epoch E, Step S`` without ``/N``) is a global step, not a new run; a W&B
summary's ``val loss`` line alone makes no llm.c console."""

from __future__ import annotations

from pathlib import Path

from ingest.formats import detect, read_log
from ingest.formats.generic import line_pairs
from tests.log_text import series_by_metric, write_lines


def test_epoch_of_n_and_split_words_in_any_case() -> None:
    pairs = line_pairs("Epoch [3/500], Train Loss: 0.25, Train L1 Loss: 0.5")
    assert pairs == [("Epoch", 3.0, None), ("Train Loss", 0.25, None), ("Train L1 Loss", 0.5, None)]
    pairs = line_pairs("Epoch [004/300] - Train Loss: 60.0, Valid Loss: 125.7, LR: [0.001]")
    assert pairs == [("Epoch", 4.0, None), ("Train Loss", 60.0, None), ("Valid Loss", 125.7, None), ("LR", 0.001, None)]
    # a space-separated pair keeps its one split word: 'train loss 9.2' is no three-word key
    assert line_pairs("train loss 9.2, val loss 9.3 step 5") == [
        ("train loss", 9.2, None),
        ("val loss", 9.3, None),
        ("step", 5.0, None),
    ]


def test_epoch_console_is_read_on_the_epoch_axis(tmp_path: Path) -> None:
    lines = ["Data loaded and split", "Model built", "<style>", "</style>"]
    for e in range(1, 13):
        lines.append(f"Epoch [{e}/50], Train Loss: {1.0 / e:.4f}, Train L1 Loss: {2.0 / e:.4f}")
        lines.append(f"Epoch [{e}/50], Validation Loss: {1.5 / e:.4f}, Validation L1: {2.5 / e:.4f}")
    parsed = read_log([write_lines(tmp_path, "out.md", lines)])
    series = series_by_metric(parsed)
    assert parsed.meta["mapping"]["step"] == "Epoch"
    assert list(series["loss"][0]) == list(range(1, 13))
    assert list(series["val_loss"][0]) == list(range(1, 13))
    assert series["loss"][1][0] == 1.0 and "Train_L1_Loss" in series and len(parsed.segments) <= 1


def test_step_restarting_each_epoch_is_a_global_step(tmp_path: Path) -> None:
    lines = ["INFO:root:Training configuration:"]
    for e in range(3):
        for s in range(100, 600, 100):
            lines.append(f"INFO:root:Epoch {e}, Step {s}, loss: {0.5 - 0.01 * e:.4f}, disc_loss: 0.1, PESQ: 2.0")
        lines.append("INFO:root:TEST - Generator loss: 0.0490, Discriminator loss: 0.0164, PESQ: 2.4854")
    parsed = read_log([write_lines(tmp_path, "train_log.txt", lines)])
    steps = series_by_metric(parsed)["loss"][0]
    # 100..500 per epoch, counted from 100 on a grid of 100: 500 batches an epoch
    assert list(steps) == [e * 500 + s for e in range(3) for s in range(100, 600, 100)]
    assert len(parsed.segments) <= 1


def test_wandb_summary_val_loss_is_no_llmc_console(tmp_path: Path) -> None:
    lines = ["# notes", "wandb: Run summary:", "wandb:          val loss 0.00734", "wandb: epoch 650"]
    assert not any(name == "llmc_console" for name, _ in detect([write_lines(tmp_path, "notes.md", lines)]))


def test_loguru_split_label_names_the_keys(tmp_path: Path) -> None:
    assert line_pairs(
        "2025-11-01 20:13:53 |     INFO | on_train_epoch_end:383 | EPOCH 1 TRAIN - Loss: 6.47, Acc: 1.74%"
    ) == [
        ("EPOCH", 1.0, None),
        ("TRAIN Loss", 6.47, None),
        ("TRAIN Acc", 1.74, "%"),
    ]
    lines = ["2025-11-01 20:09:45 |     INFO | on_train_start:161 | Starting", "x |  INFO | f:3 |   last_epoch: 0"]
    for e in range(1, 8):
        lines.append(
            f"2025-11-01 20:13:52 | INFO | on_validation_epoch_end:413 | EPOCH {e} VAL - Loss: {5.0 / e:.4f}, Acc: 4%"
        )
        lines.append(
            f"2025-11-01 20:13:53 | INFO | on_train_epoch_end:383 | EPOCH {e} TRAIN - Loss: {6.0 / e:.4f}, F1: N/A"
        )
    series = series_by_metric(read_log([write_lines(tmp_path, "training.log", lines)]))
    assert list(series["loss"][0]) == list(range(1, 8)) and list(series["val_loss"][0]) == list(range(1, 8))
    assert not any("epoch_end" in name for name in series)


def test_split_record_step_line_then_value_lines(tmp_path: Path) -> None:
    lines = ["Logging to /tmp/exp", "Job started.", "loss: dsm", "Number of timesteps: 50"]
    for s in range(2000, 22000, 2000):
        lines += ["[2024-09-17 15:27:41]--------------------", f"Step: {s}", f"Loss: {0.08 + s * 1e-7:.6f}"]
    lines += ["Saving model..."]
    parsed = read_log([write_lines(tmp_path, "log.txt", lines)])
    steps, values = series_by_metric(parsed)["loss"]
    assert list(steps) == list(range(2000, 22000, 2000)) and abs(values[0] - 0.0802) < 1e-9


def test_a_named_step_that_fails_is_no_reason_for_the_epoch_axis(tmp_path: Path) -> None:
    # 'Step' restarts every epoch on most lines (2 lines an epoch): the epoch is no finer counter's stand-in
    lines = [f"INFO:root:Epoch {e}, Step {s}, loss: 0.5, disc_loss: 0.1" for e in range(12) for s in (500, 1000)]
    try:
        parsed = read_log([write_lines(tmp_path, "train.err", lines)])
    except Exception:  # refused: a wrong axis is worse than none
        return
    assert parsed.meta.get("mapping", {}).get("step") != "Epoch"
