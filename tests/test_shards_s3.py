"""Shards on object storage (#24), against a real S3 server (moto on 127.0.0.1, ``tests/s3_server.py``):
ShardWriter at an ``s3://`` location -> Store.compact / watch / the CLI, compared with the same data
written to a local shard directory; a writer killed with SIGKILL; damaged objects."""

from __future__ import annotations

import math
import os
import signal
import subprocess
import sys
import zlib
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from ingest.errors import StabScopeError
from ingest.live.watch import watch
from ingest.store import Store
from ingest.store.object_store import ObjectStore, ObjectUrl
from ingest.store.shard_objects import bucket_store
from ingest.store.shards import HEADER, KIND_METRICS, MAGIC, ShardWriter, _ipc_bytes, find_segments, read_segment
from tests.s3_server import S3Server

REPO = Path(__file__).resolve().parents[1]
STEPS = 300


def write_job(location: str | Path, *, ranks: int = 3, steps: int = STEPS, start: int = 0) -> None:
    """A small job at ``location``: per-rank rows with a NaN, an Inf and a sparse metric, run-level rows
    and events from rank 0, metadata, a replayed block of steps (a restart), and a ``write_columns``
    frame; flushes every 37 rows, so each rank makes several segment objects. Wall times are fixed, so
    two locations get the same rows."""
    for rank in range(ranks):
        with ShardWriter(location, rank, max_buffer_rows=37, flush_interval_s=3600) as writer:
            if rank == 0 and start == 0:
                writer.write_meta({"world_size": ranks, "per_rank_batch_size": 8})
            for step in range(start, start + steps):
                wall = 1.7e9 + step
                metrics: dict[str, float] = {"grad_norm_local": 1.0 + 0.01 * rank + 0.001 * step}
                if step % 7 == 0:
                    metrics["step_time_s"] = 0.5 + rank
                if step == start + 11 and rank == 1:
                    metrics["grad_norm_local"] = math.nan
                if step == start + 12 and rank == 2:
                    metrics["grad_norm_local"] = math.inf
                run_level = {"loss": 3.0 - step * 0.001, "lr": 1e-3} if rank == 0 else None
                writer.write(step, metrics, run_level=run_level, wall_time=wall)
                if rank == 0 and step % 100 == 0:
                    writer.event(step, "checkpoint", f"ckpt-{step}")
            replay = np.arange(start + steps - 20, start + steps, dtype=np.int64)  # a restart re-logs 20 steps
            writer.write_columns(replay, {"throughput_tok_s": replay * 2.0}, wall_time=1.7e9 + replay)


def exported_rows(store: Store, run: str) -> list[tuple[Any, ...]]:
    table = store.read_long(run).sort_by([("metric", "ascending"), ("rank", "ascending"), ("step", "ascending")])
    return [
        (r["rank"], r["step"], r["metric"], "nan" if r["value"] != r["value"] else r["value"], r["wall_time"])
        for r in table.to_pylist()
    ]


