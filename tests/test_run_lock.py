"""One writer per run across processes (issue #23, Broken 1): ``ingest.store.run_lock`` through the store's
write entry points, with real processes (the CLI, started together behind a barrier; holders killed with
SIGKILL from outside) on real DuckDB catalogs and Parquet files.

The child processes are this file run as a script (``python tests/test_run_lock.py ROLE ...``): a CLI
started at a barrier, a holder of a run's lock, a reader polling the catalog and the run's rows.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

if __name__ == "__main__":  # a child: the repository on the path, as pytest's rootdir gives it to the tests
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import pytest

from ingest.store import LockHolder, Store, WriterBusy
from ingest.store.layout import run_lock_file

REPO = Path(__file__).resolve().parents[1]
RUN = "live"
RANKS = 8
BATCH_STEPS = 1500
"""Steps per rank in each of the live test's batches: 8 ranks x 1,500 steps x 1 per-rank metric plus 2
run-level metrics = 15,000 rows a batch."""
BATCH_ROWS = RANKS * BATCH_STEPS + 2 * BATCH_STEPS
BATCHES = 2
"""Batches of the live test: the first makes the run (one-pass write), the second a later generation."""


def child_env() -> dict[str, str]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    env.pop("STABSCOPE_CRASH_AT", None)
    return env


def start_child(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, str(Path(__file__).resolve()), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=child_env(),
        cwd=REPO,
    )


def stabscope(*args: str, store: Path, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "ingest", *args, "--store", str(store)]
    return subprocess.run(cmd, capture_output=True, text=True, env=child_env(), cwd=REPO, timeout=timeout, check=False)


def write_batch(shard_dir: Path, batch: int) -> None:
    """Batch ``batch`` of the live run: steps ``[batch * BATCH_STEPS, (batch + 1) * BATCH_STEPS)`` appended
    to each rank's shards as a new segment (what a training job's ShardWriter leaves while it runs)."""
    import numpy as np

    from ingest.store.shards import ShardWriter

    rng = np.random.default_rng(batch)
    steps = np.arange(batch * BATCH_STEPS, (batch + 1) * BATCH_STEPS, dtype=np.int64)
    for rank in range(RANKS):
        with ShardWriter(shard_dir, rank) as writer:
            if rank == 0:
                loss = 3.0 - steps / 1e4 + 0.01 * rng.standard_normal(steps.size)
                writer.write_columns(steps, {"loss": loss, "lr": np.full(steps.size, 1e-3)}, rank=-1)
            writer.write_columns(steps, {"grad_norm_local": 1.0 + 0.1 * rank + 0.01 * rng.standard_normal(steps.size)})


def long_rows(store_path: Path, run: str) -> list[tuple[Any, ...]]:
    table = Store(store_path).read_long(run)
    columns = [table[c].to_pylist() for c in ("step", "rank", "metric", "value")]
    return sorted(zip(*columns, strict=True))


# ------------------------------------------------------------------------------------- children


def child_cli(go: str, *argv: str) -> int:
    """The CLI's ``main(argv)`` started once the file ``go`` exists: every child is ready (its imports
    done) when the barrier falls, so their writes really start together."""
    import ingest.live.watch
    import ingest.services.run_analyses  # the imports a command makes, before the barrier  # noqa: F401
    from ingest.cli import main

    Path(f"{go}.ready-{os.getpid()}").touch()
    while not os.path.exists(go):
        time.sleep(0.005)
    return main(list(argv))


def child_hold(store: str, run: str, seconds: str) -> int:
    """Hold ``run``'s writer lock for ``seconds``, saying so on stdout once it is held."""
    with Store(store).writing(run, wait_s=0):
        print("held", flush=True)
        time.sleep(float(seconds))
    return 0


def child_reader(store: str, run: str, stop: str, out: str) -> int:
    """Poll the run's catalog row and its full long table until the file ``stop`` exists; write each
    observation (catalog rows, rows read, seconds the read took) or error to ``out`` as JSON lines."""
    from ingest.errors import StabScopeError

    opened = Store(store)
    with open(out, "w") as log:
        while not os.path.exists(stop):
            started = time.monotonic()
            try:
                catalog_rows = {r.name: r.n_rows for r in opened.list_runs()}.get(run)
                rows = opened.read_long(run).num_rows if catalog_rows is not None else None
                seen = {"catalog_rows": catalog_rows, "rows": rows, "s": time.monotonic() - started}
            except StabScopeError as exc:
                seen = {"catalog_rows": None, "rows": None, "note": str(exc), "s": time.monotonic() - started}
            except Exception as exc:  # what the test counts: a reader must never fail
                seen = {"error": f"{type(exc).__name__}: {exc}"}
            log.write(json.dumps(seen) + "\n")
            log.flush()
            time.sleep(0.05)
    return 0


