"""Layouts of batch 9's logs, each on a few lines written here from the trainer's layout (issue #31)."""

from __future__ import annotations

from pathlib import Path

import pytest

from ingest.formats import read_log


def _megatron_line(step: int, total: int, batch: int, loss: float) -> str:
    return (
        f" iteration {step:8d}/{total:8d} | consumed samples: {step * batch:10d} | elapsed time per iteration (ms):"
        f" 1500.0 | learning rate: 1.000E-04 | global batch size: {batch:5d} | lm loss: {loss:.6E} |"
        " loss scale: 1.0 | grad norm: 1.250 | number of skipped iterations:   0 | number of nan iterations:   0 |"
    )


def test_megatron_constant_global_batch_size_is_a_setting_not_a_series(tmp_path: Path) -> None:
    # no argument dump: the iteration lines are the only place the batch size is stated
    path = tmp_path / "train.log"
    path.write_text("\n".join(_megatron_line(i, 6, 16, 10.0 - 0.1 * i) for i in range(1, 7)) + "\n")
    parsed = read_log([path])
    assert parsed.format.startswith("megatron")
    assert "global_batch_size" not in parsed.metrics
    assert parsed.meta["global_batch_size"] == 16
    assert parsed.series("loss")[1].tolist() == pytest.approx([9.9, 9.8, 9.7, 9.6, 9.5, 9.4])


def test_megatron_constant_batch_size_of_each_run_of_a_file_is_its_setting(tmp_path: Path) -> None:
    # two runs in one file (the second starts again at iteration 1), each with its own batch size
    lines = [_megatron_line(i, 4, 16, 10.0 - 0.1 * i) for i in range(1, 5)]
    lines += [_megatron_line(i, 3, 32, 9.0 - 0.1 * i) for i in range(1, 4)]
    path = tmp_path / "train.log"
    path.write_text("\n".join(lines) + "\n")
    parsed = read_log([path])
    runs = [parsed, *parsed.segments]
    assert len(runs) == 2
    assert [r.meta["global_batch_size"] for r in runs] == [16, 32]
    assert not any("global_batch_size" in r.metrics for r in runs)


def test_megatron_batch_size_rampup_stays_a_series(tmp_path: Path) -> None:
    batches = [16, 16, 32, 32, 48, 48]
    path = tmp_path / "train.log"
    path.write_text("\n".join(_megatron_line(i, 6, b, 10.0 - 0.1 * i) for i, b in enumerate(batches, start=1)) + "\n")
    parsed = read_log([path])
    steps, values = parsed.series("global_batch_size")
    assert steps.tolist() == [1, 2, 3, 4, 5, 6]
    assert values.tolist() == batches


def test_megatron_memory_line_reserved_memory_is_a_canonical_metric(tmp_path: Path) -> None:
    from stab_core.metrics import CANONICAL_METRICS, unit_of

    lines = [_megatron_line(i, 3, 16, 10.0 - 0.1 * i) for i in range(1, 4)]
    lines.insert(
        1,
        "[Rank 0] (after 1 iterations) memory (MB) | allocated: 2048.0 | max allocated: 3072.0"
        " | reserved: 4096.0 | max reserved: 5120.0",
    )
    path = tmp_path / "train.log"
    path.write_text("\n".join(lines) + "\n")
    parsed = read_log([path])
    # MB as printed, GiB stored (the canonical memory unit)
    assert parsed.series("gpu_mem_reserved_gb", 0)[1].tolist() == [4.0]
    assert parsed.series("gpu_mem_max_reserved_gb", 0)[1].tolist() == [5.0]
    assert "gpu_mem_reserved_gb" in CANONICAL_METRICS and unit_of("gpu_mem_reserved_gb") == "GB"


def _lf_line(step: int, loss: float, throughput: str, tokens: int) -> str:
    return (
        f'{{"current_steps": {step}, "total_steps": 40, "loss": {loss}, "learning_rate": 5e-05, "epoch": 0.{step},'
        f' "percentage": {step * 2.5}, "elapsed_time": "0:0{step}:00", "remaining_time": "0:30:00",'
        f' "throughput": "{throughput}", "total_tokens": {tokens}}}'
    )


def test_llamafactory_all_zero_throughput_and_tokens_are_not_measured(tmp_path: Path) -> None:
    path = tmp_path / "trainer_log.jsonl"
    path.write_text("\n".join(_lf_line(i, 2.0 - 0.1 * i, "0.00", 0) for i in range(1, 5)) + "\n")
    parsed = read_log([path])
    assert parsed.format == "llamafactory"
    assert "throughput" not in parsed.metrics and "tokens" not in parsed.metrics
    assert sorted(parsed.meta["placeholders_dropped"]) == ["throughput", "tokens"]
    assert parsed.series("loss")[1].tolist() == pytest.approx([1.9, 1.8, 1.7, 1.6])


def test_llamafactory_measured_throughput_is_kept(tmp_path: Path) -> None:
    path = tmp_path / "trainer_log.jsonl"
    lines = [_lf_line(i, 2.0 - 0.1 * i, f"{1500.0 + i:.2f}", 4096 * i) for i in range(1, 5)]
    path.write_text("\n".join(lines) + "\n")
    parsed = read_log([path])
    assert parsed.series("throughput")[1].tolist() == [1501.0, 1502.0, 1503.0, 1504.0]
    assert parsed.series("tokens")[1].tolist() == [4096, 8192, 12288, 16384]


