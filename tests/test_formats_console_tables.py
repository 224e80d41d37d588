"""Consoles whose records are key-value tables or an older trainer's columns, with our own numbers (#31)."""

from __future__ import annotations

import math
from pathlib import Path

from ingest.formats import detect, read_log


def _write(tmp_path: Path, name: str, lines: list[str]) -> Path:
    path = tmp_path / name
    path.write_text("\n".join(lines) + "\n")
    return path


def _table(rows: list[tuple[str, str]], width: int = 12) -> list[str]:
    rule = "-" * (width + 26)
    return [rule, *(f"| {k:<22} | {v:<{width}} |" for k, v in rows), rule, ""]


def test_baselines_tables_are_records_stepped_by_total_steps(tmp_path: Path) -> None:
    lines = ["Logging to /tmp/run-42", "rank 0: seed=3, logdir=/tmp/run-42", "setting up actor optimizer"]
    for t in range(1, 41):
        lines += _table(
            [
                ("obs_rms_mean", "inf" if t > 30 else f"{0.4 + t / 1000:.3g}"),
                ("rollout/return", f"{-500 + 37 * t:.3g}"),
                ("reference_perturbed_...", f"{0.7 + t / 100:.3g}"),
                ("total/epochs", str(t)),
                ("total/steps", str(1500 * t)),
                ("train/loss_actor", f"{1.5e3 - t:.3g}"),
                ("train/loss_critic", f"{2 + t / 10:.3g}"),
            ]
        )
    path = _write(tmp_path, "log.txt", lines)
    assert detect([path])[0][0] == "kv_tables"
    log = read_log([path])
    steps, critic = log.series("train/loss_critic")
    assert steps.tolist() == [1500 * t for t in range(1, 41)]
    assert critic[0] == 2.1 and critic[-1] == 6.0
    assert log.series("loss")[1].tolist() == critic.tolist()  # the critic's value loss is the run's loss
    assert log.series("train/loss_actor")[1][0] == 1.5e3  # '1.5e+03' as printed
    obs = log.series("obs_rms_mean")[1]
    assert len(obs) == 40 and math.isinf(obs[-1]) and math.isfinite(obs[29])  # inf cells are values
    assert {m for m in log.metrics if m.startswith("reference_perturbed")} == {"reference_perturbed"}  # no dots


def test_sb3_sections_prefix_their_rows_and_a_table_without_a_counter_is_stepped_by_order(tmp_path: Path) -> None:
    lines = ["Using cuda device"]
    for t in range(1, 6):
        lines += _table(
            [("rollout/", ""), ("   ep_rew_mean", f"{-200 + t}"), ("train/", ""), ("   value_loss", f"{9 - t}")]
        )
    path = _write(tmp_path, "sb3.txt", lines)
    log = read_log([path])
    steps, values = log.series("rollout/ep_rew_mean")
    assert steps.tolist() == [1, 2, 3, 4, 5] and values[0] == -199
    assert log.series("train/value_loss")[1][-1] == 4


VAL_HEADER = "               Class     Images     Labels          P          R     mAP@.5 mAP@.5:.95: 100%|#| 2/2"


def test_yolov5_columns_and_its_map_spelling_are_read_and_the_best_checkpoint_check_is_no_epoch(
    tmp_path: Path,
) -> None:
    lines = ["(env) me@host:~/yolov5$ python train.py --epochs 12", "Starting training for 12 epochs...", ""]
    for e in range(12):
        lines += [
            "     Epoch   gpu_mem       box       obj       cls    labels  img_size",
            f"     {e:>2}/11     3.21G   {0.07 - e / 1000:.4f}   0.0300    0.0100        11       640: 100%|#| 9/9",
            VAL_HEADER,
            f"                 all         50        120      0.5{e:02d}       0.40       0.{300 + e}      0.{150 + e}",
            "",
        ]
    lines += [
        "12 epochs completed in 0.101 hours.",
        "Validating runs/train/exp/weights/best.pt...",
        VAL_HEADER,
        "                 all         50        120      0.999       0.99       0.999      0.999",
    ]
    path = _write(tmp_path, "train.md", lines)
    assert detect([path])[0][0] == "ultralytics"
    log = read_log([path])
    steps, loss = log.series("loss")
    assert steps.tolist() == list(range(12))
    assert abs(loss[0] - 0.11) < 1e-9  # box + obj + cls
    assert log.series("box_loss")[1][-1] == 0.059 and log.series("gpu_mem_gb")[1][0] == 3.21
    val_steps, map50 = log.series("val_map50")
    assert val_steps.tolist() == list(range(12)) and map50[-1] == 0.311  # not best.pt's 0.999
    assert log.series("val_map50_95")[1][0] == 0.15
    assert not {"labels", "img_size", "box", "obj"} & set(log.metrics)


