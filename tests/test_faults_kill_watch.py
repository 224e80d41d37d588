"""SIGKILL from outside, at least 20 times, of `stabscope watch` following 8 live writers. Half the
kills come after a seeded random delay, half a seeded moment after the child's first temporary file
appears (a write under way). Throughout, a reader process polls the catalog and reads every run
(``tests.fault_children.poll_catalog``): rows, last step and generation must never go back. After the
kills a last ``watch --once`` completes, and the store equals a clean one-shot compaction of the same
shards, row for row, with no file of a killed writer left.

Prints one ``FAULTS {...}`` line with its figures (docs/reliability.md); ``tests/test_faults_kill_*.py``
kill the other commands, one module each, so that CI's workers share them.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from ingest.store import Store
from tests import fault_harness as fh

pytestmark = pytest.mark.slow


def test_watch_killed_while_writers_run_then_rerun_equals_a_clean_compaction(tmp_path: Path) -> None:
    began = time.monotonic()
    shards, store = tmp_path / "shards", tmp_path / "store"
    n_writers, steps, seconds = 8, 4_000, 25.0
    writers = fh.start(fh.child_argv("writers", str(shards), str(n_writers), str(steps), str(seconds)))
    deadline = time.monotonic() + 60  # the writers make the folder: a busy machine starts them late
    while not shards.is_dir() and time.monotonic() < deadline and writers.poll() is None:
        time.sleep(0.05)
    reader = fh.Reader(store, tmp_path, {"live": {"monotonic": True}})
    rng, kills = fh.seeded(fh.KILL_SEED + 2), fh.KillLog()
    while kills.landed < fh.KILLS and kills.attempts < 3 * fh.KILLS:
        proc = fh.start(fh.cli_argv(store, "watch", str(shards), "--run", "live", "--interval", "0.2"))
        fh.kill_alternately(proc, store, rng, kills, (0.5, 2.0))
    assert kills.landed >= fh.KILLS and kills.failures == [], kills.to_json()
    _, err = writers.communicate(timeout=300)
    assert writers.returncode == 0, err.decode()[-2000:]
    rerun = fh.run_cli(store, "watch", str(shards), "--run", "live", "--once")
    assert rerun.returncode == 0, rerun.stderr
    found = reader.result()
    fh.check_reader(found)
    clean = tmp_path / "clean"
    assert fh.run_cli(clean, "compact", str(shards), "--run", "live").returncode == 0
    got, want = fh.sorted_rows(Store(store), "live"), fh.sorted_rows(Store(clean), "live")
    records = n_writers * steps * 3 + steps * 3
    assert want.num_rows == records and fh.no_duplicate_keys(got)
    fh.assert_same_rows(got, want)
    assert fh.leftovers(store) == []
    fh.report_kills("watch", time.monotonic() - began, kills, found, writers=n_writers, records=records)