def test_two_writers_of_one_log_are_not_rewinds_but_a_resume_is(tmp_path: Path) -> None:
    # two processes append the same lines (srun launching the trainer twice): first in step, then one
    # lags a line behind (1020 1010 1030 1020 ...); then the job dies at 1060 and resumes from the
    # 1000 checkpoint, both writers re-logging 1010..1060 before going on
    first = [10 * s for s in range(100, 103)]
    # ... and catches up again (1040 1030 1050 1040 1050 1060 1060: the copy of 1050 comes before 1060)
    lagged = [1000, 1000, 1010, 1020, 1010, 1030, 1020, 1040, 1030, 1050, 1040, 1050, 1060, 1060]
    resumed = [s for s in range(1010, 1090, 10) for _ in range(2)]
    steps = [s for s in first if s < 1000] + lagged + resumed
    loss = {s: 2.0 - s / 1000 for s in steps}
    lines = [_lf_line(s, round(loss[s], 4), "0.00", 0) for s in steps]
    path = tmp_path / "trainer_log.jsonl"
    path.write_text("\n".join(lines) + "\n")
    parsed = read_log([path])
    rollbacks = [e for e in parsed.events if e.kind == "rollback"]
    assert [(e.detail["replayed_from"], e.detail["replayed_to"]) for e in rollbacks] == [(1010, 1060)]
    got_steps, values = parsed.series("loss")
    assert got_steps.tolist() == list(range(1000, 1090, 10))
    assert values.tolist() == pytest.approx([round(loss[s], 4) for s in range(1000, 1090, 10)])


def test_tab_separated_table_with_a_header_is_read_like_a_csv(tmp_path: Path) -> None:
    # what `print(f"{step}\t{loss}")` under a 'step\tloss' header writes, under any file name
    path = tmp_path / "train.log"
    path.write_text("step\tloss\n10\t8.460716\n20\t7.688958\n30\t7.206179\n40\tnot-a-number-row\textra\n50\t6.5\n")
    parsed = read_log([path])
    assert parsed.format == "csv_wide"
    assert parsed.metrics == ["loss"]
    steps, values = parsed.series("loss")
    assert steps.tolist() == [10, 20, 30, 50]
    assert values.tolist() == [8.460716, 7.688958, 7.206179, 6.5]
    assert parsed.skipped == 1  # the row with a cell too many, counted with its line
    assert parsed.skipped_examples[0][1] == 5


def test_hf_console_dicts_quoted_after_text_are_not_logs(tmp_path: Path) -> None:
    lines = [
        "fsdp_config={'min_num_params': 0, 'xla': False},",
        "{'loss': 1.1409, 'grad_norm': 2.75, 'learning_rate': 1.8e-05, 'epoch': 0.91}",
        "Non-default generation parameters: {'max_length': 512, 'num_beams': 4, 'forced_eos_token_id': 102}",
        " 20%|###   | 1098/5490 [10:04<38:38,  2.13it/s]{'loss': 0.9, 'grad_norm': 2.1, 'learning_rate': 1.6e-05,"
        " 'epoch': 1.82}",
        "{'eval_loss': 0.66, 'eval_runtime': 2725.77, 'epoch': 2.0}",
    ]
    path = tmp_path / "console.txt"
    path.write_text("\n".join(lines) + "\n")
    parsed = read_log([path])
    assert parsed.format == "hf_console"
    assert not {"min_num_params", "max_length", "num_beams", "forced_eos_token_id"} & set(parsed.metrics)
    assert parsed.series("loss")[1].tolist() == [1.1409, 0.9]
    assert parsed.series("val_loss")[1].tolist() == [0.66]


def test_one_short_rewind_without_a_second_writer_is_a_restart(tmp_path: Path) -> None:
    steps = [10, 20, 30, 40, 50, 40, 50, 60]  # resumed from the step-30 checkpoint
    path = tmp_path / "trainer_log.jsonl"
    path.write_text("\n".join(_lf_line(s, 2.0 - i / 100, "0.00", 0) for i, s in enumerate(steps)) + "\n")
    parsed = read_log([path])
    rollbacks = [e for e in parsed.events if e.kind == "rollback"]
    assert [(e.detail["replayed_from"], e.detail["replayed_to"]) for e in rollbacks] == [(40, 50)]
    assert parsed.series("loss")[1].tolist() == pytest.approx([2.0, 1.99, 1.98, 1.95, 1.94, 1.93])


def test_modded_nanogpt_fork_tok_per_s_is_the_throughput(tmp_path: Path) -> None:
    lines = [
        f"step:{i}/20000 train_loss:{7.0 - i / 10:.4f} train_time:{150 * i}ms step_avg:150.00ms tok/s:{3450000 + i}"
        for i in range(1, 5)
    ]
    path = tmp_path / "logs.txt"
    path.write_text("\n".join(lines) + "\n")
    parsed = read_log([path])
    assert parsed.format == "modded_nanogpt"
    assert "s" not in parsed.metrics
    assert parsed.series("throughput_tok_s")[1].tolist() == [3450001, 3450002, 3450003, 3450004]


def test_build_nanogpt_tok_per_sec_is_the_throughput(tmp_path: Path) -> None:
    lines = [
        f"step {10 * i} | loss: {10.0 - i:.4f} | dt: 19315.15ms | tok/sec: {6700.5 + i} | norm: 2.93 | lr: 0.000110"
        for i in range(6)
    ]
    path = tmp_path / "log.md"
    path.write_text("\n".join(lines) + "\n")
    parsed = read_log([path])
    assert parsed.series("throughput_tok_s")[1].tolist() == [6700.5, 6701.5, 6702.5, 6703.5, 6704.5, 6705.5]
