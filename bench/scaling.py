"""Compaction at scale (issue #24): the embedded engine against the Spark engine with 1 and 2 local
executor cores, on the same synthetic shards (``bench.data.run_inputs``: ranks x steps x 8 per-rank
metrics plus 4 run-level ones), each run compacting into a fresh store in a fresh process.

``python -m bench.scaling`` measures 64 ranks x 25k steps (``--size quick``); ``--size full`` 256 x
200k; ``--size 64x100000`` any ``RANKSxSTEPS``. Per engine, the median over ``--repeats`` of:

- wall time of ``Store.compact`` (Spark's session start-up, the JVM's launch, timed apart, as a
  cluster's session outlives one compaction), and of the whole child process;
- peak RSS of the driver process alone (``VmHWM``) and of its process tree (the driver, the JVM and
  the Python workers, summed, sampled every ``SAMPLE_S``);
- bytes read and written by the tree through system calls (``rchar``/``wchar`` of every process,
  their JVM's jars and Spark's shuffle files included) and the shard and store sizes on disk.

The embedded engine is the same-run baseline: each Spark figure is also given as its ratio to it.
``--store s3`` (or ``both``) compacts into an ``s3://`` store instead, on a loopback moto server started
here unless ``AWS_ENDPOINT_URL`` names one (the server's own work is outside the measured tree; the
store's local cache is inside the store size); its baseline is the embedded engine into S3.
Compaction only: no analyses run after the merge (they are the same code for both engines).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from bench import DEFAULT_WORKDIR, log, median, run_child

RUN = "scaling"
SAMPLE_S = 0.1
"""Seconds between samples of the process tree's memory and I/O counters."""
ENGINES = {"embedded": None, "spark local[1]": "local[1]", "spark local[2]": "local[2]"}
"""Engine label -> Spark master (None: the embedded engine)."""
SIZES = {"quick": (64, 25_000), "full": (256, 200_000)}


class TreeSampler:
    """Samples this process and its descendants: peak summed RSS, and each process's last I/O counters
    (a process's counters only grow, so its last sample is its total up to then)."""

    def __init__(self) -> None:
        self.peak_rss = 0
        self.io: dict[int, dict[str, int]] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="tree-sampler", daemon=True)

    def __enter__(self) -> TreeSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.sample()

    def _run(self) -> None:
        while not self._stop.wait(SAMPLE_S):
            self.sample()

    def sample(self) -> None:
        rss = 0
        for pid in _tree(os.getpid()):
            rss += _status_kib(pid, "VmRSS:") * 1024
            io = _io(pid)
            if io:
                self.io[pid] = io
        self.peak_rss = max(self.peak_rss, rss)

    def total(self, field: str) -> int:
        return sum(counters.get(field, 0) for counters in self.io.values())


