"""Storage faults with real files: a full disk, a read-only store, a truncated Parquet file, a corrupt
``catalog.duckdb``, and a store path with spaces and non-ASCII characters. Each failure is one
paragraph on stderr (exit 2) naming the path and what to do, never a traceback; nothing half-written
becomes visible; the other runs are still served (the CLI reads them, their overview draws) and the
broken run's page says what is wrong and how to repair it.

The full disk is a small tmpfs (or an ext4 loop device) mounted by the test when it runs as root; else
the child's file size is limited with RLIMIT_FSIZE. The read-only store is a read-only remount of such a
file system as root (root ignores file modes), else ``chmod -R a-w``. Each test prints one ``FAULTS``
line saying which ran (docs/reliability.md).
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import stat
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from streamlit.testing.v1 import AppTest

from ingest.store import Store
from tests.app_pages import open_in_app
from tests.fault_harness import (
    CHILD_ENV,
    REPO,
    assert_same_rows,
    cli_argv,
    leftovers,
    run_cli,
    small_filesystem,
    sorted_rows,
    write_csv_log,
    write_shard_round,
)

pytestmark = pytest.mark.slow

GOOD_STEPS = 2_000
"""The good run's CSV: 2,000 steps x 4 metrics."""


def _one_paragraph(stderr: str, command: str) -> str:
    """The error paragraph of a failed command: one line, ``stabscope COMMAND: error: ...``, no traceback."""
    assert "Traceback" not in stderr, stderr
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1, stderr
    assert lines[0].startswith(f"stabscope {command}: error: "), stderr
    return lines[0]


def _report(test: str, seconds: float, **figures: Any) -> None:
    print("FAULTS " + json.dumps({"test": test, "seconds": round(seconds, 1), **figures}))


@pytest.fixture
def good_log(tmp_path: Path) -> Path:
    path = tmp_path / "good.csv"
    write_csv_log(path, GOOD_STEPS, seed=1)
    return path


def _overview(store: Path, run: str, monkeypatch: pytest.MonkeyPatch) -> AppTest:
    """The Run overview of ``run`` as app.py runs it (its error guard included)."""
    monkeypatch.setenv("STABSCOPE_STORE", str(store))
    at = open_in_app("overview", monkeypatch)
    at.query_params["run"] = run
    return at.run(timeout=120)


def _draws(at: AppTest, run: str) -> None:
    """The overview of ``run`` drew its charts, with no error and no exception."""
    assert not at.exception, [e.message for e in at.exception]
    assert not at.error, [e.value for e in at.error]
    assert at.selectbox(key="overview_run").value == run
    assert len(at.get("plotly_chart")) >= 1


# -------------------------------------------------------------------------------------------- full disk


def _limit_file_size(limit: int) -> Any:
    def limit_in_child() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    return limit_in_child


