"""Round 25, r25b (issue #31): runs kept apart where a file holds several launches: Hugging Face Trainer consoles
whose dicts carry no step, MMEngine scalar logs with validation records, CSV files that every launch appends to
with its header, text consoles relaunched from the start (docs/diagnosis.md, "Rules added in round 25": r25b)."""

from __future__ import annotations

import json
from pathlib import Path

from ingest.formats import detect, read_log
from tests.log_text import write_lines


def _dict(loss: float, i: int) -> str:
    """The i-th training dict of a run of 13 steps an epoch logging every 5 steps."""
    epoch = round(5 * i / 13, 2)
    return f"{{'loss': {loss}, 'grad_norm': {3.0 + i}, 'learning_rate': {1e-5 / i}, 'epoch': {epoch}}}"


def _hf_launch(losses: list[float], crash_after: int | None = None) -> list[str]:
    """One Trainer.train() call of 10 epochs x 13 steps logging every 5: an evaluation results dict (numpy scalars,
    no training key) at epoch 0, the training dicts, the summary dict (none where it crashed)."""
    lines = [
        "  [run]  model x method ...",
        "{'forget_quality': np.float64(0.64), 'model_utility': np.float64(0.43), 'epoch': 0}",
    ]
    for i, loss in enumerate(losses, 1):
        if crash_after is not None and i > crash_after:
            return [*lines, "Traceback (most recent call last):", "RuntimeError: CUDA error"]
        lines.append(f"  4%|▍         | {5 * i}/130 [02:46<31:03, 14.91s/it]")
        lines.append(_dict(loss, i))
        if i % 3 == 0:
            lines.append(
                f"{{'forget_quality': np.float64({0.5 / i}), 'model_utility': np.float64(0.4), 'epoch': {i // 3}.0}}"
            )
    lines.append("{'train_runtime': 3094.45, 'train_samples_per_second': 1.293, 'train_loss': -37.3, 'epoch': 10.0}")
    return lines


def test_hf_trainer_calls_in_one_console_are_runs_each_on_its_own_steps(tmp_path: Path) -> None:
    """A pipeline's consecutive train() calls: the epoch goes back to the run's first (0.38 after 10.0) and a summary
    dict ends each call; a call that crashed prints none, the next one's epoch back at the first still starts a run."""
    first = [-1.0 - i for i in range(26)]
    second = [15.0 - 0.1 * i for i in range(26)]
    third = [2.0 - 0.01 * i for i in range(26)]
    lines = [*_hf_launch(first), *_hf_launch(second, crash_after=20), *_hf_launch(third)]
    path = write_lines(tmp_path, "phase3_run.log", lines)
    assert detect([path])[0][0] == "hf_console"
    log = read_log([path])
    assert len(log.segments) == 2
    steps, loss = log.series("loss")
    assert steps.tolist() == [5 * i for i in range(1, 27)] and loss[-1] == first[-1]
    crashed, last = log.segments
    assert crashed.series("loss")[0].tolist() == [5 * i for i in range(1, 21)]
    assert crashed.series("loss")[1][0] == 15.0 and last.series("loss")[1][0] == 2.0
    # the evaluation results dict (numpy scalars, no training key) is an evaluation's metrics, in its own run
    assert any("forget_quality" in name for name in log.metrics)
    fq = next(name for name in last.metrics if "forget_quality" in name)
    assert last.series(fq)[1][0] == 0.64


def test_an_epoch_that_goes_back_within_a_run_is_no_new_run(tmp_path: Path) -> None:
    """A resume to a checkpoint after the run's first log (epoch back to 0.77, above the first 0.38) stays one run."""
    lines = [_dict(3.0 - 0.1 * i, i) for i in [1, 2, 3, 4, 5, 2, 3, 4, 5, 6]]
    log = read_log([write_lines(tmp_path, "console.log", lines)])
    assert not log.segments


def _mm_train(step: int, loss: float) -> str:
    return json.dumps(
        {"lr": 1e-05, "data_time": 0.2, "grad_norm": 20.0 + step, "loss": loss, "time": 0.34, "epoch": 1, "iter": step}
        | {"memory": 5600, "step": step}
    )


def _mm_val(score: float, seconds: float) -> str:
    return json.dumps({"coco/bbox_mAP": score, "coco/bbox_mAP_50": score, "data_time": 0.1, "time": seconds, "step": 0})