# ------------------------------------------------------------------------------------- tests


@pytest.mark.slow
def test_two_watchers_and_a_compact_on_one_run_end_as_one_compact(tmp_path: Path) -> None:
    """Broken 1 of issue #23: two ``watch --once`` and one ``compact`` of one run started together, twice
    as the run grows, while a reader polls the catalog and the run's rows. Before the writer lock,
    two of the three exited with ``FileNotFoundError: .../rankb/u000001.arrow.<hex>.tmp``. Now every
    command exits 0 with no error on stderr, the run equals a one-shot compact of the same shards row for
    row, and the reader never fails, never waits for a writer and only ever reads whole generations."""
    shards, store, reference = tmp_path / "shards", tmp_path / "store", tmp_path / "reference"
    stop, reader_log = tmp_path / "stop-reader", tmp_path / "reader.jsonl"
    reader = start_child("reader", str(store), RUN, str(stop), str(reader_log))
    try:
        for batch in range(BATCHES):
            write_batch(shards, batch)
            go = tmp_path / f"go-{batch}"
            commands = [["watch", str(shards), "--run", RUN, "--once"]] * 2 + [["compact", str(shards), "--run", RUN]]
            writers = [start_child("cli", str(go), *c, "--store", str(store)) for c in commands]
            deadline = time.monotonic() + 120
            while len(list(tmp_path.glob(f"go-{batch}.ready-*"))) < len(writers) and time.monotonic() < deadline:
                time.sleep(0.05)  # every child imported and waiting at the barrier
            go.touch()
            for writer, command in zip(writers, commands, strict=True):
                _out, err = writer.communicate(timeout=180)
                assert writer.returncode == 0, f"{command}: {err}"
                assert "error" not in err.lower() and "Traceback" not in err, f"{command}: {err}"
    finally:
        stop.touch()
        reader.communicate(timeout=60)
    one_shot = stabscope("compact", str(shards), "--run", RUN, store=reference)
    assert one_shot.returncode == 0, one_shot.stderr
    assert Store(store).run_info(RUN).n_rows == BATCHES * BATCH_ROWS
    assert long_rows(store, RUN) == long_rows(reference, RUN)

    seen = [json.loads(line) for line in reader_log.read_text().splitlines()]
    assert [s for s in seen if "error" in s] == []
    reads = [s for s in seen if s["rows"] is not None]
    assert len(reads) >= 10, f"the reader read the run {len(reads)} times"
    # whole generations only: a read holds every row of one pass's batches, as the catalog said
    assert {s["rows"] % BATCH_ROWS for s in reads} == {0}
    assert all(s["rows"] == s["catalog_rows"] or s["rows"] > 0 for s in reads)
    assert [s["rows"] for s in reads] == sorted(s["rows"] for s in reads)  # never back to fewer rows
    assert max(s["s"] for s in seen) < 20, "a read waited (the writers' lock is for writers only)"


@pytest.fixture
def held_run(tmp_path: Path) -> Any:
    """A store with run ``live`` (one batch) whose writer lock another process holds; yields
    (store path, shard dir, holder process). The holder is killed at the end if still alive."""
    shards, store = tmp_path / "shards", tmp_path / "store"
    write_batch(shards, 0)
    first = stabscope("compact", str(shards), "--run", RUN, store=store)
    assert first.returncode == 0, first.stderr
    write_batch(shards, 1)
    holder = start_child("hold", str(store), RUN, "120")
    assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
    yield store, shards, holder
    if holder.poll() is None:
        holder.kill()
    holder.communicate(timeout=30)


