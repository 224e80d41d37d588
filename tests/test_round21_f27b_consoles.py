"""Issue #31 (docs/diagnosis.md, "Import: format readers"): consoles of batch 20 that were refused or read wrong, each
by its layout rule."""

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


def test_counter_word_with_loop_variable_is_the_step_and_a_cycle_starts_at_its_first_full_block(
    tmp_path: Path,
) -> None:
    """``batch i:N`` (AlphaZero-Gomoku) is the counter ``batch``, no metric ``i``; each update line takes the
    step of the batch line above it, the first batch (no update yet) included on the axis."""
    lines = [f"2025-06-04 19:53:{10 + n}, batch i:{n}, episode_len:{20 + n}\n" for n in (1,)]
    for n in range(2, 12):
        lines.append(f"2025-06-04 19:54:{10 + n}, batch i:{n}, episode_len:{20 + n}\n")
        lines.append(f"kl:0.0{n},lr_multiplier:1.000,loss:{6 - n / 10:.4f},entropy:4.3,explained_var_old:0.1\n")
    log = read_log([_write(tmp_path, "train.log", "".join(lines))])
    assert "i" not in log.metrics
    assert log.series("loss")[0].tolist() == list(range(2, 12))
    assert log.series("episode_len")[0].tolist() == list(range(1, 12))


def test_gan_generator_loss_beside_the_discriminators_is_the_runs_loss_in_the_generic_reader(tmp_path: Path) -> None:
    """Two line kinds print ``D_loss`` and ``G_loss`` (a WGAN): the generator's loss is also stored as
    ``loss`` (run_loss's GAN rule), its own name kept."""
    lines = [
        f"2025-09-21 20:25:24,051 - INFO - Epoch [{e}/50] Batch [{b}/199] D_loss: -{5 + e}.5 G_loss: {5 + b / 100:.2f}"
        "\n"
        for e in range(4)
        for b in (0, 100)
    ]
    log = read_log([_write(tmp_path, "train.log", "".join(lines))])
    assert {"loss", "G_loss", "D_loss"} <= set(log.metrics)
    assert log.series("loss")[1].tolist() == log.series("G_loss")[1].tolist()
    assert log.meta["loss_source"]["kind"] == "generator"


def test_mxnet_module_console_global_batch_epoch_lines_and_lr_changes(tmp_path: Path) -> None:
    """MXNet's Module console: the step is ``E * P + B`` with ``P = num_examples / batch_size`` from the
    Namespace; epoch lines at the epoch's last printed batch; ``Time cost`` over ``P`` is the step time;
    the lr from the Namespace and the ``Change learning rate`` lines; ``Validation-X`` is ``validation_X``."""
    lines = ["INFO:root:start with arguments Namespace(batch_size=32, lr=0.01, num_epochs=3, num_examples=3200)\n"]
    for e in range(3):
        if e == 2:
            lines.append("INFO:root:Update[201]: Change learning rate to 1.00000e-03\n")
        lines += [f"INFO:root:Epoch[{e}] Batch [{b}]\tSpeed: 142.33 samples/sec\taccuracy=0.{e}{b}\n" for b in (40, 80)]
        lines += [
            f"INFO:root:Epoch[{e}] Train-accuracy=0.{e}5\n",
            f"INFO:root:Epoch[{e}] Time cost=25.000\n",
            f'INFO:root:Saved checkpoint to "models/img_cls-000{e + 1}.params"\n',
            f"INFO:root:Epoch[{e}] Validation-accuracy=0.{e}7\n",
        ]
    path = _write(tmp_path, "train.log", "".join(lines))
    assert detect([path])[0][0] == "mxnet_module"
    log = read_log([path])
    assert log.series("accuracy")[0].tolist() == [40, 80, 140, 180, 240, 280]
    assert log.series("validation_accuracy")[0].tolist() == [80, 180, 280]
    assert log.series("step_time_s")[1].tolist() == [0.25] * 3
    steps, values = log.series("lr")
    assert steps.tolist() == [40, 201] and values.tolist() == [0.01, 0.001]
    assert log.step_range == (40, 280)