def _tree(root: int) -> list[int]:
    """``root`` and every process below it (from ``/proc/*/stat``)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        ppid = int(stat[stat.rindex(")") + 2 :].split()[1])
        children.setdefault(ppid, []).append(int(entry))
    found, todo = [], [root]
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo.extend(children.get(pid, []))
    return found


def _status_kib(pid: int, key: str) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(key):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def _io(pid: int) -> dict[str, int]:
    try:
        lines = Path(f"/proc/{pid}/io").read_text().splitlines()
    except OSError:
        return {}
    return {name: int(value) for name, value in (line.split(": ") for line in lines)}


def _size_on_disk(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def compact_once(shards: str, store: str, master: str | None, cache: str | None = None) -> dict[str, Any]:
    """Child target: compact ``shards`` into the fresh store ``store`` (a directory, or an ``s3://`` URL
    with its local ``cache``), with Spark at ``master`` or the embedded engine, and report times, the
    tree's peak RSS and I/O, and the sizes (of the store's directory or cache)."""
    from ingest.store import Store

    with TreeSampler() as sampler:
        start = time.perf_counter()
        if master is not None:
            from ingest.store.engines.spark_engine import spark_session

            spark_session(master)
        session_s = time.perf_counter() - start
        begin = time.perf_counter()
        from ingest.store.engines.spark_engine import parts_reader

        read_parts = parts_reader("embedded" if master is None else "spark", master)
        report = Store(store, cache_dir=cache).compact(RUN, shards, read_parts=read_parts)
        compact_s = time.perf_counter() - begin
    result = {
        "session_s": session_s,
        "compact_s": compact_s,
        "rows": report.rows,
        "tree_peak_rss_mb": sampler.peak_rss / 2**20,
        "read_mb": sampler.total("rchar") / 2**20,
        "written_mb": sampler.total("wchar") / 2**20,
        "disk_read_mb": sampler.total("read_bytes") / 2**20,
        "disk_written_mb": sampler.total("write_bytes") / 2**20,
        "shard_mb": _size_on_disk(Path(shards)) / 2**20,
        "store_mb": _size_on_disk(Path(cache or store)) / 2**20,
    }
    if master is not None:
        from ingest.store.engines.spark_engine import spark_session

        spark_session(master).stop()
    return result


def measure(
    ranks: int, steps: int, repeats: int, workdir: Path, engines: list[str], bucket: str | None = None
) -> list[dict[str, Any]]:
    """Every engine on the ``ranks`` x ``steps`` shards, interleaved round by round (so a busy
    moment of the machine falls on all engines alike), into a local store or, given ``bucket``, an
    S3 store there; one row per engine, medians."""
    from bench.data import run_inputs

    inputs = run_inputs(workdir, ranks, steps, csv=False)
    samples: dict[str, list[dict[str, Any]]] = {label: [] for label in engines}
    for round_no in range(repeats):
        for label in engines:
            store = workdir / "scaling-store"
            shutil.rmtree(store, ignore_errors=True)
            where = {"store": str(store)}
            if bucket is not None:
                where = {"store": f"s3://{bucket}/store-{round_no}-{label.replace(' ', '-')}", "cache": str(store)}
            child = run_child(
                "bench.scaling:compact_once",
                {"shards": str(inputs.shards), "master": ENGINES[label], **where},
                timeout_s=4 * 3600,
            )
            shutil.rmtree(store, ignore_errors=True)
            sample = {**child.result, "driver_peak_rss_mb": child.peak_rss_mb, "process_s": child.wall_s}
            samples[label].append(sample)
            log(f"{ranks}x{steps} round {round_no + 1}/{repeats} {label}: compact {sample['compact_s']:.1f} s")
    rows = []
    for label in engines:
        keys = samples[label][0].keys()
        row: dict[str, Any] = {
            "size": f"{ranks}x{steps}",
            "records": inputs.records,
            "engine": label,
            "store": "local" if bucket is None else "s3",
        }
        row.update({k: median([float(s[k]) for s in samples[label]]) for k in keys})
        row["compact_samples"] = [round(float(s["compact_s"]), 2) for s in samples[label]]
        rows.append(row)
    baseline = next((r for r in rows if r["engine"] == "embedded"), None)
    for row in rows:
        if baseline is not None:
            row["compact_vs_embedded"] = row["compact_s"] / baseline["compact_s"]
    return rows


@contextlib.contextmanager
def s3_bucket() -> Iterator[str]:
    """A fresh bucket on the S3 server ``AWS_ENDPOINT_URL`` names, or on a moto server started here
    (the test suite's, on loopback) for the ``with`` block; the children inherit the settings."""
    import boto3

    server = None
    if not os.environ.get("AWS_ENDPOINT_URL"):
        from tests.s3_server import AWS_SETTINGS, start_server  # the test suite's moto server, reused

        server = start_server()
        os.environ.update(AWS_SETTINGS)
        os.environ["AWS_ENDPOINT_URL"] = server.endpoint
    bucket = f"scaling-{os.getpid()}"
    boto3.client("s3", endpoint_url=os.environ["AWS_ENDPOINT_URL"]).create_bucket(Bucket=bucket)
    try:
        yield bucket
    finally:
        if server is not None:
            server.process.terminate()
            server.process.wait()
            os.environ.pop("AWS_ENDPOINT_URL")


def table(rows: list[dict[str, Any]]) -> str:
    """The rows as a Markdown table (medians)."""
    head = (
        "| size | records | store | engine | compact s | x embedded | session start s | process s "
        "| driver peak RSS MiB | tree peak RSS MiB | read MiB | written MiB | shards MiB | store MiB |"
    )
    lines = [head, "|" + " --- |" * (head.count("|") - 1)]
    for r in rows:
        lines.append(
            f"| {r['size']} | {r['records'] / 1e6:.1f}M | {r['store']} | {r['engine']} | {r['compact_s']:.1f} "
            f"| {r.get('compact_vs_embedded', float('nan')):.2f} | {r['session_s']:.1f} | {r['process_s']:.1f} "
            f"| {r['driver_peak_rss_mb']:.0f} | {r['tree_peak_rss_mb']:.0f} | {r['read_mb']:.0f} "
            f"| {r['written_mb']:.0f} | {r['shard_mb']:.0f} | {r['store_mb']:.0f} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.scaling", description=__doc__.splitlines()[0])
    parser.add_argument("--size", default="quick", help="quick (64x25000), full (256x200000) or RANKSxSTEPS")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--engines", default=",".join(ENGINES), help="comma-separated: " + ", ".join(ENGINES))
    parser.add_argument("--workdir", type=Path, default=DEFAULT_WORKDIR)
    parser.add_argument("--store", choices=["local", "s3", "both"], default="local", help="where to compact to")
    parser.add_argument("--json", type=Path, default=None, help="also write the rows as JSON here")
    args = parser.parse_args(argv)
    ranks, steps = SIZES.get(args.size) or tuple(int(x) for x in args.size.split("x"))
    engines = [e.strip() for e in args.engines.split(",")]
    unknown = [e for e in engines if e not in ENGINES]
    if unknown:
        parser.error(f"unknown engine(s) {unknown}: use {list(ENGINES)}")
    rows: list[dict[str, Any]] = []
    if args.store in ("local", "both"):
        rows += measure(ranks, steps, args.repeats, args.workdir, engines)
    if args.store in ("s3", "both"):
        with s3_bucket() as bucket:
            rows += measure(ranks, steps, args.repeats, args.workdir, engines, bucket)
    print(table(rows))
    if args.json is not None:
        args.json.write_text(json.dumps(rows, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
