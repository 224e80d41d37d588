"""Issue #31 (docs/diagnosis.md, "Import: steps, epochs and runs"): metric files whose runs or loss were misread.
Synthetic files (own numbers) in the layouts of an appended JSON Lines history, a CSV with a line written twice, OpenAI
guided-diffusion's ``progress.csv``, a console printing cumulative training and validation clocks, a loguru console
whose launches log one step, each run by a rule of ``ingest.formats`` (docs/diagnosis.md, "Import: steps, epochs and
runs")."""

from __future__ import annotations

import json
from pathlib import Path

from ingest.formats import read_log
from ingest.formats.record_lines import LOGURU_LOCATION
from ingest.formats.run_loss import bucketed_loss


def _runs(path: Path, metric: str = "loss") -> list[list[int]]:
    log = read_log([path])
    return [run.series(metric)[0].tolist() for run in (log, *log.segments)]


def _jsonl(path: Path, rows: list[dict[str, float]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_a_jsonl_history_whose_relaunches_restart_at_step_1_holds_one_run_per_launch(tmp_path: Path) -> None:
    launches = [range(1, 4), range(1, 6), range(1, 30)]
    rows = [
        {"step": s, "loss": 0.5 + k + s / 100, "elapsed_time": 4.0 + (s % 3)} for k, r in enumerate(launches) for s in r
    ]
    log = read_log([_jsonl(tmp_path / "training_history.jsonl", rows)])
    runs = [log, *log.segments]
    assert [r.series("loss")[0].tolist() for r in runs] == [list(r) for r in launches]
    assert runs[1].series("loss")[1][0] == 1.51  # the second launch's own first value, not replaced
    assert not log.events  # fresh launches: no rollback


def test_a_jsonl_history_resumed_at_its_first_logged_step_stays_one_run_with_a_rollback(tmp_path: Path) -> None:
    # logged every 20 steps; the relaunch re-logs from step 20: not told from a resume, kept as one run
    rows = [{"step": s, "loss": 9.0 - s / 100} for s in (20, 40)]
    rows += [{"step": s, "loss": 8.9 - s / 100} for s in range(20, 201, 20)]
    log = read_log([_jsonl(tmp_path / "metrics.jsonl", rows)])
    assert not log.segments
    assert log.series("loss")[0].tolist() == list(range(20, 201, 20))
    assert [e.kind for e in log.events] == ["rollback"]


def test_lines_written_twice_are_one_record_not_a_restart(tmp_path: Path) -> None:
    launch = [{"step": s, "loss": 3.0 - s / 10} for s in range(1, 6)]
    log = read_log([_jsonl(tmp_path / "history.jsonl", launch + launch + [{"step": 6, "loss": 2.4}])])
    assert not log.segments and not log.events
    assert log.series("loss")[0].tolist() == [1, 2, 3, 4, 5, 6]
    csv = tmp_path / "metrics_table.csv"
    body = [f"{s},{3.0 - s / 10:.2f}" for s in range(0, 5)]
    csv.write_text("\n".join(["step,loss", *body, *body, "5,2.5"]) + "\n")
    assert _runs(csv) == [[0, 1, 2, 3, 4, 5]]
    account = read_log([csv]).account  # every row accounted for: the repeats as skipped, at their lines
    assert (account.read, account.parsed) == (11, 6)
    assert account.ignored["duplicate record (the same line again)"].first_lines == [7, 8, 9, 10, 11]


def test_an_elapsed_time_that_does_not_rise_on_every_step_records_is_the_step_time(tmp_path: Path) -> None:
    rows = [{"step": s, "loss": 1.0 / s, "elapsed_time": 17.0 + (s * 7) % 5} for s in range(1, 40)]
    log = read_log([_jsonl(tmp_path / "history.jsonl", rows)])
    steps, values = log.series("step_time_s")
    assert steps.tolist() == list(range(1, 40)) and values[0] == 19.0
    clock = [{"step": s, "loss": 1.0 / s, "elapsed_time": 3.0 * s} for s in range(1, 40)]
    assert "elapsed_time" not in read_log([_jsonl(tmp_path / "clock.jsonl", clock)]).metrics  # a clock


def test_a_loss_beside_its_bucket_copies_is_the_runs_loss(tmp_path: Path) -> None:
    header = "mse_cond_mean,mse_cond_q0_mean,mse_loss_mean,mse_loss_q0_mean,mse_loss_q1_mean,samples,step"
    rows = [f"0.{s + 3},0.{s + 2},0.0{s + 1},0.0{s},0.0{s + 2},{s + 1},{s * 10}" for s in range(1, 9)]
    path = tmp_path / "progress.csv"
    path.write_text("\n".join([header, *rows]) + "\n")
    log = read_log([path])
    steps, values = log.series("loss")
    assert steps.tolist() == [s * 10 for s in range(1, 9)] and values[0] == 0.02
    assert log.meta["loss_source"] == {"name": "mse_loss_mean", "kind": "training"}
    # two losses, or a copy of another loss beside it: no rule says which one
    assert bucketed_loss(["a_loss", "b_loss", "a_loss_q1"]) is None
    assert bucketed_loss(["a_loss", "b_loss_q1"]) is None
    assert bucketed_loss(["a_loss", "val_a_loss", "a_loss_q2"]) == "a_loss"


def test_cumulative_training_and_validation_clocks_are_no_metrics(tmp_path: Path) -> None:
    lines = [
        f"\tStep = {s:5d},  PSNR: {10 + s / 100:.2f},  Loss: {2.0 - s / 1000:.2e},"
        f"  Net training time: {30.0 + 0.6 * s:.1f}s,  Net validation time: {0.7 * s:.1f}s"
        for s in range(0, 1050, 50)
    ]
    path = tmp_path / "log_train.txt"
    path.write_text("Training...\n" + "\n".join(lines) + "\n")
    log = read_log([path])
    assert not [m for m in log.metrics if "training_time" in m or "validation_time" in m]
    steps, values = log.series("step_time_s")
    assert steps[0] == 50 and abs(values[0] - 0.6) < 1e-9  # the training clock's differences


def _loguru(launches: list[int]) -> str:
    out = []
    for k, n in enumerate(launches):
        out.append(f"2025-11-0{k + 1} 10:00:00.000 | INFO     | __main__:<module>:10 - Starting run")
        for i in range(n):
            out.append(
                f"2025-11-0{k + 1} 10:00:{i + 1:02d}.000 | INFO     | __main__:_log_metrics:8 - "
                f"iter={i:04d} reward={-100.0 - k * 10 - i:.4f} loss_critic={1000.0 + k * 50 + i:.4f}"
            )
    return "\n".join(out) + "\n"


def test_a_loguru_location_is_no_metric(tmp_path: Path) -> None:
    path = tmp_path / "train.log"
    path.write_text(_loguru([5, 6]))
    log = read_log([path])
    assert not any("log_metrics" in m for r in (log, *log.segments) for m in r.metrics)
    assert LOGURU_LOCATION.sub("| ", "x | INFO | __main__:_log_metrics:8 - iter=1") == "x | INFO | iter=1"
    assert LOGURU_LOCATION.sub("| ", "| tokens:5 - x") == "| tokens:5 - x"  # one name: a pair, not a location


def test_a_first_step_printed_twice_with_the_same_values_is_one_record(tmp_path: Path) -> None:
    text = _loguru([3]).splitlines()
    path = tmp_path / "train.log"
    path.write_text("\n".join([text[0], text[1], text[1], *text[2:]]) + "\n")
    assert _runs(path, "reward") == [[0, 1, 2]]


def test_an_mmcv_log_json_places_its_validation_records_at_the_training_step_before_them(tmp_path: Path) -> None:
    rows: list[dict[str, object]] = [{}, {}]
    for it in range(10, 610, 10):
        rows.append(
            {
                "mode": "train",
                "epoch": 1 + it // 100,
                "iter": it,
                "lr": 0.01,
                "loss": 2.0 - it / 1000,
                "time": 0.4,
                "data_time": 0.05,
            }
        )
        if it % 200 == 0:  # the validation record's 'iter' is the count of validation images, not a step
            rows.append(
                {"mode": "val", "epoch": 1 + it // 100, "iter": 64, "lr": 0.01, "mIoU": 0.5 + it / 10000, "aAcc": 0.9}
            )
    path = tmp_path / "None.log.json"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    log = read_log([path])
    assert not log.events and not log.segments  # no resume to step 64 at every evaluation
    assert log.series("mIoU")[0].tolist() == [200, 400, 600]
    assert log.series("loss")[0].tolist() == list(range(10, 610, 10))
    assert log.series("step_time_s")[1][0] == 0.4  # 'time' beside 'data_time' is the step's duration