def test_s3_shards_compact_to_the_same_run_as_local_shards(s3_url: str, tmp_path: Path) -> None:
    shards = s3_url.replace("/store", "/job42/shards")
    write_job(shards)
    write_job(tmp_path / "shards")
    writers = find_segments(shards)
    local = find_segments(tmp_path / "shards")
    # One segment per writer, as locally, made of one object per flush (37 rows a flush).
    assert len(writers) == len(local) == 3
    assert all(len(ref.objects) >= STEPS // 37 for ref in writers)
    for ref in writers:
        assert ref.key == ref.location and ref.location.startswith(shards + "/rank-0000")
        assert [url for url, _ in ref.objects] == [f"{ref.location}-{i:09d}.ssf" for i in range(len(ref.objects))]
        assert ref.size == sum(size for _, size in ref.objects)
    # A writer's objects read as one segment hold the bytes of the same writer's local file.
    assert [ref.size for ref in writers] == [ref.size for ref in local]
    # By its stem URL alone (as Spark executors get it) a segment lists its objects and reads the same,
    # and from an offset the objects past it only.
    whole, by_url = read_segment(writers[0]), read_segment(writers[0].location)
    assert by_url.frames == whole.frames and by_url.end_offset == whole.end_offset == writers[0].size
    first_size = writers[0].objects[0][1]
    rest = read_segment(writers[0].location, first_size)
    assert rest.frames == whole.frames - read_segment(writers[0].objects[0][0]).frames
    assert all(a.equals(b) for a, b in zip(rest.metrics, whole.metrics[-len(rest.metrics) :], strict=True))

    via_s3 = Store(tmp_path / "store-a")
    via_disk = Store(tmp_path / "store-b")
    report_s3 = via_s3.compact("job42", shards)
    report_disk = via_disk.compact("job42", tmp_path / "shards")
    assert report_s3.rows == report_disk.rows > 3 * STEPS
    assert report_s3.rejected == report_disk.rejected == 0 and not report_s3.torn
    assert exported_rows(via_s3, "job42") == exported_rows(via_disk, "job42")
    assert [e.step for e in via_s3.events("job42")] == [e.step for e in via_disk.events("job42")] == [0, 100, 200]
    info = via_s3.run_info("job42")
    assert info.meta["world_size"] == 3 and info.source == f"shards:{shards}"

    # A second pass fetches no object again: the offsets are keyed by each object's URL.
    counters = bucket_store(ObjectUrl.parse(shards).bucket).counters
    read_before = counters.bytes_read
    again = via_s3.compact("job42", shards)
    assert again.rows == 0 and again.frames == 0
    assert counters.bytes_read == read_before


def test_watch_tails_new_objects_across_passes(s3_url: str, tmp_path: Path) -> None:
    shards = s3_url.replace("/store", "/live/shards")
    store = Store(tmp_path / "store")
    write_job(shards, ranks=2, steps=100)
    logged: list[str] = []
    assert watch(store, "live", shards, once=True, log=logged.append) == 1
    first = exported_rows(store, "live")
    assert {r[1] for r in first if r[2] == "loss"} == set(range(100))

    objects_before = {url for ref in find_segments(shards) for url, _ in ref.objects}
    write_job(shards, ranks=2, steps=100, start=100)
    new_bytes = sum(size for ref in find_segments(shards) for url, size in ref.objects if url not in objects_before)
    counters = bucket_store(ObjectUrl.parse(shards).bucket).counters
    read_before = counters.bytes_read
    assert watch(store, "live", shards, once=True, log=logged.append) == 1
    assert counters.bytes_read - read_before == new_bytes  # only the new objects were fetched
    second = exported_rows(store, "live")
    assert {r[1] for r in second if r[2] == "loss"} == set(range(200))
    assert set(first) <= set(second)
    assert len(second) == len(set(second))  # nothing doubled

    reference = Store(tmp_path / "reference")
    write_job(tmp_path / "shards", ranks=2, steps=100)
    write_job(tmp_path / "shards", ranks=2, steps=100, start=100)
    reference.compact("live", tmp_path / "shards")
    assert second == exported_rows(reference, "live")


KILLED_WRITER = """
import sys, time
from ingest.store.shards import ShardWriter

writer = ShardWriter(sys.argv[1], rank=0, flush_interval_s=0.01)
for step in range(1_000_000):
    writer.write(step, {"grad_norm_local": float(step)}, run_level={"loss": float(step)}, wall_time=1.7e9 + step)
    if step % 50 == 49:
        writer.flush()
        print(step, flush=True)
    time.sleep(0.0005)
"""


def test_a_killed_writer_loses_nothing_flushed_and_leaves_no_partial_object(s3_url: str, tmp_path: Path) -> None:
    shards = s3_url.replace("/store", "/killed/shards")
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    child = subprocess.Popen(
        [sys.executable, "-c", KILLED_WRITER, shards], stdout=subprocess.PIPE, text=True, env=env, cwd=REPO
    )
    assert child.stdout is not None
    flushed = -1
    for line in child.stdout:
        flushed = int(line)
        if flushed >= 499:  # 10 explicit flushes, and uploads of the 10 ms flushes in flight between them
            break
    os.kill(child.pid, signal.SIGKILL)
    child.wait()
    assert child.returncode == -signal.SIGKILL

    segments = find_segments(shards)
    for ref in segments:  # every visible object is whole: all its frames decode, none torn
        read = read_segment(ref)
        assert not read.errors and not read.torn_tail and read.end_offset == ref.size
    store = Store(tmp_path / "store")
    report = store.compact("killed", shards)
    assert report.rejected == 0 and not report.torn
    rows = exported_rows(store, "killed")
    losses = sorted(r[1] for r in rows if r[2] == "loss")
    assert losses[: flushed + 1] == list(range(flushed + 1))  # every step flushed before the kill is there
    assert losses == list(range(len(losses)))  # and no hole: objects of one writer are put in order


def put_frames(store: ObjectStore, key: str, frames: list[bytes]) -> None:
    store.put_bytes(key, b"".join(frames))


def metrics_frame(steps: range) -> bytes:
    table = pa.table(
        {
            "rank": pa.array([0] * len(steps), pa.int32()),
            "step": pa.array(list(steps), pa.int64()),
            "wall_time": pa.array([1.7e9 + s for s in steps], pa.float64()),
            "grad_norm_local": pa.array([float(s) for s in steps], pa.float64()),
        }
    )
    payload = _ipc_bytes(table)
    return HEADER.pack(MAGIC, KIND_METRICS, len(payload), zlib.crc32(payload)) + payload


def test_bad_frames_in_an_object_are_reported_with_its_url_and_byte_offset(s3_url: str, tmp_path: Path) -> None:
    shards = s3_url.replace("/store", "/bad/shards")
    url = ObjectUrl.parse(shards)
    store = ObjectStore(url)
    good, damaged, last = (
        metrics_frame(range(0, 10)),
        bytearray(metrics_frame(range(10, 20))),
        metrics_frame(range(20, 30)),
    )
    damaged[HEADER.size + 5] ^= 0xFF  # a payload byte: the CRC no longer matches
    put_frames(store, "rank-00000/seg-00000000000000000001-1-000000000.ssf", [good, bytes(damaged), last])
    truncated = metrics_frame(range(30, 40))
    put_frames(store, "rank-00000/seg-00000000000000000001-1-000000001.ssf", [truncated[:-7]])

    report = Store(tmp_path / "store").compact("bad", shards)
    assert report.rejected == 2 and not report.torn  # an object never grows: a cut frame is damage, not a tail
    first = f"{shards}/rank-00000/seg-00000000000000000001-1-000000000.ssf"
    second = f"{shards}/rank-00000/seg-00000000000000000001-1-000000001.ssf"
    assert f"{first}: byte {len(good)}: CRC mismatch" in report.rejected_examples[0]
    assert f"{second}: byte 0: truncated frame" in report.rejected_examples[1]
    steps = {r[1] for r in exported_rows(Store(tmp_path / "store"), "bad")}
    assert steps == set(range(0, 10)) | set(range(20, 30))


def test_compact_and_watch_through_the_cli(s3_url: str, tmp_path: Path) -> None:
    shards = s3_url.replace("/store", "/cli/shards")
    write_job(shards, ranks=2, steps=60)
    env = {**os.environ, "PYTHONPATH": str(REPO)}

    def stabscope(*args: str) -> subprocess.CompletedProcess[str]:
        cmd = [sys.executable, "-m", "ingest", *args, "--store", str(tmp_path / "store")]
        return subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=REPO, timeout=300, check=False)

    compact = stabscope("compact", shards, "--run", "cli-s3")
    assert compact.returncode == 0, compact.stderr
    assert "cli-s3: " in compact.stdout and "rows" in compact.stdout
    write_job(shards, ranks=2, steps=60, start=60)
    watched = stabscope("watch", shards, "--run", "cli-s3", "--once")
    assert watched.returncode == 0, watched.stderr
    rows = exported_rows(Store(tmp_path / "store"), "cli-s3")
    assert {r[1] for r in rows if r[2] == "loss"} == set(range(120))

    missing = stabscope("compact", "s3://no-such-bucket-here/shards", "--run", "x")
    assert missing.returncode == 2 and "Traceback" not in missing.stderr
    assert "no-such-bucket-here" in missing.stderr and "does not exist" in missing.stderr


