"""``stabscope check --repair`` loses nothing it can keep (#33 items 8 and 9): a run's long file deleted
while its run-level file holds the same rows is rebuilt from that copy, and a catalog older than the
run files (a restored backup, an rsync of the catalog alone) is caught up with the complete generation
the files hold instead of that generation being deleted as a stopped writer's. Every command runs as a
user runs it (``python -m ingest``), on a real public log where one is needed.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import numpy as np
import pytest

from ingest.store import Store
from ingest.store.shards import ShardWriter
from tests.conftest import SMALL_RUN, RunSpec, open_page, write_run
from tests.test_cli import stabscope
from tests.test_store import write_run as write_shards

REAL_LOG = (
    Path(__file__).resolve().parents[1].parent / "shared" / "data" / "real_logs" / "mng_llmc_gpt2_124m" / "main.log"
)
"""llm.c's GPT-2 124M main.log: 58,760 run-level rows (train loss, grad norm, lr to step 19559, val loss)."""


def _real_run(store: Path) -> None:
    if not REAL_LOG.exists():
        pytest.skip(f"../shared absent: no real log at {REAL_LOG}")
    proc = stabscope("import", str(REAL_LOG), "--run", "llmc", store=store)
    assert proc.returncode == 0, proc.stderr


def _export(store: Path, run: str, target: Path) -> bytes:
    proc = stabscope("export", run, "--format", "csv", "-o", str(target), store=store)
    assert proc.returncode == 0, proc.stderr
    return target.read_bytes()


def _check(store: Path, *args: str) -> tuple[int, list[dict]]:
    proc = stabscope("check", "--json", *args, store=store)
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc.returncode, json.loads(proc.stdout)


def _files(store: Path, run: str, kind: str) -> list[Path]:
    return sorted((store / "runs" / f"run={run}" / kind).glob("g*.parquet"))


@pytest.mark.parametrize("deleted", ["long", "runlevel"])
def test_a_deleted_file_of_a_real_run_is_rebuilt_from_its_intact_copy(tmp_path: Path, deleted: str) -> None:
    """Before: with the base long file deleted, repair said "none: the rows of this file are lost" although
    the run-level file held every one of them; export then wrote 0 of 58,760 rows."""
    store = tmp_path / "store"
    _real_run(store)
    before = _export(store, "llmc", tmp_path / "before.csv")
    assert before.count(b"\n") == 58_760 + 1
    [gone] = _files(store, "llmc", deleted)
    gone.unlink()

    code, findings = _check(store)
    assert code == 1
    [finding] = [f for f in findings if f["path"] == str(gone)]
    assert finding["code"] == "missing_file"
    if deleted == "long":
        assert finding["repair"].startswith("rebuild it from the run-level file of its generation")
    else:
        assert finding["repair"] == "merge the run again from its long files into a new generation (no row is lost)"
    assert not any(f["repair"].startswith("none") for f in findings), findings

    code, findings = _check(store, "--repair")
    assert code == 0 and all(f["repaired"] for f in findings), findings
    assert _check(store) == (0, [])
    assert _export(store, "llmc", tmp_path / "after.csv") == before  # byte for byte


def test_a_per_rank_run_missing_its_long_file_still_says_its_rows_are_lost(tmp_path: Path) -> None:
    """The run-level file holds only the rank -1 rows: with per-rank rows, it is no copy to restore from."""
    write_shards(tmp_path / "shards", ranks=2, steps=50, spike_step=40)
    store = tmp_path / "store"
    assert stabscope("compact", str(tmp_path / "shards"), "--run", "r", store=store).returncode == 0
    [long_file] = _files(store, "r", "long")
    long_file.unlink()
    code, findings = _check(store, "--repair")
    assert code == 1
    [lost] = [f for f in findings if f["path"] == str(long_file)]
    assert lost["repair"].startswith("none: the rows of this file are lost") and not lost["repaired"]


def _restore(backup: Path, store: Path) -> None:
    for wal in store.glob("catalog.duckdb*"):
        wal.unlink()
    for saved in backup.glob("catalog.duckdb*"):
        shutil.copy(saved, store / saved.name)


def _backup(store: Path, backup: Path) -> None:
    backup.mkdir()
    for f in store.glob("catalog.duckdb*"):
        shutil.copy(f, backup / f.name)


