"""Issues #31/#32 (docs/diagnosis.md, "Import: steps, epochs and runs"): metrics tables that hold runs back to back, a
loss column over loss terms, a validation loss that turns non-finite mid-run (synthetic files in the layouts Keras'
CSVLogger in append mode, TensorBoard's JSON and CSV downloads, Lightning's CSVLogger and a YOLO results.csv write;
own numbers)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from ingest.formats import read_log
from ingest.formats.run_loss import aggregate_loss
from stab_core.analysis import analyze_run
from stab_core.held_out import held_out_nonfinite
from stab_core.runview import RunView, Series


def _runs(path: Path) -> list[tuple[list[int], list[float]]]:
    log = read_log([path])
    out = []
    for run in (log, *log.segments):
        steps, values = run.series("loss")
        out.append((steps.tolist(), values.tolist()))
    return out


def test_an_appended_csvlogger_whose_epoch_restarts_at_0_holds_two_runs(tmp_path: Path) -> None:
    rows = ["epoch,accuracy,loss,val_loss", "0,0.5,4.0,4.5", "1,0.6,3.0,3.5"]
    rows += [f"{e},0.7,{2.0 - e / 10:.2f},2.5" for e in range(5)]  # a second fit() appended, no header
    path = tmp_path / "training.log"
    path.write_text("\n".join(rows) + "\n")
    runs = _runs(path)
    assert [r[0] for r in runs] == [[0, 1], [0, 1, 2, 3, 4]]
    assert runs[0][1] == [4.0, 3.0] and runs[1][1][0] == 2.0  # the first fit's rows are not replaced
    assert not read_log([path]).events  # a fresh run, no rollback


def test_a_csv_with_a_derived_step_time_restarting_is_cut_where_the_rows_restart(tmp_path: Path) -> None:
    rows = ["epoch,time,loss"] + [f"{e},{10.0 * (e + 1):.1f},{3.0 - e / 10:.2f}" for e in range(4)]
    rows += [f"{e},{12.0 * (e + 1):.1f},{2.0 - e / 10:.2f}" for e in range(3)]
    path = tmp_path / "results.csv"
    path.write_text("\n".join(rows) + "\n")
    log = read_log([path])
    assert len(log.segments) == 1
    assert log.series("loss")[0].tolist() == [0, 1, 2, 3]
    assert log.segments[0].series("loss")[0].tolist() == [0, 1, 2]


def test_a_resume_to_a_later_step_stays_one_run(tmp_path: Path) -> None:
    rows = ["step,loss"] + [f"{s},{3.0 - s / 100:.3f}" for s in (10, 20, 30, 40)] + ["30,2.71", "40,2.61", "50,2.5"]
    path = tmp_path / "metrics_table.csv"
    path.write_text("\n".join(rows) + "\n")
    log = read_log([path])
    assert not log.segments
    assert log.series("loss")[0].tolist() == [10, 20, 30, 40, 50]


def test_a_tensorboard_json_export_whose_step_restarts_below_its_first_holds_two_runs(tmp_path: Path) -> None:
    triples = [[1000.0 + i, s, 2.0 - i / 10] for i, s in enumerate((12, 40, 75, 110))]
    triples += [[2000.0 + i, s, 1.0 - i / 10] for i, s in enumerate((9, 50, 90))]
    path = tmp_path / "run-.-tag-loss.json"
    path.write_text(json.dumps(triples))
    assert [r[0] for r in _runs(path)] == [[12, 40, 75, 110], [9, 50, 90]]


def test_a_tensorboard_csv_download_whose_step_restarts_holds_two_runs(tmp_path: Path) -> None:
    rows = ["Wall time,Step,Value"] + [f"{1000 + s},{s},{2.0 - s / 100:.2f}" for s in (0, 10, 20)]
    rows += [f"{5000 + s},{s},{1.0 - s / 100:.2f}" for s in (0, 10)]
    path = tmp_path / "run-.-tag-loss.csv"
    path.write_text("\n".join(rows) + "\n")
    assert [r[0] for r in _runs(path)] == [[0, 10, 20], [0, 10]]


def test_a_lightning_mean_loss_over_loss_terms_is_the_run_loss_and_nan_rows_are_kept(tmp_path: Path) -> None:
    header = "a_loss,b_loss,epoch,c_loss,mean_loss,step"
    rows = [f"{5.0 - s:.1f},{1.0:.1f},{s},{0.5:.1f},{(6.5 - s) / 3:.4f},{s}" for s in range(4)]
    rows += [f"nan,nan,{s},nan,nan,{s}" for s in range(4, 7)]  # the run went non-finite in every column
    path = tmp_path / "metrics.csv"
    path.write_text("\n".join([header, *rows]) + "\n")
    log = read_log([path])
    steps, loss = log.series("loss")
    assert steps.tolist() == list(range(7))
    assert loss[0] == (6.5 / 3).__round__(4) and bool(np.isnan(loss[4:]).all())
    assert log.meta["loss_source"] == {"name": "mean_loss", "kind": "aggregate"}


def test_an_aggregate_loss_needs_two_terms_beside_it() -> None:
    assert aggregate_loss(["mean_loss", "a_loss", "b_loss"]) == "mean_loss"
    assert aggregate_loss(["total", "box_loss", "cls_loss"]) == "total"
    assert aggregate_loss(["total_loss", "val_loss", "accuracy"]) is None  # val_loss is no term of it
    assert aggregate_loss(["mean_loss", "a_loss"]) is None
    assert aggregate_loss(["val_mean_loss", "val_a_loss", "val_b_loss"]) is None


def _yolo_like_view(val_cls: list[float], loss: list[float] | None = None) -> RunView:
    steps = np.arange(1, len(val_cls) + 1, dtype=np.int64)
    train = np.asarray(loss if loss is not None else [6.0 - 0.02 * i for i in range(len(val_cls))])
    val_box = np.asarray([np.nan] + [3.0 - 0.01 * i for i in range(1, len(val_cls))])
    return RunView(
        "r",
        {
            "loss": Series(steps, train),
            "val/cls_loss": Series(steps, np.asarray(val_cls, dtype=np.float64)),
            "val/box_loss": Series(steps, val_box),
        },
    )


def test_a_validation_loss_that_turns_non_finite_mid_run_is_an_incident_recovered_at_its_next_finite_value() -> None:
    val = [np.nan, 15.0, np.inf, np.inf, np.inf, 9.0] + [8.0 - 0.05 * i for i in range(40)]
    result = analyze_run(_yolo_like_view(val))
    hits = [s for s in result.spikes if s.spike.metric == "val/cls_loss"]
    assert len(hits) == 1  # the NaN at the first row is the validator's placeholder: no incident
    incident = hits[0].incident
    assert incident is not None and incident.start == 3 and incident.severity == "spike"
    assert incident.loss_recovered_at == 6


def test_held_out_non_finite_needs_a_finite_value_before_and_a_finite_training_loss() -> None:
    steps = np.arange(1, 8, dtype=np.int64)
    placeholder = {"val_loss": Series(steps, np.asarray([np.nan, np.nan, 2.0, 1.9, 1.8, 1.7, 1.6]))}
    assert held_out_nonfinite(placeholder, None) == []
    both = {"val_loss": Series(steps, np.asarray([2.0, 1.9, np.nan, np.nan, np.nan, np.nan, np.nan]))}
    loss = Series(steps, np.asarray([2.0, 1.9, np.nan, np.nan, np.nan, np.nan, np.nan]))
    assert held_out_nonfinite(both, loss) == []  # the training loss's own incident
    assert [e.start for e in held_out_nonfinite(both, None)] == [3]
    assert held_out_nonfinite({"train/cls_loss": both["val_loss"]}, None) == []  # not held out
