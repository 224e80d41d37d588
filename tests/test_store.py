"""The run store: compaction semantics, crash safety, watch, reads, hostile input."""

from __future__ import annotations

import math
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from ingest.errors import StabScopeError
from ingest.live.watch import watch
from ingest.services.run_analyses import open_analysed_store
from ingest.store import Store, validate_run_name
from ingest.store.shards import ShardWriter

REPO = Path(__file__).resolve().parents[1]


def write_run(shard_dir: Path, ranks: int = 3, steps: int = 400, spike_step: int = 300) -> None:
    """A small multi-rank run: per-rank local grad norms, run-level loss with a 5x spike, lr, an event."""
    rng = np.random.default_rng(0)
    for rank in range(ranks):
        with ShardWriter(shard_dir, rank, max_buffer_rows=97) as w:
            if rank == 0:
                w.write_meta({"world_size": ranks, "per_rank_batch_size": 8, "global_batch_size": 8 * ranks})
                w.event(50, "warmup_end", "warmup done")
            for s in range(steps):
                run_level = None
                if rank == 0:
                    loss = 3.0 - s / steps + (12.0 if s == spike_step else 0.0) + 0.01 * rng.standard_normal()
                    run_level = {"loss": loss, "lr": min(1.0, s / 50) * 1e-3}
                w.write(s, {"grad_norm_local": 1.0 + 0.1 * rank}, run_level=run_level)


def export_rows(store: Store, run: str) -> list[tuple[int, int, str, float]]:
    t = store.read_long(run)
    return list(
        zip(t["step"].to_pylist(), t["rank"].to_pylist(), t["metric"].to_pylist(), t["value"].to_pylist(), strict=True)
    )


def test_compact_builds_catalog_and_is_idempotent(tmp_path: Path) -> None:
    write_run(tmp_path / "shards")
    store = open_analysed_store(tmp_path / "store")
    first = store.compact("r1", tmp_path / "shards")
    assert first.rows == 3 * 400 + 2 * 400 and first.rejected == 0
    info = store.run_info("r1")
    assert (info.first_step, info.last_step, info.n_steps, info.ranks) == (0, 399, 400, 3)
    assert info.metrics == ["grad_norm_local", "loss", "lr"] and info.rank_metrics == ["grad_norm_local"]
    assert info.meta["global_batch_size"] == 24
    assert [(e.step, e.kind) for e in store.events("r1")] == [(50, "warmup_end")]
    before = export_rows(store, "r1")
    second = store.compact("r1", tmp_path / "shards")
    assert second.rows == 0 and second.gen == first.gen
    assert export_rows(store, "r1") == before


def test_duplicates_keep_the_last_write(tmp_path: Path) -> None:
    shards = tmp_path / "shards"
    with ShardWriter(shards, 0) as w:
        w.write(5, {"grad_norm_local": 1.0})
        w.write(5, {"grad_norm_local": 2.0})  # re-logged in the same session
        w.write(6, {"grad_norm_local": 3.0})
    time.sleep(0.01)
    with ShardWriter(shards, 0) as w:  # a restarted job replays step 6
        w.write(6, {"grad_norm_local": 4.0})
    store = open_analysed_store(tmp_path / "store")
    store.compact("dup", shards)
    assert [(s, v) for s, _, _, v in export_rows(store, "dup")] == [(5, 2.0), (6, 4.0)]
    # Later records for an already-compacted step also replace it.
    with ShardWriter(shards, 0) as w:
        w.write(5, {"grad_norm_local": 9.0})
    store.compact("dup", shards)
    assert [(s, v) for s, _, _, v in export_rows(store, "dup")] == [(5, 9.0), (6, 4.0)]


