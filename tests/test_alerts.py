"""Alerts (the rules: stab_core.alerts; a stored run's: ingest.services.run_alerts) and their delivery by
``stabscope watch --on-alert``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from ingest.services.run_alerts import run_alerts
from ingest.services.run_analyses import open_analysed_store
from ingest.store.shards import ShardWriter
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
    assert [a.step for a in spike_alerts("r", [_spike(800), _spike(799)], 1000, live=True)] == [800]


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


@pytest.mark.slow  # out of the fast loop: multi-second (CLI processes, several threads); CI runs it
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
    now = {a.key: a for a in run_alerts(open_analysed_store(store), "job", live=True)}
    assert now[("straggler", "step_time_s", 3)].detail["deviation_pct"] == pytest.approx(30.0, abs=1.5)
    assert now[("clipping_saturated", "clip_ratio", 0)].message == "clipping saturated: 100% of the last steps clipped"


def test_a_hanging_alert_command_does_not_stop_the_watcher(tmp_path: Path) -> None:
    from ingest.live.watch import ALERT_COMMAND_TIMEOUT_EXIT, run_alert_command

    assert run_alert_command("sleep 5", {"alert": "x"}, timeout_s=0.2) == ALERT_COMMAND_TIMEOUT_EXIT
    assert run_alert_command("exit 3", {"alert": "x"}) == 3
    sink = tmp_path / "got.json"
    assert run_alert_command(f"cat > {sink}", {"alert": "straggler", "rank": 2}) == 0
    assert json.loads(sink.read_text()) == {"alert": "straggler", "rank": 2}


def test_alerts_round_trip_through_json() -> None:
    alert = Alert("straggler", "job", 274, "step_time_s", "m", {"rank": 3, "deviation_pct": 29.5})
    assert Alert.from_json(json.loads(json.dumps(alert.to_json()))) == alert


def test_compaction_stores_the_alerts_the_store_would_compute(tmp_path: Path) -> None:
    from ingest.services.run_alerts import alerts_from_store

    shards, store = tmp_path / "shards", open_analysed_store(tmp_path / "store")
    _write_steps(shards, 0, 800)
    store.compact("job", shards, status="live")
    info = store.run_info("job")
    stored = info.meta["analysis"]["alerts"]
    assert {a["alert"] for a in stored} >= {"straggler", "clipping_saturated", "new_spike"}
    # what the analyses computed from the run in memory == what the store's own reads give
    assert [Alert.from_json(a) for a in stored] == alerts_from_store(store, info)
    assert run_alerts(store, "job") == [Alert.from_json(a) for a in stored]  # live: every kind
    store.set_status("job", "finished")
    assert "new_spike" not in {a.kind for a in run_alerts(store, "job")}  # a finished run has no news


def test_the_pages_drop_a_new_spike_once_the_run_is_no_longer_live(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The Runs table and banners cache alerts per generation; stopping a live run keeps the generation."""
    from pages.parts import alert_banners

    shards, store = tmp_path / "shards", open_analysed_store(tmp_path / "store")
    _write_steps(shards, 0, 800)
    store.compact("job", shards, status="live")
    monkeypatch.setenv("STABSCOPE_STORE", str(store.root))
    live = alert_banners.run_alerts(store.run_info("job"))
    assert any(m.startswith("new spike: loss") for m in live), live
    store.set_status("job", "finished")
    finished = alert_banners.run_alerts(store.run_info("job"))
    assert not any(m.startswith("new spike") for m in finished)
    assert [m for m in live if not m.startswith("new spike")] == finished


# ------------------------------------------------------------------ pipeline stages and missing ranks

PIPELINE_WORLD = 64
PIPELINE_STAGES = 4
SLOW_PIPELINE_RANK = 22
"""Its step time is 1.2x its stage's (a straggler)."""
STEADY_RANK = 5
"""Its step time is a steady 1.025x the others' (not an outlier: under the 10 % threshold)."""
SILENT_RANK = 41
"""Logs nothing at all."""