@pytest.mark.slow
def test_a_second_writer_waits_then_exits_1_naming_the_holder(held_run: Any) -> None:
    """While another process writes the run, each writing command waits ``--wait`` seconds and exits 1
    with one paragraph: the run, the holder's pid and command, since when, what to do. The run is left
    as it was (delete refused), and reads answer at once."""
    store, shards, holder = held_run
    before = Store(store).run_info(RUN)
    log = shards.parent / "extra.csv"
    log.write_text("step,loss\n1,2.5\n2,2.4\n")
    commands = {
        "compact": ["compact", str(shards), "--run", RUN, "--wait", "1.5"],
        "watch --once": ["watch", str(shards), "--run", RUN, "--once", "--wait", "0.5"],
        "import": ["import", str(log), "--run", RUN, "--wait", "0.5"],
        "delete": ["delete", RUN, "--wait", "0"],
        "meta": ["meta", RUN, "gpus=8", "--wait", "0"],
    }
    for what, argv in commands.items():
        started = time.monotonic()
        done = stabscope(*argv, store=store)
        took = time.monotonic() - started
        assert done.returncode == 1, f"{what}: {done.returncode} {done.stderr}"
        err = done.stderr.strip()
        assert "Traceback" not in err and len(err.splitlines()) == 1, f"{what}: {err}"
        python = Path(sys.executable).name
        assert f"error: run '{RUN}' is being written by pid {holder.pid} ({python} test_run_lock.py hold" in err, err
        assert " since 20" in err and "--wait SECONDS" in err and "locks/run=live.lock" in err, err
        if what == "compact":
            assert re.search(r"; waited [12] s for it to finish", err) and took >= 1.5, err  # --wait first
    after = Store(store)
    assert after.run_info(RUN).n_rows == before.n_rows and after.run_info(RUN).gen == before.gen
    assert "gpus" not in after.run_info(RUN).meta
    started = time.monotonic()
    runs = stabscope("runs", "--json", store=store)
    assert runs.returncode == 0 and [r["name"] for r in json.loads(runs.stdout)] == [RUN], runs.stderr
    assert time.monotonic() - started < 20  # a reader never waits for the writer's lock (120 s here)
    assert Store(store).run_writer(RUN) == LockHolder(holder.pid, _holder_command(store), _since(store))


def _holder_command(store: Path) -> str:
    return str(json.loads(run_lock_file(store, RUN).read_text())["command"])


def _since(store: Path) -> str:
    return str(json.loads(run_lock_file(store, RUN).read_text())["since"])


@pytest.mark.slow
def test_watch_skips_a_pass_while_the_run_is_busy_and_goes_on_once_the_holder_is_killed(held_run: Any) -> None:
    """``watch`` says in one line that it skipped a pass and tries again at the next one; the holder
    killed with SIGKILL leaves no lock behind: the next pass folds in what waited."""
    store, shards, holder = held_run
    cmd = [sys.executable, "-m", "ingest", "watch", str(shards), "--run", RUN, "--interval", "0.5", "--wait", "0.3"]
    watcher = subprocess.Popen(
        [*cmd, "--store", str(store)], stderr=subprocess.PIPE, text=True, env=child_env(), cwd=REPO
    )
    try:
        assert watcher.stderr is not None
        first = watcher.stderr.readline()
        assert first.startswith(f"{RUN}: pass skipped: run '{RUN}' is being written by pid {holder.pid} ("), first
        assert first.rstrip().endswith("trying again in 0.5 s"), first
        os.kill(holder.pid, signal.SIGKILL)
        holder.wait(30)
        folded = ""
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and "+" not in folded:
            folded = watcher.stderr.readline()
        assert folded.startswith(f"{RUN}: +{BATCH_ROWS} rows (generation 2"), folded
    finally:
        watcher.send_signal(signal.SIGINT)
        _, rest = watcher.communicate(timeout=60)
    assert watcher.returncode == 0 and "Traceback" not in rest, rest
    opened = Store(store)
    assert opened.run_info(RUN).n_rows == 2 * BATCH_ROWS and opened.run_info(RUN).status == "finished"
    assert opened.run_writer(RUN) is None


def test_threads_of_one_process_take_turns_and_a_holder_may_write_again(tmp_path: Path) -> None:
    """The dashboard's sessions are threads of one process: one holds a run, another waits for it (or
    gives up, naming this process); the holder's own nested writes (compact -> ensure_run -> analyses)
    take the lock again at once."""
    store = Store(tmp_path / "store")
    taken, release = threading.Event(), threading.Event()

    def hold() -> None:
        with store.writing("r"), store.writing("r"):  # re-entrant
            store.ensure_run("r", "test")  # a write inside a held lock: no wait on itself
            taken.set()
            release.wait(30)

    holder = threading.Thread(target=hold)
    holder.start()
    assert taken.wait(30)
    with pytest.raises(WriterBusy) as busy, store.writing("r", wait_s=0.3):
        pass
    assert busy.value.holder is not None and busy.value.holder.pid == os.getpid()
    assert "run 'r' is being written by pid" in str(busy.value) and "waited" not in busy.value.short
    assert store.run_writer("r") is not None and store.run_writer("other") is None
    threading.Timer(0.5, release.set).start()
    started = time.monotonic()
    with store.writing("r", wait_s=30):
        assert time.monotonic() - started >= 0.3  # it waited for the other thread, then got the run
        store.set_status("r", "live")
    holder.join(30)
    assert store.run_writer("r") is None