@pytest.mark.slow
@pytest.mark.parametrize(
    "stage", ["after_stage_files", "after_stage_commit", "after_merge_files", "after_merge_commit"]
)
def test_crash_mid_compaction_then_rerun_equals_clean_run(tmp_path: Path, stage: str) -> None:
    shards = tmp_path / "shards"
    write_run(shards)
    clean = open_analysed_store(tmp_path / "clean")
    clean.compact("r", shards)
    expected = export_rows(clean, "r")

    crashed_store = tmp_path / "crashed"
    # A first generation exists before the crash, so "previous state readable" is checked too.
    with ShardWriter(tmp_path / "early", 0) as w:
        w.write(0, {"grad_norm_local": 1.0})
    open_analysed_store(crashed_store).compact("r", tmp_path / "early")
    cmd = [sys.executable, "-m", "ingest", "compact", str(shards), "--run", "r", "--store", str(crashed_store)]
    env = {**os.environ, "STABSCOPE_CRASH_AT": stage, "PYTHONPATH": str(REPO)}
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, cwd=REPO, check=False)
    assert proc.returncode == 137, proc.stderr
    readable = open_analysed_store(crashed_store)
    assert readable.run_info("r").n_rows >= 1  # previous (or new) generation still readable
    env.pop("STABSCOPE_CRASH_AT")
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, cwd=REPO, check=False)
    assert proc.returncode == 0, proc.stderr
    after = open_analysed_store(crashed_store)
    assert export_rows(after, "r") == expected
    # No orphan files: only the current generation and nothing staged remain.
    run_dir = after.run_dir("r")
    assert sorted(p.name for p in (run_dir / "long").iterdir()) == [f"g{after.run_info('r').gen:06d}.parquet"]
    assert not any((run_dir / "staging").iterdir())


def test_watch_picks_up_appends_and_resumes_after_restart(tmp_path: Path) -> None:
    shards = tmp_path / "shards"
    store = open_analysed_store(tmp_path / "store")
    writer = ShardWriter(shards, 0, max_buffer_rows=10_000, flush_interval_s=3600)
    for s in range(100):
        writer.write(s, {"grad_norm_local": float(s)})
    writer.flush()
    assert watch(store, "live", shards, once=True) == 1
    assert store.run_info("live").n_rows == 100
    for s in range(100, 150):
        writer.write(s, {"grad_norm_local": float(s)})
    writer.flush()
    # A "restarted" watcher (new Store object, same files) folds in exactly the 50 new records.
    store2 = open_analysed_store(tmp_path / "store")
    report = store2.compact("live", shards)
    assert report.rows == 50
    writer.close()
    with ShardWriter(shards, 1) as w2:  # the job restarted: a new segment appears
        w2.write(150, {"grad_norm_local": 150.0})
    watch(store2, "live", shards, once=True)
    info = store2.run_info("live")
    assert (info.n_rows, info.last_step, info.ranks, info.status) == (151, 150, 2, "finished")


def test_live_watch_folds_in_new_records_within_seconds(tmp_path: Path) -> None:
    shards = tmp_path / "shards"
    store = open_analysed_store(tmp_path / "store")
    writer = ShardWriter(shards, 0, flush_interval_s=0.1)
    writer.write(0, {"grad_norm_local": 1.0})
    writer.flush()
    stop = threading.Event()
    thread = threading.Thread(target=watch, args=(store, "w", shards), kwargs={"interval_s": 0.2, "stop": stop})
    thread.start()
    try:
        for s in range(1, 20):
            writer.write(s, {"grad_norm_local": 1.0})
        writer.flush()
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if store.has_run("w") and store.run_info("w").last_step == 19:
                break
            time.sleep(0.1)
        info = store.run_info("w")
        assert info.last_step == 19 and info.status == "live"
    finally:
        stop.set()
        thread.join(10)
        writer.close()
    assert store.run_info("w").status == "finished"


def test_downsampled_read_keeps_a_single_step_spike(tmp_path: Path) -> None:
    steps = np.arange(100_000)
    rng = np.random.default_rng(1)
    loss = 2.0 + 0.01 * rng.standard_normal(steps.size)
    loss[73_411] = 20.0
    with ShardWriter(tmp_path / "s", 0) as w:
        w.write_columns(steps, {"loss": loss}, rank=-1)
    store = open_analysed_store(tmp_path / "store")
    store.compact("big", tmp_path / "s")
    s = store.read_series("big", "loss", buckets=200)
    assert s.bucketed and 190 <= s.steps.size <= 200
    i = int(np.argmax(s.max))
    assert s.max[i] == 20.0 and s.max_step is not None and s.max_step[i] == 73_411
    assert s.values[i] < 2.2  # the bucket mean alone would have hidden it
    full = store.read_series("big", "loss", start=73_400, end=73_420)
    assert full.steps.tolist() == list(range(73_400, 73_421)) and full.values[11] == 20.0


