"""Alerts (stab_core.alerts, ingest.alerts) and their delivery by ``stabscope watch --on-alert``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from ingest.alerts import run_alerts
from ingest.shards import ShardWriter
from ingest.store import Store
from stab_core.alerts import (
    CLIP_SATURATION,
    Alert,
    clipping_alert,
    cross_rank_band,
    rank_deviations,
    spike_alerts,
    straggler_alerts,
)

REPO = Path(__file__).resolve().parents[1]


def _spike(peak: int, recovered: bool = True, metric: str = "loss") -> dict[str, object]:
    return {"metric": metric, "start": peak - 2, "peak": peak, "end": peak + 20, "ratio": 2.5,
            "recovered": recovered, "cause": "data_outlier", "actions": ["skip the batch"]}  # fmt: skip


def test_cross_rank_band_by_hand() -> None:
    matrix = np.array([[1.0, np.nan, 4.0], [3.0, np.nan, 2.0], [2.0, np.nan, np.nan]])
    median, low, high = cross_rank_band(matrix)
    np.testing.assert_array_equal(median, [2.0, np.nan, 3.0])
    np.testing.assert_array_equal(low, [1.0, np.nan, 2.0])
    np.testing.assert_array_equal(high, [3.0, np.nan, 4.0])


def test_rank_deviations_find_the_straggler_and_the_transient() -> None:
    steps = np.arange(0, 100, 10)
    matrix = np.ones((5, 10))
    matrix[3] = 1.3  # a straggler: 30 % slower in every bucket
    matrix[1, 4] = 5.0  # a transient: 5x in one bucket
    out = rank_deviations(np.arange(5), steps, matrix)
    assert [d.rank for d in out[:2]] == [3, 1]
    assert (out[0].kind, out[0].flagged_pct, out[0].deviation_pct) == ("straggler", 100.0, pytest.approx(30.0))
    assert (out[1].kind, out[1].flagged_pct) == ("transient", pytest.approx(10.0))
    assert (out[1].peak_deviation_pct, out[1].peak_step) == (pytest.approx(400.0), 40)
    assert {d.kind for d in out[2:]} == {"normal"}
    assert rank_deviations(np.arange(2), steps, matrix[:2]) == []  # no robust median of 2 ranks
    # 4 % apart is noise, however large its z-score among otherwise identical ranks
    quiet = np.ones((5, 10))
    quiet[2] = 1.04
    assert {d.kind for d in rank_deviations(np.arange(5), steps, quiet)} == {"normal"}


def test_spike_alerts_diverging_always_recent_only_when_live() -> None:
    spikes = [_spike(100), _spike(900), _spike(950, recovered=False)]
    live = spike_alerts("r", spikes, last_step=1000, live=True)
    assert [(a.kind, a.step) for a in live] == [("new_spike", 900), ("diverging_run", 948)]
    assert live[0].message == "new spike: loss x2.5 at step 900"
    assert live[1].message == "diverging: loss spike from step 948 has not recovered"
    assert [a.kind for a in spike_alerts("r", spikes, last_step=1000, live=False)] == ["diverging_run"]
    # the window is ALERT_WINDOW_STEPS (200) behind the last step, inclusive
    assert [a.step for a in spike_alerts("r", [_spike(800), _spike(799)], 1000, True)] == [800]


def test_clipping_alert_at_the_saturation_threshold() -> None:
    steps = np.arange(10)
    assert CLIP_SATURATION == 0.9
    at = clipping_alert("r", steps, np.full(10, 0.9))
    assert at is not None and (at.kind, at.step, at.detail["clipped_fraction"]) == ("clipping_saturated", 9, 0.9)
    assert at.message == "clipping saturated: 90% of the last steps clipped"
    assert clipping_alert("r", steps, np.full(10, 0.89)) is None
    tail_nan = np.r_[np.full(8, 0.95), np.nan, np.nan]  # the last finite value counts
    assert clipping_alert("r", steps, tail_nan).step == 7  # type: ignore[union-attr]
    assert clipping_alert("r", steps, np.full(10, np.nan)) is None


def test_straggler_alerts_and_the_json_a_command_gets() -> None:
    matrix = np.ones((4, 10))
    matrix[2] = 1.25
    deviations = rank_deviations(np.arange(4), np.arange(10) * 5, matrix)
    [alert] = straggler_alerts("job", "step_time_s", deviations)
    assert alert.message == "straggler: rank 2 step_time_s +25% vs the median"
    assert alert.key == ("straggler", "step_time_s", 2)
    payload = alert.to_json()
    assert {k: payload[k] for k in ("alert", "run", "metric", "rank")} == {
        "alert": "straggler", "run": "job", "metric": "step_time_s", "rank": 2}  # fmt: skip
    assert payload["deviation_pct"] == pytest.approx(25.0)
    spike = Alert("new_spike", "job", 7, "loss", "m", {"ratio": 2.0, "cause": "lr_transition", "actions": []})
    # the spike alert keeps the fields watch has always sent
    assert {"alert", "run", "step", "metric", "ratio", "cause", "actions", "message"} == set(spike.to_json())


# ----------------------------------------------------------------------- from shards to --on-alert


def _write_steps(shards: Path, first: int, last: int) -> None:
    """Steps [first, last) of a 4-rank run: rank 3 is 30 % slower all run long; from step 600 every
    step is clipped (clip_coef 0.5); loss jumps 3x for steps 700-709 and recovers."""
    steps = np.arange(first, last)
    rng = np.random.default_rng(first)
    loss = 2.0 + 6.0 * np.exp(-steps / 300.0) + 0.01 * rng.standard_normal(steps.size)
    loss[(steps >= 700) & (steps < 710)] *= 3.0
    coef = np.where(steps >= 600, 0.5, 1.0)
    grad = np.where(steps >= 600, 2.0, 0.5) + 0.01 * rng.standard_normal(steps.size)
    with ShardWriter(shards, 0) as writer:
        if first == 0:
            writer.write_meta({"max_norm": 1.0, "world_size": 4, "per_rank_batch_size": 8, "global_batch_size": 32})
        writer.write_columns(steps, {"loss": loss, "grad_norm": grad, "clip_coef": coef}, rank=-1)
    for rank in range(4):
        with ShardWriter(shards, rank) as writer:
            time_s = 0.5 * (1.3 if rank == 3 else 1.0) * (1 + 0.01 * rng.standard_normal(steps.size))
            writer.write_columns(steps, {"step_time_s": time_s}, rank=rank)


def _watch_once(shards: Path, store: Path, sink: Path) -> subprocess.CompletedProcess[str]:
    command = f"cat >> {sink}; echo >> {sink}"  # each alert's JSON on its own line
    cmd = [sys.executable, "-m", "ingest", "watch", str(shards), "--run", "job", "--once", "--on-alert", command,
           "--store", str(store)]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=REPO, timeout=300, check=False)


def test_watch_sends_each_kind_of_alert_once_to_the_command(tmp_path: Path) -> None:
    shards, store, sink = tmp_path / "shards", tmp_path / "store", tmp_path / "alerts.jsonl"
    sink.touch()
    received: list[list[dict[str, object]]] = []
    for first, last in ((0, 400), (400, 800), (800, 850)):  # three restarts of `watch --once`
        _write_steps(shards, first, last)
        proc = _watch_once(shards, store, sink)
        assert proc.returncode == 0, proc.stderr
        lines = [json.loads(line) for line in sink.read_text().splitlines() if line.strip()]
        received.append(lines[sum(map(len, received)) :])
    first, second, third = received
    assert [(a["alert"], a["metric"], a["rank"]) for a in first] == [("straggler", "step_time_s", 3)]
    kinds = sorted(str(a["alert"]) for a in second)
    assert "clipping_saturated" in kinds and ("new_spike" in kinds or "diverging_run" in kinds), second
    assert "straggler" not in kinds  # still there, but already sent
    spike = next(a for a in second if a["alert"] in ("new_spike", "diverging_run"))
    assert spike["metric"] == "loss" and 698 <= int(spike["step"]) <= 712  # type: ignore[call-overload]
    assert third == []  # nothing new: the same spike, clipping and straggler
    assert "ALERT clipping_saturated: clipping saturated: 100% of the last steps clipped" not in proc.stderr
    # the dashboard reads the same alerts
    now = {a.key: a for a in run_alerts(Store(store), "job", live=True)}
    assert now[("straggler", "step_time_s", 3)].detail["deviation_pct"] == pytest.approx(30.0, abs=1.5)
    assert now[("clipping_saturated", "clip_ratio", 0)].message == "clipping saturated: 100% of the last steps clipped"


def test_a_hanging_alert_command_does_not_stop_the_watcher(tmp_path: Path) -> None:
    from ingest.watch import ALERT_COMMAND_TIMEOUT_EXIT, run_alert_command

    assert run_alert_command("sleep 5", {"alert": "x"}, timeout_s=0.2) == ALERT_COMMAND_TIMEOUT_EXIT
    assert run_alert_command("exit 3", {"alert": "x"}) == 3
    sink = tmp_path / "got.json"
    assert run_alert_command(f"cat > {sink}", {"alert": "straggler", "rank": 2}) == 0
    assert json.loads(sink.read_text()) == {"alert": "straggler", "rank": 2}


def test_alerts_round_trip_through_json() -> None:
    alert = Alert("straggler", "job", 274, "step_time_s", "m", {"rank": 3, "deviation_pct": 29.5})
    assert Alert.from_json(json.loads(json.dumps(alert.to_json()))) == alert


def test_compaction_stores_the_alerts_the_store_would_compute(tmp_path: Path) -> None:
    from ingest.alerts import compute_alerts

    shards, store = tmp_path / "shards", Store(tmp_path / "store")
    _write_steps(shards, 0, 800)
    store.compact("job", shards, status="live")
    info = store.run_info("job")
    stored = info.meta["analysis"]["alerts"]
    assert {a["alert"] for a in stored} >= {"straggler", "clipping_saturated", "new_spike"}
    # what the analyses stored from their fresh results == what the store's own reads give
    assert [Alert.from_json(a) for a in stored] == compute_alerts(store, info)
    assert run_alerts(store, "job") == [Alert.from_json(a) for a in stored]  # live: every kind
    store.set_status("job", "finished")
    assert "new_spike" not in {a.kind for a in run_alerts(store, "job")}  # a finished run has no news


def test_the_pages_drop_a_new_spike_once_the_run_is_no_longer_live(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The Runs table and banners cache alerts per generation; stopping a live run keeps the generation."""
    from pages import common

    shards, store = tmp_path / "shards", Store(tmp_path / "store")
    _write_steps(shards, 0, 800)
    store.compact("job", shards, status="live")
    monkeypatch.setenv("STABSCOPE_STORE", str(store.root))
    live = common.run_alerts(store.run_info("job"))
    assert any(m.startswith("new spike: loss") for m in live), live
    store.set_status("job", "finished")
    finished = common.run_alerts(store.run_info("job"))
    assert not any(m.startswith("new spike") for m in finished)
    assert [m for m in live if not m.startswith("new spike")] == finished
