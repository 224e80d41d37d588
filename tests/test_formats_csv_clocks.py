"""Issue #31 (docs/diagnosis.md, "Import: step times and clocks"): a metrics CSV's clocks and an RL agent's exploration
settings are no metrics (``ingest.formats.csv_clocks``, ``ingest.formats.field_roles``), on synthetic files in the
layouts OpenAI baselines' logger, fastai's ``CSVLogger`` and YOLO11's ``results.csv`` write (own numbers)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from ingest.formats import read_log
from ingest.formats.field_roles import moved_fields


def _write(path: Path, lines: list[str]) -> Path:
    path.write_text("\n".join(lines) + "\n")
    return path


def _walls(parsed: object, metric: str) -> list[object]:
    table = parsed.table  # type: ignore[attr-defined]
    rows = table.filter(np.asarray(table["metric"].to_pylist()) == metric)
    return list(rows["wall_time"].to_pylist())


def test_rl_logger_csv_exploration_noise_and_wall_clock_are_no_metrics(tmp_path: Path) -> None:
    header = "train/param_noise_distance,train/loss_critic,total/steps,param_noise_stddev,total/duration,rollout/return"
    rows = [f"{0.2 + e / 50},{40.0 + e},{1000 * e},{0.1 + e / 100},{8.0 * e + 1},{10.0 * e}" for e in range(1, 8)]
    parsed = read_log([_write(tmp_path / "progress.csv", [header, *rows])])
    assert not {"param_noise_stddev", "total/duration", "elapsed_time_s"} & set(parsed.metrics)
    assert parsed.meta["log_settings"]["param_noise_stddev"] == pytest.approx(0.17)  # its last value, kept
    assert "train/param_noise_distance" in parsed.metrics  # how far the noise moved the policy: a measure
    steps, step_time = parsed.series("step_time_s")  # 8 s of clock over 1000 steps
    assert steps.tolist() == [1000 * e for e in range(2, 8)] and step_time.tolist() == pytest.approx([0.008] * 6)


def test_an_exploration_rate_is_moved_and_a_measure_beside_it_stays() -> None:
    moved = moved_fields(
        {
            "rollout/exploration_rate": np.linspace(1.0, 0.05, 10),
            "action_noise_sigma": np.linspace(0.3, 0.1, 10),
            "rollout/ep_rew_mean": np.linspace(1.0, 9.0, 10),
            "adam_epsilon_like": np.linspace(1.0, 2.0, 10),
        }
    )
    assert set(moved) == {"rollout/exploration_rate", "action_noise_sigma"}
    assert moved["rollout/exploration_rate"][1] == pytest.approx(0.05)


def test_fastai_time_of_an_epoch_in_minutes_and_seconds_is_its_step_time(tmp_path: Path) -> None:
    times = ["04:39", "04:36", "1:02:05", "04:29"]
    rows = [f"{e},{0.8 - e / 10},{0.5 - e / 20},{0.8 + e / 50},{t}" for e, t in enumerate(times)]
    parsed = read_log([_write(tmp_path / "history.csv", ["epoch,train_loss,valid_loss,accuracy,time", *rows])])
    assert parsed.format == "csv_wide"
    assert "time" not in parsed.metrics
    steps, step_time = parsed.series("step_time_s")  # seconds the epoch (the step here) took
    assert steps.tolist() == [0, 1, 2, 3] and step_time.tolist() == [279.0, 276.0, 3725.0, 269.0]
    assert _walls(parsed, "loss") == [None] * 4  # a duration is no wall clock


def test_yolo11_cumulative_time_is_a_clock_not_a_step_time(tmp_path: Path) -> None:
    header = "epoch,time,train/box_loss,train/cls_loss,train/dfl_loss,metrics/mAP50(B),val/box_loss,lr/pg0,lr/pg1"
    rows = [
        f"{e},{33.5 * e + 1.2:.1f},{1.8 - e / 20},{3.0 - e / 10},{1.7 - e / 30},{0.1 * e},{1.9},0.01,0.01"
        for e in range(1, 7)
    ]
    parsed = read_log([_write(tmp_path / "results.csv", [header, *rows])])
    assert "time" not in parsed.metrics
    steps, step_time = parsed.series("step_time_s")  # the clock's increase from one epoch to the next
    assert steps.tolist() == [2, 3, 4, 5, 6] and step_time == pytest.approx([33.5] * 5, abs=0.11)
    assert set(_walls(parsed, "train/box_loss")) == {None}  # seconds since the start are no Unix time


def test_a_unix_time_column_stays_the_rows_wall_clock(tmp_path: Path) -> None:
    rows = [f"{s},{2.0 - s / 100},{1_700_000_000 + 60 * s}" for s in range(0, 50, 10)]
    parsed = read_log([_write(tmp_path / "metrics.csv", ["step,loss,time", *rows])])
    assert "step_time_s" not in parsed.metrics
    assert _walls(parsed, "loss")[:2] == [1_700_000_000.0, 1_700_000_600.0]
