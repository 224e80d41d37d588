"""SIGKILL from outside, at least 20 times each, of `stabscope import` (a 1.08M-record Megatron log),
`stabscope compact` (510k rows, then rounds that append and re-log steps), `stabscope watch` (8 live
writers) and the Upload page's import (AppTest of pages/upload.py, a 400k-record CSV). Half the kills
come after a seeded random delay, half a seeded moment after the child's first temporary file appears
(a write under way). Throughout, a reader process polls the catalog and reads every run
(``tests.fault_children.poll_catalog``): it must never see a partial run or generation. After the kills
a rerun of the same command completes, and the store equals a clean one-shot import/compaction of
the same input, row for row, with no file of a killed writer left.

Each test prints one ``FAULTS {...}`` line with its figures (docs/reliability.md).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from ingest.store import Store
from tests.fault_harness import (
    KillLog,
    Reader,
    assert_same_rows,
    child_argv,
    cli_argv,
    kill_after,
    kill_on_marker,
    leftovers,
    no_duplicate_keys,
    run_cli,
    seeded,
    sorted_rows,
    start,
    wait_for_line,
    write_csv_log,
    write_megatron_log,
    write_shard_round,
)

pytestmark = pytest.mark.slow

KILLS = 20
"""Kills that must land on a live process, per command."""
SEED = 23
MEGATRON_ITERATIONS = 120_000
"""9 values a line: 1.08M records, large enough that a kill lands mid-import."""
UPLOAD_STEPS = 100_000
"""4 metrics a row: 400k records (6 MB, under the Upload page's 200 MiB bound)."""


def _kill(proc: Any, store: Path, rng: Any, kills: KillLog, window_s: tuple[float, float]) -> None:
    """Every other kill after a random delay in ``window_s``, the others a random moment (up to 0.4 s)
    after the child's first temporary file appears."""
    if kills.attempts % 2:
        kill_on_marker(proc, store, rng.uniform(0.0, 0.4), kills)
    else:
        kill_after(proc, rng.uniform(*window_s), kills, store)


def _report(test: str, seconds: float, kills: KillLog, reader: dict[str, Any], **figures: Any) -> None:
    line = {
        "test": test,
        "seconds": round(seconds, 1),
        "kills": kills.to_json(),
        "reader": {k: reader[k] for k in ("polls", "reads", "gen_changed_during_read")},
        "violations": len(reader["violations"]),
        "reader_errors": len(reader["errors"]),
        **figures,
    }
    print("FAULTS " + json.dumps(line))


def _check_reader(found: dict[str, Any]) -> None:
    assert found["reads"] > 0, found
    assert found["violations"] == [], "\n".join(found["violations"])
    assert found["errors"] == [], "\n".join(found["errors"])


def test_import_killed_mid_import_then_rerun_equals_a_clean_import(tmp_path: Path) -> None:
    began = time.monotonic()
    log = tmp_path / "train.log"
    records = write_megatron_log(log, MEGATRON_ITERATIONS, seed=SEED)
    store = tmp_path / "store"
    reader = Reader(store, tmp_path, {"train": {"rows": [records]}})
    clean = tmp_path / "clean"
    t0 = time.monotonic()
    done = run_cli(clean, "import", str(log), "--run", "train")
    baseline = time.monotonic() - t0  # under the same load as the kills (the reader is polling)
    assert done.returncode == 0, done.stderr
    rng, kills = seeded(SEED), KillLog()
    while kills.landed < KILLS and kills.attempts < 3 * KILLS:
        proc = start(cli_argv(store, "import", str(log), "--run", "train"))
        _kill(proc, store, rng, kills, (0.3 * baseline, 1.05 * baseline))
    assert kills.landed >= KILLS and kills.failures == [], kills.to_json()
    rerun = run_cli(store, "import", str(log), "--run", "train")
    assert rerun.returncode == 0 and rerun.stderr == "", rerun.stderr
    found = reader.result()
    _check_reader(found)
    got, want = sorted_rows(Store(store), "train"), sorted_rows(Store(clean), "train")
    assert want.num_rows == records and no_duplicate_keys(got)
    assert_same_rows(got, want)
    assert leftovers(store) == []
    _report("import", time.monotonic() - began, kills, found, records=records, baseline_s=round(baseline, 2))


ROUNDS = [  # (first step, steps, version): version > 0 re-logs steps already stored (a full merge)
    (0, 10_000, 0),
    (10_000, 1_000, 0),
    (2_000, 1_000, 1),
    (11_000, 1_000, 0),
    (0, 1_500, 2),
    (12_000, 1_000, 0),
    (5_000, 2_000, 3),
    (13_000, 1_000, 0),
    (500, 500, 4),
    (14_000, 1_000, 0),
] + [(15_000 + 1_000 * i, 1_000, 0) for i in range(20)]
"""The first ten rounds mix appends and re-logged steps; the appends after them are there only for a
fast machine, where a round can finish before a kill lands: the test stops once KILLS have landed."""
COMPACT_RANKS = 16
KILLS_PER_ROUND = 4


def _distinct_rows_after_each_round() -> list[int]:
    """The catalog's row count once each round is folded in (re-logged steps add no rows)."""
    per_step = COMPACT_RANKS * 3 + 3
    top, out = 0, []
    for first, n, _ in ROUNDS:
        top = max(top, first + n)
        out.append(top * per_step)
    return out


def test_compact_killed_mid_compaction_then_rerun_equals_a_clean_compaction(tmp_path: Path) -> None:
    began = time.monotonic()
    shards, store = tmp_path / "shards", tmp_path / "store"
    reader = Reader(store, tmp_path, {"job": {"rows": _distinct_rows_after_each_round()}})
    rng, kills = seeded(SEED + 1), KillLog()
    written = rounds = 0
    for first, n, version in ROUNDS:
        if kills.landed >= KILLS:
            break
        written += write_shard_round(shards, first, n, ranks=COMPACT_RANKS, version=version)
        rounds += 1
        in_round = kills.landed
        while kills.landed - in_round < KILLS_PER_ROUND:
            proc = start(cli_argv(store, "compact", str(shards), "--run", "job"))
            before = kills.landed
            _kill(proc, store, rng, kills, (0.1, 1.2))
            if kills.landed == before:  # it finished before the kill: this round is folded in
                break
        done = run_cli(store, "compact", str(shards), "--run", "job")
        assert done.returncode == 0, done.stderr
    assert kills.landed >= KILLS and kills.failures == [], kills.to_json()
    found = reader.result()
    _check_reader(found)
    clean = tmp_path / "clean"
    one_shot = run_cli(clean, "compact", str(shards), "--run", "job")
    assert one_shot.returncode == 0, one_shot.stderr
    got, want = sorted_rows(Store(store), "job"), sorted_rows(Store(clean), "job")
    assert want.num_rows == _distinct_rows_after_each_round()[rounds - 1] and no_duplicate_keys(got)
    assert_same_rows(got, want)
    assert leftovers(store) == []
    _report(
        "compact", time.monotonic() - began, kills, found, rounds=rounds, records_written=written, rows=want.num_rows
    )


def test_watch_killed_while_writers_run_then_rerun_equals_a_clean_compaction(tmp_path: Path) -> None:
    began = time.monotonic()
    shards, store = tmp_path / "shards", tmp_path / "store"
    n_writers, steps, seconds = 8, 4_000, 25.0
    writers = start(child_argv("writers", str(shards), str(n_writers), str(steps), str(seconds)))
    deadline = time.monotonic() + 60  # the writers make the folder: a busy machine starts them late
    while not shards.is_dir() and time.monotonic() < deadline and writers.poll() is None:
        time.sleep(0.05)
    reader = Reader(store, tmp_path, {"live": {"monotonic": True}})
    rng, kills = seeded(SEED + 2), KillLog()
    while kills.landed < KILLS and kills.attempts < 3 * KILLS:
        proc = start(cli_argv(store, "watch", str(shards), "--run", "live", "--interval", "0.2"))
        _kill(proc, store, rng, kills, (0.5, 2.0))
    assert kills.landed >= KILLS and kills.failures == [], kills.to_json()
    _, err = writers.communicate(timeout=300)
    assert writers.returncode == 0, err.decode()[-2000:]
    rerun = run_cli(store, "watch", str(shards), "--run", "live", "--once")
    assert rerun.returncode == 0, rerun.stderr
    found = reader.result()
    _check_reader(found)
    clean = tmp_path / "clean"
    assert run_cli(clean, "compact", str(shards), "--run", "live").returncode == 0
    got, want = sorted_rows(Store(store), "live"), sorted_rows(Store(clean), "live")
    records = n_writers * steps * 3 + steps * 3
    assert want.num_rows == records and no_duplicate_keys(got)
    assert_same_rows(got, want)
    assert leftovers(store) == []
    _report("watch", time.monotonic() - began, kills, found, writers=n_writers, records=records)


def test_upload_page_import_killed_then_rerun_equals_a_cli_import(tmp_path: Path) -> None:
    began = time.monotonic()
    log = tmp_path / "upload.csv"
    records = write_csv_log(log, UPLOAD_STEPS, seed=SEED)
    store = tmp_path / "store"
    reader = Reader(store, tmp_path, {"up": {"rows": [records]}})
    clean = tmp_path / "clean"
    proc = start(child_argv("upload", str(clean), str(log), "up"))
    assert wait_for_line(proc, b"IMPORTING")
    marked = time.monotonic()
    out, err = proc.communicate(timeout=300)
    import_s = time.monotonic() - marked
    assert proc.returncode == 0 and b"DONE" in out, err.decode()[-3000:]
    rng, kills = seeded(SEED + 3), KillLog()
    while kills.landed < KILLS and kills.attempts < 3 * KILLS:
        proc = start(child_argv("upload", str(store), str(log), "up"))
        assert wait_for_line(proc, b"IMPORTING"), proc.communicate()[1].decode()[-3000:]
        _kill(proc, store, rng, kills, (0.0, 1.1 * import_s))
    assert kills.landed >= KILLS and kills.failures == [], kills.to_json()
    rerun = start(child_argv("upload", str(store), str(log), "up"))
    out, err = rerun.communicate(timeout=300)
    assert rerun.returncode == 0 and b"DONE" in out, err.decode()[-3000:]
    found = reader.result()
    _check_reader(found)
    cli_clean = tmp_path / "cli"
    assert run_cli(cli_clean, "import", str(log), "--run", "up").returncode == 0
    got, want = sorted_rows(Store(store), "up"), sorted_rows(Store(cli_clean), "up")
    assert want.num_rows == records and no_duplicate_keys(got)
    assert_same_rows(got, want)
    assert_same_rows(sorted_rows(Store(clean), "up"), want)
    assert leftovers(store) == []
    _report("upload", time.monotonic() - began, kills, found, records=records, import_s=round(import_s, 2))
