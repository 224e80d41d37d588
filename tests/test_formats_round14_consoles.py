"""Issue #31 (docs/diagnosis.md, "Import: format readers"): consoles no reader took: YOLOv5's headerless results.txt,
the DCGAN print (also inside a notebook exported to Markdown) and a Python-logging console of per-epoch Train./Val.
lines."""

from __future__ import annotations

import math
from pathlib import Path

from ingest.formats import detect, read_log


def _series(path: Path) -> dict[str, list[tuple[int, float]]]:
    table = read_log([path]).table.to_pylist()
    out: dict[str, list[tuple[int, float]]] = {}
    for row in table:
        out.setdefault(row["metric"], []).append((row["step"], row["value"]))
    return out


def test_yolov5_results_txt_columns_by_position(tmp_path: Path) -> None:
    rows = [
        f"{e:>6}/4    2.40G   0.0{5 - e}1   0.0300   0.0100   0.0{9 - e}1   {17 + e}   416"
        f"   0.70   0.60   0.6{e}   0.40   0.0500   0.0200   0.0100"
        for e in range(5)
    ]
    path = tmp_path / "results.txt"
    path.write_text("\n".join(rows) + "\n")
    assert detect([path])[0][0] == "yolov5_results"
    parsed = read_log([path])
    s = _series(path)
    assert s["loss"][0] == (0, 0.091) and s["loss"][-1] == (4, 0.051)  # the 'total' column
    assert s["box_loss"][1] == (1, 0.041) and s["val_map50"][2] == (2, 0.62)
    assert s["gpu_mem_gb"][0] == (0, 2.4) and s["val_cls_loss"][0] == (0, 0.01)
    assert not {"targets", "img_size", "labels"} & set(s)  # labels in the last batch, image size
    assert parsed.meta["planned_steps"] == 5


def test_dcgan_print_in_markdown_export_skips_summary_quote(tmp_path: Path) -> None:
    lines = ["# notes", "```python", "print('[%d/%d][%d/%d]' % (epoch, n, i, m))", "```", "<details>"]
    lines += [
        "<summary>[0/2][0/300]\tLoss_D: 1.2000\tLoss_G: 3.0000\tD(x): 0.5000\tD(G(z)): 0.4000 / 0.1000 <br />",
        "...",
        "  <br />  [1/2][250/300]\tLoss_D: 0.3000\tLoss_G: 2.5000\tD(x): 0.9000\tD(G(z)): 0.1000 / 0.0800",
        "</summary>",
        '<div markdown="1">',
    ]
    for e in range(2):
        for i in range(0, 300, 50):
            g = 15.0 if (e, i) == (0, 50) else 3.0 - 0.1 * e
            d = f"\tD(x): 0.8{i // 50}\tD(G(z)): 0.2{i // 50} / 0.1"
            lines.append(f"  <br />  [{e}/2][{i}/300]\tLoss_D: 0.5000\tLoss_G: {g:.4f}" + d)
    lines += ["</div>", "</details>"]
    path = tmp_path / "gan.md"
    path.write_text("\n".join(lines) + "\n")
    assert detect([path])[0][0] == "gan_console"
    parsed = read_log([path])
    s = _series(path)
    assert [st for st, _ in s["loss"]] == [e * 300 + i for e in range(2) for i in range(0, 300, 50)]
    assert s["loss"][1] == (50, 15.0) and s["disc_loss"][0] == (0, 0.5) and s["d_g_z"][1] == (50, 0.21)
    assert parsed.meta["planned_steps"] == 600


def test_python_logging_epoch_console_keeps_nan(tmp_path: Path) -> None:
    lines = ["01-05 11:00:00 - INFO - __main__ - Configuration:", "01-05 11:00:00 - INFO - __main__ - {'epochs': 6,"]
    lines.append(" 'lr': 0.001}")
    for e in range(6):
        loss = "nan" if e >= 3 else f"{2.4 - 0.1 * e:.2f}"
        pre = f"01-05 11:0{e}:00 - INFO - __main__ - "
        lines += [
            pre + f"Epoch: {e}, Loss: {loss}",
            pre + f"Train. Total Loss: {loss}, Rec.: 1.00, KL: 0.2{e}, AUC: 55.00%, AP: 3.00%",
            pre + f"Val. Total Loss: {loss}, Rec.: 1.10, KL: 0.30, AUC: {52 + e}.00%, AP: 49.00%",
        ]
    path = tmp_path / "train.log"
    path.write_text("\n".join(lines) + "\n")
    assert detect([path])[0][0] == "pylog_epochs"
    parsed = read_log([path])
    s = _series(path)
    assert [st for st, _ in s["loss"]] == list(range(6))  # once per epoch, not twice
    assert s["loss"][2] == (2, 2.2) and math.isnan(s["loss"][3][1]) and math.isnan(s["val_loss"][5][1])
    assert s["val_auc"][0] == (0, 52.0) and s["train_kl"][0] == (0, 0.2)
    assert parsed.meta["planned_steps"] == 6


def _pix2pix_line(epoch: int, iters: int, g: float) -> str:
    losses = f"G_GAN: {g:.3f} G_L1: 4.{iters % 7}00 D_real: 0.300 D_fake: 0.2{epoch}0 "
    return f"(epoch: {epoch}, iters: {iters}, time: 0.120, data: 0.010) " + losses


def test_pix2pix_loss_log_global_step_runs_and_validation(tmp_path: Path) -> None:
    head = "=============== {} ({}) ==============="
    lines = [head.format("Training Loss", "Fri Feb  2 10:00:00 2024"), _pix2pix_line(1, 50, 9.0)]  # aborted
    lines.append(head.format("Training Loss", "Fri Feb  2 10:05:00 2024"))
    # 130 iterations per epoch printed every 50 global iterations: epoch 2 starts at iters 20, epoch 3 at 40
    for epoch, first in ((1, 50), (2, 20), (3, 40)):
        lines += [_pix2pix_line(epoch, i, 1.0 + epoch) for i in range(first, 131, 50)]
        lines += [head.format("Validation Loss", "Fri Feb  2 10:06:00 2024"), _pix2pix_line(epoch, 50, 0.5)]
        lines.append(head.format("Training Loss", "Fri Feb  2 10:07:00 2024"))
    path = tmp_path / "loss_log.txt"
    path.write_text("\n".join(lines) + "\n")
    assert detect([path])[0][0] == "pix2pix_loss_log"
    parsed = read_log([path])
    assert len(parsed.segments) == 1  # the file's first run, then the others
    first, run = parsed, parsed.segments[0]
    assert first.series("G_GAN")[0].tolist() == [50]
    steps, values = run.series("G_GAN")
    assert steps.tolist() == [50, 100, 150, 200, 250, 300, 350]  # 50 apart across epoch ends
    assert values.tolist() == [2.0, 2.0, 3.0, 3.0, 3.0, 4.0, 4.0]  # no validation value among them
    assert run.series("loss")[1].tolist() == values.tolist() and run.meta["loss_source"]["name"] == "G_GAN"
    assert {"iters", "data", "epoch"}.isdisjoint(run.metrics) and "step_time_s" in run.metrics
