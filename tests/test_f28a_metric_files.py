"""Round 22 (#31, f28a): metric files read as their writers meant them (synthetic files in the layouts of a
pipeline's per-phase CSV, a scripted TensorBoard scalar export, a Lightning GAN's CSVLogger, an epoch
summary's tallies and a resumed build-nanogpt log.txt; own numbers)."""

from __future__ import annotations

from pathlib import Path

import pytest

from ingest.formats import _tabular, read_log
from ingest.formats.aliases import canonical_name
from ingest.formats.csv_counters import is_tally


def _runs(path: Path, metric: str = "loss") -> list[list[int]]:
    log = read_log([path])
    return [run.series(metric)[0].tolist() for run in (log, *log.segments)]


def _write(path: Path, rows: list[str]) -> Path:
    path.write_text("\n".join(rows) + "\n")
    return path


def _phase(name: str, epochs: range, loss: float) -> list[str]:
    return [f"{name},{e},{loss - e / 100:.3f},{loss + 0.1:.3f}" for e in epochs]


def test_each_block_of_a_phase_column_is_a_run_of_its_own(tmp_path: Path) -> None:
    # a pipeline trains model a (epochs 1-4), b (1-3), then again a resumed (3-6: back, not to 1) and b
    rows = ["phase,epoch,train_loss,val_loss"]
    rows += _phase("a", range(1, 5), 2.0) + _phase("b", range(1, 4), 7.0)
    rows += _phase("a", range(3, 7), 1.9) + _phase("b", range(1, 4), 6.9)
    runs = _runs(_write(tmp_path / "training_log.csv", rows))
    assert runs == [[1, 2, 3, 4], [1, 2, 3], [3, 4, 5, 6], [1, 2, 3]]
    assert not read_log([tmp_path / "training_log.csv"]).events  # no block is a resume of the one before


def test_a_block_whose_epochs_go_on_from_the_block_before_is_still_its_own_run(tmp_path: Path) -> None:
    # model b's epochs go on past model a's (5-8 after 1-4): the label, not the axis, says a new run
    rows = ["phase,epoch,train_loss,val_loss", *_phase("a", range(1, 5), 2.0), *_phase("b", range(5, 9), 7.0)]
    rows += _phase("a", range(1, 3), 2.0)
    assert _runs(_write(tmp_path / "log.csv", rows)) == [[1, 2, 3, 4], [5, 6, 7, 8], [1, 2]]


def test_a_schedule_phase_over_rising_steps_labels_parts_of_one_run(tmp_path: Path) -> None:
    rows = ["step,phase,loss"] + [f"{s},{'warmup' if s < 4 else 'stable'},{3.0 - s / 10:.2f}" for s in range(10)]
    assert _runs(_write(tmp_path / "log.csv", rows)) == [list(range(10))]


def test_a_label_that_changes_on_every_row_marks_rows_not_runs(tmp_path: Path) -> None:
    # train and eval rows interleaved (one row each): no blocks, read as before (one run)
    rows = ["step,split,loss"] + [f"{s // 2 * 10},{'train' if s % 2 == 0 else 'eval'},{2.0:.1f}" for s in range(12)]
    assert len(_runs(_write(tmp_path / "log.csv", rows))) == 1


def test_a_long_form_scalar_export_is_pivoted_one_series_per_tag(tmp_path: Path) -> None:
    rows = ["filename,tag,step,value"]
    rows += [f"./events.out.tfevents.1,train/current_loss,{s},{2.7 - s / 1000:.3f}" for s in (100, 200, 300)]
    for s in (100, 200, 300):  # every running-mean row written twice (overlapping event files)
        rows += [f"./events.out.tfevents.1,train/tot_loss,{s},{2.8 - s / 1000:.3f}"] * 2
    log = read_log([_write(tmp_path / "loss_history.csv", rows)])
    assert not log.segments
    assert "value" not in log.metrics
    assert log.series("train/current_loss")[0].tolist() == [100, 200, 300]
    assert log.meta["proposed_map"] == {"train/current_loss": "loss"}  # the current step's loss is the run's
    steps, values = log.series("train/tot_loss")
    assert steps.tolist() == [100, 200, 300] and values.tolist() == [2.7, 2.6, 2.5]  # each record once


def test_a_long_export_larger_than_a_read_block_is_pivoted_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # read in blocks of a few hundred bytes, each tag's rows cross many block boundaries: still one series each
    monkeypatch.setattr(_tabular, "CSV_WHOLE_FILE_BYTES", 1)  # stream it, as a file of more than 256 MiB is
    monkeypatch.setattr(_tabular, "CSV_BLOCK_BYTES", 512)
    rows = ["tag,step,value"]
    rows += [f"train/loss,{s},{3.0 - s / 1000:.4f}" for s in range(0, 400, 10)]
    rows += [f"val/loss,{s},{3.1 - s / 1000:.4f}" for s in range(0, 400, 100)]
    log = read_log([_write(tmp_path / "scalars.csv", rows)])
    assert not log.segments and not log.events
    assert log.series("loss")[0].tolist() == list(range(0, 400, 10))  # train/loss, by its canonical name
    assert log.series("val_loss")[0].tolist() == [0, 100, 200, 300]