def test_cross_rank_rollup_and_heatmap(tmp_path: Path) -> None:
    write_run(tmp_path / "shards", ranks=3)
    store = open_analysed_store(tmp_path / "store")
    store.compact("r", tmp_path / "shards")
    s = store.read_series("r", "grad_norm_local")
    assert s.source == "ranks"
    assert np.allclose(s.values, 1.1) and np.allclose(s.min, 1.0) and np.allclose(s.max, 1.2)
    ranks, bucket_steps, matrix = store.read_rank_heatmap("r", "grad_norm_local", buckets=10)
    assert bucket_steps[0] == 0
    assert ranks.tolist() == [0, 1, 2] and matrix.shape == (3, 10)
    assert np.allclose(matrix[:, 0], [1.0, 1.1, 1.2])
    view = store.run_view("r")
    assert view.per_rank["grad_norm_local"].values.shape == (3, 400)
    assert view.series["loss"].values.size == 400 and math.isclose(view.series["lr"].values[50], 1e-3)


@pytest.mark.parametrize("name", ["../etc", "a/b", "a\\b", "..", "", "x'; DROP TABLE runs; --", "-x", "a" * 200])
def test_hostile_run_names_are_refused(tmp_path: Path, name: str) -> None:
    write_run(tmp_path / "shards", ranks=1, steps=10)
    store = open_analysed_store(tmp_path / "store")
    store.compact("safe", tmp_path / "shards")
    with pytest.raises(StabScopeError, match="invalid run name"):
        validate_run_name(name)
    with pytest.raises(StabScopeError):
        store.compact(name, tmp_path / "shards")
    with pytest.raises(StabScopeError):
        store.run_info(name)
    assert [r.name for r in store.list_runs()] == ["safe"]
    assert not (tmp_path / "etc").exists()


def test_metric_names_are_bound_not_interpolated(tmp_path: Path) -> None:
    write_run(tmp_path / "shards", ranks=1, steps=10)
    store = open_analysed_store(tmp_path / "store")
    store.compact("r", tmp_path / "shards")
    assert store.read_series("r", "loss' OR '1'='1").steps.size == 0
    assert store.read_series("r", "loss").steps.size == 10


def test_rejected_records_are_counted_and_kept_in_catalog(tmp_path: Path) -> None:
    shards = tmp_path / "shards"
    with ShardWriter(shards, 0, max_buffer_rows=1) as w:
        for s in range(3):
            w.write(s, {"grad_norm_local": 1.0})
    data = bytearray(w.path.read_bytes())
    data[-5] ^= 0xFF  # corrupt the last frame...
    w.path.write_bytes(bytes(data))
    with ShardWriter(shards, 0, max_buffer_rows=1) as w2:  # ...and add a later good segment
        w2.write(3, {"grad_norm_local": 1.0})
    # The corrupt frame is the last of its file: treated as an unfinished write, not lost data.
    store = open_analysed_store(tmp_path / "store")
    report = store.compact("r", shards)
    assert report.torn and report.rows == 3
    # Append another good frame behind it: now it is a corrupt middle frame and gets rejected.
    with open(w.path, "ab") as f:
        f.write(w2.path.read_bytes())
    report = store.compact("r", shards)
    assert report.rejected == 1 and "CRC" in report.rejected_examples[0]
    info = store.run_info("r")
    assert info.rejected == 1 and "byte" in info.rejected_examples[0]
    # Steps 0-1 and 3 survive; step 2 was in the corrupt frame (reported above, not silently lost).
    assert sorted({r[0] for r in export_rows(store, "r")}) == [0, 1, 3]


def _long_rows() -> dict[str, list[object]]:
    """A small long table: three metrics, two ranks, rows out of order, one key written twice."""
    return {
        "rank": [0, 1, 0, -1, 1, 0, -1, 0],
        "step": [2, 1, 1, 1, 2, 3, 2, 2],
        "metric": ["loss", "loss", "loss", "lr", "grad_norm_local", "loss", "lr", "loss"],
        "value": [2.0, 1.5, 3.0, 0.1, 7.0, 1.0, 0.2, 2.5],
        "wall_time": [None, None, 10.0, None, None, None, None, None],
    }


