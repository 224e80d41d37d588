"""Issue #31, round 25 (docs/diagnosis.md, "round 25: r25a"): log shapes that were refused or read with junk
names, each on a synthetic input: a CSV numbered by pandas' unnamed index, a Python ``logging`` console appended by
several launches, an ``Epoch [e/E], Step [s/S]`` console resumed after a Chinese note, a Megatron field missing its
``|``, a W&B history's ``_runtime`` and a timer key that ends in its unit."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ingest.formats import read_log
from ingest.formats._common import ParsedLog
from ingest.formats.csv_wide import INDEX_STEP_SOURCE
from ingest.formats.line_pairs import line_pairs


def _all_steps(log: ParsedLog, metric: str) -> list[int]:
    """The steps of ``metric`` over every run of ``log`` (the first run and its segments), in file order."""
    return [int(s) for run in (log, *log.segments) if metric in run.metrics for s in run.series(metric)[0]]


def test_pandas_index_column_is_the_step(tmp_path: Path) -> None:
    # a Trainer log_history saved with DataFrame.to_csv: the index column's header cell is empty, the epoch fractional
    rows = ["0,0.09,2025-05-14 14:26:00,2.79,0.24,0.0003", "1,0.18,-,2.43,0.20,0.0003"]
    rows += [
        f"{i},{0.09 * (i + 1):.2f},{f'2025-05-14 14:{26 + i // 11:02d}:00' if i % 11 == 0 else '-'},"
        f"{2.0 - i / 100:.3f},0.3,0.0003"
        for i in range(2, 60)
    ]
    path = tmp_path / "train_log.csv"
    path.write_text(",epoch,time,loss,grad_norm,learning_rate\n" + "\n".join(rows) + "\n")
    log = read_log([path])
    steps, _ = log.series("loss")
    assert steps.tolist() == list(range(60))
    assert log.meta.get("step_source") == INDEX_STEP_SOURCE
    assert "epoch" not in log.metrics and "" not in log.metrics
    # the wall-clock stamps on each epoch's first row time the steps between them (60 s over 11 steps)
    t_steps, per_step = log.series("step_time_s")
    assert t_steps.tolist() == [11, 22, 33, 44, 55]
    assert np.allclose(per_step, 60.0 / 11)


def test_an_index_that_goes_back_is_no_step(tmp_path: Path) -> None:
    path = tmp_path / "table.csv"
    path.write_text(",epoch,loss\n3,1,2.0\n1,2,1.9\n2,3,1.8\n")
    log = read_log([path])
    assert log.series("loss")[0].tolist() == [1, 2, 3]  # the whole epoch stays the axis


def test_logging_console_of_relaunches_is_read(tmp_path: Path) -> None:
    # '<date time,ms> - INFO - ' prefixes; the first line is no metric line; each launch restarts its batch counter,
    # so the file ends on a batch below its first one (12 < 25); a 'nan' loss is a record, not a dropped line
    lines = ["2024-11-03 10:46:40,816 - INFO - Checkpoint saved to checkpoints/checkpoint.pth"]
    for launch, (first, last) in enumerate(((25, 500), (2, 40), (6, 12))):
        lines.append(f"2024-11-03 1{launch}:00:00,000 - INFO - PyTorch version 2.5.0 available.")
        step_by = 25 if first == 25 else 2
        for n, b in enumerate(range(first, last + 1, step_by)):
            loss = "nan" if (launch, n) == (2, 1) else f"{1.0 + 0.01 * n:.4f}"
            lines.append(
                f"2024-11-03 1{launch}:{n // 60:02d}:{n % 60:02d},5 - INFO - Epoch 1, Batch {b}, "
                f"Training Loss: {loss}, Validation Loss: {0.5 + 0.001 * n:.4f}"
            )
    path = tmp_path / "training.log"
    path.write_text("\n".join(lines) + "\n")
    log = read_log([path])
    steps = _all_steps(log, "loss")
    # the third launch resumes at batch 6 (a step that goes back, not to the first: a rollback over the second's 6-40)
    assert steps == [*range(25, 501, 25), 2, 4, 6, 8, 10, 12]
    values = np.concatenate([run.series("loss")[1] for run in (log, *log.segments) if "loss" in run.metrics])
    assert int(np.isnan(values).sum()) == 1
    assert len(values) == 20 + 2 + 4


def test_a_latin_word_glued_after_chinese_text_is_a_key() -> None:
    keys = [k for k, _, _ in line_pairs("中途中断了，2023.09.20.17：40继续Epoch [1/500], Step [1/6], Loss: 0.5394")]
    assert keys == ["Epoch", "Step", "Loss"]


def test_epoch_step_console_resumed_after_a_note(tmp_path: Path) -> None:
    def launch(epochs: int) -> list[str]:
        out: list[str] = []
        for e in range(1, epochs + 1):
            out += [f"Epoch [{e}/50], Step [{s}/6], Loss: {1.0 / (e + s):.4f}" for s in range(1, 7)]
            out.append(out[-1])  # the epoch's last batch written twice: one record
        return out

    second = launch(15)
    path = tmp_path / "loss_log.txt"
    path.write_text("\n".join([*launch(12), "", "中途中断了，继续" + second[0], *second[1:]]) + "\n")
    log = read_log([path])
    runs = [run.series("loss")[0].tolist() for run in (log, *log.segments) if "loss" in run.metrics]
    # two launches, each counted by the global step (e - 1) * 6 + s from 1: the note does not cut a run of its own
    assert runs == [list(range(1, 73)), list(range(1, 91))]


def test_megatron_pairs_without_a_pipe_between_are_split(tmp_path: Path) -> None:
    line = (
        " iteration        {i}/   25000 | consumed samples:         {c} | elapsed time per iteration (ms): 35868.8 |"
        " learning rate: 2.000E-07 | global batch size:  1080 | lm loss: 1.394677E+01 | loss scale: 1.0 |"
        " grad norm: 37.346 | number of skipped iterations:   0 | number of nan iterations:   0 |"
        " iteration time: 35.869 s samples/sec: 30.1 | TFLOPS: 386.4 |"
    )
    path = tmp_path / "megatron.log"
    path.write_text("\n".join(line.format(i=i, c=1080 * i) for i in range(1, 21)) + "\n")
    log = read_log([path])
    assert not [m for m in log.metrics if m[:1].isdigit() or "samples/sec" in m]
    assert np.allclose(log.series("samples_per_s")[1], 30.1)
    assert np.allclose(log.series("step_time_s")[1], 35.8688)


def test_pandas_index_beside_a_step_column_is_no_metric(tmp_path: Path) -> None:
    # a W&B run history saved with to_csv: the unnamed index beside '_step'; '_runtime' is W&B's elapsed clock
    rows = [f"{i},{i},{10.0 * i + 5.0:.1f},{1.0 - i / 100:.3f}" for i in range(30)]
    path = tmp_path / "wandb_history.csv"
    path.write_text(",_step,_runtime,train/loss\n" + "\n".join(rows) + "\n")
    log = read_log([path])
    assert "metric" not in log.metrics and "_runtime" not in log.metrics
    steps, per_step = log.series("step_time_s")
    assert steps.tolist() == list(range(1, 30))
    assert np.allclose(per_step, 10.0)


def test_a_timer_key_that_ends_in_its_unit_is_the_step_time(tmp_path: Path) -> None:
    # nanochat's 'dt_ms' is nanoGPT's per-step delta time: the alias table names it the step time (r25c); another
    # timer key that ends in its unit ('elapsed_ms') is a time in that unit, proposed as the step time
    lines = [
        f"[2026-06-25 19:36:{i:02d}] step {i:06d} | loss {5.0 - i / 50:.6f} | lrm 1.0000 | dt_ms 7255.5"
        for i in range(40)
    ]
    path = tmp_path / "speedrun.log"
    path.write_text("\n".join(lines) + "\n")
    log = read_log([path])
    assert np.allclose(log.series("step_time_s")[1], 7.2555) and "dt_s" not in log.metrics
    path.write_text("\n".join(line.replace("| lrm 1.0000 | dt_ms", "| elapsed_ms") for line in lines) + "\n")
    log = read_log([path])
    assert log.meta["proposed_map"] == {"elapsed_s": "step_time_s"}
    assert np.allclose(log.series("elapsed_s")[1], 7.2555)


def test_the_import_says_what_it_took_for_the_step(tmp_path: Path) -> None:
    from ingest.importing.importer import import_logs
    from ingest.services.run_analyses import open_analysed_store

    path = tmp_path / "train_log.csv"
    path.write_text(
        ",epoch,loss\n" + "\n".join(f"{i},{0.1 * (i + 1):.1f},{2.0 - i / 50:.3f}" for i in range(20)) + "\n"
    )
    store = open_analysed_store(tmp_path / "store")
    (out,) = import_logs(store, [path], run="idx")
    assert out["step_source"] == INDEX_STEP_SOURCE and out["steps"] == [0, 19]
