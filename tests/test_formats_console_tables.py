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