def test_a_restored_older_catalog_adopts_the_full_generation_the_files_hold(tmp_path: Path) -> None:
    """Before: `check --repair` deleted generation 2's five files as "a writer stopped between writing and
    committing it" and called generation 1's rows lost: 58,760 rows gone, the run empty."""
    store = tmp_path / "store"
    _real_run(store)
    _backup(store, tmp_path / "backup")
    proc = stabscope("import", str(REAL_LOG), "--run", "llmc", store=store)  # generation 2, a full merge
    assert proc.returncode == 0, proc.stderr
    assert [p.name for p in _files(store, "llmc", "long")] == ["g000002.parquet"]
    before = _export(store, "llmc", tmp_path / "before.csv")
    _restore(tmp_path / "backup", store)

    code, findings = _check(store)
    assert code == 1
    assert [(f["code"], f["run"]) for f in findings] == [("catalog_behind_files", "llmc")]
    assert "complete generation 2, newer than the catalog's generation 1" in findings[0]["problem"]
    code, findings = _check(store, "--repair")
    assert code == 0, findings
    assert _check(store) == (0, [])
    [run] = json.loads(stabscope("runs", "--json", store=store).stdout)
    assert run["rows"] == 58_760 and run["steps"] == [0, 19560]
    assert _export(store, "llmc", tmp_path / "after.csv") == before


def test_a_restored_older_catalog_adopts_a_base_and_its_delta_parts(tmp_path: Path) -> None:
    """A run compacted three times (a base and two delta parts), the catalog restored to after the first."""
    shards, store = tmp_path / "shards", tmp_path / "store"
    rng = np.random.default_rng(3)
    for i, (lo, hi) in enumerate(((0, 2999), (3000, 3100), (3101, 3200))):  # each only extends the run: a delta part
        steps = np.arange(lo, hi + 1, dtype=np.int64)
        for rank in (-1, 0, 1):
            with ShardWriter(shards, max(rank, 0)) as writer:
                name = "loss" if rank < 0 else "grad_norm_local"
                writer.write_columns(steps, {name: 1 + rng.standard_normal(steps.size)}, rank=rank)
        proc = stabscope("compact", str(shards), "--run", "r", store=store)
        assert proc.returncode == 0, proc.stderr
        if i == 0:
            _backup(store, tmp_path / "backup")
    [run] = json.loads(stabscope("runs", "--json", store=store).stdout)
    assert run["steps"] == [0, 3200]
    before = _export(store, "r", tmp_path / "before.csv")
    parts = [p.name for p in _files(store, "r", "long")]
    assert parts == ["g000001.parquet", "g000002.parquet", "g000003.parquet"]
    _restore(tmp_path / "backup", store)

    code, findings = _check(store)
    assert [(f["code"], f["repair"].split(" ")[0]) for f in findings] == [("catalog_behind_files", "make")]
    assert re.search(r"complete generation 3 \(base 1 and its delta parts\)", findings[0]["problem"])
    code, findings = _check(store, "--repair")
    assert code == 0, findings
    assert [p.name for p in _files(store, "r", "long")] == parts  # nothing deleted
    [run] = json.loads(stabscope("runs", "--json", store=store).stdout)
    assert run["steps"] == [0, 3200]
    assert _export(store, "r", tmp_path / "after.csv") == before


def test_runs_and_the_pages_mark_a_run_missing_its_long_file(own_app_store: Store) -> None:
    """Before: `runs` said "ended at step 1999" and the Runs page and overview showed the run as whole with
    its base long file deleted (their reads never open it); only `export` and `check` noticed."""
    write_run(own_app_store, RunSpec(name="other-run", per_rank=False, seed=5))
    store = own_app_store.root
    [gone] = _files(store, "other-run", "long")
    gone.unlink()

    proc = stabscope("runs", "--json", store=store)
    assert proc.returncode == 0, proc.stderr
    runs = {r["name"]: r for r in json.loads(proc.stdout)}
    assert runs["other-run"]["damaged"] == f"{gone}: missing"
    assert runs["other-run"]["status_text"] == "damaged: run `stabscope check other-run --repair`"
    assert runs[SMALL_RUN]["damaged"] is None and runs[SMALL_RUN]["status_text"] == "ended at step 1999"
    proc = stabscope("runs", store=store)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr
    line = next(row for row in proc.stdout.splitlines() if row.startswith("other-run"))
    assert "damaged: run `stabscope check other-run --repair`" in line
    assert f"warning: run other-run is damaged: {gone}: missing" in proc.stderr

    at = open_page("runs").run()
    assert not at.exception
    table = at.dataframe(key="runs_table").value.set_index("name")
    assert table.loc["other-run", "status"].startswith("damaged")
    assert table.loc[SMALL_RUN, "status"] == "ended at step 1999"

    at = open_page("overview")
    at.query_params["run"] = "other-run"
    at.run()
    assert not at.exception
    [banner] = [e.value for e in at.error]
    assert banner.startswith(f"{gone.parent.parent}: run 'other-run' is damaged: {gone}: missing")
    assert "stabscope check other-run --repair" in banner
    assert at.get("plotly_chart")  # what can still be read is drawn: the run-level file is intact

    assert _check(store, "--repair")[0] == 0  # every row of the run is run-level: rebuilt from that copy
    assert json.loads(stabscope("runs", "--json", store=store).stdout)[1]["damaged"] is None