def test_an_upload_that_fails_is_one_clear_error_at_flush(s3_server: S3Server) -> None:
    writer = ShardWriter("s3://no-such-bucket-for-shards/job/shards", rank=0)
    writer.write(0, {"grad_norm_local": 1.0})
    with pytest.raises(StabScopeError, match=r"no-such-bucket-for-shards.*does not exist"):
        writer.flush()
    with pytest.raises(StabScopeError):
        writer.close()


def test_stability_monitor_writes_its_shard_to_object_storage(s3_url: str, tmp_path: Path) -> None:
    import torch

    from ingest.training.monitor import StabilityMonitor
    from ingest.training.torch_clipping import clip_grad_norm

    shards = s3_url.replace("/store", "/monitored/shards")
    model = torch.nn.Linear(4, 2)
    with StabilityMonitor(shards, seq_len=8, per_rank_batch_size=2, flush_interval_s=0.0) as monitor:
        for step in range(20):
            loss = model(torch.randn(2, 4)).square().mean()
            loss.backward()  # type: ignore[no-untyped-call]
            record = clip_grad_norm(list(model.parameters()), 1.0)
            monitor.log(step, loss=loss.detach(), lr=1e-3, clip_stats=record)
    assert all(ref.location.startswith(f"{shards}/rank-00000/seg-") for ref in find_segments(shards))
    store = Store(tmp_path / "store")
    store.compact("monitored", shards)
    rows = exported_rows(store, "monitored")
    assert sorted(r[1] for r in rows if r[2] == "loss" and r[0] == -1) == list(range(20))
    assert store.run_info("monitored").meta["per_rank_batch_size"] == 2
