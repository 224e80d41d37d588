"""Consoles of widely used frameworks, written from their logging code with our own numbers (#31)."""

from __future__ import annotations

from pathlib import Path

from ingest.formats import detect, read_log
from tests.log_text import write_lines


def _mmengine(epochs: int = 2, per_epoch: int = 400) -> list[str]:
    out = ["12/06 05:00:01 - mmengine - INFO - ", "System environment:", "    sys.platform: linux"]
    for e in range(1, epochs + 1):
        for i in range(50, per_epoch + 1, 50):
            out.append(
                f"12/06 05:01:00 - mmengine - INFO - Epoch(train)  [{e}][{i:>3}/{per_epoch}]  base_lr: 1.0000e-02"
                f" lr: {i * 1e-5:.4e}  eta: 1:21:11  time: 0.4120  data_time: 0.0123  memory: 3072"
                f"  grad_norm: 5.1  loss: {2 - i / 1000:.4f}  loss_cls: 0.9000  loss_bbox: 0.5000"
            )
        out.append(f"12/06 05:40:00 - mmengine - INFO - Saving checkpoint at {e} epochs")
        out.append(
            f"12/06 05:41:00 - mmengine - INFO - Epoch(val)  [{e}][100/500]    eta: 0:00:20  time: 0.0512"
            "  data_time: 0.0021  memory: 812"
        )
        out.append(
            f"12/06 05:42:00 - mmengine - INFO - Epoch(val) [{e}][500/500]    coco/bbox_mAP: 0.3010"
            "  data_time: 0.0021  time: 0.0498"
        )
    return out


def test_mmengine_epoch_console_steps_by_iteration_with_parts_and_eval(tmp_path: Path) -> None:
    path = write_lines(tmp_path, "20261206_050001.log", _mmengine())
    assert detect([path])[0][0] == "openmmlab"
    log = read_log([path])
    steps, loss = log.series("loss")
    # the iteration within the epoch plus the epochs before it: one axis, no second run
    assert steps[0] == 50 and steps[-1] == 800 and len(steps) == 16 and not log.segments
    assert loss[0] == 1.95  # the summed loss, not loss_cls
    assert log.series("lr")[1][0] == 5e-4
    assert log.series("step_time_s")[1][0] == 0.412  # training's time, not evaluation's 0.0512
    assert len(log.series("step_time_s")[0]) == 16
    assert log.series("coco/bbox_mAP")[0].tolist() == [400, 800]
    assert [(e.kind, e.step) for e in log.events] == [("checkpoint", 400), ("checkpoint", 800)]


def test_mmcv_iter_console_and_its_tab_separated_pairs(tmp_path: Path) -> None:
    lines = ["2026-12-06 05:00:01,123 - mmseg - INFO - Environment info:"]
    for it in range(50, 2001, 50):
        lines.append(
            f"2026-12-06 05:01:00,555 - mmseg - INFO - Iter [{it}/2000]\tlr: 9.900e-03, eta: 0:32:11, time: 0.412,"
            f" data_time: 0.012, memory: 3512, decode.loss_ce: 0.7000, loss: {3 - it / 1000:.4f}"
        )
        if it % 1000 == 0:
            lines.append(f"2026-12-06 05:40:00,000 - mmseg - INFO - Saving checkpoint at {it} iterations")
            lines.append("2026-12-06 05:42:00,000 - mmseg - INFO - Iter(val) [500]\taAcc: 0.9100, mIoU: 0.4100")
    path = write_lines(tmp_path, "train.log", lines)
    log = read_log([path])
    assert log.format == "openmmlab"
    steps, loss = log.series("loss")
    assert steps[0] == 50 and steps[-1] == 2000 and loss[0] == 2.95
    assert log.series("mIoU")[0].tolist() == [1000, 2000]
    assert [e.step for e in log.events if e.kind == "checkpoint"] == [1000, 2000]


