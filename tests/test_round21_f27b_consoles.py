"""Round 21 (f27b, issue #31): consoles of batch 20 that were refused or read wrong, each by its layout rule."""

from __future__ import annotations

from pathlib import Path

from ingest.formats import detect, read_log


def _write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_buildnanogpt_console_with_double_bar_fields_and_no_lr(tmp_path: Path) -> None:
    """A build-nanogpt variant splits its fields by ``||`` and prints ``elapsed_time: dt=Tms`` without an lr."""
    lines = ["Using fused AdamW: TrueUsing fused AdamW: True\n", "\n", "validation loss: 10.9512\n"]
    lines += [
        f"step {n} || loss: {10 - n / 10:.4f} || norm: {1 + n / 100:.4f} || elapsed_time: dt={460 + n}.5ms"
        f" || tok/sec: 1139485.93\n"
        for n in range(6)
    ]
    path = _write(tmp_path, "full_training_log.log", "".join(lines))
    assert detect([path])[0][0] == "buildnanogpt_console"
    log = read_log([path])
    assert {"loss", "grad_norm", "step_time_s", "throughput_tok_s", "val_loss"} <= set(log.metrics)
    assert log.step_range == (0, 5)
    assert log.series("step_time_s")[1][0] == 0.4605
    assert log.series("val_loss")[0].tolist() == [0]


def test_epoch_counter_before_a_step_is_no_prefix_in_the_way(tmp_path: Path) -> None:
    """``epoch:[ E/N ] train step:S  loss: x`` (PaddleVideo) holds torchtitan's ``step: N`` after other
    text; that text is the step's epoch, so the generic reader reads the file instead of a refusal."""
    lines = ["/home/user/project\n", "[12/25 14:22:26] epochs : 3\n"]
    for e in range(1, 4):
        for s in (0, 100):
            lines.append(
                f"[12/25 14:22:40] epoch:[  {e}/3 ] train step:{s}    loss: {4 - e / 2 - s / 1000:.5f} lr: 0.010000"
                f" top1: 0.5 batch_cost: 1.9 sec, reader_cost: 1.5 sec, ips: 32.9 instance/sec.\n"
            )
        lines.append(f"[12/25 14:25:53] END epoch:{e}   train loss_avg: 3.9  top1_avg: 0.1\n")
    log = read_log([_write(tmp_path, "train.log", "".join(lines))])
    assert "loss" in log.metrics and len(log.series("loss")[0]) == 6


def test_paddle_hapi_progress_lines_take_the_epochs_global_step(tmp_path: Path) -> None:
    """PaddlePaddle's ``Model.fit`` console: ``step s/T`` counts within ``Epoch E/N``; the lines after
    ``Eval begin...`` are the epoch's evaluation (its last line stored as ``val_`` metrics)."""
    lines = ["    The loss value printed in the log is the current step, and the metric is the average value.\r\n"]
    for e in (1, 2):
        lines.append(f"    Epoch {e}/2\r\n")
        for s in (10, 20, 25):
            lines.append(f"    step {s:3d}/25 - loss: {1 - e / 10 - s / 100:.4f} - AUROC_avg: 0.{e}{s} - 3s/step\r\n")
        lines += ["    save checkpoint at /home/aistudio/save/0\r\n", "    Eval begin...\r\n"]
        lines += [f"    step {s}/8 - loss: 0.{e}{s} - AUROC_avg: 0.7{e} - 120ms/step\r\n" for s in (4, 8)]
        lines.append("    Eval samples: 250\r\n")
    path = _write(tmp_path, "train.log", "".join(lines))
    assert detect([path])[0][0] == "paddle_hapi"
    log = read_log([path])
    assert log.series("loss")[0].tolist() == [10, 20, 25, 35, 45, 50]
    assert log.series("step_time_s")[1].tolist() == [3.0] * 6
    steps, values = log.series("val_loss")
    assert steps.tolist() == [25, 50] and values.tolist() == [0.18, 0.28]
    assert log.series("val_AUROC_avg")[1].tolist() == [0.71, 0.72]
    assert log.meta["total_steps"] == 50
