"""Round 20 (f26d, issue #32): statements said only where their check holds on the run's data."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ingest.formats import read_log
from ingest.formats.aliases import canonical_name
from stab_core.action_premises import run_facts
from stab_core.analysis import analyze_run
from stab_core.runview import RunView, Series
from stab_core.skipped_steps import skipped_update_steps


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


def _amp_run(nan_at: list[int], loss_nan_at: tuple[int, ...] = ()) -> RunView:
    """A loss and grad norm logged every 15 steps, the grad norm nan at ``nan_at`` (sample indices)."""
    rng = np.random.default_rng(5)
    n = 120
    steps = np.arange(1, n + 1) * 15
    loss = 2.5 * np.exp(-np.arange(n) / 40.0) + 0.5 + rng.uniform(-0.03, 0.03, n)
    grad = 6.0 + rng.uniform(-0.8, 0.8, n)
    grad[nan_at] = np.nan
    loss[list(loss_nan_at)] = np.nan
    return RunView("amp", {"loss": Series(steps, loss), "grad_norm": Series(steps, grad)})


def test_a_loss_scalers_start_up_skips_are_no_incident() -> None:
    # fp16 AMP halving its initial scale: the grad norm nan at the first two logged steps, the loss finite
    # and the grad norm finite after: no incident (before: "grad_norm went non-finite at step 15", a spike
    # "Not back", shown on a healthy run); two nan in a row mid-run are judged as before
    shown = [(d["metric"], d["start"]) for d in analyze_run(_amp_run([0, 1])).spike_dicts()]
    assert all(start > 30 for _, start in shown)
    assert skipped_update_steps(_amp_run([0, 1]).series["grad_norm"], _amp_run([0, 1]).series["loss"]) == [15, 30]
    assert skipped_update_steps(_amp_run([0, 1, 2, 3, 4]).series["grad_norm"], _amp_run([]).series["loss"]) == []


def test_skipped_updates_make_the_run_fp16_for_the_precision_actions() -> None:
    # a nan grad norm the run went on from with its loss finite is a dynamic loss scaler's skip (fp16 AMP):
    # "Record the run's precision (fp16 or bf16)" said of it was false; without the skip, or with the loss
    # non-finite too (weights gone bad), the precision stays unknown
    holds, evidence = run_facts(_amp_run([60])).fp16
    assert holds is True and evidence["skipped_steps"] == [61 * 15]
    assert run_facts(_amp_run([])).fp16[0] is None
    assert run_facts(_amp_run([60], loss_nan_at=(61,))).fp16[0] is None
    assert run_facts(_amp_run(list(range(60, 120)))).fp16[0] is None  # nan to the end: no skip
