"""The child processes of the fault tests (``python -m tests.fault_children KIND ...``):

- ``reader STORE OUT STOP SPEC``: polls the catalog and reads every run's rows until ``STOP`` exists;
  writes its findings as JSON to ``OUT`` (see ``poll_catalog``).
- ``upload STORE LOG RUN``: the Upload page (AppTest of pages/upload.py): uploads ``LOG``, names the
  run, prints ``IMPORTING`` and clicks Import (the page's own import path), then ``DONE <rows>``.
- ``writers SHARDS N_WRITERS STEPS SECONDS``: forks ``N_WRITERS`` processes, each a ``ShardWriter`` of
  its rank writing ``STEPS`` steps paced over ``SECONDS`` (rank 0 also the run-level rows).
- ``cli_reader STORE RUN STOP OUT``: runs ``stabscope runs --json`` and ``spikes RUN --json`` in a
  loop; counts calls and failures.
- ``page_reader STORE RUN STOP OUT``: runs the Runs and Run overview pages (AppTest) in a loop; counts
  runs and errors.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import traceback
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))


def poll_catalog(store_root: Path, out: Path, stop: Path, spec: dict[str, dict[str, Any]]) -> None:
    """Until ``stop`` exists: list the runs, and for each read its rows. A violation is a state a reader
    must never see: a run listed before its first generation is committed (gen 0), a committed
    generation whose long file is missing, a row count read that differs from the catalog's for the
    same generation, a row count the input cannot give (``spec[run]["rows"]``), or rows, last step or
    generation going back between polls (``spec[run]["monotonic"]``). An exception is an error."""
    from ingest.store import Store
    from ingest.store.layout import LONG, part_generations

    store = Store(store_root)
    seen: dict[str, tuple[int, int, int]] = {}
    found: dict[str, Any] = {"polls": 0, "reads": 0, "gen_changed_during_read": 0, "violations": [], "errors": []}

    def violation(text: str) -> None:
        if len(found["violations"]) < 50:
            found["violations"].append(text)

    while not stop.exists():
        try:
            infos = store.list_runs()
            for info in infos:
                name = info.name
                expect = spec.get(name, {})
                if info.gen == 0:
                    violation(
                        f"{name}: listed with no committed generation (status {info.status!r}, rows {info.n_rows})"
                    )
                    continue
                if "rows" in expect and info.n_rows not in expect["rows"]:
                    violation(
                        f"{name}: catalog says {info.n_rows} rows at gen {info.gen}, expected one of {expect['rows']}"
                    )
                missing = [g for g in part_generations(info) if not store._layout(name).file(LONG, g).exists()]
                if missing and store.run_info(name).gen == info.gen:
                    violation(f"{name}: gen {info.gen} is current but its long files of gens {missing} are missing")
                rows = store.read_long(name).num_rows
                after = store.run_info(name)
                found["reads"] += 1
                if after.gen != info.gen:
                    found["gen_changed_during_read"] += 1
                elif rows != info.n_rows:
                    violation(f"{name}: read {rows} rows of gen {info.gen}, the catalog says {info.n_rows}")
                before = seen.get(name)
                now = (info.gen, info.n_rows, info.last_step if info.last_step is not None else -1)
                went_back = before is not None and any(a < b for a, b in zip(now, before, strict=True))
                if went_back and expect.get("monotonic", True):
                    violation(f"{name}: went back from (gen, rows, last step) {before} to {now}")
                seen[name] = now
        except Exception as exc:  # every exception a reader meets is a finding
            if len(found["errors"]) < 50:
                found["errors"].append(f"{type(exc).__name__}: {exc}\n{traceback.format_exc()[-1500:]}")
        found["polls"] += 1
        time.sleep(0.05)  # the writers under test share the machine's cores with this reader
    found["last"] = {name: {"gen": g, "rows": r, "last_step": s} for name, (g, r, s) in seen.items()}
    out.write_text(json.dumps(found, indent=1))


def upload(store_root: str, log: Path, run: str) -> None:
    """The Upload page's import of ``log`` as ``run``, as a user does it (upload, name, click Import)."""
    os.environ["STABSCOPE_STORE"] = store_root
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(str(REPO / "pages" / "upload.py"), default_timeout=300)
    at.run()
    at.file_uploader(key="up_files").upload(log.name, log.read_bytes(), "text/csv").run()
    at.text_input(key="up_name").input(run).run()
    assert not at.exception and not at.error, (at.exception, [e.value for e in at.error])
    print("IMPORTING", flush=True)
    at.button(key="up_import").click().run()
    if at.exception or at.error or not at.success:
        print("FAILED", [e.value for e in at.error], at.exception, flush=True)
        sys.exit(3)
    print("DONE", at.success[0].value, flush=True)


