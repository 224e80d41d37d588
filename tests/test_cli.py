"""The CLI contract: subcommands, --store/STABSCOPE_STORE, --json shapes, exit codes, no tracebacks."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ingest.services.run_analyses import open_analysed_store
from tests.conftest import REPO_ROOT
from tests.test_store import write_run

REPO = Path(__file__).resolve().parents[1]


def stabscope(
    *args: str, store: Path | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "ingest", *args]
    if store is not None:
        cmd += ["--store", str(store)]
    full_env = {**os.environ, "PYTHONPATH": str(REPO), **(env or {})}
    return subprocess.run(cmd, capture_output=True, text=True, env=full_env, cwd=REPO, timeout=300, check=False)


@pytest.fixture(scope="module")
def compacted(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("cli")
    write_run(root / "shards", ranks=2, steps=50, spike_step=40)
    proc = stabscope("compact", str(root / "shards"), "--run", "cli-run", store=root / "store")
    assert proc.returncode == 0, proc.stderr
    return root


def test_runs_json_contract(compacted: Path) -> None:
    proc = stabscope("runs", "--json", store=compacted / "store")
    assert proc.returncode == 0, proc.stderr
    [run] = json.loads(proc.stdout)
    assert run["name"] == "cli-run" and run["steps"] == [0, 49] and run["ranks"] == 2
    assert run["metrics"] == ["grad_norm_local", "loss", "lr"]


def test_store_env_variable_is_the_default(compacted: Path) -> None:
    proc = stabscope("runs", "--json", env={"STABSCOPE_STORE": str(compacted / "store")})
    assert [r["name"] for r in json.loads(proc.stdout)] == ["cli-run"]


def test_export_csv_has_contract_columns(compacted: Path) -> None:
    out = compacted / "out.csv"
    proc = stabscope("export", "cli-run", "--format", "csv", "-o", str(out), store=compacted / "store")
    assert proc.returncode == 0, proc.stderr
    with out.open() as f:
        rows = list(csv.DictReader(f))
    assert {"step", "rank", "metric", "value"} <= set(rows[0])
    assert len(rows) == 2 * 50 + 2 * 50
    loss40 = [r for r in rows if r["metric"] == "loss" and r["step"] == "40"]
    assert loss40[0]["rank"] == "-1" and float(loss40[0]["value"]) > 10


def test_show_json(compacted: Path) -> None:
    proc = stabscope("show", "cli-run", "--json", store=compacted / "store")
    data = json.loads(proc.stdout)
    assert data["events"] == [{"step": 50, "kind": "warmup_end", "label": "warmup done"}]
    assert data["meta"]["world_size"] == 2


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("show", "nope"), "no run named 'nope'"),
        (("show", "../x"), "invalid run name"),
        (("compact", "/does/not/exist", "--run", "x"), "does not exist"),
        (("export", "cli-run", "--format", "csv", "-o", "/proc/forbidden/x.csv"), "error"),
    ],
)
def test_failures_exit_nonzero_with_one_paragraph_and_no_traceback(
    compacted: Path, args: tuple[str, ...], message: str
) -> None:
    proc = stabscope(*args, store=compacted / "store")
    assert proc.returncode != 0
    assert message in proc.stderr
    assert "Traceback" not in proc.stderr and proc.stderr.count("\n") <= 3


def test_delete_removes_run_and_files(tmp_path: Path) -> None:
    write_run(tmp_path / "shards", ranks=1, steps=5)
    store = tmp_path / "store"
    assert stabscope("compact", str(tmp_path / "shards"), "--run", "gone", store=store).returncode == 0
    assert (store / "runs" / "run=gone").is_dir()
    assert stabscope("delete", "gone", store=store).returncode == 0
    assert json.loads(stabscope("runs", "--json", store=store).stdout) == []
    assert not (store / "runs" / "run=gone").exists()


def test_watch_once_and_json_compact_report(tmp_path: Path) -> None:
    write_run(tmp_path / "shards", ranks=1, steps=20)
    store = tmp_path / "store"
    proc = stabscope("watch", str(tmp_path / "shards"), "--run", "w", "--once", store=store)
    assert proc.returncode == 0, proc.stderr
    proc = stabscope("compact", str(tmp_path / "shards"), "--run", "w", "--json", store=store)
    assert json.loads(proc.stdout)["rows"] == 0  # already folded in by watch


@pytest.mark.slow
def test_serve_seeds_the_demo_runs_before_it_answers(tmp_path: Path) -> None:
    """The README's first command on a fresh store: the server process writes the demo runs (with a
    progress bar on a terminal) before its health check answers, so the first page has them."""
    from ingest.services.demo import DEMO_SEEDED_KEY
    from tests.test_browser import _free_port, _wait_healthy

    store_path, port, log = tmp_path / "store", _free_port(), tmp_path / "serve.log"
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    env.pop("STABSCOPE_NO_DEMO", None)
    cmd = [sys.executable, "-m", "ingest", "serve", "--store", str(store_path), "--port", str(port)]
    with log.open("wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=tmp_path)
    try:
        _wait_healthy(f"http://127.0.0.1:{port}", proc, log)
    finally:
        proc.terminate()
        proc.wait(30)
    store = open_analysed_store(store_path)
    assert "pid" in (store.get_setting(DEMO_SEEDED_KEY) or "")  # who seeded it and when (ingest.services.demo)
    assert {"demo-dense-1b", "s1-moe-7b-before"} <= {r.name for r in store.list_runs()}
    output = log.read_text()
    assert f"StabScope on http://localhost:{port}" in output  # (the bar is silent off a terminal)
    assert "WARNING" not in output, output  # e.g. Streamlit's "No runtime found" for each cached function
    # no lookup of the machine's external address (.streamlit/config.toml names the server address):
    # found, it prints "External URL"; not found (no internet), "Did not auto detect external IP"
    assert "External URL" not in output and "external IP" not in output, output
    # it listens on 127.0.0.1 only (issue #23): no address for other machines (tests/test_serve_access.py)
    assert "from another machine" not in output, output


def test_serve_reports_a_store_it_cannot_seed_in_one_line(tmp_path: Path) -> None:
    """A store path that is a file: the server process stops before it listens, with the CLI's one
    paragraph error and status 2, no traceback."""
    blocked = tmp_path / "not-a-dir"
    blocked.write_text("a file where the store should be")
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    env.pop("STABSCOPE_NO_DEMO", None)
    cmd = [sys.executable, "-m", "ingest", "serve", "--store", str(blocked / "store"), "--port", "1"]
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120)
    assert done.returncode == 2, done.stderr
    assert "stabscope serve: error:" in done.stderr and "Traceback" not in done.stderr


def test_diagnose_on_a_step_without_an_incident_says_so_and_names_the_nearest(compacted: Path) -> None:
    # the run has a loss spike at step 40; step 20 is an ordinary step (issue #20: no verdict there)
    store = compacted / "store"
    quiet = stabscope("diagnose", "cli-run", "--step", "20", store=store)
    assert quiet.returncode == 0, quiet.stderr
    assert "no incident covers step 20 of cli-run" in quiet.stdout and "nearest after" in quiet.stdout
    assert "actions:" not in quiet.stdout
    data = json.loads(stabscope("diagnose", "cli-run", "--step", "20", "--json", store=store).stdout)
    assert data["incident"] is None and [n["side"] for n in data["nearest"]] == ["after"]
    assert data["nearest"][0]["start"] <= 40 <= data["nearest"][0]["until"]
    spike = json.loads(stabscope("diagnose", "cli-run", "--step", "40", "--json", store=store).stdout)
    assert spike["start"] <= 40 <= spike["until"] and "action_evidence" in spike and "members" in spike
    forced = stabscope("diagnose", "cli-run", "--step", "20", "--force", store=store)
    assert forced.returncode == 0 and "diagnosed as if it were one" in forced.stdout


def test_runs_says_how_far_a_run_got(compacted: Path) -> None:
    # the run states no planned steps: it ended at its last step, it did not "finish" anything (#20)
    proc = stabscope("runs", store=compacted / "store")
    assert proc.returncode == 0 and "ended at step 49" in proc.stdout and "finished" not in proc.stdout
    [run] = json.loads(stabscope("runs", "--json", store=compacted / "store").stdout)
    assert run["status"] == "finished" and run["status_text"] == "ended at step 49"


def test_export_of_a_run_missing_a_long_file_fails_and_writes_nothing(tmp_path: Path) -> None:
    """A run whose base long file is gone: export said "wrote 6002 rows", wrote 2 and exited 0 (#33 item
    8). It now compares the rows it wrote with the catalog's and refuses, naming the missing file."""
    write_run(tmp_path / "shards", ranks=2, steps=50, spike_step=40)
    store = tmp_path / "store"
    assert stabscope("compact", str(tmp_path / "shards"), "--run", "r", store=store).returncode == 0
    # a second generation, so that a delta part survives the loss of the base file
    write_run(tmp_path / "shards", ranks=2, steps=60, spike_step=40)
    assert stabscope("compact", str(tmp_path / "shards"), "--run", "r", store=store).returncode == 0
    long_files = sorted((store / "runs" / "run=r" / "long").glob("g*.parquet"))
    long_files[0].unlink()
    for fmt in ("csv", "parquet"):
        target = tmp_path / f"r.{fmt}"
        proc = stabscope("export", "r", "--format", fmt, "-o", str(target), store=store)
        assert proc.returncode == 2 and "Traceback" not in proc.stderr
        assert "is damaged" in proc.stderr and str(long_files[0]) in proc.stderr
        assert not target.exists() and not list(tmp_path.glob(f".r.{fmt}.*"))
