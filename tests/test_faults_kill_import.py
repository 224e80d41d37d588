"""SIGKILL from outside, at least 20 times, of `stabscope import` (a 1.08M-record Megatron log). Half
the kills come after a seeded random delay, half a seeded moment after the child's first temporary file
appears (a write under way). Throughout, a reader process polls the catalog and reads every run
(``tests.fault_children.poll_catalog``): it must never see a partial run or generation. After the kills
a rerun of the same command completes, and the store equals a clean one-shot import of the same input,
row for row, with no file of a killed writer left.

Prints one ``FAULTS {...}`` line with its figures (docs/reliability.md); ``tests/test_faults_kill_*.py``
kill the other commands, one module each, so that CI's workers share them.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests import fault_harness as fh

pytestmark = pytest.mark.slow

MEGATRON_ITERATIONS = 120_000
"""9 values a line: 1.08M records, large enough that a kill lands mid-import."""


def test_import_killed_mid_import_then_rerun_equals_a_clean_import(tmp_path: Path) -> None:
    began = time.monotonic()
    log = tmp_path / "train.log"
    records = fh.write_megatron_log(log, MEGATRON_ITERATIONS, seed=fh.KILL_SEED)
    store = tmp_path / "store"
    reader = fh.Reader(store, tmp_path, {"train": {"rows": [records]}})
    clean = tmp_path / "clean"
    t0 = time.monotonic()
    done = fh.run_cli(clean, "import", str(log), "--run", "train")
    baseline = time.monotonic() - t0  # under the same load as the kills (the reader is polling)
    assert done.returncode == 0, done.stderr
    rng, kills = fh.seeded(fh.KILL_SEED), fh.KillLog()
    while kills.landed < fh.KILLS and kills.attempts < 3 * fh.KILLS:
        proc = fh.start(fh.cli_argv(store, "import", str(log), "--run", "train"))
        fh.kill_alternately(proc, store, rng, kills, (0.3 * baseline, 1.05 * baseline))
    assert kills.landed >= fh.KILLS and kills.failures == [], kills.to_json()
    rerun = fh.run_cli(store, "import", str(log), "--run", "train")
    assert rerun.returncode == 0 and rerun.stderr == "", rerun.stderr
    found = reader.result()
    fh.check_reader(found)
    fh.assert_equal_to_clean(store, clean, "train", records)
    fh.report_kills("import", time.monotonic() - began, kills, found, records=records, baseline_s=round(baseline, 2))