def test_a_tag_giving_one_step_two_values_is_read_as_a_wide_table_would_be(tmp_path: Path) -> None:
    # step 30 logged again with another value (a relaunch): not "a repeated row" whose second value is dropped;
    # the file is read in order, as the same rows in a wide table are (the later value is the step's)
    rows = ["tag,step,value"] + [f"loss,{s},{2.0 - s / 100:.2f}" for s in range(0, 40, 10)]
    rows += ["loss,30,1.2", "loss,40,1.1"]
    log = read_log([_write(tmp_path / "scalars.csv", rows)])
    steps, values = log.series("value")
    assert steps.tolist() == [0, 10, 20, 30, 40] and values.tolist() == [2.0, 1.9, 1.8, 1.2, 1.1]


def test_a_dev_loss_is_the_validation_loss() -> None:
    assert canonical_name("dev_loss")[0] == "val_loss"
    assert canonical_name("dev/loss")[0] == "val_loss"


def test_a_lightning_gans_split_prefixed_generator_loss_is_the_runs_loss(tmp_path: Path) -> None:
    rows = ["step,epoch,train_disc_loss,train_gen_loss"] + [f"{s},{s // 4},{11.7 - s / 100:.3f},nan" for s in range(8)]
    log = read_log([_write(tmp_path / "metrics.csv", rows)])
    assert log.series("loss")[0].tolist() == list(range(8))  # nan from the first row: still the loss
    assert "train_gen_loss" in log.metrics  # kept under its own name too


def test_tallies_of_an_epoch_summary_are_no_metrics(tmp_path: Path) -> None:
    assert is_tally("micro_steps", [2745.0, 2745.0]) and is_tally("straggle_events", [0.0, 1.0])
    assert not is_tally("micro_steps", [0.5]) and not is_tally("micro_time", [2.0])
    step_line = "[Epoch {e:03d}] global_step={g} train_loss={loss:.4f}"
    lines = [step_line.format(e=s // 10, g=s * 10, loss=3.0 - s / 100) + " step_time=2.2s" for s in range(1, 31)]
    for at in (30, 20, 10):  # each epoch's summary after its last step line, with its tallies
        summary = step_line.format(e=at // 10, g=at * 10, loss=3.0 - at / 100)
        lines.insert(at, summary + " micro_steps=10 steps=10 straggle_events=0")
    log = read_log([_write(tmp_path / "train.txt", lines)])
    assert "loss" in log.metrics
    assert not {"micro_steps", "steps", "straggle_events"} & set(log.metrics)


def _nanogpt(rewinds: dict[int, int], shift: float) -> list[str]:
    """A build-nanogpt log.txt of steps 0-59; at each step in ``rewinds`` the launch resumes from the
    step it maps to and logs those steps again, each loss ``shift`` away from the first pass's."""
    lines: list[str] = []
    step = 0
    seen: set[int] = set()
    while step < 60:
        again = step in seen
        lines.append(f"{step} train {4.0 - step / 100 + (shift if again else 0.0):.6f}")
        seen.add(step)
        if step in rewinds and step not in {s for s in rewinds.values()} and not again:
            step = rewinds.pop(step)
            continue
        step += 1
    return lines


def test_a_resume_that_logs_the_same_losses_again_is_no_rollback(tmp_path: Path) -> None:
    log = read_log([_write(tmp_path / "log.txt", _nanogpt({30: 20}, shift=1e-6))])
    assert not log.segments and not [e for e in log.events if e.kind == "rollback"]
    assert log.series("loss")[0].tolist() == list(range(60))  # each replayed step once


def test_a_resume_whose_replayed_losses_differ_is_a_rollback(tmp_path: Path) -> None:
    log = read_log([_write(tmp_path / "log.txt", _nanogpt({30: 20}, shift=0.05))])
    assert [e.kind for e in log.events] == ["rollback"]


def test_an_epoch_closing_line_keeps_its_accuracies_not_its_mean_loss(tmp_path: Path) -> None:
    lines = []
    for epoch in range(4):
        for step in (100, 200, 300):
            lines.append("2023-03-19 09:54:38,969 - INFO: ")  # the metric line follows a bare INFO line
            lines.append(f"Epoch [{epoch}/4], Step [{step}/390], Loss: {0.04 - epoch / 100:.5f}")
            lines.append(f"2023-03-19 09:54:38,969 - INFO: Time elasped: {step / 10:.3f}")
        lines.append(
            f"2023-03-19 09:55:26,479 - INFO: Epoch {epoch}: train loss {0.04 - epoch / 100:.5f},"
            f" train acc {0.1 * (epoch + 1):.3f}, test acc {0.09 * (epoch + 1):.3f}"
        )
    log = read_log([_write(tmp_path / "train.log", lines)])
    assert log.series("test_acc")[1].tolist() == [0.09, 0.18, 0.27, 0.36]
    assert log.series("train_acc")[1].tolist() == [0.1, 0.2, 0.3, 0.4]
    assert log.series("loss")[0].shape[0] == 12  # the epoch's mean loss is no step's loss