def test_a_bare_epoch_counter_is_not_the_runner_line(tmp_path: Path) -> None:
    # the PyTorch tutorials' console: the bracket is an epoch count, the step another field
    lines = [f"Epoch [1/5], Step [{s * 100}/600], Loss: {2 - s / 10:.4f}" for s in range(1, 7)]
    path = write_lines(tmp_path, "tutorial.txt", lines)
    assert "openmmlab" not in dict(detect([path]))


def _d2_line(it: int, total: float) -> str:
    return (
        f"[12/06 05:01:11 d2.utils.events]:  eta: 1:02:03  iter: {it}  total_loss: {total:.3f}  loss_cls: 0.9"
        f"  loss_box_reg: 0.5  time: 0.5012  last_time: 0.4901  data_time: 0.0123  last_data_time: 0.0101"
        f"  lr: 0.0002  max_mem: {2048 if it < 300 else 3072}M"
    )


def test_detectron2_total_loss_is_the_loss_and_time_the_step_time(tmp_path: Path) -> None:
    lines = ["[12/06 05:00:01 detectron2]: Environment info:", "sys.platform            linux"]
    for it in range(19, 700, 20):
        lines.append(_d2_line(it, 3 - it / 1000))
        if it == 499:
            lines.append("[12/06 05:30:00 fvcore.common.checkpoint]: Saving checkpoint to ./output/model_0000499.pth")
    path = write_lines(tmp_path, "log.txt", lines)
    assert detect([path])[0][0] == "detectron2"
    log = read_log([path])
    steps, loss = log.series("loss")
    assert steps[0] == 19 and loss[0] == 2.981  # total_loss, not a part
    assert log.series("step_time_s")[1][0] == 0.5012  # the window's, not last_time
    assert log.series("lr")[1][0] == 0.0002
    assert log.series("gpu_mem_max_gb")[1][0] == 2.0  # 2048 MB
    assert "eta" not in log.metrics and "last_time" not in log.metrics
    assert [(e.kind, e.step) for e in log.events] == [("checkpoint", 499)]


def _timm_line(epoch: int, batch: int, loss: float) -> str:
    return (
        f"Train: {epoch} [{batch:>4d}/1000 ({100 * batch / 999:>3.0f}%)]  Loss: {loss:#.3g} ({loss + 0.5:#.3g})"
        f"  Time: 0.312s,  820.51/s  (0.331s,  773.41/s)  LR: 1.000e-03  Data: 0.012 (0.015)"
    )


def test_timm_console_steps_over_epochs_and_reads_the_eval_means(tmp_path: Path) -> None:
    lines = ["Training with a single process on 1 device (cuda:0).", "Scheduled epochs: 2."]
    for epoch in range(2):
        lines += [_timm_line(epoch, b, 6 - epoch - b / 1000) for b in (*range(0, 1000, 50), 999)]
        lines += [
            f"Test: [{b:>4d}/97]  Time: 0.112 (0.150)  Loss:  {4.1 - epoch:.3f} ({4.2 - epoch:.3f})"
            f"  Acc@1: 19.000 ({18.0 + epoch:.3f})  Acc@5: 40.000 (41.000)"
            for b in (0, 50, 97)
        ]
        lines.append("Current checkpoints:")
    path = write_lines(tmp_path, "train.log", lines)
    assert detect([path])[0][0] == "timm_console"
    log = read_log([path])
    steps, loss = log.series("loss")
    assert steps[0] == 0 and steps[21] == 1000 and steps[-1] == 1999 and not log.segments
    assert loss[0] == 6.0  # this step's loss, not the running mean in parentheses
    assert log.series("step_time_s")[1][0] == 0.312
    assert log.series("lr")[1][0] == 1e-3
    # the evaluation's result is the last Test line's running mean, at the epoch's last step
    assert log.series("val_loss")[0].tolist() == [999, 1999]
    assert log.series("val_loss")[1].tolist() == [4.2, 3.2]
    assert log.series("val_acc@1")[1].tolist() == [18.0, 19.0]
    assert [e.step for e in log.events if e.kind == "checkpoint"] == [999, 1999]


