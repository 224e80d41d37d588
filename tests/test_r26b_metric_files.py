"""Round 26, r26b (issue #31): metric files and loss logs read with their loss, grad norm and launches.

Synthetic files of each shape, our own numbers: a per-epoch JSON log two launches appended to (its epoch counter
starts again), DETR's COCO summary list, a Lightning ``grad_2_norm``, a JSON record whose one changing loss field is
not named ``loss`` and whose ``steps_time`` is the step's time, and a CycleGAN ``loss_log.txt`` whose resumed launch
is collapsed (its G/D terms flat) and crosses no epoch end.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ingest.formats import read_log
from ingest.formats.coco_stats import with_coco_headline
from ingest.formats.run_loss import sole_loss
from stab_core.metrics import gan_terms


def _lines(path: Path, rows: list[dict[str, object]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _detr_record(epoch: int, launch: int) -> dict[str, object]:
    return {
        "epoch": epoch,
        "n_params": 1000 + launch,
        "train_loss": 10.0 / (epoch + 1) + launch,
        "train_lr": 1e-3,
        "train_loss_ce": 1.0 / (epoch + 1),
        "test_loss": 12.0 / (epoch + 1) + launch,
        "test_coco_eval_bbox": [0.1 + epoch / 100, 0.3 + epoch / 100, *([0.05] * 10)],
    }


def test_an_epoch_counter_that_starts_again_is_the_axis_of_two_runs(tmp_path: Path) -> None:
    rows = [_detr_record(e, 0) for e in range(6)] + [_detr_record(e, 1) for e in range(9)]
    log = read_log([_lines(tmp_path / "log.txt", rows)])
    runs = [log, *log.segments]
    assert len(runs) == 2
    assert [r.step_range for r in runs] == [(0, 5), (0, 8)]
    assert all("epoch" not in r.metrics for r in runs)
    assert runs[0].series("loss")[1][-1] == pytest.approx(10.0 / 6)
    assert runs[1].series("loss")[1].shape == (9,)


def test_an_epoch_repeated_by_the_next_record_is_no_axis(tmp_path: Path) -> None:
    rows = [{"epoch": e // 2, "loss": 2.0 - i / 10} for i, e in enumerate(range(8))]
    log = read_log([_lines(tmp_path / "log.jsonl", rows)])
    assert not log.segments and log.step_range == (0, 7)


def test_the_coco_summary_list_gives_ap_and_ap50(tmp_path: Path) -> None:
    rows = [_detr_record(e, 0) for e in range(4)]
    log = read_log([_lines(tmp_path / "log.txt", rows)])
    steps, ap = log.series("test_coco_eval_bbox_ap")
    assert list(steps) == [0, 1, 2, 3] and ap[-1] == pytest.approx(0.13)
    assert log.series("test_coco_eval_bbox_ap50")[1][0] == pytest.approx(0.3)


def test_a_list_of_another_length_is_no_coco_summary() -> None:
    import pyarrow as pa

    table = pa.table({"epoch": [0, 1], "test_coco_eval_bbox": [[0.1, 0.2, 0.3], [0.2, 0.3, 0.4]]})
    out = with_coco_headline(table)
    assert out.column_names == ["epoch"]


def test_lightning_grad_2_norm_is_the_grad_norm(tmp_path: Path) -> None:
    lines = ["train_loss_step,grad_2_norm_step,epoch,step,train_loss_epoch,grad_2_norm_epoch"]
    lines += [f"{0.5 - s / 1000},{3.0 + s / 100},0,{s},," for s in range(9, 100, 10)]
    lines += ["0.4,,0,99,0.45,3.4"]
    path = tmp_path / "metrics.csv"
    path.write_text("\n".join(lines) + "\n")
    log = read_log([path])
    steps, norm = log.series("grad_norm")
    assert steps.shape == (10,) and norm[0] == pytest.approx(3.09)
    assert "grad_2_norm_epoch" in log.metrics


def test_the_one_changing_loss_field_is_the_loss_and_steps_time_the_step_time(tmp_path: Path) -> None:
    rows = [
        {
            "loss_tgt_mean": 1.0 - s / 20,
            "loss_scaled": (1.0 - s / 20) / 512,
            "vicreg_loss": 0.0,
            "lr": 3e-4,
            "grad_norm": 0.1 + (s % 3) / 100,
            "steps_time": 9 + (s % 2),
            "step": s,
        }
        for s in range(8)
    ]
    log = read_log([_lines(tmp_path / "metrics.jsonl", rows)])
    assert log.series("loss")[1][0] == pytest.approx(1.0)
    assert log.meta["loss_source"] == {"name": "loss_tgt_mean", "kind": "training"}
    assert {"loss_tgt_mean", "loss_scaled"} <= set(log.metrics)
    assert list(log.series("step_time_s")[1][:2]) == [9.0, 10.0]


def test_two_changing_loss_fields_choose_none() -> None:
    import pyarrow as pa

    table = pa.table({"step": [0, 1, 2], "loss_kl": [0.1, 0.2, 0.3], "loss_recon": [3.0, 2.0, 1.0]})
    assert sole_loss(table, ["loss_kl", "loss_recon"]) is None
    flat = pa.table({"step": [0, 1, 2], "loss_kl": [0.0, 0.0, 0.0], "loss_recon": [3.0, 2.0, 1.0]})
    assert sole_loss(flat, ["loss_kl", "loss_recon"]) == "loss_recon"


def _cyclegan_line(epoch: int, iters: int, d: float, g: float, cycle: float) -> str:
    return (
        f"(epoch: {epoch}, iters: {iters}, time: 0.125, data: 0.002) D_A: {d:.3f} G_A: {g:.3f} cycle_A: {cycle:.3f} "
        f"idt_A: 0.500 D_B: {d:.3f} G_B: {g:.3f} cycle_B: {cycle:.3f} idt_B: 0.400 "
    )


def test_a_collapsed_resumed_cyclegan_launch_keeps_its_gan_terms_and_the_epoch_length(tmp_path: Path) -> None:
    # an epoch of 250 images printed every 100: epoch 2 starts at iters 50, epoch 3 at 100
    first = ["================ Training Loss (Mon May  6 10:00:00 2024) ================"]
    marks = [(1, 100), (1, 200), (2, 50), (2, 150), (2, 250), (3, 100), (3, 200)]
    first += [_cyclegan_line(e, i, 0.3 - n / 100, 0.5 + n / 10, 2.0 - n / 10) for n, (e, i) in enumerate(marks)]
    resumed = ["================ Training Loss (Mon May  6 12:00:00 2024) ================"]
    resumed += [_cyclegan_line(3, i, 0.0, 1.0, 1.0 + i / 1000) for i in (100, 200, 300, 400, 500, 600)]
    path = tmp_path / "loss_log.txt"
    path.write_text("\n".join(first + resumed) + "\n")
    log = read_log([path])
    runs = [log, *log.segments]
    assert len(runs) == 2
    assert runs[0].step_range == (100, 700)
    assert runs[1].step_range == (600, 1100)  # (3 - 1) * 250 + iters, the length launch 1 measured
    assert {"D_A", "G_A", "D_B", "G_B"} <= set(runs[1].metrics)
    assert not {"D_A", "G_A"} & set(runs[1].meta.get("log_settings", {}))


def test_gan_terms_need_both_sides() -> None:
    assert gan_terms(["G_A", "D_A", "cycle_A"]) == ["D_A", "G_A"]
    assert gan_terms(["D_model", "loss"]) == []
