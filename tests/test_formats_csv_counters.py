"""Issue #31 (docs/diagnosis.md, "Import: metrics files"): metrics CSVs whose step is a step-like counter (``total
timesteps``, ``total/steps``) or only the row, with columns that count the run and a total loss, on synthetic
files in the layouts RL loggers, OpenAI baselines, Keras and YOLOv5 write (own numbers)."""

from __future__ import annotations

from pathlib import Path

import pytest

from ingest.formats import detect, read_log
from ingest.formats.csv_counters import is_elapsed_clock, is_run_clock, is_step_like, proposed_loss


def _write(path: Path, lines: list[str]) -> Path:
    path.write_text("\n".join(lines) + "\n")
    return path


def _rl_csv(tmp_path: Path) -> Path:
    """A PPO logger's CSV: a 'total timesteps' counter, a Progress percentage, an elapsed clock, the
    first row with rollout fields only."""
    header = "num_episodes,mean_reward,total_time,Progress,total timesteps,ep_rew_mean,value_loss,aux_loss,total_loss"
    rows = ["5,0.5,2.5,0.0%,4096,10.0,,,"]
    for i in range(1, 9):
        rows.append(
            f"{5 + 4 * i},{0.5 / i:.4f},{2.5 + 9 * i},{i * 0.41:.2f}%,{4096 * (i + 1)},{10.0 + 3 * i},"
            f"{2.0 - i / 10:.3f},{0.3 + i / 100:.3f},{2.3 - i / 20:.3f}"
        )
    return _write(tmp_path / "run-2031-01-01.csv", [header, *rows])


def test_rl_csv_with_a_total_timesteps_counter_is_read(tmp_path: Path) -> None:
    path = _rl_csv(tmp_path)
    assert detect([path])[0][0] == "csv_wide"
    parsed = read_log([path])
    assert parsed.skipped == 0  # the "0.41%" cells are the run's progress, not unreadable metrics
    for clock in ("total timesteps", "Progress", "total_time", "num_episodes"):
        assert clock not in parsed.metrics
    assert parsed.meta["proposed_map"] == {"total_loss": "loss"}  # applied on import, --map corrects it
    steps, values = parsed.series("total_loss")
    assert steps.tolist() == [4096 * (i + 1) for i in range(1, 9)]
    assert values[0] == pytest.approx(2.25)
    assert {"value_loss", "aux_loss", "ep_rew_mean"} <= set(parsed.metrics)
    # the elapsed clock is no metric: its increase over the steps between rows is the step time
    assert "elapsed_time_s" not in parsed.metrics
    time_steps, step_time = parsed.series("step_time_s")
    assert time_steps[:2].tolist() == [8192, 12288] and step_time[:2].tolist() == pytest.approx([9 / 4096] * 2)


def test_baselines_progress_csv_steps_by_total_steps(tmp_path: Path) -> None:
    header = "obs_rms_mean,train/loss_actor,rollout/return,total/epochs,train/loss_critic,total/steps,total/duration"
    rows = [f"{0.4 + e / 100},{-10.0 * e},{50.0 * e},{e},{30.0 + e},{1500 * e},{12.5 * e}" for e in range(1, 7)]
    parsed = read_log([_write(tmp_path / "progress.csv", [header, *rows])])
    assert parsed.format == "csv_wide"
    assert parsed.series("train/loss_critic")[0].tolist() == [1500 * e for e in range(1, 7)]
    assert not {"total/epochs", "total/duration", "total/steps"} & set(parsed.metrics)
    assert "elapsed_time_s" not in parsed.metrics
    assert parsed.series("step_time_s")[1][-1] == pytest.approx(12.5 / 1500)
    assert "proposed_map" not in parsed.meta  # no total loss: the actor's and critic's losses keep their names


