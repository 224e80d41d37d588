"""A store at an s3:// URL on a real moto server: every write gives what the same write gives a local
store, two caches of one URL agree, a lost conditional put leaves nothing visible, and the cache is only
a cache."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from ingest.errors import StabScopeError
from ingest.services.run_analyses import materialise
from ingest.store import Store, remote
from ingest.store.manifest import manifest_seq
from ingest.store.object_store import ObjectStore
from tests.conftest import RunSpec, write_run

OVERVIEW_METRICS = ("loss", "lr", "grad_norm", "clip_coef", "grad_norm_local", "step_time_s", "snr", "clip_ratio")


def s3_store(url: str, cache: Path, **kwargs: Any) -> Store:
    return Store(url, on_generation=materialise, cache_dir=cache, **kwargs)


def imported_table(n_steps: int, offset: int = 0) -> pa.Table:
    steps = np.arange(offset, offset + n_steps, dtype=np.int64)
    loss = 5.0 * np.exp(-steps / 300.0) + 2.0
    loss[n_steps // 2] *= 4.0  # a spike for the analyses to find
    return pa.table(
        {
            "rank": pa.array(np.full(2 * n_steps, -1), pa.int32()),
            "step": np.concatenate([steps, steps]),
            "metric": ["loss"] * n_steps + ["lr"] * n_steps,
            "value": np.concatenate([loss, np.full(n_steps, 3e-4)]),
            "wall_time": np.concatenate([steps * 0.5, steps * 0.5]),
        }
    )


def _long_rows(store: Store, name: str) -> dict[str, list[Any]]:
    order = [("metric", "ascending"), ("rank", "ascending"), ("step", "ascending")]
    table = store.read_long(name, include_derived=True).sort_by(order)
    rows = table.to_pydict()
    rows["value"] = np.nan_to_num(table.column("value").to_numpy(), nan=-1e300).tolist()
    return rows


def state_of(store: Store, name: str) -> dict[str, Any]:
    """Everything a user sees of a run: catalog figures, events, spikes, every exported row, the
    overview's series (full and bucketed), the heatmap."""
    info = store.run_info(name)
    out: dict[str, Any] = {
        "info": (info.gen, info.base_gen, info.n_rows, info.n_steps, info.ranks, info.metrics, info.rank_metrics),
        "status": info.status,
        "meta": {k: v for k, v in info.meta.items() if k != "analysis"},
        "analysis": info.meta.get("analysis", {}).get("alerts"),
        "events": [(e.step, e.kind, e.label) for e in store.events(name)],
        "spikes": store.spikes(name),
        "long": _long_rows(store, name),
    }
    for metric in OVERVIEW_METRICS:
        if metric in info.metrics or metric in ("snr", "clip_ratio"):
            for buckets in (None, 100):
                s = store.read_series(name, metric, buckets=buckets)
                out[f"{metric}/{buckets}"] = (s.steps.tolist(), np.nan_to_num(s.values, nan=-1e300).tolist())
    if info.rank_metrics:
        ranks, steps, matrix = store.read_rank_heatmap(name, "grad_norm_local", buckets=50)
        out["heatmap"] = (ranks.tolist(), steps.tolist(), np.nan_to_num(matrix, nan=-1e300).tolist())
    return out


def test_writes_through_s3_equal_a_local_store(s3_url: str, tmp_path: Path) -> None:
    local = Store(tmp_path / "local", on_generation=materialise)
    remote = s3_store(s3_url, tmp_path / "cache")
    for store in (local, remote):
        write_run(
            store, RunSpec(name="sharded", n_steps=800, loss_spike=(500, 506), grad_spike_step=498, outlier_rank=1)
        )
        store.import_table("imported", imported_table(600), source="import:csv:x.csv", meta={"gpus": 8})
        store.import_table("imported", imported_table(300, offset=600), source="import:csv:x.csv")  # a delta
        store.update_meta("sharded", {"usd_per_gpu_hour": 2.5})
        store.import_table("doomed", imported_table(100), source="import:csv:y.csv")
        store.delete_run("doomed")
    assert [r.name for r in remote.list_runs()] == [r.name for r in local.list_runs()] == ["sharded", "imported"]
    for name in ("sharded", "imported"):
        assert state_of(remote, name) == state_of(local, name)
    assert remote.run_info("imported").gen == 2 and remote.run_info("sharded").meta["usd_per_gpu_hour"] == 2.5
    for fmt in ("csv", "parquet"):
        remote.export("sharded", fmt, tmp_path / f"r.{fmt}")
        local.export("sharded", fmt, tmp_path / f"l.{fmt}")
        assert (tmp_path / f"r.{fmt}").read_bytes() == (tmp_path / f"l.{fmt}").read_bytes()
    # a second machine with an empty cache reads the same from the objects alone
    fresh = s3_store(s3_url, tmp_path / "cache2")
    assert not fresh.has_run("doomed")
    for name in ("sharded", "imported"):
        assert state_of(fresh, name) == state_of(local, name)
    # what is left on the server is what the newest manifests name, and those manifests
    objects = ObjectStore(s3_url)
    keys = [o.key for o in objects.list("runs/")]
    data = [k for k in keys if manifest_seq(k) is None]
    assert len(data) == len(set(data)) and all("/run=doomed/" not in k for k in data)
    assert all(k.count(".") == 2 for k in data)  # each carries its writer's token