def test_keras3_console_with_its_colour_codes_and_its_redraws_on_lines(tmp_path: Path) -> None:
    bar = "\x1b[32m" + "\u2501" * 20 + "\x1b[0m\x1b[37m\x1b[0m"
    lines = ['Model: "sequential"']
    for e in range(1, 31):
        lines.append(f"Epoch {e}/30")
        # a console that is no terminal: each redraw is a line; its time is an ETA, its values running means
        lines.append(f"\x1b[1m 100/1875\x1b[0m {bar} \x1b[1m9s\x1b[0m 5ms/step - accuracy: 0.5000 - loss: 9.0000")
        lines.append(
            f"\x1b[1m1875/1875\x1b[0m {bar} \x1b[1m{5 + e % 2}s\x1b[0m 3ms/step - accuracy: 0.9000"
            f" - loss: {1 / e:.4f} - val_accuracy: 0.9100 - val_loss: {1.1 / e:.4f}"
        )
        if e % 10 == 0:
            lines.append(f"Epoch {e}: val_loss improved from 0.5 to 0.4, saving model to best.keras")
    path = write_lines(tmp_path, "fit.txt", lines)
    assert detect([path])[0][0] == "keras_console"
    log = read_log([path])
    steps, loss = log.series("loss")
    assert steps.tolist() == list(range(1, 31)) and loss[0] == 1.0  # one value an epoch, at the bar's target
    # '6s 3ms/step': the step takes 3 ms, the epoch 6 s (docs/diagnosis.md, "Import: step times and clocks")
    assert log.series("step_time_s")[1][:2].tolist() == [0.003, 0.003]
    assert log.series("epoch_time_s")[1][:2].tolist() == [6.0, 5.0]
    assert [e.step for e in log.events if e.kind == "checkpoint"] == [10, 20, 30]


def test_keras3_verbose_2_line(tmp_path: Path) -> None:
    lines = [
        line
        for e in range(1, 6)
        for line in (f"Epoch {e}/5", f"1875/1875 - 5s - 3ms/step - accuracy: 0.9000 - loss: {1 / e:.4f}")
    ]
    log = read_log([write_lines(tmp_path, "fit.txt", lines)])
    assert log.format == "keras_console" and log.series("loss")[0].tolist() == [1, 2, 3, 4, 5]


def test_espnet_batches_of_an_epoch_on_one_axis_and_its_valid_results(tmp_path: Path) -> None:
    lines = ["# Running on gpu01", "/usr/bin/python3 -m espnet2.bin.asr_train --use_preprocessor true"]
    for ep in (1, 2, 3):
        for b in range(100, 1001, 100):
            lines.append(
                f"[gpu01] 2026-12-06 05:01:11,555 (trainer:762) INFO: {ep}epoch:train:{b - 99}-{b}batch:"
                f" iter_time=1.234e-04, forward_time=0.150, loss_ctc=99.0, loss_att=70.0,"
                f" loss={100 / ep - b / 100:.3f},"
                f" backward_time=0.130, grad_norm=40.0, optim0_lr0={1e-3 * ep:.3e}, train_time=0.456"
            )
        lines.append(
            f"[gpu01] 2026-12-06 05:30:00,000 (trainer:338) INFO: {ep}epoch results: [train] loss=1.0,"
            f" train_time=0.456, time=8 minutes and 5.1 seconds, total_count=1000, [valid] loss={80 / ep:.3f},"
            " acc=0.5, time=30.5 seconds, total_count=100, gpu_max_cached_mem_GB=10.5, [att_plot] time=5.1 seconds"
        )
    path = write_lines(tmp_path, "train.log", lines)
    assert detect([path])[0][0] == "espnet"
    log = read_log([path])
    steps, loss = log.series("loss")
    assert steps[0] == 100 and steps[10] == 1100 and steps[-1] == 3000 and len(steps) == 30 and not log.segments
    assert loss[0] == 99.0  # the summed loss, not a part
    assert log.series("lr")[1][10] == 2e-3 and log.series("step_time_s")[1][0] == 0.456
    assert log.series("val_loss")[0].tolist() == [1000, 2000, 3000] and log.series("val_loss")[1][0] == 80.0
    assert "val_total_count" not in log.metrics and "val_time" not in log.metrics


