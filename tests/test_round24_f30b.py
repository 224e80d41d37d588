"""Round 24, f30b (issue #31): layouts that were refused, metrics without their role, junk metric names and
units (docs/diagnosis.md, "Rules added in round 24": f30b)."""

from __future__ import annotations

import json
from pathlib import Path

from ingest.formats import detect, read_log
from tests.log_text import write_lines


def test_a_json_object_keyed_by_step_is_a_step_keyed_metric_file(tmp_path: Path) -> None:
    """NeMo Megatron-Bridge's golden values: ``{"0": {"lm loss": .., "elapsed time per iteration (ms)": ..}, ..}``
    with run-level totals (``alloc``) beside the steps."""
    doc: dict[str, object] = {
        str(s): {"lm loss": 10.0 - 0.1 * s, "elapsed time per iteration (ms)": 230.0 + s, "GPU utilization": 270.0}
        for s in range(12)
    }
    doc["alloc"], doc["max_alloc"] = 81.9, 93.2
    path = tmp_path / "golden_values.json"
    path.write_text(json.dumps(doc, indent=4))
    log = read_log([path])
    steps, loss = log.series("loss")
    assert steps.tolist() == list(range(12)) and loss[0] == 10.0
    assert log.series("step_time_s")[1][0] == 0.23  # ms in the key: stored in seconds
    assert "alloc" not in log.metrics and "max_alloc" not in log.metrics


def _swin_train(epoch: int, total: int, loss: float) -> str:
    return (
        f"[2024-09-04 20:35:07 swin_base] (main.py 257): INFO Train: [{epoch}/{total}][0/4]\teta 0:00:03 lr 0.000100"
        f"\t wd 0.0500\ttime 0.9720 (0.9720)\tloss {loss:.4f} ({loss:.4f})\tgrad_norm 18.4493 (18.4493)"
        "\tloss_scale 65536.0000 (65536.0000)\tmem 3277MB"
    )


def _swin_eval(val: float) -> list[str]:
    return [
        "[2024-09-04 20:35:10 swin_base] (main.py 300): INFO Test: [0/4]\tTime 0.325 (0.325)\tLoss 13.2 (13.2)"
        "\tMAE 3.491 (3.491)\tMem 3952MB",
        f"[2024-09-04 20:35:10 swin_base] (main.py 306): INFO  * Average Loss: {val:.4f}, Average MAE: 3.991",
    ]


def test_a_swin_console_of_launches_is_read_one_run_per_launch_a_record_per_epoch(tmp_path: Path) -> None:
    banner = "[2024-09-04 20:10:10 swin_base] (main.py 381): INFO Full config saved to output/default/config.json"
    lines = [banner, "AMP_ENABLE: false", "  BASE_LR: 0.0001"]
    for e in range(3):
        lines += [_swin_train(e, 300, 15.0 - e), *_swin_eval(18.0 - e)]
    lines += [banner, "  BASE_LR: 0.0001"]  # a second launch resumed from epoch 2's checkpoint
    lines.append(
        "[2024-09-05 14:15:40 swin_base] (utils.py 36): INFO => loaded successfully 'ckpt_epoch_2.pth' (epoch 2)"
    )
    lines += _swin_eval(16.5)
    for e in range(3, 6):
        lines += [_swin_train(e, 300, 15.0 - e), *_swin_eval(18.0 - e)]
    path = write_lines(tmp_path, "log_rank0.txt", lines)
    assert detect([path])[0][0] == "timm_console"
    log = read_log([path])
    assert len(log.segments) == 1  # each 'Full config saved' banner starts a launch
    steps, loss = log.series("loss")
    assert steps.tolist() == [0, 1, 2] and loss.tolist() == [15.0, 14.0, 13.0]  # one line an epoch: the epoch
    assert log.series("val_loss")[1].tolist() == [18.0, 17.0, 16.0]
    assert log.series("step_time_s")[1][0] == 0.972 and log.series("grad_norm")[1][0] == 18.4493
    second = log.segments[0]
    assert second.series("loss")[0].tolist() == [3, 4, 5]
    # the resumed launch's first evaluation is the loaded checkpoint's, at its epoch
    assert second.series("val_loss")[0].tolist() == [2, 3, 4, 5]
    assert second.series("val_loss")[1][0] == 16.5
    assert "val_mae" in log.metrics and "eta" not in log.metrics


def test_a_gan_loss_key_joined_by_plus_is_one_name(tmp_path: Path) -> None:
    lines = ["================ Training Loss (Sun Aug 19 08:57:32 2018) ================"]
    lines += [
        f"(epoch: 1, iters: {i * 100}, time: 0.793) G_GAN: {28 - i:.3f} G_L1: 3421.759 D_real+fake: {-59 - i:.3f} "
        for i in range(1, 8)
    ]
    log = read_log([write_lines(tmp_path, "loss_log.txt", lines)])
    assert "D_real+fake" in log.metrics and "fake" not in log.metrics
    assert log.series("D_real+fake")[1][0] == -60.0


def test_counts_of_prompt_groups_are_bookkeeping_not_metrics(tmp_path: Path) -> None:
    rows = [
        {"iteration": i, "loss": 0.01 * i, "n_groups": 20 - i % 3, "skipped_groups": i % 3, "iter_time_s": 120.0 + i}
        for i in range(1, 12)
    ]
    path = tmp_path / "metrics.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    log = read_log([path])
    assert "loss" in log.metrics and "n_groups" not in log.metrics and "skipped_groups" not in log.metrics
    assert log.meta["log_settings"]["skipped_groups"] == 2  # kept, with its last value