def test_two_caches_follow_the_published_manifests(s3_url: str, tmp_path: Path) -> None:
    writer = s3_store(s3_url, tmp_path / "a")
    reader = s3_store(s3_url, tmp_path / "b")
    assert reader.list_runs() == []
    writer.import_table("run1", imported_table(500), source="import:csv:x.csv")
    reader.refresh()
    assert reader.run_info("run1").gen == 1
    before = state_of(reader, "run1")
    writer.import_table("run1", imported_table(500, offset=500), source="import:csv:x.csv")
    assert reader.run_info("run1").gen == 1  # not refreshed yet: the cache still reflects m1
    assert state_of(reader, "run1") == before
    reader.refresh()
    assert reader.run_info("run1").gen == 2
    assert state_of(reader, "run1") == state_of(writer, "run1")
    # the reader writes next: it starts from the writer's state, and the writer sees its write
    reader.update_meta("run1", {"gpus": 16})
    writer.refresh()
    assert writer.run_info("run1").meta["gpus"] == 16
    assert state_of(writer, "run1") == state_of(reader, "run1")
    expected = state_of(writer, "run1")
    # a stale cache catalog (here: a cache reflecting m1 put back) is rebuilt from the newest manifest
    shutil.rmtree(tmp_path / "b")
    again = s3_store(s3_url, tmp_path / "b")
    assert state_of(again, "run1") == expected
    # deleting the run on one machine removes it on the other at its next refresh
    writer.delete_run("run1")
    again.refresh()
    assert again.list_runs() == [] and not (tmp_path / "b" / "runs" / "run=run1").exists()


def test_losing_the_conditional_put_leaves_nothing_of_the_write(s3_url: str, tmp_path: Path) -> None:
    """Machine B's write races machine A's: A publishes the next manifest while B is merging, so B's
    conditional put loses. Nothing of B's write is visible; B's cache now holds A's state."""
    a = s3_store(s3_url, tmp_path / "a")
    a.import_table("run1", imported_table(400), source="import:csv:x.csv")
    raced: list[bool] = []

    def a_writes_meanwhile(store: Store, name: str) -> None:
        if not raced:
            raced.append(True)
            a.import_table("run1", imported_table(100, offset=400), source="import:csv:x.csv")
        materialise(store, name)

    b = Store(s3_url, on_generation=a_writes_meanwhile, cache_dir=tmp_path / "b")
    with pytest.raises(StabScopeError, match=r"another machine published a new state of this run first"):
        b.import_table("run1", imported_table(50, offset=10_000), source="import:csv:z.csv")
    assert raced
    fresh = s3_store(s3_url, tmp_path / "c")
    for store in (b, fresh):
        assert store.run_info("run1").last_step == 499  # A's rows, none of B's
    assert state_of(b, "run1") == state_of(fresh, "run1") == state_of(a, "run1")


def test_deleting_the_cache_loses_nothing(s3_url: str, tmp_path: Path) -> None:
    store = s3_store(s3_url, tmp_path / "cache")
    store.import_table("kept", imported_table(300), source="import:csv:x.csv", meta={"gpus": 4})
    store.set_setting("demo_seeded", "1")
    expected = state_of(store, "kept")
    shutil.rmtree(tmp_path / "cache")
    reopened = s3_store(s3_url, tmp_path / "cache")
    assert state_of(reopened, "kept") == expected
    assert reopened.get_setting("demo_seeded") == "1"
    # a cache whose catalog alone is lost (its record of what it reflects kept) is rebuilt too
    del reopened
    (tmp_path / "cache" / "catalog.duckdb").unlink()
    assert state_of(s3_store(s3_url, tmp_path / "cache"), "kept") == expected
    # reads fetch only what they need: the run-level series reads no long file
    cold = s3_store(s3_url, tmp_path / "cold")
    cold.read_series("kept", "loss")
    fetched = {p.parent.name for p in (tmp_path / "cold" / "runs").rglob("*.parquet")}
    assert "runlevel" in fetched and "long" not in fetched


def test_a_missing_bucket_is_one_paragraph(s3_server: Any, tmp_path: Path) -> None:
    with pytest.raises(StabScopeError, match=r"bucket 'no-such-bucket' does not exist"):
        Store("s3://no-such-bucket/store", cache_dir=tmp_path / "c")
    with pytest.raises(StabScopeError, match=r"expected s3://bucket/prefix"):
        Store("s3://x/store", cache_dir=tmp_path / "c")


