"""Issues #31/#32 (docs/diagnosis.md, "Import: format readers"): key-value training consoles read fully (synthetic logs
of each shape)."""

from __future__ import annotations

from pathlib import Path

from ingest.formats import read_log


def test_short_t_clock_beside_step_avg_is_train_time(tmp_path: Path) -> None:
    path = tmp_path / "train.log"
    lines = [
        f"step:{n}/4000 loss:{4 - n / 2000:.4f} ce:{3.9 - n / 2000:.4f} t:{n * 50}ms step_avg:50.0ms\n"
        for n in range(500, 4001, 500)
    ]
    lines.insert(4, "step:2000/4000 val_loss:3.1 val_bpb:1.3 train_time:100000ms\n")
    path.write_text("".join(lines))
    log = read_log([path])
    assert "t_s" not in log.metrics
    steps, values = log.series("step_time_s", 0)
    assert steps.tolist() == list(range(1000, 4001, 500))
    assert values.round(6).tolist() == [0.05] * 7


def _kv(step: int, loss: float, runtime: float) -> str:
    return (
        f"\x1b[32m[2026-12-06 05:00:00,100] [    INFO]\x1b[0m - loss: {loss}, learning_rate: 2e-05,"
        f" global_step: {step}, interval_runtime: {runtime}, interval_samples_per_second: 3.5, epoch: 0.1\x1b[0m\n"
    )


def test_key_value_console_evaluations_and_interval_step_time(tmp_path: Path) -> None:
    path = tmp_path / "train.out"
    eval_line = (
        "\x1b[32m[2026-12-06 05:00:09,000] [    INFO]\x1b[0m - eval_loss: {}, eval_accuracy: 0.5,"
        " eval_runtime: 30.0, eval_samples_per_second: 99.0, epoch: 0.2\x1b[0m\n"
    )
    path.write_text(
        "\x1b[32m[2026-12-06 05:00:00,000] [    INFO]\x1b[0m - max_steps                     :400\x1b[0m\n"
        + _kv(20, 2.0, 8.0)
        + _kv(40, 1.8, 4.0)
        + eval_line.format(1.7)
        + _kv(60, 1.6, 34.0)
        + _kv(80, 1.5, 4.0)
        + eval_line.format(1.4)
        + "\x1b[32m[2026-12-06 05:00:10,000] [    INFO]\x1b[0m - train_runtime: 90.1, train_loss: 1.7, epoch: 0.3\n"
    )
    log = read_log([path])
    assert log.format == "kv_console"
    assert log.series("val_loss")[0].tolist() == [40, 80]
    assert log.series("val_loss")[1].tolist() == [1.7, 1.4]
    steps, seconds = log.series("step_time_s")
    assert steps.tolist() == [20, 40, 60, 80]
    assert seconds.tolist() == [0.4, 0.2, 1.7, 0.2]
    assert {"loss", "lr"} <= set(log.metrics)
    assert not {"eval_runtime", "train_runtime", "global_step", "max_steps"} & set(log.metrics)


def test_key_value_console_runs_of_different_tasks_state_their_settings(tmp_path: Path) -> None:
    path = tmp_path / "train.out"
    text = ""
    for task in ("sst", "nli"):
        text += f"[2026-12-06 05:00:00,000] [    INFO] - task_name                     :{task}\n"
        text += "[2026-12-06 05:00:00,000] [    INFO] - model_name_or_path            :tiny-model\n"
        text += "".join(_kv(step, 1.0, 3.0) for step in (10, 20, 30))
    path.write_text(text)
    log = read_log([path])
    settings = [run.meta.get("run_settings") for run in (log, *log.segments)]
    assert settings == [{"task": "sst", "model name": "tiny-model"}, {"task": "nli", "model name": "tiny-model"}]


def _coqui_step(step: int, disc: float, total: float) -> str:
    return (
        f"\x1b[1m   --> STEP: {step % 8}/8 -- GLOBAL_STEP: {step}\x1b[0m\n"
        f"     | > loss_disc: {disc}  (2.5)\n     | > loss_0: {disc}  (2.5)\n"
        f"     | > grad_norm_0: 9.0  (9.5)\n     | > loss_gen: 1.5  (1.6)\n     | > loss_mel: {total - 1.5}  (20.0)\n"
        f"     | > amp_scaler: 512.00000  (512.00000)\n     | > loss_1: {total}  (22.0)\n"
        f"     | > grad_norm_1: 30.0  (31.0)\n     | > current_lr_0: 0.00030 \n     | > current_lr_1: 0.00010 \n"
        f"     | > step_time: 0.9  (1.0)\n     | > loader_time: 0.01  (0.02)\n\n"
    )