def write_pipeline_run(
    shards: Path, steps: int = 120, *, layout_meta: bool = True, stages: int = 4, every: int = 1
) -> None:
    """A 64-rank job whose pipeline has ``stages`` stages of contiguous ranks (Megatron's order): the first
    and last stage hold 13 % more GPU memory (embedding; output layer and loss), rank 22 is 20 % slower
    in step time, rank 5 a steady 2.5 % slower, rank 41 logs nothing. ``layout_meta``: whether the run's
    metadata gives ``pipeline_parallel_size`` and ``tensor_parallel_size`` (``world_size`` always);
    ``every``: the ranks log every that many steps (the run-level loss every step)."""
    rng = np.random.default_rng(20)
    index = np.arange(steps)
    per_stage = PIPELINE_WORLD // stages
    meta: dict[str, object] = {"world_size": PIPELINE_WORLD, "max_norm": 1.0}
    if layout_meta:
        meta |= {"pipeline_parallel_size": stages, "tensor_parallel_size": 4}
    with ShardWriter(shards, -1) as writer:
        writer.write_meta(meta)
        writer.write_columns(index, {"loss": 3.0 - index / steps + 0.01 * rng.standard_normal(steps)}, rank=-1)
    index = index[::every]
    for rank in range(PIPELINE_WORLD):
        if rank == SILENT_RANK:
            continue
        stage = rank // per_stage
        noise = rng.standard_normal((2, index.size))
        memory = 40.0 * (1.13 if stage in (0, stages - 1) else 1.0) * (1 + 0.002 * noise[0])
        slow = 1.2 if rank == SLOW_PIPELINE_RANK else 1.025 if rank == STEADY_RANK else 1.0
        time_s = 0.8 * slow * (1 + 0.005 * noise[1])
        with ShardWriter(shards, rank) as writer:
            writer.write_columns(index, {"step_time_s": time_s, "gpu_mem_gb": memory}, rank=rank)


def test_stage_layout_from_the_metadata() -> None:
    from stab_core.ranklayout import comparison_groups, expected_world_size, missing_ranks, stage_layout

    ranks = np.arange(64)
    layout = stage_layout({"world_size": 64, "pipeline_parallel_size": 4, "tensor_parallel_size": 4}, ranks)
    assert layout is not None and (layout.stages, layout.ranks_per_stage) == (4, 16)
    assert layout.stage_of([0, 15, 16, 47, 63]).tolist() == [0, 0, 1, 2, 3]  # pipeline outermost: contiguous
    # the Megatron reader's key, a number as text, and the highest rank + 1 when world_size is absent
    assert stage_layout({"pipeline_parallel": "16"}, ranks) == layout.__class__(16, 64)
    assert stage_layout({}, ranks) is None  # no layout: unknown, not guessed
    assert stage_layout({"world_size": 64, "pipeline_parallel_size": 5}, ranks) is None  # 64 ranks, 5 stages?
    assert stage_layout({"world_size": 64, "pipeline_parallel_size": 4, "tensor_parallel_size": 3}, ranks) is None
    assert stage_layout({"world_size": 64, "pipeline_parallel_size": True}, ranks) is None
    assert expected_world_size({"world_size": 8}, [0, 1, 11]) == 12  # a rank above world_size: it existed
    assert expected_world_size({}, []) is None
    assert missing_ranks({"world_size": 64}, [r for r in ranks if r not in (17, 40)]) == [17, 40]
    assert missing_ranks({}, [0, 1, 3]) == [2]  # below the highest rank that logged
    # a stage of 2 ranks cannot be told from its peers: all ranks are compared together
    assert comparison_groups(stage_layout({"pipeline_parallel_size": 32}, ranks), ranks) is None
    assert comparison_groups(layout, np.delete(ranks, range(16, 30))) is None  # 30, 31 left
    assert comparison_groups(layout, ranks).tolist() == layout.stage_of(ranks).tolist()  # type: ignore[union-attr]