def test_parquet_footer_reads_by_range(s3_url: str, tmp_path: Path) -> None:
    """The objects are the cache's Parquet files as written: pyarrow opens one on the server by ranges."""
    store = s3_store(s3_url, tmp_path / "cache")
    store.import_table("r", imported_table(200), source="import:csv:x.csv")
    objects = ObjectStore(s3_url)
    (key,) = [o.key for o in objects.list("runs/run=r/long/")]
    with objects.open_input(key) as f:
        assert pq.ParquetFile(f).metadata.num_rows == 400


def test_one_ranks_window_reads_the_long_object_by_ranges(
    s3_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(remote, "RANGED_MIN_BYTES", 0)  # a long file of a few row groups is read by ranges
    local = Store(tmp_path / "local", on_generation=materialise)
    writer = s3_store(s3_url, tmp_path / "writer")
    for store in (local, writer):
        write_run(store, RunSpec(name="r", n_steps=20_000, n_ranks=4))
    reader = s3_store(s3_url, tmp_path / "reader")
    before = dict(reader.object_counters or {})
    window = reader.read_series("r", "grad_norm_local", rank=2, start=14_000, end=18_999)
    expected = local.read_series("r", "grad_norm_local", rank=2, start=14_000, end=18_999)
    assert window.steps.tolist() == expected.steps.tolist() == list(range(14_000, 19_000))
    assert window.values.tolist() == expected.values.tolist()
    read = (reader.object_counters or {})["bytes_read"] - before["bytes_read"]
    (long_object,) = ObjectStore(s3_url).list("runs/run=r/long/")
    assert 0 < read < long_object.size / 2
    whole = reader.read_series("r", "grad_norm_local", rank=1, buckets=100)
    assert whole.values.tolist() == local.read_series("r", "grad_norm_local", rank=1, buckets=100).values.tolist()
    assert not list((tmp_path / "reader" / "runs" / "run=r").rglob("long/*.parquet"))  # never fetched whole


def test_a_pass_that_finds_nothing_new_publishes_nothing(s3_url: str, tmp_path: Path) -> None:
    """``watch`` compacts every 2 s: a pass with no new frame must not put a manifest each time."""
    from tests.test_store import write_run as write_shards

    write_shards(tmp_path / "shards", ranks=2, steps=100, spike_step=80)
    store = s3_store(s3_url, tmp_path / "cache")
    store.compact("live", tmp_path / "shards", status="live")
    objects = ObjectStore(s3_url)
    manifests = [o.key for o in objects.list("runs/run=live/manifests/")]
    report = store.compact("live", tmp_path / "shards", status="live")
    assert report.rows == 0
    assert [o.key for o in objects.list("runs/run=live/manifests/")] == manifests
    store.compact("live", tmp_path / "shards", status="finished")  # a status change is a new state
    assert len(objects.list("runs/run=live/manifests/")) == len(manifests) + 1
    assert s3_store(s3_url, tmp_path / "other").run_info("live").status == "finished"


def test_check_names_an_object_the_manifest_needs_and_lacks(s3_url: str, tmp_path: Path) -> None:
    from ingest.store.check_remote import check_object_store

    store = s3_store(s3_url, tmp_path / "cache")
    store.import_table("r", imported_table(200), source="import:csv:x.csv")
    assert check_object_store(s3_url).clean
    objects = ObjectStore(s3_url)
    (rollup,) = objects.list("runs/run=r/rollup/")
    objects.delete([rollup.key])
    report = check_object_store(s3_url, "r", repair=True)
    assert not report.clean
    assert [(f.code, f.path, f.repaired) for f in report.findings] == [
        ("missing_object", f"{s3_url}/{rollup.key}", False)
    ]
    assert "delete the run" in report.findings[0].repair


def test_check_names_a_resized_object_and_a_manifest_that_does_not_read(s3_url: str, tmp_path: Path) -> None:
    """An object overwritten with other bytes (a manual copy, a truncated upload) and a newest manifest
    that does not parse: both named, neither deleted (the run is imported again)."""
    from ingest.store.check_remote import check_object_store
    from ingest.store.manifest import manifest_key, manifest_seq

    store = s3_store(s3_url, tmp_path / "cache")
    store.import_table("r", imported_table(200), source="import:csv:x.csv")
    objects = ObjectStore(s3_url)
    (rollup,) = objects.list("runs/run=r/rollup/")
    objects.put_bytes(rollup.key, objects.get_bytes(rollup.key)[:-10])
    report = check_object_store(s3_url, "r", repair=True)
    assert [(f.code, f.path, f.repaired) for f in report.findings] == [
        ("object_size_mismatch", f"{s3_url}/{rollup.key}", False)
    ]
    assert report.findings[0].problem == f"{rollup.size - 10} bytes, but manifest m000000001 recorded {rollup.size}"
    newest = max(s for s in (manifest_seq(o.key) for o in objects.list("runs/run=r/")) if s is not None)
    objects.put_bytes(manifest_key("r", newest), b"{not json")
    report = check_object_store(s3_url, "r", repair=True)
    assert [(f.code, f.path, f.repaired) for f in report.findings] == [
        ("damaged_manifest", f"{s3_url}/{manifest_key('r', newest)}", False)
    ]
    assert report.findings[0].problem.startswith("the run's newest manifest does not read: ")
