"""RL logs (issue #31; docs/diagnosis.md, "Import: metrics files"), with our own numbers: a Monitor CSV under its JSON
comment line, and an SB3 console table's counters and clock."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.compute as pc
import pytest

from ingest.formats import detect, read_log
from ingest.formats.csv_comments import leading_comments, without_comments


def _monitor(tmp_path: Path, returns: list[float]) -> Path:
    lines = ["#" + json.dumps({"t_start": 1600000000.25, "env_id": "Pong-v4"}), "r,l,t"]
    lines += [f"{r},{100 + i},{0.5 * (i + 1):.3f}" for i, r in enumerate(returns)]
    path = tmp_path / "0.monitor.csv"
    path.write_text("\n".join(lines) + "\n")
    return path


def test_monitor_file_is_read_by_episode(tmp_path: Path) -> None:
    path = _monitor(tmp_path, [float(i % 7) for i in range(40)])
    assert detect([path])[0][0] == "csv_wide"
    log = read_log([path])
    steps, returns = log.series("episode_reward")
    assert steps.tolist() == list(range(40)) and returns[3] == 3.0  # the episode index, from 0
    assert log.series("episode_length")[1][-1] == 139
    assert not {"t", "r", "l", "t_start", "env_id", "step_time_s"} & set(log.metrics)  # t is a clock
    assert log.meta["log_settings"]["env_id"] == "Pong-v4"


def test_monitor_clock_is_each_episodes_wall_clock_time(tmp_path: Path) -> None:
    # t is seconds from t_start: stored as wall-clock times so the Cost page reads the time per episode
    # (before, the run "logged no wall-clock times" although every row carries one)
    log = read_log([_monitor(tmp_path, [1.0, 2.0, 3.0, 4.0])])
    rows = log.table.filter(pc.equal(log.table["metric"], "episode_reward")).to_pydict()
    assert rows["wall_time"] == [1600000000.75, 1600000001.25, 1600000001.75, 1600000002.25]


def test_comment_lines_and_hash_headers() -> None:
    assert leading_comments(b'#{"t_start": 1.5, "env_id": "X"}\nr,l,t\n1,2,3\n') == 1
    assert leading_comments(b"# exported by a script\n# run 3\nstep,loss\n1,2.5\n") == 2
    assert leading_comments(b"#step,loss\n1,2.5\n") == 0  # a header that starts with '#' stays the header
    assert without_comments(b"# note\nstep,loss\n1,2\n") == b"step,loss\n1,2\n"


def _table(rows: list[tuple[str, str]]) -> list[str]:
    rule = "-" * 40
    return [rule, *(f"| {k:<22} | {v:<12} |" for k, v in rows), rule]


def test_sb3_table_counters_and_clock_are_no_metrics(tmp_path: Path) -> None:
    lines = ["Using cpu device"]
    for t in range(1, 31):
        lines += _table(
            [
                ("rollout/", ""),
                ("   ep_rew_mean", f"{0.1 * t:.3g}"),
                ("time/", ""),
                ("   episodes", str(4 * t)),
                ("   fps", str(500 + t)),
                ("   iterations", str(t)),
                ("   time_elapsed", str(2 * t)),
                ("   total_timesteps", str(250 * t)),
                ("train/", ""),
                ("   learning_rate", "0.0001"),
                ("   loss", f"{0.01 / t:.3g}"),
                ("   n_updates", str(60 * t)),
            ]
        )
    path = tmp_path / "out.txt"
    path.write_text("\n".join(lines) + "\n")
    log = read_log([path])
    assert log.series("loss")[0].tolist() == [250 * t for t in range(1, 31)]
    counters = {"time/episodes", "time/iterations", "time/time_elapsed", "time/total_timesteps", "train/n_updates"}
    assert not counters & set(log.metrics)
    assert {"rollout/ep_rew_mean", "time/fps", "lr"} <= set(log.metrics)


def test_a_monitor_run_is_priced_from_its_episode_clock(tmp_path: Path) -> None:
    # a run with no loss: the wall-clock spacing of its episode rows (0.5 s apart) is its time per step,
    # so the Spikes and Cost pages do not say it "logs no wall-clock times"
    from ingest.importing.importer import import_logs
    from ingest.services.run_analyses import open_analysed_store
    from ingest.services.run_cost import run_cost_inputs, wall_step_time_s

    store = open_analysed_store(tmp_path / "store")
    import_logs(store, [_monitor(tmp_path, [float(i % 5) for i in range(30)])], run="ppo")
    assert wall_step_time_s(store, "ppo") == pytest.approx(0.5)
    inputs = run_cost_inputs(store, store.run_info("ppo"))
    assert inputs.step_time_s == pytest.approx(0.5) and inputs.step_time_source == "wall times"