def test_compress_ranks_known_answers() -> None:
    from stab_core.ranklayout import compress_ranks

    assert compress_ranks([40, 17]) == "17, 40"
    assert compress_ranks([3, 4, 5, 6, 9, 11, 12]) == "3–6, 9, 11, 12"
    assert compress_ranks(range(8, 64)) == "8–63"
    assert compress_ranks([]) == ""


def test_memory_by_stage_is_not_a_straggler() -> None:
    """16 stages of 4 ranks (the BigScience log's TP4 x PP16): the first and last stage hold 13 % more.
    Against all ranks they are persistent outliers; against their own stage nobody is; and memory
    never makes a straggler whatever the comparison."""
    from stab_core.ranklayout import StageLayout

    ranks, steps = np.arange(64), np.arange(10)
    stage = StageLayout(16, 64).stage_of(ranks)
    memory = np.where(np.isin(stage, [0, 15]), 17.5, 15.5)[:, None] * np.ones((64, 10))
    memory[9, 4:] *= 1.2  # one rank of stage 2 leaks memory from step 4 on: 60 % of its columns
    everyone = rank_deviations(ranks, steps, memory, straggles=False)
    assert {d.rank for d in everyone if d.kind == "persistent"} == {0, 1, 2, 3, 60, 61, 62, 63, 9}
    assert "straggler" not in {d.kind for d in everyone}
    by_stage = rank_deviations(ranks, steps, memory, groups=stage, straggles=False)
    assert [(d.rank, d.kind, d.flagged_pct) for d in by_stage if d.kind != "normal"] == [(9, "persistent", 60.0)]
    assert by_stage[0].deviation_pct == pytest.approx(12.0)  # 0 % in 4 columns, +20 % in 6
    # what the old rules said of the same numbers: the first and last stage were stragglers
    old = rank_deviations(ranks, steps, memory)
    assert {d.rank for d in old if d.kind == "straggler"} == {0, 1, 2, 3, 60, 61, 62, 63, 9}
    # a rank whose peers did not log with it is not compared: unknown, not normal
    lonely = rank_deviations(np.arange(3), np.arange(2), np.array([[1.0, np.nan], [1.0, np.nan], [1.0, 2.0]]))
    assert [(d.rank, d.kind) for d in lonely] == [(0, "normal"), (1, "normal"), (2, "normal")]
    unscored = rank_deviations(np.arange(4), np.arange(2), np.array([[1.0, np.nan], [1.0, np.nan], [1.0, np.nan],
                                                                     [np.nan, 2.0]]))  # fmt: skip
    assert [(d.rank, d.kind) for d in unscored][-1] == (3, "unknown") and np.isnan(unscored[-1].flagged_pct)


def test_pipeline_run_alerts_the_slow_rank_not_the_memory_stages(tmp_path: Path) -> None:
    """64 ranks written by ShardWriter, compacted: the 20 % slower rank is the one straggler alert
    (its deviation measured against its own stage), the +13 % memory stages and the steady +2.5 %
    rank are not, and the rank that logged nothing is named by ``missing_ranks``."""
    from ingest.services.run_alerts import alerts_from_store
    from stab_core.ranklayout import missing_ranks

    write_pipeline_run(tmp_path / "shards")
    store = open_analysed_store(tmp_path / "store")
    store.compact("pp", tmp_path / "shards")
    info = store.run_info("pp")
    assert info.ranks == 63 and info.meta["pipeline_parallel_size"] == 4
    stragglers = [a for a in alerts_from_store(store, info, spikes=[]) if a.kind == "straggler"]
    assert [(a.metric, a.detail["rank"]) for a in stragglers] == [("step_time_s", SLOW_PIPELINE_RANK)]
    assert stragglers[0].detail["deviation_pct"] == pytest.approx(20.0, abs=1.0)
    assert set(stragglers[0].to_json()) == {"alert", "run", "step", "metric", "message", "rank", "deviation_pct",
                                            "flagged_pct"}  # fmt: skip
    ranks = store.read_rank_heatmap("pp", "step_time_s", buckets=10)[0]
    assert missing_ranks(info.meta, ranks) == [SILENT_RANK]