def writers(shards: Path, n_writers: int, steps: int, seconds: float) -> None:
    """Fork ``n_writers`` writer processes; each writes ``steps`` steps of its rank, paced evenly over
    ``seconds``, flushing every 0.25 s, and exits; exits non-zero if any writer failed."""
    from ingest.store.shards import ShardWriter
    from tests.fault_harness import RANK_METRICS, RUN_METRICS, shard_scalar

    pids = []
    start = time.monotonic()
    for rank in range(n_writers):
        pid = os.fork()
        if pid == 0:
            code = 0
            try:
                writer = ShardWriter(shards, rank, flush_interval_s=0.25, max_buffer_rows=100_000)
                for step in range(steps):
                    metrics = {m: shard_scalar(m, rank, step) for m in RANK_METRICS}
                    run_level = {m: shard_scalar(m, -1, step) for m in RUN_METRICS} if rank == 0 else None
                    writer.write(step, metrics, run_level=run_level, wall_time=1.7e9 + step)
                    ahead = start + seconds * (step + 1) / steps - time.monotonic()
                    if ahead > 0:
                        time.sleep(ahead)
                writer.close()
            except BaseException:
                traceback.print_exc()
                code = 1
            os._exit(code)
        pids.append(pid)
    failed = 0
    for pid in pids:
        _, status = os.waitpid(pid, 0)
        failed += status != 0
    print(f"WRITERS DONE {n_writers - failed}/{n_writers}", flush=True)
    sys.exit(1 if failed else 0)


def cli_reader(store_root: str, run: str, stop: Path, out: Path) -> None:
    """``stabscope runs --json`` and ``stabscope spikes RUN --json`` in turn until ``stop`` exists."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    found: dict[str, Any] = {"calls": 0, "errors": [], "rows_seen": []}
    while not stop.exists():
        for args in (["runs", "--json"], ["spikes", run, "--json"]):
            done = subprocess.run(
                [sys.executable, "-m", "ingest", *args, "--store", store_root],
                env=env,
                cwd=REPO,
                capture_output=True,
                text=True,
                check=False,
            )
            found["calls"] += 1
            if args[0] == "spikes" and done.returncode != 0 and "no run named" in done.stderr:
                continue  # before watch's first pass the run does not exist yet: a clear answer, not an error
            if done.returncode != 0 or done.stderr.strip():
                found["errors"].append(f"{' '.join(args)}: exit {done.returncode}: {done.stderr[-1500:]}")
                continue
            try:
                answer = json.loads(done.stdout)
            except ValueError as exc:
                found["errors"].append(f"{' '.join(args)}: not JSON ({exc}): {done.stdout[:300]}")
                continue
            if args[0] == "runs":
                found["rows_seen"].extend(r["rows"] for r in answer if r["name"] == run)
    out.write_text(json.dumps(found, indent=1))


def page_reader(store_root: str, run: str, stop: Path, out: Path) -> None:
    """The Runs page and the Run overview of ``run`` (AppTest) in turn until ``stop`` exists."""
    os.environ["STABSCOPE_STORE"] = store_root
    os.environ["STABSCOPE_NO_DEMO"] = "1"
    from streamlit.testing.v1 import AppTest

    found: dict[str, Any] = {"page_runs": 0, "errors": []}
    while not stop.exists():
        for page in ("runs", "overview"):
            at = AppTest.from_file(str(REPO / "pages" / f"{page}.py"), default_timeout=120)
            if page == "overview":
                at.query_params["run"] = run
            try:
                at.run()
            except Exception as exc:  # an AppTest timeout or a crash of the script runner
                found["errors"].append(f"{page}: {type(exc).__name__}: {exc}")
                continue
            found["page_runs"] += 1
            problems = [f"exception: {e.message}" for e in at.exception] + [f"error: {e.value}" for e in at.error]
            # the overview before watch's first pass says there is no such run yet: not an error
            problems = [p for p in problems if "no run named" not in p and "No runs" not in p]
            if problems:
                found["errors"].append(f"{page}: {problems}")
    out.write_text(json.dumps(found, indent=1))


def main(argv: list[str]) -> None:
    kind, args = argv[0], argv[1:]
    if kind == "reader":
        poll_catalog(Path(args[0]), Path(args[1]), Path(args[2]), json.loads(Path(args[3]).read_text()))
    elif kind == "upload":
        upload(args[0], Path(args[1]), args[2])
    elif kind == "writers":
        writers(Path(args[0]), int(args[1]), int(args[2]), float(args[3]))
    elif kind == "cli_reader":
        cli_reader(args[0], args[1], Path(args[2]), Path(args[3]))
    elif kind == "page_reader":
        page_reader(args[0], args[1], Path(args[2]), Path(args[3]))
    else:
        raise SystemExit(f"unknown child kind {kind!r}")


if __name__ == "__main__":
    main(sys.argv[1:])
