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
  writer's uploads run on its background thread.
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

from ingest.object_store import ObjectUrl
from ingest.shard_objects import bucket_store
from ingest.shards import ShardWriter


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
    args = parser.parse_args(argv)

    def body(endpoint: str) -> None:
        import boto3

        bucket = f"bench-{os.getpid()}"
        boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1").create_bucket(Bucket=bucket)
        with tempfile.TemporaryDirectory(prefix="stabscope-shard-bench-") as tmp:
            for rows in (32, 4096):
                costs = flush_costs(f"s3://{bucket}/flush{rows}", Path(tmp) / f"flush{rows}", rows, args.rounds)
                print(f"flush of {rows} rows: " + ", ".join(f"{k} {v * 1e3:.2f} ms" for k, v in costs.items()))
            for interval in (2.0, 0.05):
                figures = step_overhead(
                    f"s3://{bucket}/loop{interval}", Path(tmp) / f"loop{interval}", args.steps, interval
                )
                print(
                    f"{args.steps} steps, flush every {interval:g} s: "
                    + ", ".join(f"{k} {v * 1e6:.1f} us" for k, v in figures.items())
                )

    _with_server(body)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