def test_history_without_any_counter_is_read_one_row_per_step(tmp_path: Path) -> None:
    rows = [f"{0.02 / (e + 1):.6f},{0.021 / (e + 1):.6f}" for e in range(7)]
    path = _write(tmp_path / "history.csv", ["loss,val_loss", *rows])
    assert detect([path])[0][0] == "csv_wide"
    parsed = read_log([path])
    assert sorted(parsed.metrics) == ["loss", "val_loss"]
    assert parsed.series("loss")[0].tolist() == list(range(7))  # the 0-based row, as Keras numbers epochs
    assert parsed.series("val_loss")[1][-1] == pytest.approx(0.021 / 7, rel=1e-4)


def test_a_text_table_without_counter_is_not_claimed(tmp_path: Path) -> None:
    path = _write(tmp_path / "notes.csv", ["name,comment", "alpha,fine", "beta,slow"])
    assert all(name != "csv_wide" for name, _ in detect([path]))


def test_yolov5_numbered_lr_columns_are_param_groups(tmp_path: Path) -> None:
    header = "epoch,train/box_loss,train/obj_loss,metrics/precision,val/box_loss,x/lr0,x/lr1,x/lr2"
    rows = [
        f"{e},{0.07 - e / 200:.4f},{0.04 - e / 500:.4f},{0.5 + e / 20:.3f},{0.06 - e / 300:.4f},"
        f"{0.08 - 0.015 * e:.4f},{0.001 * (e + 1):.4f},{0.001 * (e + 1):.4f}"
        for e in range(5)
    ]
    parsed = read_log([_write(tmp_path / "results.csv", [header, *rows])])
    # the first group (x/lr0) is the run's lr, the canonical first param group's (docs/diagnosis.md, "Import: metrics
    # files")
    assert parsed.series("lr")[1].tolist() == pytest.approx([0.08 - 0.015 * e for e in range(5)])
    assert "x/lr1" in parsed.metrics and "x/lr0" not in parsed.metrics


def test_counter_and_loss_rules() -> None:
    for name in ("total timesteps", "total_timesteps", "total/steps", "time/total_timesteps", "env_steps"):
        assert is_step_like(name), name
    for name in ("steps_per_second", "total/steps_per_second", "warmup_steps_done", "ep_len_mean"):
        assert not is_step_like(name), name
    for name in ("total/epochs", "rollout/episodes", "num_episodes", "Progress"):
        assert is_run_clock(name), name
    for name in ("total/duration", "total_time", "time/time_elapsed"):
        assert is_elapsed_clock(name) and not is_run_clock(name), name
    assert not is_elapsed_clock("time") and not is_elapsed_clock("step_time")
    for name in ("rollout/episode_steps", "rollout/return", "step_time", "time"):
        assert not is_run_clock(name), name
    assert proposed_loss(["value_loss", "total_loss"]) == {"total_loss": "loss"}
    assert proposed_loss(["loss", "total_loss"]) == {}  # the log's own loss stands
    assert proposed_loss(["train/loss_critic", "train/loss_actor"]) == {}


def test_a_table_logged_per_episode_is_on_its_episode_axis(tmp_path: Path) -> None:
    # a PPO logger's row every 10 episodes, no step nor epoch column: the episode index (docs/diagnosis.md, "Import:
    # metrics files") is the axis, not the row number (an incident at episode 2100 is at 2100, not at row 210)
    header = "Episode,Train_Return,Episode_Length,Value_Loss,Approx_KL"
    rows = [f"{10 * i}, {0.1 * i:.2f}, 24, {3.0 + (i % 3):.2f}, {0.01 + i / 1000:.4f}" for i in range(12)]
    path = _write(tmp_path / "log_training.csv", [header, *rows])
    parsed = read_log([path])
    assert parsed.series("Value_Loss")[0].tolist() == [10 * i for i in range(12)]
    assert "Episode" not in parsed.metrics
    # an episode column that does not rise on every row is no axis: the row number stays
    repeated = _write(tmp_path / "again.csv", [header, *rows[:6], *rows[:6]])
    assert read_log([repeated]).series("Value_Loss")[0].tolist() == list(range(12))
