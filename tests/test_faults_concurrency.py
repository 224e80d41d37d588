"""Many writers at once: 64 ShardWriter processes (one per rank, rank 0 also the run-level rows) write
for 60 s while `stabscope watch` folds them into a live run and four readers read it throughout: two
loop over `stabscope runs --json` and `stabscope spikes RUN --json`, two over the Runs page and the Run
overview (AppTest), and a fifth polls the catalog and reads every row (``poll_catalog``). Every record
must arrive exactly once with the value written (0 lost, 0 doubled), and no reader may see an error or
a partial generation.

Prints one ``FAULTS {...}`` line with its figures (docs/reliability.md).
"""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from ingest.store import Store
from tests.fault_harness import (
    RANK_METRICS,
    RUN_METRICS,
    Reader,
    assert_same_rows,
    child_argv,
    cli_argv,
    leftovers,
    shard_value,
    sorted_rows,
    start,
)

pytestmark = pytest.mark.slow

WRITERS = 64
STEPS = 6_000
"""Steps each writer writes, paced over ``SECONDS``."""
SECONDS = 60.0


def _expected_rows() -> pa.Table:
    """Every (metric, rank, step) the writers write with its value, sorted as ``sorted_rows`` sorts."""
    steps = np.arange(STEPS, dtype=np.int64)
    parts = []
    for metric in sorted(RANK_METRICS + RUN_METRICS):
        ranks = [-1] if metric in RUN_METRICS else list(range(WRITERS))
        for rank in ranks:
            parts.append(
                pa.table(
                    {
                        "metric": pa.array([metric] * STEPS, pa.string()),
                        "rank": pa.array(np.full(STEPS, rank, np.int32)),
                        "step": pa.array(steps),
                        "value": pa.array(shard_value(metric, rank, steps, 0)),
                    }
                )
            )
    return pa.concat_tables(parts)


def test_64_writers_watch_and_4_readers_lose_and_double_nothing(tmp_path: Path) -> None:
    began = time.monotonic()
    shards, store = tmp_path / "shards", tmp_path / "store"
    expected = _expected_rows()
    writers = start(child_argv("writers", str(shards), str(WRITERS), str(STEPS), str(SECONDS)))
    watch = start(cli_argv(store, "watch", str(shards), "--run", "live", "--interval", "1"))
    readers = [
        start(child_argv(kind, str(store), "live", str(tmp_path / "stop"), str(tmp_path / f"{kind}-{i}.json")))
        for kind in ("cli_reader", "page_reader")
        for i in range(2)
    ]
    poller = Reader(store, tmp_path, {"live": {"monotonic": True}})
    out, err = writers.communicate(timeout=SECONDS * 4)
    assert writers.returncode == 0 and f"WRITERS DONE {WRITERS}/{WRITERS}".encode() in out, err.decode()[-3000:]
    written_s = time.monotonic() - began
    deadline = time.monotonic() + 180
    reached = False
    while time.monotonic() < deadline and watch.poll() is None:
        infos = {r.name: r for r in Store(store).list_runs()}
        if "live" in infos and infos["live"].n_rows >= expected.num_rows:
            reached = True
            break
        time.sleep(0.5)
    caught_up_s = time.monotonic() - began - written_s
    (tmp_path / "stop").touch()
    found = poller.result()
    reader_results = []
    for proc in readers:
        _, reader_err = proc.communicate(timeout=300)
        assert proc.returncode == 0, reader_err.decode()[-3000:]
    for kind in ("cli_reader", "page_reader"):
        for i in range(2):
            reader_results.append(json.loads((tmp_path / f"{kind}-{i}.json").read_text()))
    watch.send_signal(signal.SIGINT)  # as Ctrl-C: the run is marked finished
    _, watch_err = watch.communicate(timeout=120)
    assert watch.returncode == 0, watch_err.decode()[-3000:]
    assert reached, "watch did not fold in every record within 180 s of the writers' end"

    assert found["violations"] == [] and found["errors"] == [], found
    for result in reader_results:
        assert result["errors"] == [], result["errors"]
    assert all(r.get("calls", r.get("page_runs", 0)) > 0 for r in reader_results)
    final = Store(store)
    info = final.run_info("live")
    assert (info.n_rows, info.ranks, info.status) == (expected.num_rows, WRITERS, "finished")
    assert_same_rows(sorted_rows(final, "live"), expected)  # 0 lost, 0 doubled, every value as written
    assert leftovers(store) == []
    line = {
        "test": "concurrency",
        "seconds": round(time.monotonic() - began, 1),
        "writers": WRITERS,
        "records": expected.num_rows,
        "written_s": round(written_s, 1),
        "watch_caught_up_s": round(caught_up_s, 1),
        "generations": info.gen,
        "cli_calls": sum(r.get("calls", 0) for r in reader_results),
        "page_runs": sum(r.get("page_runs", 0) for r in reader_results),
        "poller": {k: found[k] for k in ("polls", "reads", "gen_changed_during_read")},
        "lost": 0,
        "doubled": 0,
        "reader_errors": 0,
    }
    print("FAULTS " + json.dumps(line))
