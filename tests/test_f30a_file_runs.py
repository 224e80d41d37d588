"""Round 24, f30a (issue #31): how one file splits into runs: two launches writing one log at once,
launches appended to a metrics table, records of one step spread over several lines."""

from __future__ import annotations

import json
import math
from pathlib import Path

from ingest.formats import detect, read_log
from ingest.formats.writer_runs import writer_runs

BANNER = "================ Training Loss (Thu Dec 21 {}:00:00 2017) ================"


def _line(epoch: int, iters: int, seconds: float, g: float) -> str:
    """A line whose G_GAN is ``g`` plus a wobble (a launch's level), its other losses varying too."""
    g += (iters % 700) / 1000
    losses = f"G_GAN: {g:.3f} G_L1: {400 - g:.3f} D_real+fake: {-g:.3f} "
    return f"(epoch: {epoch}, iters: {iters}, time: {seconds:.3f}) " + losses


def test_writer_runs_follow_each_writers_own_series() -> None:
    # the first launch is at 2600 when a second starts and writes one line for each of the first's; the
    # second logs every 300 steps, the first every 100, so the second overtakes the first at about 4000
    first, second = list(range(2700, 5100, 100)), list(range(100, 7300, 300))
    steps, want = list(range(100, 2700, 100)), [0] * 26
    for a, b in zip(first, second, strict=True):
        steps += [b, a]
        want += [1, 0]
    # where the two cross, each line goes to the writer whose next step on its own grid it is
    assert writer_runs(steps) == want