def test_icefall_loss_is_the_batch_loss_not_the_running_total(tmp_path: Path) -> None:
    lines = ["2026-12-06 05:00:01,123 INFO [train.py:1080] Training started"]
    for ep in (1, 2):
        for b in range(0, 1000, 50):
            lines.append(
                f"2026-12-06 05:01:11,555 INFO [train.py:1030] (0/4) Epoch {ep}, batch {b},"
                f" loss[loss={1 + b / 1000:.4f},"
                " simple_loss=0.40, pruned_loss=0.06, over 5432.00 frames. utt_duration=1000 frames,"
                " utt_pad_proportion=0.05], tot_loss[loss=0.5000, simple_loss=0.41, pruned_loss=0.061,"
                f" over 1098765.43 frames. ], batch size: {40 + b % 7}, lr: 3.00e-03, grad_scale: 16.0"
            )
            if b == 500:
                lines.append(
                    f"2026-12-06 05:20:30,000 INFO [train.py:1070] (0/4) Epoch {ep}, validation: loss=0.{ep}000,"
                    " simple_loss=0.45, over 123456.00 frames. "
                )
        lines.append(f"2026-12-06 05:59:00,000 INFO [checkpoint.py:75] (0/4) Saving checkpoint to exp/epoch-{ep}.pt")
    path = write_lines(tmp_path, "log-train-2026-12-06", lines)
    assert detect([path])[0][0] == "icefall"
    log = read_log([path])
    steps, loss = log.series("loss")
    assert steps[0] == 0 and steps[20] == 1000 and steps[-1] == 1950 and not log.segments
    assert loss[1] == 1.05  # the batch's loss, not tot_loss's running mean
    assert log.series("tot_loss")[1][0] == 0.5
    assert log.series("val_loss")[0].tolist() == [500, 1500]
    assert not {"over", "size", "utt_duration", "tot_utt_duration"} & set(log.metrics)
    assert [e.step for e in log.events if e.kind == "checkpoint"] == [950, 1950]


def test_ultralytics_rows_by_their_header_and_loss_is_the_sum_of_parts(tmp_path: Path) -> None:
    lines = [
        "Ultralytics 8.3.0 Python-3.11.4 torch-2.4.0 CUDA:0 (NVIDIA A100, 81051MiB)",
        "Starting training for 30 epochs...",
    ]
    for e in range(1, 31):
        lines.append("      Epoch    GPU_mem   box_loss   cls_loss   dfl_loss  Instances       Size")
        row = (
            f"      {e:>2}/30      {2 + e % 2}.5G      1.000      2.000      {1 + e / 100:.3f}         37        640: "
        )
        # the bar redrawn as the epoch runs: the last redraw is the epoch's line
        lines.append(
            row.replace("1.000", "9.000") + " 50%|#####     | 4/8\r" + row + "100%|##########| 8/8 [00:01<00:00]"
        )
        lines.append(
            "                 Class     Images  Instances      Box(P          R      mAP50  mAP50-95): 100%|#| 1/1"
        )
        lines.append(f"                   all          4         17      0.601      0.801      0.{800 + e}      0.601")
    path = write_lines(tmp_path, "train.log", lines)
    assert detect([path])[0][0] == "ultralytics"
    log = read_log([path])
    steps, loss = log.series("loss")
    assert steps.tolist() == list(range(1, 31))
    assert abs(loss[0] - 4.01) < 1e-9  # box + cls + dfl of the epoch's last redraw
    assert log.series("box_loss")[1][0] == 1.0 and log.series("gpu_mem_gb")[1][0] == 3.5
    assert log.series("val_box_map50")[1][0] == 0.801
    assert not {"instances", "size", "epochs"} & set(log.metrics)