def test_the_first_of_several_evaluation_sets_is_the_validation_loss(tmp_path: Path) -> None:
    history: list[dict[str, float]] = []
    for e in range(4):
        step = 100 * e
        if e:
            history.append({"epoch": float(e), "step": step, "loss": 1.0 / e, "grad_norm": 2.0, "learning_rate": 1e-5})
        for g in range(3):
            history.append(
                {"epoch": float(e), "step": step, f"eval_g{g}_loss": 5.0 - e + g, f"eval_g{g}_accuracy": 0.5}
            )
    path = tmp_path / "trainer_state.json"
    path.write_text(json.dumps({"global_step": 300, "log_history": history}))
    log = read_log([path])
    steps, val = log.series("val_loss")
    assert steps.tolist() == [0, 100, 200, 300] and val.tolist() == [5.0, 4.0, 3.0, 2.0]  # eval_g0_loss
    assert "eval_g1_loss" in log.metrics and log.meta["val_loss_source"] == "eval_g0_loss"


def test_a_lone_named_evaluation_loss_is_not_the_validation_loss(tmp_path: Path) -> None:
    rows = [{"step": s, "loss": 1.0, "eval_kl_loss": 0.1 * s} for s in range(6)]
    path = tmp_path / "log.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert "val_loss" not in read_log([path]).metrics


def test_the_scorer_compares_a_golden_value_in_the_unit_the_log_field_states() -> None:
    """The goldens write first/last values as the log prints them (``step_time_ms: 308.9``); the stored step time
    is in seconds."""
    from bench.corpus_eval import _in_stored_unit, _unit_named

    assert 0.3089 in _in_stored_unit("step_time", 308.9, {"known_fields": ["step_time_ms", "step_time"]})
    assert 0.1724 in _in_stored_unit("step_time_ms", 172.4, {"known_fields": []})
    assert _in_stored_unit("step_time_s", 0.2, {"known_fields": ["step_time_ms"]}) == [0.2]  # canonical: seconds
    assert _in_stored_unit("loss", 2.0, {"known_fields": ["loss"]}) == [2.0]
    assert _unit_named("throughput", {"throughput_tok_s": None})
    assert not _unit_named("loss", {"loss_scale": None})


def test_a_bare_time_in_milliseconds_that_does_not_rise_is_the_step_time(tmp_path: Path) -> None:
    rows = [{"event": "train", "iter": i, "loss": 3.0 - 0.01 * i, "time_ms": 8000.0 + (i % 3) * 10} for i in range(8)]
    path = tmp_path / "metrics.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    log = read_log([path])
    assert log.series("step_time_s")[1][:3].tolist() == [8.0, 8.01, 8.02] and "time_ms" not in log.metrics


def test_a_rate_column_with_a_thousands_letter_is_scaled(tmp_path: Path) -> None:
    lines = [
        f"step {47700 + 10 * i:>7d} | loss {2.0 - 0.01 * i:.4f} | lr 1.79e-04 | grad 0.075 | {37.1 + i / 10:.1f}k tok/s"
        f" | mfu 37.67%"
        for i in range(30)
    ]
    log = read_log([write_lines(tmp_path, "train.out", lines)])
    assert log.series("throughput_tok_s")[1][:2].tolist() == [37100.0, 37200.0]


def test_a_world_model_loss_beside_actor_and_critic_is_the_run_loss_and_its_grad_norm_the_runs(tmp_path: Path) -> None:
    rows = [
        {
            "step": 200 * i,
            "world_model_loss": 0.2 - 0.01 * i,
            "world_model_grad_norm": 0.8 + 0.01 * i,
            "actor_loss": 0.01,
            "value_loss": 0.7 - 0.05 * i,
            "value_grad_norm": 1.2,
        }
        for i in range(1, 9)
    ]
    path = tmp_path / "metrics.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    log = read_log([path])
    assert log.series("loss")[1][0] == 0.19 and log.meta["loss_source"]["kind"] == "world_model"
    assert log.series("grad_norm")[1][0] == 0.81
    assert "value_loss" in log.metrics and "world_model_loss" in log.metrics


def test_a_utilisation_over_100_is_no_percentage_and_keeps_its_name(tmp_path: Path) -> None:
    doc = {str(s): {"lm loss": 10.0 - 0.1 * s, "GPU utilization": 250.0 + s} for s in range(8)}
    path = tmp_path / "golden_values.json"
    path.write_text(json.dumps(doc))
    log = read_log([path])
    assert "gpu_util" not in log.metrics and log.series("GPU_utilization")[1][0] == 250.0
    doc = {str(s): {"lm loss": 10.0 - 0.1 * s, "GPU utilization": 50.0 + s} for s in range(8)}
    path.write_text(json.dumps(doc))
    assert "gpu_util" in read_log([path]).metrics  # a percentage: the canonical name


def test_a_flat_entropy_is_a_measure_not_a_setting(tmp_path: Path) -> None:
    rows = [{"step": 200 * i, "actor_loss": 0.01 * i, "actor_entropy": -0.88, "world_size": 3} for i in range(1, 9)]
    path = tmp_path / "metrics.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    log = read_log([path])
    assert "actor_entropy" in log.metrics and "world_size" not in log.metrics


def test_a_detectors_validation_loss_parts_are_no_evaluation_sets(tmp_path: Path) -> None:
    rows = [
        {"step": s, "loss": 1.0, "val_box_loss": 0.1 * s, "val_obj_loss": 0.2, "val_cls_loss": 0.3} for s in range(6)
    ]
    path = tmp_path / "log.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert "val_loss" not in read_log([path]).metrics
