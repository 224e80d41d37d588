"""Round 23, f29b (issue #31): metric files whose step, clip, step time or columns were read wrong, on synthetic logs
(own numbers, none from the corpus): a JSON record's per-epoch step beside a run-wide counter, a true/false clipped
flag beside the grad norm, a wall clock named with its unit, progress and bookkeeping fields that are no metrics, a
test evaluation after training that overwrote the last epoch's validation, and the scorer's prefix ban of a name
the golden requires (docs/diagnosis.md, "round 23: f29b")."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from bench.corpus_eval import junk_metrics
from ingest.formats import read_log
from ingest.formats.field_roles import SETTINGS_KEY, moved_fields


def _write(path: Path, lines: list[str]) -> Path:
    path.write_text("\n".join(lines) + "\n")
    return path


def _jsonl(path: Path, records: list[dict[str, object]]) -> Path:
    return _write(path, [json.dumps(r) for r in records])


def _epoch_records(per_epoch: int = 12, epochs: int = 3, every: int = 8) -> list[dict[str, object]]:
    out: list[dict[str, object]] = []
    for epoch in range(epochs):
        for i in range(1, per_epoch + 1):
            step = i * every - 1
            run_step = epoch * per_epoch * every + step
            norm = 2.4 / (1 + run_step / 40) + 0.1 * (i % 2)
            out.append(
                {
                    "global_step": run_step,
                    "epoch": epoch,
                    "step": step,
                    "loss": 9.0 / (1 + run_step / 50),
                    "grad_norm": norm,
                    "lr": 1e-4,
                    "clipped": norm > 0.5,
                }
            )
    return out


def test_a_per_epoch_step_beside_a_run_wide_counter_gives_way_to_it(tmp_path: Path) -> None:
    records = _epoch_records()
    parsed = read_log([_jsonl(tmp_path / "training_log.jsonl", records)])
    steps, values = parsed.series("loss")
    assert steps.tolist() == [r["global_step"] for r in records]  # every record, on the run's steps
    assert values[0] == pytest.approx(9.0 / (1 + 7 / 50))  # the first epoch's first loss, not the last epoch's
    assert parsed.segments == []  # no restart: the per-epoch step going back is no rollback
    assert "'global_step'" in parsed.meta["step_source"] and "'step' restarts" in parsed.meta["step_source"]
    assert "step" not in parsed.metrics and "global_step" not in parsed.metrics


def test_a_relaunch_that_restarts_every_counter_keeps_the_first_counter(tmp_path: Path) -> None:
    first = _epoch_records(epochs=1)
    again = [dict(r, loss=float(str(r["loss"])) * 1.1) for r in first]  # both counters back at their start
    parsed = read_log([_jsonl(tmp_path / "training_log.jsonl", first + again)])
    assert "step_source" not in parsed.meta  # no counter kept rising: the relaunch is read as before
    assert parsed.series("loss")[0].tolist() == [r["step"] for r in first]


def test_a_clipped_flag_beside_the_grad_norm_gives_the_clip_threshold(tmp_path: Path) -> None:
    parsed = read_log([_jsonl(tmp_path / "training_log.jsonl", _epoch_records())])
    assert parsed.meta["max_norm"] == 0.5  # the roundest value between the unclipped and the clipped norms
    assert "'clipped'" in parsed.meta["max_norm_source"]


def test_clipped_flags_no_threshold_explains_give_none(tmp_path: Path) -> None:
    records = _epoch_records()
    for i, record in enumerate(records):
        record["clipped"] = i % 3 == 0  # set on small norms and large ones alike
    assert "max_norm" not in read_log([_jsonl(tmp_path / "training_log.jsonl", records)]).meta


def test_a_wall_clock_named_with_its_unit_is_a_step_time_and_a_step_count_no_metric(tmp_path: Path) -> None:
    records = [
        {
            "run_name": "ablation",
            "step": step,
            "total_step_count": step + 1,
            "wall_time_sec": 3.0 + step * 0.05,
            "train_loss": 6.0 / (1 + step / 100),
            "lr": 1e-3,
            "batch_size": 64,
        }
        for step in range(0, 2001, 100)
    ]
    parsed = read_log([_jsonl(tmp_path / "run.jsonl", records)])
    steps, values = parsed.series("step_time_s")
    assert steps[0] == 100 and values == pytest.approx(np.full(steps.shape, 0.05))  # the clock's rise a step
    assert "total_step_count" not in parsed.metrics and "wall_time_sec" not in parsed.metrics
    assert parsed.meta[SETTINGS_KEY]["total_step_count"] == 2001


@pytest.mark.parametrize(
    "name",
    ["total_step_count", "num_updates", "epochs_completed", "progress_pct", "percent_done", "best_epoch", "best_step"],
)
def test_progress_and_bookkeeping_fields_are_no_metrics(name: str) -> None:
    rising = np.linspace(1.0, 100.0, 12)
    assert name in moved_fields({name: rising})
    assert not moved_fields({"val_loss": rising, "step_time_s": rising, "best_val_loss": rising})


def test_a_results_table_keeps_its_best_epoch_out_of_the_series(tmp_path: Path) -> None:
    lines = ["epoch,train/box_loss,val/box_loss,best_epoch,lr/pg0"]
    lines += [f"{e},{2.0 / e:.4f},{2.2 / e:.4f},{e if e < 8 else 7},0.001" for e in range(1, 13)]
    parsed = read_log([_write(tmp_path / "results.csv", lines)])
    assert "best_epoch" not in parsed.metrics and parsed.meta[SETTINGS_KEY]["best_epoch"] == 7


def _blocks(test_every_epoch: bool) -> list[str]:
    lines = []
    for epoch in range(1, 7):
        lines += [f"epoch {epoch}", f"Train Loss: {2.3 - epoch / 100:.6f}, Acc: {10 + epoch:.6f}%"]
        lines.append(f"Val Loss: {2.4 + epoch:.6f}, Acc: {9 + epoch / 10:.6f}%")
        if test_every_epoch:
            lines.append(f"Test Loss: {2.5 + epoch:.6f}, Acc: {8 + epoch / 10:.6f}%")
    if not test_every_epoch:
        lines.append("Test Loss: 1.234567, Acc: 7.700000%")  # one evaluation after training
    return lines


def test_a_test_evaluation_after_training_does_not_overwrite_the_last_validation(tmp_path: Path) -> None:
    parsed = read_log([_write(tmp_path / "train.log", _blocks(test_every_epoch=False))])
    steps, values = parsed.series("val_loss")
    assert steps.tolist() == [1, 2, 3, 4, 5, 6] and values[-1] == pytest.approx(8.4)
    assert not [m for m in parsed.metrics if m.startswith("test_")]


def test_test_lines_at_every_epoch_beside_validation_are_their_own_series(tmp_path: Path) -> None:
    parsed = read_log([_write(tmp_path / "train.log", _blocks(test_every_epoch=True))])
    assert parsed.series("val_loss")[1][-1] == pytest.approx(8.4)
    assert parsed.series("test_loss")[1][-1] == pytest.approx(8.5)


def test_test_lines_without_validation_are_the_validation(tmp_path: Path) -> None:
    lines = [x for x in _blocks(test_every_epoch=True) if not x.startswith("Val")]
    parsed = read_log([_write(tmp_path / "train.log", lines)])
    assert parsed.series("val_loss")[1][-1] == pytest.approx(8.5)
    assert not [m for m in parsed.metrics if m.startswith("test_")]


def test_the_scorer_does_not_ban_by_prefix_a_step_time_the_golden_counts() -> None:
    golden_import = {"known_fields": ["step", "wall_time_sec"], "must_not_be_metrics": ["step", "total_step_count"]}
    counted = {"metrics": ["loss"], "records_by_metric": {"loss": 5, "step_time": 5}}
    assert junk_metrics(["loss", "step_time_s"], golden_import, counted) == []
    # a golden that does not count a step time still bans it by the prefix, as before
    assert junk_metrics(["step_time_s"], golden_import, {"metrics": ["loss"]}) == ["step_time_s (must not be a metric)"]