def test_a_full_disk_fails_the_import_cleanly_and_the_other_runs_stay(
    tmp_path: Path, good_log: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    began = time.monotonic()
    big = tmp_path / "big.csv"
    records = write_csv_log(big, 300_000, seed=2)
    with small_filesystem(tmp_path / "disk", 12) as disk:
        store = disk.path / "store"
        assert run_cli(store, "import", str(good_log), "--run", "good").returncode == 0
        before = sorted_rows(Store(store), "good")
        argv = cli_argv(store, "import", str(big), "--run", "big")
        limit = None if disk.kind != "none" else 4 * 1024 * 1024
        done = subprocess.run(
            argv,
            env=CHILD_ENV,
            cwd=REPO,
            capture_output=True,
            text=True,
            check=False,
            preexec_fn=_limit_file_size(limit) if limit else None,  # one child: no threads to race the fork
        )
        assert done.returncode == 2, done.stderr
        message = _one_paragraph(done.stderr, "import")
        assert str(store) in message, message
        assert ("No space left on device" if limit is None else "File too large") in message, message
        assert "free space" in message.lower() and "--store" in message, message  # what to do
        reopened = Store(store)
        assert [r.name for r in reopened.list_runs()] == ["good"]  # nothing of the failed run is listed
        assert_same_rows(sorted_rows(reopened, "good"), before)
        # no temporary file is left; a staged batch the import committed before its merge failed is kept
        # for the run's next write to finish (as after a kill), and is listed in the catalog
        staged = set(reopened._commit.catalog.staged_files("big")) if reopened.has_run("big") else set()
        assert {str(p) for p in leftovers(store)} == staged
        _draws(_overview(store, "good", monkeypatch), "good")
        if disk.kind == "tmpfs":  # room made: the same import now succeeds into the same store
            subprocess.run(["mount", "-o", "remount,size=256m", str(disk.path)], check=True)
            again = run_cli(store, "import", str(big), "--run", "big")
            assert again.returncode == 0, again.stderr
            assert Store(store).run_info("big").n_rows == records
            assert leftovers(store) == []
    _report("full_disk", time.monotonic() - began, filesystem=disk.kind, limit=limit, records=records)


# ------------------------------------------------------------------------------------------- read-only


@pytest.fixture
def read_only_store(tmp_path: Path, good_log: Path) -> Iterator[tuple[Path, str]]:
    """A store holding ``good`` made read-only: a read-only remount as root, ``chmod -R a-w`` otherwise."""
    with small_filesystem(tmp_path / "ro", 64) as disk:
        store = disk.path / "store"
        assert run_cli(store, "import", str(good_log), "--run", "good").returncode == 0
        if disk.kind != "none":
            disk.remount(read_only=True)
            how = f"read-only {disk.kind} mount"
        elif os.geteuid() != 0:
            for path in [store, *store.rglob("*")]:
                path.chmod(path.stat().st_mode & ~(stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH))
            how = "chmod -R a-w"
        else:
            pytest.skip("root without mount(8): neither a read-only mount nor file modes can make the store read-only")
        yield store, how
        if disk.kind == "none":
            for path in [store, *store.rglob("*")]:
                path.chmod(path.stat().st_mode | stat.S_IWUSR)


def test_a_read_only_store_is_read_and_refuses_writes_in_one_paragraph(
    read_only_store: tuple[Path, str], good_log: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    began = time.monotonic()
    store, how = read_only_store
    t0 = time.monotonic()
    listed = run_cli(store, "runs", "--json")
    assert listed.returncode == 0, listed.stderr
    assert [r["name"] for r in json.loads(listed.stdout)] == ["good"]
    exported = run_cli(store, "export", "good", "-o", str(good_log.with_name("good-export.csv")))
    assert exported.returncode == 0, exported.stderr
    for args in (["import", str(good_log), "--run", "other"], ["delete", "good"], ["meta", "good", "gpus=8"]):
        done = run_cli(store, *args)
        assert done.returncode == 2, (args, done.stderr)
        message = _one_paragraph(done.stderr, args[0])
        assert str(store) in message and "read-only" in message.lower(), message
        assert "writable" in message or "write access" in message, message  # what to do
    elapsed = time.monotonic() - t0
    assert elapsed < 60, f"{elapsed:.0f} s: a read-only store must be answered at once, not after lock retries"
    _draws(_overview(store, "good", monkeypatch), "good")
    _report("read_only", time.monotonic() - began, how=how, commands=5)


# ------------------------------------------------------------------------------------ truncated Parquet


def test_a_truncated_parquet_file_is_named_and_the_other_runs_are_served(
    tmp_path: Path, good_log: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    began = time.monotonic()
    store = tmp_path / "store"
    for run in ("good", "bad"):
        assert run_cli(store, "import", str(good_log), "--run", run).returncode == 0
    before = sorted_rows(Store(store), "good")
    run_dir = Store(store).run_dir("bad")
    damaged = [run_dir / "long" / "g000001.parquet", run_dir / "runlevel" / "g000001.parquet"]
    for path in damaged:
        os.truncate(path, path.stat().st_size // 2)

    exported = run_cli(store, "export", "bad", "-o", str(tmp_path / "bad.csv"))
    assert exported.returncode == 2
    message = _one_paragraph(exported.stderr, "export")
    assert str(damaged[0]) in message and "stabscope check bad --repair" in message, message
    assert not (tmp_path / "bad.csv").exists()  # no half-written export
    listed = run_cli(store, "runs", "--json")
    assert listed.returncode == 0, listed.stderr
    statuses = {r["name"]: r["status_text"] for r in json.loads(listed.stdout)}
    assert statuses == {"good": "ended at step 2000", "bad": "damaged: run `stabscope check bad --repair`"}
    assert run_cli(store, "export", "good", "-o", str(tmp_path / "good.csv")).returncode == 0
    assert_same_rows(sorted_rows(Store(store), "good"), before)

    _draws(_overview(store, "good", monkeypatch), "good")
    runs_page = open_in_app("runs", monkeypatch).run(timeout=120)
    assert not runs_page.exception and not runs_page.error, [e.value for e in runs_page.error]
    table = runs_page.dataframe(key="runs_table").value.set_index("name")
    assert table.loc["bad", "status"].startswith("damaged") and table.loc["good", "last loss step"] == GOOD_STEPS
    at = _overview(store, "bad", monkeypatch)
    assert not at.exception, [e.message for e in at.exception]
    banners = [e.value for e in at.error]
    assert len(banners) == 1, banners
    assert str(damaged[1]) in banners[0] and "stabscope check bad --repair" in banners[0], banners[0]
    _report("truncated_parquet", time.monotonic() - began, files_truncated=len(damaged))


# ------------------------------------------------------------------------------------- corrupt catalog


@pytest.mark.parametrize("damage", ["header", "block"])
def test_a_corrupt_catalog_is_named_at_once_with_the_repair(
    tmp_path: Path, good_log: Path, damage: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    began = time.monotonic()
    store = tmp_path / "store"
    for run in ("good", "other"):
        assert run_cli(store, "import", str(good_log), "--run", run).returncode == 0
    before = {run: sorted_rows(Store(store), run) for run in ("good", "other")}
    catalog = store / "catalog.duckdb"
    with open(catalog, "r+b") as f:  # the file header, or the blocks after DuckDB's headers
        f.seek(0 if damage == "header" else 12288)
        f.write(bytes(range(256)) * 48)
    t0 = time.monotonic()
    for args in (["runs", "--json"], ["show", "good"], ["import", str(good_log), "--run", "third"]):
        done = run_cli(store, *args)
        assert done.returncode == 2, (args, done.stderr)
        message = _one_paragraph(done.stderr, args[0])
        assert str(catalog) in message and "stabscope check --repair" in message, message
        assert "already in this process" not in message, message  # not mistaken for a second connection
    elapsed = time.monotonic() - t0
    assert elapsed < 30, f"{elapsed:.0f} s: a damaged catalog must be reported at once, not after lock retries"
    monkeypatch.setenv("STABSCOPE_STORE", str(store))
    at = open_in_app("runs", monkeypatch).run(timeout=120)
    assert not at.exception, [e.message for e in at.exception]
    assert any("stabscope check --repair" in e.value for e in at.error), [e.value for e in at.error]

    repaired = run_cli(store, "check", "--repair")
    assert repaired.returncode == 0, repaired.stdout + repaired.stderr
    assert run_cli(store, "check").returncode == 0
    after = Store(store)
    assert sorted(r.name for r in after.list_runs()) == ["good", "other"]
    for run, rows in before.items():
        assert_same_rows(sorted_rows(after, run), rows)
    _report(f"corrupt_catalog_{damage}", time.monotonic() - began, answered_s=round(elapsed, 1))


# ---------------------------------------------------------------------------------- unusual store path


def test_a_store_path_with_spaces_and_non_ascii_works_and_is_named_exactly(
    tmp_path: Path, good_log: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    began = time.monotonic()
    folder = tmp_path / "my runs é ü 日本 (v2)"
    store = folder / "store dir ø"
    log = folder / "train log ä.csv"
    folder.mkdir()
    shutil.copy(good_log, log)
    shards = folder / "shards ñ"
    written = write_shard_round(shards, 0, 500, ranks=2)
    assert run_cli(store, "import", str(log), "--run", "imported").returncode == 0
    assert run_cli(store, "compact", str(shards), "--run", "compacted").returncode == 0
    listed = run_cli(store, "runs", "--json")
    assert listed.returncode == 0, listed.stderr
    runs = {r["name"]: r for r in json.loads(listed.stdout)}
    assert runs["imported"]["rows"] == GOOD_STEPS * 4 and runs["compacted"]["rows"] == written
    assert str(log) in runs["imported"]["source"] and str(shards) in runs["compacted"]["source"]
    target = folder / "export ü.csv"
    assert run_cli(store, "export", "imported", "-o", str(target)).returncode == 0
    assert target.read_text().count("\n") == GOOD_STEPS * 4 + 1
    missing = folder / "no such ü.log"
    done = run_cli(store, "import", str(missing), "--run", "x")
    assert done.returncode == 2 and str(missing) in _one_paragraph(done.stderr, "import")
    _draws(_overview(store, "compacted", monkeypatch), "compacted")
    _report("unusual_path", time.monotonic() - began, path=str(store.relative_to(tmp_path)))