def test_an_iteration_loops_validation_records_at_step_0_are_no_restart(tmp_path: Path) -> None:
    """MMEngine's scalars.json of an IterBasedTrainLoop: every validation record says ``"step": 0`` (the epoch such
    a loop never counts). Three launches appended: each validation record goes at the iteration before it, in the
    launch it ran in; the steps back at 1 alone start runs."""
    lines = []
    steps = [1, *range(50, 1550, 50)]
    for launch in range(3):
        for step in steps:
            lines.append(_mm_train(step, 40.0 - step / 50 - launch))
            if step % 500 == 0 and launch != 1:
                lines.append(_mm_val(step / 5000, 0.16 + launch))  # equal scores in two launches: two records
    path = write_lines(tmp_path, "scalars.json", lines)
    log = read_log([path])
    assert len(log.segments) == 2
    for run in (log, *log.segments):
        assert run.series("loss")[0].tolist() == steps
        assert run.series("step_time_s")[1].tolist() == [0.34] * 31  # the evaluation's own time is not a step's
    assert log.series("coco/bbox_mAP")[0].tolist() == [500, 1000, 1500]
    assert "coco/bbox_mAP" not in log.segments[0].metrics
    assert log.segments[1].series("coco/bbox_mAP")[0].tolist() == [500, 1000, 1500]


def test_a_csv_header_written_again_starts_a_launch(tmp_path: Path) -> None:
    """Six launches appended to one epoch CSV, each after its header line: a launch of one row, and launches that go
    on at the epoch the one before ended at (19 after 19), are runs of their own; no row is dropped."""
    header = "epoch,train_loss,val_loss"
    launches = [[0, 1], [0], list(range(11)), list(range(20)), [19], list(range(19, 35))]
    lines = []
    for k, epochs in enumerate(launches):
        lines.append(header)
        lines += [f"{e},{0.06 - 0.001 * e + 0.0001 * k},{0.07 - 0.001 * e}" for e in epochs]
    log = read_log([write_lines(tmp_path, "train_log.csv", lines)])
    runs = [log, *log.segments]
    assert [run.series("loss")[0].tolist() for run in runs] == launches
    assert all(run.series("val_loss")[0].shape[0] == len(epochs) for run, epochs in zip(runs, launches, strict=True))


def _launch_head(batch_size: int) -> list[str]:
    return [
        "2022-05-08 18:17:42,722 - INFO - using device:cuda:0",
        f"2022-05-08 18:17:45,410 - INFO - args:Namespace(batch_size={batch_size}, epochs=5, log_step=10)",
        "2022-05-08 18:17:45,410 - INFO - start training",
    ]


def _batch(n: int, loss: float) -> str:
    return f"2022-05-08 18:20:00,000 - INFO - batch {n} of epoch 1, loss {loss}, batch_acc 0.4, lr [{n * 1e-8}]"


def test_a_relaunch_that_counts_from_its_start_is_a_run_not_a_resume(tmp_path: Path) -> None:
    """A console relaunched three times (its start-up lines printed again): the first launch logs every batch
    (1..300), the next ones every 10th (10, 20, ...). A step back to 10 after 300 is no resume: a resume from a
    checkpoint at batch c logs c + 10 first, more than its logging interval; a launch from scratch logs 10."""
    lines = [*_launch_head(8), *[_batch(n, 4.9 - n / 1000) for n in range(1, 301)]]
    lines += [*_launch_head(8), *[_batch(n, 4.5 - n / 10000) for n in range(10, 4050, 10)]]
    lines += [*_launch_head(4), *[_batch(n, 4.7 - n / 10000) for n in range(10, 240, 10)]]
    log = read_log([write_lines(tmp_path, "train.log", lines)])
    runs = [log, *log.segments]
    assert [run.series("loss")[0][[0, -1]].tolist() for run in runs] == [[1, 300], [10, 4040], [10, 230]]
    assert not any(event.kind == "rollback" for run in runs for event in run.events)


def test_a_relaunch_that_resumes_from_a_checkpoint_stays_in_its_run(tmp_path: Path) -> None:
    """The same console, its second launch resumed from the checkpoint at batch 200: it logs 210 first (more than its
    interval of 10), a rewind of the run, not a run of its own."""
    lines = [*_launch_head(8), *[_batch(n, 4.9 - n / 1000) for n in range(10, 310, 10)]]
    lines += [*_launch_head(8), *[_batch(n, 4.5 - n / 10000) for n in range(210, 500, 10)]]
    log = read_log([write_lines(tmp_path, "train.log", lines)])
    assert not log.segments
