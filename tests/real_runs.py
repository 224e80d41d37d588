"""Real public logs (../shared/data/real_logs) imported into a test store, for the page tests that
check what a user reads about them. They are read where they lie, never copied; a test skips with
the path it missed when they are absent."""

from __future__ import annotations

from pathlib import Path

import pytest

from ingest.importing.importer import import_logs
from ingest.services.run_analyses import open_analysed_store
from ingest.store import Store

REAL = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "real_logs"
RUNS = {
    "megds": REAL / "bigscience_megds_perf_log" / "meg_ds_3d_gpt2_perf_n16-ds-off.out",
    "mixtral-h100": REAL / "megatron_mixtral8x7b_h100" / "golden_values_dev_dgx_h100.json",
    "llmc": REAL / "mng_llmc_gpt2_124m" / "main.log",
}
"""Run name -> log: a perf test killed at iteration 62 of 1000, golden values that turn to "nan" after
step 22685 of 24000, and llm.c's main.log (train lines to step 19559, a last val line at 19560)."""


def import_real_runs(root: Path) -> Store:
    """A store at ``root`` holding ``RUNS``, imported as ``stabscope import`` does."""
    store = open_analysed_store(root)
    for name, path in RUNS.items():
        if not path.exists():
            pytest.skip(f"../shared absent: no real log at {path}")
        import_logs(store, [path], run=name)
    return store
