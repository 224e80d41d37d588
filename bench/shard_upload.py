"""What a training job pays to write its shards straight to object storage (#24), against the local
writer measured in the same run, on a loopback S3 server (moto, started here unless ``AWS_ENDPOINT_URL``
names one).

``python -m bench.shard_upload [--rounds N]`` prints, as medians over ``N`` interleaved rounds:

- per flush of ``rows`` buffered rows (the monitor's 2 s flush holds tens of rows; 4096 is the buffer
  cap): the local writer's ``flush`` (two syscalls), the S3 writer's ``flush`` (the frame, one PUT,
  waited for), and the alternative of one multipart upload per writer with a part per flush
  (``upload_part``; S3 also rejects parts under 5 MiB but the last at completion, and nothing of a
  multipart upload is visible before it completes, so ``watch`` could not tail it);
- in a loop of simulated training steps (a fixed numpy workload, ``write`` of 4 metrics plus the
  run-level row each step, a flush every ``flush_interval_s``), the time inside ``write`` per step for
  the local and the S3 writer, interleaved step by step: the cost the training step sees, since the S3
  writer's uploads run on its background thread;
- a ``compact`` pass that finds nothing new among 500 and 2,000 segment objects (a quiet ``watch``
  pass), and the listing alone;
- with ``--monitor-repeats N``: goal 5's loops (``bench.training``) with the monitor's shard local and on
  S3, alternating, N times each.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from ingest.store.object_store import ObjectUrl
from ingest.store.shard_objects import bucket_store
from ingest.store.shards import ShardWriter


def _rows(writer: ShardWriter, n: int, start: int) -> None:
    for step in range(start, start + n):
        writer.write(step, {"grad_norm_local": 1.0, "step_time_s": 0.1}, run_level={"loss": 2.0, "lr": 1e-3})


def flush_costs(location: str, local_dir: Path, rows: int, rounds: int) -> dict[str, float]:
    """Median seconds per flush of ``rows`` rows: local, S3 (PUT waited for), multipart part."""
    url = ObjectUrl.parse(location)
    store = bucket_store(url.bucket)
    client: Any = store._client  # the alternative the writer does not use: measured here only
    upload = client.create_multipart_upload(Bucket=url.bucket, Key=url.key("multipart.ssf"))
    local = ShardWriter(local_dir, 0, max_buffer_rows=10**9, flush_interval_s=1e9)
    remote = ShardWriter(location, 0, max_buffer_rows=10**9, flush_interval_s=1e9)
    times: dict[str, list[float]] = {"local_flush_s": [], "s3_put_flush_s": [], "multipart_part_s": []}
    parts = []
    for i in range(rounds):
        size_before = local.path.stat().st_size
        for writer, name in ((local, "local_flush_s"), (remote, "s3_put_flush_s")):
            _rows(writer, rows // 2, i * rows)  # each write adds a rank row and a run-level row
            begin = time.perf_counter()
            writer.flush()
            times[name].append(time.perf_counter() - begin)
        payload = os.urandom(local.path.stat().st_size - size_before)  # the bytes of one flush
        begin = time.perf_counter()
        part = client.upload_part(
            Bucket=url.bucket, Key=url.key("multipart.ssf"), UploadId=upload["UploadId"], PartNumber=i + 1, Body=payload
        )
        times["multipart_part_s"].append(time.perf_counter() - begin)
        parts.append({"PartNumber": i + 1, "ETag": part["ETag"]})
    client.abort_multipart_upload(Bucket=url.bucket, Key=url.key("multipart.ssf"), UploadId=upload["UploadId"])
    local.close()
    remote.close()
    return {name: statistics.median(values) for name, values in times.items()}


def step_overhead(location: str, local_dir: Path, steps: int, flush_interval_s: float) -> dict[str, float]:
    """Median and 99th-percentile seconds inside ``write`` per simulated step, local and S3."""
    work = np.random.default_rng(0).standard_normal((160, 160))
    writers = {
        "local": ShardWriter(local_dir, 1, flush_interval_s=flush_interval_s),
        "s3": ShardWriter(location, 1, flush_interval_s=flush_interval_s),
    }
    times: dict[str, list[float]] = {name: [] for name in writers}
    step_s: list[float] = []
    order = list(writers)
    for step in range(steps):
        for name in order[step % 2 :] + order[: step % 2]:
            begin = time.perf_counter()
            _ = work @ work  # the "training step": the same work for both writers
            step_s.append(time.perf_counter() - begin)
            begin = time.perf_counter()
            writers[name].write(
                step,
                {"grad_norm_local": 1.0, "step_time_s": 0.1, "throughput_tok_s": 1e5, "loss": 2.0},
                run_level={"loss": 2.0, "lr": 1e-3},
            )
            times[name].append(time.perf_counter() - begin)
    for writer in writers.values():
        writer.close()
    out = {"step_work_s": statistics.median(step_s)}
    for name, values in times.items():
        out[f"{name}_write_median_s"] = statistics.median(values)
        out[f"{name}_write_p99_s"] = float(np.percentile(values, 99))
        out[f"{name}_write_total_s"] = sum(values)
    return out


def idle_pass_cost(location: str, store_dir: Path, objects: int, rounds: int) -> dict[str, float]:
    """Median seconds of a ``compact`` pass that finds nothing new over ``objects`` segment objects
    (what every ``watch`` pass of a quiet run pays: the listing, one LIST request per 1,000 objects,
    and the catalog's offsets), and of the listing alone."""
    from ingest.store import Store
    from ingest.store.shards import find_segments

    url = ObjectUrl.parse(location)
    store = bucket_store(url.bucket)
    frame = Path(store_dir / "frame.ssf")
    with ShardWriter(store_dir / "one", 0) as writer:
        writer.write(0, {"grad_norm_local": 1.0})
    frame.write_bytes(writer.path.read_bytes())
    for i in range(objects):  # one tiny object per flush of writer ``i // 100``
        key = f"rank-{i % 8:05d}/seg-{i // 100:020d}-1-{i % 100:09d}.ssf"
        store.put_bytes(url.key(key), frame.read_bytes())
    target = Store(store_dir / "store")
    target.compact("idle", location)
    times: dict[str, list[float]] = {"idle_compact_pass_s": [], "listing_s": []}
    for _ in range(rounds):
        begin = time.perf_counter()
        target.compact("idle", location)
        times["idle_compact_pass_s"].append(time.perf_counter() - begin)
        begin = time.perf_counter()
        find_segments(location)
        times["listing_s"].append(time.perf_counter() - begin)
    return {name: statistics.median(values) for name, values in times.items()}


def monitor_overhead(bucket: str, workdir: Path, steps: int, repeats: int) -> dict[str, float]:
    """Goal 5's loops (``bench.training._interleaved_loops``: the demo model, bare / torch-clipping /
    monitored, interleaved step by step; one rank) with the monitor's shard local and on S3, the two
    alternating ``repeats`` times. Medians over the repeats of each run's median step of
    ``monitor.log`` (s) and of its paired ratio monitored / torch-clipping step."""
    import dataclasses

    import torch
    import torch.distributed as dist

    from bench.training import _interleaved_loops, _overhead_summary
    from ingest.training.demo_trainer import DemoConfig

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    runs: dict[str, list[dict[str, float]]] = {"local": [], "s3": []}
    dist.init_process_group("gloo", init_method=f"file://{workdir}/rdzv", rank=0, world_size=1)
    try:
        for repeat in range(repeats):
            for where in runs:
                config = DemoConfig(out=workdir / f"shards-{repeat}", ranks=1, steps=max(steps, 40)).resolved()
                if where == "s3":
                    # The monitor takes an s3:// location where the demo config holds a Path.
                    config = dataclasses.replace(config, out=f"s3://{bucket}/monitor-{repeat}/shards")  # type: ignore[arg-type]
                runs[where].append(_overhead_summary(_interleaved_loops(config, steps), steps))
    finally:
        dist.destroy_process_group()
        torch.set_num_threads(threads)
    out = {}
    for where, summaries in runs.items():
        out[f"{where}_monitor_log_s"] = statistics.median(r["monitor_log_s"] for r in summaries)
        out[f"{where}_paired_ratio_vs_torch_clip"] = statistics.median(
            r["paired_ratio_vs_torch_clip"] for r in summaries
        )
    return out


def _with_server(body: Callable[[str], None]) -> None:
    if os.environ.get("AWS_ENDPOINT_URL"):
        body(os.environ["AWS_ENDPOINT_URL"])
        return
    from tests.s3_server import AWS_SETTINGS, start_server  # the test suite's moto server, reused

    server = start_server()
    os.environ.update(AWS_SETTINGS)
    os.environ["AWS_ENDPOINT_URL"] = server.endpoint
    try:
        body(server.endpoint)
    finally:
        server.process.terminate()
        server.process.wait()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.shard_upload", description=__doc__)
    parser.add_argument("--rounds", type=int, default=30, help="flushes measured per size (default 30)")
    parser.add_argument("--steps", type=int, default=3000, help="simulated training steps (default 3000)")
    parser.add_argument(
        "--monitor-repeats", type=int, default=0, help="also time goal 5's loops, local and S3, this many times each"
    )
    args = parser.parse_args(argv)

    def body(endpoint: str) -> None:
        import boto3

        bucket = f"bench-{os.getpid()}"
        boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1").create_bucket(Bucket=bucket)
        with tempfile.TemporaryDirectory(prefix="stabscope-shard-bench-") as tmp:
            for rows in (32, 4096):
                costs = flush_costs(f"s3://{bucket}/flush{rows}", Path(tmp) / f"flush{rows}", rows, args.rounds)
                print(f"flush of {rows} rows: " + ", ".join(f"{k} {v * 1e3:.2f} ms" for k, v in costs.items()))
            for objects in (500, 2000):
                idle = idle_pass_cost(f"s3://{bucket}/idle{objects}", Path(tmp) / f"idle{objects}", objects, 5)
                print(f"{objects} objects, nothing new: " + ", ".join(f"{k} {v * 1e3:.0f} ms" for k, v in idle.items()))
            for interval in (2.0, 0.05):
                figures = step_overhead(
                    f"s3://{bucket}/loop{interval}", Path(tmp) / f"loop{interval}", args.steps, interval
                )
                print(
                    f"{args.steps} steps, flush every {interval:g} s: "
                    + ", ".join(f"{k} {v * 1e6:.1f} us" for k, v in figures.items())
                )
            if args.monitor_repeats:
                figures = monitor_overhead(bucket, Path(tmp), 300, args.monitor_repeats)
                print(
                    "StabilityMonitor, 300 steps of the demo model: "
                    + ", ".join(f"{k} {v:.5f}" for k, v in figures.items())
                )

    _with_server(body)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