def test_a_forked_child_does_not_keep_its_parents_lock(tmp_path: Path) -> None:
    """A child forked while the parent writes (multiprocessing's fork, a harness) neither holds the
    parent's lock (it waits like any process) nor keeps it held once the parent lets it go."""
    store = Store(tmp_path / "store")
    third_done = tmp_path / "third-done"
    decided_r, decided_w = os.pipe()
    with store.writing("r"):
        pid = os.fork()
        if pid == 0:  # the child: the run is the parent's
            code = 4
            try:
                with store.writing("r", wait_s=0):
                    code = 3
            except WriterBusy:
                code = 0
            os.write(decided_w, b"x")
            deadline = time.monotonic() + 60
            while not third_done.exists() and time.monotonic() < deadline:
                time.sleep(0.05)  # alive, with its copy of the parent's descriptors, while a third process writes
            os._exit(code)
        os.read(decided_r, 1)  # the parent holds the run until the child has tried it
    third = start_child("hold", str(tmp_path / "store"), "r", "0")  # the parent let go; the child lives on
    out, err = third.communicate(timeout=120)
    third_done.touch()
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0  # the child found the run busy
    assert third.returncode == 0 and out.strip() == "held", err


def test_analyses_of_a_run_deleted_meanwhile_write_nothing(tmp_path: Path) -> None:
    """The old ``assert row is not None`` in ``write_analysis`` (Broken 2): a run deleted before its
    analyses are written gets no file and no rows, and the call says nothing went wrong."""
    from ingest.long_schema import LONG_SCHEMA

    shards = tmp_path / "shards"
    write_batch(shards, 0)
    store = Store(tmp_path / "store")
    store.compact(RUN, shards)
    gen = store.run_info(RUN).gen
    store.delete_run(RUN)
    spike = {"metric": "loss", "start": 1, "peak": 2, "end": 3, "ratio": 4.0, "recovered": True}
    spike = {**spike, "cause": "data", "confidence": 0.5}
    store.write_analysis(RUN, gen, LONG_SCHEMA.empty_table(), [spike], {"note": "late"})
    assert not store.run_dir(RUN).exists()
    assert not store.has_run(RUN) and store.spikes(RUN) == []


REWRITE_STEPS = 20_000
"""Steps of each rewrite of the rewritten run (4 ranks): a full merge of 80,000 rows each time."""


def rewrite_table(first_step: int) -> Any:
    """4 ranks x ``REWRITE_STEPS`` steps of ``loss`` from ``first_step``, in the long schema."""
    import numpy as np
    import pyarrow as pa

    from ingest.long_schema import LONG_SCHEMA

    steps = np.tile(np.arange(first_step, first_step + REWRITE_STEPS, dtype=np.int64), 4)
    ranks = np.repeat(np.arange(4, dtype=np.int32), REWRITE_STEPS)
    values = np.random.default_rng(first_step).random(steps.size)
    columns = {"rank": ranks, "step": steps, "metric": ["loss"] * steps.size, "value": values}
    return pa.table({**columns, "wall_time": pa.nulls(steps.size, pa.float64())}, schema=LONG_SCHEMA)


def child_rewrite(store: str, run: str, stop: str) -> int:
    """Write ``run`` again and again, each time over steps it has (a full merge, whose commit removes
    the previous generation's files), until the file ``stop`` exists; prints the generations made."""
    opened = Store(store)
    first = 0
    while not os.path.exists(stop):
        first = 5 - first  # 0, 5, 0, 5 ...: every import repeats steps the run holds
        opened.import_table(run, rewrite_table(first), source="test")
    print(opened.run_info(run).gen, flush=True)
    return 0


