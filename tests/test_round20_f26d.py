"""Round 20 (f26d, issue #32): statements said only where their check holds on the run's data."""

from __future__ import annotations

from pathlib import Path

from ingest.formats import read_log
from ingest.formats.aliases import canonical_name


def test_csv_batch_index_restarting_each_epoch_is_the_step_axis(tmp_path: Path) -> None:
    # 'Epoch,Batch,...' one row per batch, the batch index restarting as the epoch grows: the rows are
    # the steps (epoch * 3 + batch), not one step per epoch holding three rows
    path = tmp_path / "training_log.csv"
    rows = [f"{e},{b},{1.0 - 0.01 * (3 * e + b)}" for e in range(4) for b in range(3)]
    path.write_text("Epoch,Batch,loss\n" + "\n".join(rows) + "\n")
    parsed = read_log([path])
    steps, values = parsed.series("loss")
    assert steps.tolist() == list(range(12))
    assert values[-1] == 1.0 - 0.01 * 11
    assert "Batch" not in parsed.metrics
    # one row per epoch beside a batch column that never restarts: the epoch stays the axis
    per_epoch = tmp_path / "per_epoch.csv"
    per_epoch.write_text("epoch,batch,loss\n0,32,3\n1,32,2.9\n2,32,2.8\n")
    assert read_log([per_epoch]).series("loss")[0].tolist() == [0, 1, 2]


def test_a_step_time_named_by_its_unit_alone_is_the_step_time(tmp_path: Path) -> None:
    # a JSONL harness's 'step_ms': the run's step time in ms, not a metric of its own ("step_time: not
    # in this run" was said of a run logging it)
    assert canonical_name("step_ms") == ("step_time_s", "ms")
    assert canonical_name("iter_sec") == ("step_time_s", "sec")
    assert canonical_name("step_s")[0] != "step_time_s"  # 'step_s' may count steps: no unit spelled
    assert canonical_name("eval_step_ms")[0] != "step_time_s"
    path = tmp_path / "metrics.jsonl"
    rows = [f'{{"step": {s}, "loss": {3 - s / 100}, "step_ms": {3700 + s % 3}}}' for s in range(1, 41)]
    path.write_text("\n".join(rows) + "\n")
    steps, values = read_log([path]).series("step_time_s")
    assert steps[0] == 1 and abs(values[0] - 3.701) < 1e-9
