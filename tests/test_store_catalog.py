"""The store's catalog units of work: the file lock is held for one unit and released after it, errors
roll back, and threads, nested units and several stores of one process take turns."""

from __future__ import annotations

import subprocess
import sys
import threading
from pathlib import Path

import pytest

from ingest.services.run_analyses import open_analysed_store
from ingest.store import Store

REPO = Path(__file__).resolve().parents[1]

_PROBE = """
import sys, duckdb
from ingest.store import queries as q
try:
    con = duckdb.connect(sys.argv[1])
except duckdb.IOException as exc:
    print("locked:", exc)
    sys.exit(3)
print(con.execute(q.GET_SETTING, [sys.argv[2]]).fetchall()[0][0])
"""


def _other_process_reads(store: Store, key: str) -> tuple[int, str]:
    """What another process gets when it opens the catalog now: (exit status, its output)."""
    done = subprocess.run(
        [sys.executable, "-c", _PROBE, str(store.catalog_path), key],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=60,
    )
    return done.returncode, done.stdout.strip()


def test_the_catalog_lock_is_held_only_inside_a_unit_of_work(tmp_path: Path) -> None:
    store = open_analysed_store(tmp_path / "store")
    store.set_setting("colour", "teal")
    assert _other_process_reads(store, "colour") == (0, "teal")  # committed, checkpointed, released
    with store._catalog():
        status, out = _other_process_reads(store, "colour")
        assert status == 3 and "lock" in out
        with store._catalog() as inner:  # a nested unit of the same thread reuses the attachment
            assert inner.execute("SELECT 1").fetchall() == [(1,)]
        assert _other_process_reads(store, "colour")[0] == 3  # still the outer unit's
    assert _other_process_reads(store, "colour") == (0, "teal")


def test_an_error_inside_a_unit_rolls_back_and_releases_the_catalog(tmp_path: Path) -> None:
    store = open_analysed_store(tmp_path / "store")
    store.set_setting("colour", "teal")
    from ingest.store import queries as q

    with pytest.raises(RuntimeError, match="half-way"), store._catalog() as con:
        con.execute("BEGIN TRANSACTION")
        con.execute(q.SET_SETTING, ["colour", "mauve"])
        raise RuntimeError("half-way")
    assert store.get_setting("colour") == "teal"
    assert _other_process_reads(store, "colour") == (0, "teal")
    store.set_setting("colour", "ochre")  # the next unit attaches afresh
    assert _other_process_reads(store, "colour") == (0, "ochre")


def test_threads_and_two_stores_take_turns(tmp_path: Path) -> None:
    stores = [open_analysed_store(tmp_path / "a"), open_analysed_store(tmp_path / "b")]
    errors: list[BaseException] = []

    def work(t: int) -> None:
        try:
            for i in range(15):
                outer, inner = stores[(t + i) % 2], stores[(t + i + 1) % 2]
                with outer._catalog():  # a unit of one store while the other's is opened inside it
                    inner.set_setting(f"t{t}", str(i))
                outer.set_setting(f"t{t}", str(i))
        except BaseException as exc:  # reported below, on the test's thread
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(t,)) for t in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    for store in stores:
        assert [store.get_setting(f"t{t}") for t in range(6)] == ["14"] * 6
        assert _other_process_reads(store, "t0") == (0, "14")


def test_a_unit_waits_for_another_process_that_holds_the_catalog(tmp_path: Path) -> None:
    store = open_analysed_store(tmp_path / "store")
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time, duckdb; c = duckdb.connect(sys.argv[1]); print('held', flush=True); time.sleep(1.5)",
            str(store.catalog_path),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        store.set_setting("colour", "teal")  # retried until the other process lets go
    finally:
        holder.wait(timeout=60)
    assert store.get_setting("colour") == "teal"


def test_two_spellings_of_one_store_share_the_attachment(tmp_path: Path) -> None:
    (tmp_path / "store").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "store")
    a, b = open_analysed_store(tmp_path / "store"), open_analysed_store(tmp_path / "link" / ".." / "link")
    with a._catalog():
        b.set_setting("colour", "teal")  # DuckDB refuses one file attached twice in one database
    assert a.get_setting("colour") == "teal"


_FORK = """
import os, sys, threading, time
from ingest.errors import StabScopeError
from ingest.store import Store

store = Store(sys.argv[1])
store.set_setting("colour", "teal")


def in_child(work) -> int:
    pid = os.fork()
    if pid == 0:
        try:
            os._exit(work())
        except BaseException:
            os._exit(9)
    return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])


def write() -> int:  # the child's own catalog database
    value = store.get_setting("colour")
    store.set_setting("child", "was here")
    return 0 if value == "teal" else 1


def refused() -> int:  # DuckDB's registry says the file is open: a clear error, not a hang
    try:
        store.get_setting("colour")
    except StabScopeError as exc:
        return 3 if "forked" in str(exc) else 4
    return 5


idle = in_child(write)
inside, release = threading.Event(), threading.Event()


def hold() -> None:
    with store._catalog():
        inside.set()
        release.wait(30)


holder = threading.Thread(target=hold)
holder.start()
inside.wait(30)
held = in_child(refused)
release.set()
holder.join()
print(idle, held, store.get_setting("child"), store.get_setting("colour"))
"""


def test_a_forked_child_opens_the_catalog_on_its_own(tmp_path: Path) -> None:
    """A child forked while the store is idle uses its own catalog database (not its parent's);
    one forked during another thread's unit of work gets a clear error, and the parent carries on."""
    done = subprocess.run(
        [sys.executable, "-c", _FORK, str(tmp_path / "store")],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "0 3 was here teal"


def test_the_catalog_database_is_recycled_between_units(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every few thousand units the process starts a new in-memory DuckDB (what DuckDB keeps per
    ATTACH stays bounded), never in the middle of a unit, and the catalog's rows carry over."""
    import ingest.store.catalog as catalog_module

    monkeypatch.setattr(catalog_module, "CATALOG_RECYCLE_UNITS", 3)
    store = open_analysed_store(tmp_path / "store")
    databases = []  # kept alive, so that their ids stay distinct
    for i in range(10):
        with store._catalog():
            database = catalog_module._CATALOGS._db
            with store._catalog():  # a nested unit ends inside the outer one: no recycling there
                assert catalog_module._CATALOGS._db is database
            store.set_setting("count", str(i))
            assert catalog_module._CATALOGS._db is database
        databases.append(database)
    assert len({id(d) for d in databases}) >= 3
    assert store.get_setting("count") == "9"
    assert _other_process_reads(store, "count") == (0, "9")
