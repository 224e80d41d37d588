"""SIGKILL from outside, at least 20 times, of `stabscope compact` (510k rows, then rounds that append
and re-log steps). Half the kills come after a seeded random delay, half a seeded moment after the
child's first temporary file appears (a write under way). Throughout, a reader process polls the catalog
and reads every run (``tests.fault_children.poll_catalog``): it must never see a partial run or
generation. After the kills a rerun completes, and the store equals a clean one-shot compaction of the
same shards, row for row, with no file of a killed writer left.

Prints one ``FAULTS {...}`` line with its figures (docs/reliability.md); ``tests/test_faults_kill_*.py``
kill the other commands, one module each, so that CI's workers share them.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests import fault_harness as fh

pytestmark = pytest.mark.slow

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
fast machine, where a round can finish before a kill lands: the test stops once fh.KILLS have landed."""
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
    reader = fh.Reader(store, tmp_path, {"job": {"rows": _distinct_rows_after_each_round()}})
    rng, kills = fh.seeded(fh.KILL_SEED + 1), fh.KillLog()
    written = rounds = 0
    for first, n, version in ROUNDS:
        if kills.landed >= fh.KILLS:
            break
        written += fh.write_shard_round(shards, first, n, ranks=COMPACT_RANKS, version=version)
        rounds += 1
        in_round = kills.landed
        while kills.landed - in_round < KILLS_PER_ROUND:
            proc = fh.start(fh.cli_argv(store, "compact", str(shards), "--run", "job"))
            before = kills.landed
            fh.kill_alternately(proc, store, rng, kills, (0.1, 1.2))
            if kills.landed == before:  # it finished before the kill: this round is folded in
                break
        done = fh.run_cli(store, "compact", str(shards), "--run", "job")
        assert done.returncode == 0, done.stderr
    assert kills.landed >= fh.KILLS and kills.failures == [], kills.to_json()
    found = reader.result()
    fh.check_reader(found)
    clean = tmp_path / "clean"
    one_shot = fh.run_cli(clean, "compact", str(shards), "--run", "job")
    assert one_shot.returncode == 0, one_shot.stderr
    rows = _distinct_rows_after_each_round()[rounds - 1]
    fh.assert_equal_to_clean(store, clean, "job", rows)
    fh.report_kills(
        "compact", time.monotonic() - began, kills, found, rounds=rounds, records_written=written, rows=rows
    )