@pytest.mark.slow
def test_reads_during_full_merges_read_whole_generations_and_never_fail(tmp_path: Path) -> None:
    """A reader never waits for the writer and never fails when the generation it began on is replaced
    and its files removed under it (the read starts again on the new one): a process re-merging a run
    over and over for a few seconds while this one reads the run's rows and series. Before the retry,
    about 1 read in 300 failed with "Cannot open file .../long/g<gen>.parquet"."""
    store_path, stop = tmp_path / "store", tmp_path / "stop"
    store = Store(store_path)
    store.import_table("r", rewrite_table(0), source="test")
    writer = start_child("rewrite", str(store_path), "r", str(stop))
    counts: set[int] = set()
    failures: list[str] = []
    reads, longest = 0, 0.0
    try:
        deadline = time.monotonic() + 8.0
        while time.monotonic() < deadline:
            started = time.monotonic()
            try:
                counts.add(store.read_long("r").num_rows)
                counts.add(4 * store.read_series("r", "loss", rank=0).steps.size)
            except Exception as exc:  # counted: a read must never fail
                failures.append(f"{type(exc).__name__}: {exc}")
            longest = max(longest, time.monotonic() - started)
            reads += 1
    finally:
        stop.touch()
        out, err = writer.communicate(timeout=120)
    assert writer.returncode == 0, err
    assert failures == [], f"{len(failures)} of {reads} reads failed"
    generations = int(out.strip())
    assert generations >= 4, f"the writer made {generations} generations"
    assert reads >= 10 and counts <= {4 * REWRITE_STEPS, 4 * (REWRITE_STEPS + 5)}, (reads, counts)
    assert longest < 20  # a read never waited for the writer


@pytest.mark.slow
def test_the_runs_page_refuses_to_delete_a_run_being_written(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Deleting two runs on the Runs page while another process writes one of them: that one is refused
    at once with who writes it and since when; the other is deleted."""
    from tests.conftest import RunSpec, open_page
    from tests.conftest import write_run as write_spec_run

    store_path = tmp_path / "store"
    monkeypatch.setenv("STABSCOPE_STORE", str(store_path))
    store = Store(store_path)
    for name in ("busy", "free"):
        write_spec_run(store, RunSpec(name=name, per_rank=False))
    holder = start_child("hold", str(store_path), "busy", "120")
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        at = open_page("runs").run()
        at.session_state["runs_table"] = {"selection": {"rows": [0, 1], "columns": []}}
        at.run()
        at.checkbox(key="runs_delete_confirm").check().run()
        at.button(key="runs_delete").click().run()
        assert not at.exception
        refused = [e.value for e in at.error]
        assert len(refused) == 1 and f"run 'busy' is being written by pid {holder.pid} (" in refused[0], refused
        assert "since 20" in refused[0] and refused[0].endswith("Try again when it has finished."), refused
        assert any("Deleted free." in s.value for s in at.success)
        assert [r.name for r in Store(store_path).list_runs()] == ["busy"]
    finally:
        holder.kill()
        holder.communicate(timeout=30)


@pytest.mark.slow
def test_the_upload_page_says_who_writes_the_run_and_imports_once_it_is_free(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The Upload page names the process writing the run it would import into; the import waits for it,
    and goes on as soon as that process is killed (SIGKILL: the lock goes with it)."""
    from tests.conftest import open_page

    store_path = tmp_path / "store"
    monkeypatch.setenv("STABSCOPE_STORE", str(store_path))
    Store(store_path)
    holder = start_child("hold", str(store_path), "up", "120")
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        at = open_page("upload").run()
        at.file_uploader(key="up_files").upload("up.csv", b"step,loss\n1,2.5\n2,2.25\n3,2.0\n", "text/csv").run()
        assert at.text_input(key="up_name").value == "up"
        said = [w.value for w in at.warning]
        assert any(f"Run **up** is being written now by pid {holder.pid} (" in w for w in said), said
        killer = threading.Timer(1.0, os.kill, (holder.pid, signal.SIGKILL))
        killer.start()
        started = time.monotonic()
        at.button(key="up_import").click().run()
        killer.join()
        assert not at.exception and len(at.error) == 0
        assert time.monotonic() - started >= 1.0  # it waited for the holder
        assert "Imported 3 rows into run **up**" in at.success[0].value
        assert Store(store_path).run_info("up").n_rows == 3
    finally:
        if holder.poll() is None:
            holder.kill()
        holder.communicate(timeout=30)


if __name__ == "__main__":
    role, *rest = sys.argv[1:]
    sys.exit({"cli": child_cli, "hold": child_hold, "reader": child_reader, "rewrite": child_rewrite}[role](*rest))