def test_coqui_trainer_blocks_take_the_generators_optimizer_as_the_run(tmp_path: Path) -> None:
    path = tmp_path / "trainer_0_log.txt"
    path.write_text(
        " > Model has 1000 parameters\n\n\x1b[1m > TRAINING (2026-12-06 05:00:00) \x1b[0m\n\n"
        + _coqui_step(505, 2.5, 24.0)
        + _coqui_step(510, 2.4, 23.0)
        + "\x1b[1m > EVALUATION \x1b[0m\n\n  \x1b[1m--> EVAL PERFORMANCE\x1b[0m\n"
        + "     | > avg_loader_time: 3.1 \x1b[0m(+0.00000)\n     | > avg_loss_0: 2.6 \x1b[0m(+0.10000)\n"
        + "     | > avg_loss_1: 22.5 \x1b[0m(-0.50000)\n\n"
        + _coqui_step(515, 2.6, 21.0)
    )
    log = read_log([path])
    assert log.format == "coqui_trainer"
    assert log.series("loss")[1].tolist() == [24.0, 23.0, 21.0]
    assert log.series("loss_0")[1].tolist() == [2.5, 2.4, 2.6]
    assert log.series("val_loss")[0].tolist() == [510]
    assert log.series("val_loss")[1].tolist() == [22.5]
    assert log.series("lr")[1].tolist() == [0.0001] * 3
    assert log.series("grad_norm")[1].tolist() == [30.0] * 3
    assert log.series("loss_scale")[1].tolist() == [512.0] * 3
    assert log.series("step_time_s")[1].tolist() == [0.9] * 3
    assert log.meta["loss_source"] == {"name": "loss_1", "kind": "generator"}


def test_prose_is_values_with_epoch_evaluations_and_epoch_lr(tmp_path: Path) -> None:
    path = tmp_path / "train.log"
    text = "Start training!\n"
    for epoch in range(4):
        text += f"Starting epoch {epoch} current lr is {0.01 if epoch < 2 else 0.001}\n"
        for step in (10, 20, 30):
            text += f"Epoch {epoch}, Step {step}, total used time {epoch * 30 + step}.5 (s), avg loss so far is "
            text += f"{0.5 - 0.01 * (epoch * 3 + step // 10)}\n"
        text += f"Epoch {epoch}, val loss is {0.4 - 0.01 * epoch}, val mse is {0.2 - 0.01 * epoch}.\n"
        text += f"Epoch {epoch}, test mse is {0.3 - 0.01 * epoch}.\n"
    path.write_text(text)
    log = read_log([path])
    assert log.series("loss")[0].tolist() == list(range(10, 121, 10))
    assert round(log.series("loss")[1][0], 6) == 0.49
    assert log.series("val_loss")[0].tolist() == [30, 60, 90, 120]
    assert log.series("val_mse")[1].round(6).tolist() == [0.2, 0.19, 0.18, 0.17]
    assert log.series("lr")[0].tolist() == [10, 40, 70, 100]
    assert log.series("lr")[1].tolist() == [0.01, 0.01, 0.001, 0.001]
    assert "is" not in log.metrics


def test_a_config_dumps_lone_lr_is_no_step_rate(tmp_path: Path) -> None:
    path = tmp_path / "train.log"
    text = "Optimizer config:\n   lr: 0.02\n   momentum: 0.9\n"
    text += "".join(f"Epoch 0, Step {step}, avg loss so far is {1 - step / 100}\n" for step in (10, 20, 30, 40))
    path.write_text(text)
    log = read_log([path])
    assert "loss" in log.metrics and "lr" not in log.metrics


def test_key_value_console_line_without_a_whole_step_is_skipped_where_it_is(tmp_path: Path) -> None:
    # the fuzz tier found `global_step: inf` / `nan` crashing the reader (int(float('inf'))): such a line has
    # no step; it is skipped with its line number, the others are read
    path = tmp_path / "train.out"
    bad = _kv(40, 1.8, 4.0)
    path.write_text(
        _kv(20, 2.0, 8.0)
        + bad.replace("global_step: 40", "global_step: inf")
        + bad.replace("global_step: 40", "global_step: nan")
        + bad.replace("global_step: 40", "global_step: 40.5")
        + _kv(60, 1.6, 4.0)
    )
    log = read_log([path])
    assert log.format == "kv_console"
    assert log.series("loss")[0].tolist() == [20, 60]
    assert log.skipped == 3 and log.skipped_examples[0][1] == 2  # (file, line, what)


def test_a_console_step_no_int64_holds_skips_its_line(tmp_path: Path) -> None:
    # a mangled epoch counter (26 digits) made every console reader on the shared line loop fail with an
    # OverflowError: the line is skipped with its number, the rest is read
    path = tmp_path / "gan.log"
    lines = [
        f"[{e}/2][{i}/100] Loss_D: 1.{i} Loss_G: 2.{i} D(x): 0.5 D(G(z)): 0.4 / 0.3"
        for e in range(2)
        for i in range(0, 100, 10)
    ]
    lines.insert(3, "[" + "9" * 26 + "/2][10/100] Loss_D: 1.0 Loss_G: 2.0 D(x): 0.5 D(G(z)): 0.4 / 0.3")
    path.write_text("\n".join(lines) + "\n")
    log = read_log([path])
    assert log.format == "gan_console"
    assert len(log.series("loss")[0]) == 20
    assert log.skipped == 1 and log.skipped_examples[0][1] == 4
