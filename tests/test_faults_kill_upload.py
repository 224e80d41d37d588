"""SIGKILL from outside, at least 20 times, of the Upload page's import (AppTest of pages/upload.py in a
child, a 400k-record CSV). Half the kills come after a seeded random delay, half a seeded moment after
the child's first temporary file appears (a write under way). Throughout, a reader process polls the
catalog and reads every run (``tests.fault_children.poll_catalog``): it must never see a partial run or
generation. After the kills a rerun through the page completes, and the store equals `stabscope import`
of the same file, row for row, with no file of a killed writer left.

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

UPLOAD_STEPS = 100_000
"""4 metrics a row: 400k records (6 MB, under the Upload page's 200 MiB bound)."""


def test_upload_page_import_killed_then_rerun_equals_a_cli_import(tmp_path: Path) -> None:
    began = time.monotonic()
    log = tmp_path / "upload.csv"
    records = fh.write_csv_log(log, UPLOAD_STEPS, seed=fh.KILL_SEED)
    store = tmp_path / "store"
    reader = fh.Reader(store, tmp_path, {"up": {"rows": [records]}})
    clean = tmp_path / "clean"
    proc = fh.start(fh.child_argv("upload", str(clean), str(log), "up"))
    assert fh.wait_for_line(proc, b"IMPORTING")
    marked = time.monotonic()
    out, err = proc.communicate(timeout=300)
    import_s = time.monotonic() - marked
    assert proc.returncode == 0 and b"DONE" in out, err.decode()[-3000:]
    rng, kills = fh.seeded(fh.KILL_SEED + 3), fh.KillLog()
    while kills.landed < fh.KILLS and kills.attempts < 3 * fh.KILLS:
        proc = fh.start(fh.child_argv("upload", str(store), str(log), "up"))
        assert fh.wait_for_line(proc, b"IMPORTING"), proc.communicate()[1].decode()[-3000:]
        fh.kill_alternately(proc, store, rng, kills, (0.0, 1.1 * import_s))
    assert kills.landed >= fh.KILLS and kills.failures == [], kills.to_json()
    rerun = fh.start(fh.child_argv("upload", str(store), str(log), "up"))
    out, err = rerun.communicate(timeout=300)
    assert rerun.returncode == 0 and b"DONE" in out, err.decode()[-3000:]
    found = reader.result()
    fh.check_reader(found)
    cli_clean = tmp_path / "cli"
    assert fh.run_cli(cli_clean, "import", str(log), "--run", "up").returncode == 0
    fh.assert_equal_to_clean(store, cli_clean, "up", records)
    fh.assert_same_rows(fh.sorted_rows(Store(clean), "up"), fh.sorted_rows(Store(cli_clean), "up"))
    fh.report_kills("upload", time.monotonic() - began, kills, found, records=records, import_s=round(import_s, 2))