def test_writer_runs_take_no_pace_from_a_damaged_time() -> None:
    # a line whose time per step reads inf or 0 (a damaged line: the fuzzer's bad value) tells no writer apart;
    # the split follows the steps as without times (it raised "math domain error" on log(x / inf))
    first, second = list(range(2700, 5100, 100)), list(range(100, 7300, 300))
    steps = list(range(100, 2700, 100))
    for a, b in zip(first, second, strict=True):
        steps += [b, a]
    for damaged in (math.inf, 0.0, -1.0, math.nan):
        pace = [0.05] * len(steps)
        pace[0] = pace[len(steps) // 2] = damaged
        assert writer_runs(steps, pace) == writer_runs(steps)


def test_writer_runs_leave_a_single_writers_restarts_alone() -> None:
    # launches one after another: each starts again at 100; nothing interleaves
    steps = [100, 200, 300, 100, 200, 100, 200, 300, 400, 500]
    assert writer_runs(steps) is None
    # a resume whose steps land once above an earlier launch's last step is no second writer
    assert writer_runs([100, 200, 250, 100, 200, 300, 400]) is None


def test_pix2pix_two_launches_writing_at_once_are_two_runs(tmp_path: Path) -> None:
    lines = [BANNER.format("09"), BANNER.format("10")]  # a launch that wrote no row is no run
    lines += [_line(1, i, 0.5, 10.0 + i / 100) for i in range(100, 600, 100)]  # a short try
    lines.append(BANNER.format("11"))
    lines += [_line(1, i, 2.7, 1.0) for i in range(100, 2700, 100)]  # the long launch alone
    lines.append(BANNER.format("12"))  # the second launch starts while the first goes on
    first = [(1, i) for i in range(2700, 3001, 100)] + [(2, i) for i in range(100, 1601, 100)]
    second = [(1, i) for i in range(100, 3001, 100)]
    a = b = 0
    while a < len(first) or b < len(second):
        for _ in range(2 if b % 3 == 0 else 1):  # the second writes a little faster
            if b < len(second):
                lines.append(_line(*second[b], 3.4, 5.0))
                b += 1
        if a < len(first):
            lines.append(_line(*first[a], 5.1, 1.0))
            a += 1
    path = tmp_path / "loss_log.txt"
    path.write_text("\n".join(lines) + "\n")
    assert detect([path])[0][0] == "pix2pix_loss_log"
    parsed = read_log([path])
    runs = [parsed, *parsed.segments]
    assert len(runs) == 3  # not one run per line that went down
    short, long_, second_run = runs
    assert short.series("G_GAN")[0].tolist() == list(range(100, 600, 100))
    steps, values = long_.series("G_GAN")
    # 3000 iterations an epoch: the long launch goes on from 2700 to epoch 2's 1600 (4600) in its own run
    assert steps.tolist() == list(range(100, 4601, 100)) and values.max() < 2.0
    assert long_.series("step_time_s")[1][-1] == 5.1
    steps, values = second_run.series("G_GAN")
    assert steps.tolist() == list(range(100, 3001, 100)) and values.min() >= 5.0
    for run in runs:
        assert not [e for e in run.events if e.kind == "rollback"]
        assert "D_real+fake" in run.metrics and "fake" not in run.metrics  # the key as printed, whole


def _d2_record(iteration: int, loss: float, eta: float) -> str:
    return json.dumps(
        {"data_time": 0.01, "eta_seconds": eta, "iteration": iteration, "lr": 1e-4, "time": 0.43, "total_loss": loss}
    )


def test_detectron2_launches_closed_by_a_bare_eta_record_are_runs(tmp_path: Path) -> None:
    lines: list[str] = []
    for n in (10, 4, 6):  # interrupted launches: their last record off the grid, then the bare closing record
        lines += [_d2_record(19 + 20 * k, 100.0 + n - k, 146000.0 - k) for k in range(n - 1)]
        last = 20 * (n - 1) + 12
        lines += [_d2_record(last, 50.0, 145000.0), json.dumps({"eta_seconds": 145000.0, "iteration": last + 1})]
    lines += [_d2_record(19 + 20 * k, 90.0 - k / 10, 3000.0 - k) for k in range(200)]
    path = tmp_path / "metrics.json"
    path.write_text("\n".join(lines) + "\n")
    parsed = read_log([path])
    runs = [parsed, *parsed.segments]
    assert [len(run.series("loss")[0]) for run in runs] == [10, 4, 6, 200]
    assert runs[0].series("loss")[1][0] == 110.0 and runs[3].series("loss")[1][0] == 90.0
    assert not [e for run in runs for e in run.events if e.kind == "rollback"]


def test_a_jsonl_relaunch_without_a_closing_record_stays_a_resume(tmp_path: Path) -> None:
    # a history whose launch re-logs from its first step with no record closing the launch before: one run
    rows = [(20, 8.56), (40, 7.9), (20, 8.55), *((s, 8.0 - s / 1000) for s in range(40, 2001, 20))]
    path = tmp_path / "metrics.jsonl"
    path.write_text("".join(json.dumps({"step": s, "loss": v, "lr": 1e-4}) + "\n" for s, v in rows))
    parsed = read_log([path])
    assert not parsed.segments and parsed.series("loss")[1][0] == 8.55


def test_lightning_evaluation_batch_rows_without_a_val_name_are_no_restart(tmp_path: Path) -> None:
    # a speech model's validation logs pesq on_step and on_epoch: its batch rows have no epoch and count
    # 0, 1, 2 ... on their own; the training rows and the epoch-end rows carry the epoch
    rows = ["epoch,pesq_epoch,pesq_step,step,train_loss_epoch,train_loss_step"]
    counter = 0
    for epoch in range(6):
        rows.append(f"{epoch},,,{50 * epoch + 49},,{2.0 - epoch / 10}")
        for _ in range(4):
            rows.append(f",,{1.1 + counter / 100},{counter},,")
            counter += 1
        rows.append(f"{epoch},{1.2 + epoch / 100},,{51 * epoch + 50},,")
        rows.append(f"{epoch},,,{51 * epoch + 50},{2.05 - epoch / 10},")
    path = tmp_path / "metrics.csv"
    path.write_text("\n".join(rows) + "\n")
    assert detect([path])[0][0] == "lightning_csv"
    parsed = read_log([path])
    assert not parsed.segments  # one run: no step back to 0 at the first evaluation batch
    assert parsed.series("loss")[0].tolist() == [50 * e + 49 for e in range(6)]
    assert parsed.series("pesq")[0].tolist() == [51 * e + 50 for e in range(6)]  # the epoch aggregate
    assert "pesq_step" not in parsed.metrics


def test_a_step_back_off_the_runs_logging_grid_is_another_launch(tmp_path: Path) -> None:
    # a run logging every 200 steps to 6000, then a launch that counts from env step 1080: not a resume of
    # the run (a resume logs on its grid again), so the run keeps its rows and no rollback is recorded
    rows = [{"step": s, "world_model_loss": 1.0 - s / 10000, "frames_per_second": 0.5} for s in range(200, 6001, 200)]
    rows += [{"step": 1080, "frames_per_second": 0.0}]
    rows += [{"step": s, "world_model_loss": 0.3, "frames_per_second": 0.6} for s in (1200, 1400)]
    # and a resume on the grid stays one run with its rollback
    rows += [{"step": s, "world_model_loss": 0.2, "frames_per_second": 0.6} for s in (1600, 1800, 2000, 2200)]
    rows += [{"step": s, "world_model_loss": 0.1, "frames_per_second": 0.6} for s in (1800, 2000)]
    path = tmp_path / "metrics.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    parsed = read_log([path])
    runs = [parsed, *parsed.segments]
    assert len(runs) == 2
    assert parsed.series("world_model_loss")[0].tolist() == list(range(200, 6001, 200))
    assert not [e for e in parsed.events if e.kind == "rollback"]
    assert [e.kind for e in runs[1].events].count("rollback") == 1
    assert runs[1].series("world_model_loss")[1][-1] == 0.1
