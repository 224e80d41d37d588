"""An S3 store (real moto server) from the command line and the dashboard: --store s3:// and
STABSCOPE_STORE=s3:// (meta, delete and the rest go through the same Store, tested in test_store_s3),
a killed writer's leftovers found and collected by check."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ingest.services.run_analyses import materialise
from ingest.store import Store
from ingest.store.check_remote import check_object_store
from tests.conftest import REPO_ROOT, open_page
from tests.test_store import write_run as write_shards
from tests.test_store_s3 import imported_table, state_of


def stabscope(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    full_env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), **env}
    cmd = [sys.executable, "-m", "ingest", *args]
    return subprocess.run(cmd, capture_output=True, text=True, env=full_env, cwd=REPO_ROOT, timeout=300, check=False)


def test_the_commands_take_an_s3_store(s3_url: str, tmp_path: Path) -> None:
    env = {"STABSCOPE_CACHE": str(tmp_path / "cache")}
    store = ["--store", s3_url]
    write_shards(tmp_path / "shards", ranks=2, steps=50, spike_step=40)
    proc = stabscope("compact", str(tmp_path / "shards"), "--run", "cli-run", *store, env=env)
    assert proc.returncode == 0, proc.stderr
    log = tmp_path / "train.csv"
    loss = imported_table(300).slice(0, 300)  # the loss rows
    log.write_text(
        "step,loss\n"
        + "".join(f"{s},{v!r}\n" for s, v in zip(loss["step"].to_pylist(), loss["value"].to_pylist(), strict=True))
    )
    proc = stabscope("import", str(log), "--run", "imp", *store, env=env)
    assert proc.returncode == 0, proc.stderr
    # another machine (its own cache) through STABSCOPE_STORE sees both runs as written
    other = {"STABSCOPE_CACHE": str(tmp_path / "other"), "STABSCOPE_STORE": s3_url}
    proc = stabscope("runs", "--json", env=other)
    assert proc.returncode == 0, proc.stderr
    runs = {r["name"]: r for r in json.loads(proc.stdout)}
    assert set(runs) == {"cli-run", "imp"}
    assert runs["cli-run"]["steps"] == [0, 49] and runs["cli-run"]["ranks"] == 2
    proc = stabscope("spikes", "cli-run", "--json", env=other)
    assert proc.returncode == 0, proc.stderr
    assert any(40 <= s["peak"] <= 41 for s in json.loads(proc.stdout))
    out = tmp_path / "out.csv"
    proc = stabscope("export", "cli-run", "--format", "csv", "-o", str(out), env=other)
    assert proc.returncode == 0, proc.stderr
    with out.open() as f:
        assert len(list(csv.DictReader(f))) == 2 * 50 + 2 * 50
    proc = stabscope("check", "--json", env=other)
    assert proc.returncode == 0 and json.loads(proc.stdout) == [], proc.stdout + proc.stderr
    proc = stabscope("runs", "--store", "s3://no-such-bucket-here/x", env=env)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "bucket 'no-such-bucket-here' does not exist" in proc.stderr


_CHILD = """
import sys
from ingest.services.run_analyses import materialise
from ingest.store import Store
from ingest.store.check_remote import check_object_store
from tests.test_store_s3 import imported_table
store = Store(sys.argv[1], on_generation=materialise, cache_dir=sys.argv[2])
store.import_table("run1", imported_table(200, offset=400), source="import:csv:x.csv")
"""


@pytest.mark.parametrize("failpoint", ["after_merge_commit", "after_object_upload", "after_manifest_put"])
def test_a_killed_writer_leaves_the_previous_state_and_check_collects_its_leftovers(
    s3_url: str, tmp_path: Path, failpoint: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = Store(s3_url, on_generation=materialise, cache_dir=tmp_path / "a")
    store.import_table("run1", imported_table(400), source="import:csv:x.csv")
    before = state_of(store, "run1")
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "STABSCOPE_CRASH_AT": failpoint}
    child = subprocess.run(
        [sys.executable, "-c", _CHILD, s3_url, str(tmp_path / "a")], env=env, cwd=REPO_ROOT, timeout=120, check=False
    )
    assert child.returncode == 137
    published = failpoint == "after_manifest_put"
    for cache in ("a", "b"):  # the killed writer's own cache, and another machine's
        reader = Store(s3_url, on_generation=materialise, cache_dir=tmp_path / cache)
        if published:
            assert reader.run_info("run1").last_step == 599
        else:
            assert state_of(reader, "run1") == before
    findings = [
        f.to_json() for f in check_object_store(s3_url).findings
    ]  # what `stabscope check --json --store URL` prints
    if failpoint == "after_merge_commit":  # nothing reached the server
        assert findings == []
        return
    assert findings and {f["code"] for f in findings} == {"unreferenced_object"}
    assert all(f["run"] == "run1" and f["path"].startswith(s3_url + "/runs/run=run1/") for f in findings)
    young = check_object_store(
        s3_url, repair=True
    )  # the objects are younger than the grace period: a write may be under way
    assert not young.clean and not any(f.repaired for f in young.findings)
    monkeypatch.setenv("STABSCOPE_CHECK_GRACE_S", "0")
    repaired = check_object_store(s3_url, repair=True)
    assert repaired.clean and all(f.repaired for f in repaired.findings)
    assert {f.path for f in repaired.findings} == {f["path"] for f in findings}
    assert check_object_store(s3_url).findings == []
    reader = Store(s3_url, on_generation=materialise, cache_dir=tmp_path / "d")
    assert reader.run_info("run1").last_step == (599 if published else 399)
    reader.read_long("run1")  # every object the manifest names is still there


def test_the_dashboard_reads_an_s3_store(s3_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STABSCOPE_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("STABSCOPE_STORE", s3_url)
    monkeypatch.setenv("STABSCOPE_NO_DEMO", "1")
    writer = Store(s3_url, on_generation=materialise, cache_dir=tmp_path / "writer")
    writer.import_table("run1", imported_table(600), source="import:csv:x.csv")
    at = open_page("spikes").run()
    assert not at.exception
    # the one-step 4x loss outlier is back on the trend the next step: a blip, listed on demand
    assert [s["severity"] for s in writer.spikes("run1")] == ["blip"]
    at.toggle(key="sp_blips").set_value(True).run()
    assert not at.exception
    table = at.dataframe(key="sp_table").value
    assert list(table["peak step"]) == [s["peak"] for s in writer.spikes("run1")] == [300]