def test_epoch_blocks_in_a_markdown_fence_are_read_with_their_test_lines_as_validation(tmp_path: Path) -> None:
    lines = ["```text"]
    for e in range(1, 9):
        bar = f"{30 * e}/240 [00:0{e}<00:10]"
        lines += [
            f"Epoch: {e}",
            f"Learning rate: {0.02 - e / 1000:.6f}",
            # two redraws of the bar on one line: the last is the epoch's
            f"Train Epoch: {e} Loss: 9.000 Top1 1.000: 50%|##   | {bar}\r"
            f"Train Epoch: {e} Loss: {4 - e / 10:.3f} Top1 {20 + e:.3f}: 100%|#####| 240/240 [00:20<00:00,  1.2it/s]",
            "",
            f"Test set: Average loss: {4.2 - e / 10:.4f}, Top1: {18 + e:.3f}%",
            f"GPU Memory: 0.{e} GB (Max: 9.99 GB)",
        ]
    lines.append("```")
    path = _write(tmp_path, "log_output.md", lines)
    assert detect([path])[0][0] == "epoch_blocks"
    log = read_log([path])
    steps, loss = log.series("loss")
    assert steps.tolist() == list(range(1, 9)) and loss[0] == 3.9 and loss[-1] == 3.2
    assert log.series("val_loss")[1][0] == 4.1 and log.series("lr")[1][-1] == 0.012
    assert log.series("val_Top1")[1][0] == 19.0 and log.series("gpu_mem_gb")[1][1] == 0.2
    assert not {"Max", "Train_Epoch", "epoch", "Average_loss"} & set(log.metrics)


def test_stage_console_steps_by_batch_and_a_glued_redraw_is_skipped_never_a_metric(tmp_path: Path) -> None:
    lines = []
    for e in range(1, 7):
        lines.append("- Training...")
        for b in (50, 100, 150):
            lines.append(
                f"- Train | Epoch {e} | {b}/150 | 2.31 it/sec | Loss {1 - e / 20 - b / 10000:.4f} | Grad 0.{e}5"
                f" | Aux {e}.5"
            )
        lines += [f"- Train Summary | Epoch {e} | Loss=9.0 | Grad=9.0", "- Cross validation..."]
        lines += [f"- Valid | Epoch {e} | {k}/4 | 0.50 it/sec | Loss 7.0 | Score 1.0" for k in (1, 2)]
        tail = "Bname=main" if e % 2 else "Bname=ep_2 ore=4.5 | Aux5.25"  # two redraws glued
        lines.append(f"- Valid Summary | Epoch {e} | Loss=0.{90 - e} | Score={e}.25 | Best=0.5 | {tail}")
    path = _write(tmp_path, "train_log.txt", lines)
    assert detect([path])[0][0] == "stage_console"
    log = read_log([path])
    steps, loss = log.series("loss")
    assert steps[:4].tolist() == [50, 100, 150, 200] and len(steps) == 18  # summaries and eval passes: no records
    assert loss[0] == 0.945 and log.series("grad_norm")[1][0] == 0.15
    val_steps, val = log.series("val_loss")
    assert val_steps.tolist() == [150 * e for e in range(1, 7)] and val[0] == 0.89
    assert log.series("val_Score")[1][-1] == 6.25
    assert not {m for m in log.metrics if m.lower() in {"ore", "val_ore"} or m.startswith("val_Aux") or "Bname" in m}
    assert log.skipped >= 6  # each glued cell counted
