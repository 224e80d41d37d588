"""Issue #32 (docs/diagnosis.md, "Actions and claims"): statements said only where their check holds on the run's
data."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ingest.formats import read_log
from ingest.formats.aliases import canonical_name
from ingest.importing.importer import import_logs
from ingest.services.run_analyses import open_analysed_store
from ingest.services.run_findings import stored_findings
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
    assert holds is True and evidence["first_skipped_step"] == 61 * 15 and evidence["skipped_samples"] == 1
    assert run_facts(_amp_run([])).fp16[0] is None
    assert run_facts(_amp_run([60], loss_nan_at=(61,))).fp16[0] is None
    assert run_facts(_amp_run(list(range(60, 120)))).fp16[0] is None  # nan to the end: no skip


def _keras_fits(params: list[int], ms_per_step: list[int], epochs: int = 30) -> str:
    """A Keras console of one fit() per model, each after its model.summary() ('Total params: N'): the
    epochs restart at 1, so each fit is a run of the file."""
    lines = []
    for count, ms in zip(params, ms_per_step, strict=True):
        lines += ["_" * 65, "Layer (type)                 Output Shape              Param #", "=" * 65]
        lines += [f"Total params: {count:,}", f"Trainable params: {count:,}", "Non-trainable params: 0", "_" * 65]
        for e in range(1, epochs + 1):
            lines.append(f"Epoch {e}/{epochs}")
            loss = 3.0 / e + 0.1
            lines.append(
                f"143/143 [==============================] - {ms * 143 // 1000}s {ms}ms/step - loss: {loss:.4f} "
                f"- acc: 0.5000 - val_loss: {loss * 1.1:.4f} - val_acc: 0.4800"
            )
    return "\n".join(lines) + "\n"


def _sibling_gaps(tmp_path: Path, text: str) -> dict[str, dict | None]:
    tmp_path.mkdir()
    path = tmp_path / "training_log.txt"
    path.write_text(text)
    store = open_analysed_store(tmp_path / "store")
    report = import_logs(store, [path], run="fits")[0]
    names = [report["run"]] + [s["run"] for s in report.get("segments") or []]
    return {n: stored_findings(store, store.run_info(n)).get("throughput_siblings") for n in names}


def test_models_of_other_sizes_fitted_in_one_console_are_no_siblings(tmp_path: Path) -> None:
    # four CNNs of 115k-1.28M parameters fitted one after the other: "throughput loss: step time 14 against
    # 6 for 3 sibling run(s)" was false (other models, other step times); the same model fitted twice is
    # still compared
    gaps = _sibling_gaps(tmp_path / "a", _keras_fits([115_214, 1_277_534, 891_854], [10, 50, 30]))
    assert len(gaps) == 3 and all(gap is None for gap in gaps.values())
    same = _sibling_gaps(tmp_path / "b", _keras_fits([115_214, 115_214, 115_214], [10, 10, 30]))
    assert [gap is not None for gap in same.values()] == [False, False, True]