def test_import_of_a_dictionary_metric_column_equals_plain_strings(tmp_path: Path) -> None:
    """read_log's tables carry the metric as a one-name dictionary per chunk; the store takes such
    chunks as parts without decoding them, falls back for a dictionary of several names, and stores
    exactly what the plain-string table gives (the last write of a repeated key wins)."""
    import pyarrow as pa

    from ingest.store.stage import parts_by_metric

    plain = pa.table(_long_rows())
    dictionary = pa.dictionary(pa.int32(), pa.string())
    one_name_chunks = pa.concat_tables(
        [
            pa.Table.from_batches([batch]).set_column(
                2,
                "metric",
                pa.DictionaryArray.from_arrays(
                    pa.array(np.zeros(batch.num_rows, np.int32)), pa.array([batch.column(2)[0].as_py()])
                ),
            )
            for batch in plain.slice(0, 3).to_batches() + plain.slice(3, 1).to_batches()
        ]
    )
    mixed = plain.slice(4).set_column(2, "metric", plain.slice(4).column("metric").cast(dictionary))

    def rows_by_metric(parts: list[tuple[str, pa.Table]]) -> dict[str, list[tuple[int, int, float]]]:
        out: dict[str, list[tuple[int, int, float]]] = {}
        for metric, part in parts:
            columns = [part.column(c).to_pylist() for c in ("rank", "step", "value")]
            out.setdefault(metric, []).extend(zip(*columns, strict=True))
        return out

    parts = parts_by_metric(one_name_chunks) + parts_by_metric(mixed)
    assert rows_by_metric(parts) == rows_by_metric(parts_by_metric(plain))
    assert [m for m, _ in parts_by_metric(one_name_chunks)] == ["loss", "lr"]  # one part per chunk
    stores = {}
    for label, table in {"plain": plain, "dictionary": pa.concat_tables([one_name_chunks, mixed])}.items():
        store = open_analysed_store(tmp_path / label)
        store.import_table("r", table, source="test")
        stores[label] = store
    for metric, rank in (("loss", 0), ("loss", 1), ("lr", -1), ("grad_norm_local", 1)):
        a, b = (s.read_series("r", metric, rank=rank) for s in stores.values())
        np.testing.assert_array_equal(a.steps, b.steps)
        np.testing.assert_array_equal(a.values, b.values)
    assert stores["dictionary"].read_series("r", "loss", rank=0).values.tolist() == [3.0, 2.5, 1.0]


def test_split_by_metric_cuts_a_sorted_table_at_each_metric() -> None:
    from ingest.store.read import split_by_metric

    rng = np.random.default_rng(5)
    names = sorted(["grad_norm", "loss", "lr", "z/extra"])
    counts = [3, 1, 0, 5]
    metric = [m for m, c in zip(names, counts, strict=True) for _ in range(c)]
    steps = np.concatenate([np.arange(c, dtype=np.int64) * 10 for c in counts])
    values = rng.normal(size=steps.size)
    table = pa.table({"metric": metric, "step": steps, "value": values})
    chunked = pa.Table.from_batches(table.to_batches(max_chunksize=2))  # boundaries inside and between chunks
    dictionary = table.set_column(0, "metric", table.column("metric").dictionary_encode())
    for t in (table, chunked, dictionary):
        got = split_by_metric(t)
        assert list(got) == ["grad_norm", "loss", "z/extra"]
        assert got["grad_norm"].steps.tolist() == [0, 10, 20] and got["loss"].steps.tolist() == [0]
        assert got["z/extra"].values.tolist() == values[4:].tolist()
    assert split_by_metric(table.slice(0, 0)) == {}
    # rows in any order (a scan without ORDER BY): each metric gathered and sorted by step
    order = rng.permutation(steps.size)
    shuffled = table.take(pa.array(order))
    blocks = pa.concat_tables([table.slice(4), table.slice(0, 4)])  # two runs of one metric
    for t in (shuffled, blocks):
        got = split_by_metric(t)
        assert list(got) == ["grad_norm", "loss", "z/extra"]
        assert got["grad_norm"].steps.tolist() == [0, 10, 20]
        assert got["z/extra"].values.tolist() == values[4:].tolist()
    many = pa.table({"metric": ["a", "b"] * 6000, "step": np.repeat(np.arange(6000), 2), "value": np.zeros(12000)})
    got = split_by_metric(many)  # 12,000 runs: sorted once instead of gathered
    assert got["a"].steps.tolist() == list(range(6000)) and got["b"].steps.tolist() == list(range(6000))
