"""The store's catalog: ``catalog.duckdb`` (runs, shard offsets, staged batches, events, spikes, settings).

Every unit of work attaches the catalog file to one in-memory DuckDB of the process and detaches it
after, so the file lock is held only for that unit and the app, ``watch`` and the CLI take turns.
Reads are answered from memory while the catalog files are unchanged. A run's row is read by column
name (``queries.RUN_COLUMNS``), and its metadata is changed by one read-modify-write (``change_meta``).
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import duckdb

from ingest.errors import StabScopeError
from ingest.store import queries
from ingest.store.run_info import RunInfo
from ingest.store.storage_errors import damaged_catalog, is_damaged_catalog, is_read_only

if TYPE_CHECKING:
    from ingest.store.generation import GenerationFiles

LOCK_RETRY_S = 20.0
"""Seconds a catalog locked by another process is retried before giving up."""

CATALOG_RECYCLE_UNITS = 5000
"""Catalog units of work a process runs on one in-memory DuckDB before it starts a new one."""


class _CatalogAttacher:
    """Every catalog unit of work of this process, on one in-memory DuckDB: the store's
    ``catalog.duckdb`` is attached for the unit and detached after it.

    A new DuckDB database per unit of work (connect, then close) pays the database's start-up and
    shut-down each time, which is many times an ATTACH and DETACH on a database that stays up (see the
    benchmark); DETACH still checkpoints and releases the file lock for the other processes (``watch``,
    the CLI, the app). One database, and one unit of work at a time (a re-entrant lock), because DuckDB
    refuses the same file in two databases of one process; a nested unit of the same thread reuses the
    attachment.
    """

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._db: duckdb.DuckDBPyConnection | None = None
        self._attached: dict[str, tuple[str, int]] = {}  # real path -> (alias, depth)
        self._aliases = itertools.count()
        self._inherited: list[duckdb.DuckDBPyConnection] = []
        self._units = 0  # units of work on the current database

    def forget_after_fork(self) -> None:
        """In a forked child: start afresh. The parent's database is kept referenced, never closed
        here: closing it would checkpoint a catalog the parent may hold, and its lock may be held by
        a thread the child does not have."""
        if self._db is not None:
            self._inherited.append(self._db)
        self._lock, self._db, self._attached = threading.RLock(), None, {}

    def _database(self) -> duckdb.DuckDBPyConnection:
        if self._db is None:
            self._db = duckdb.connect(config={"threads": 1})
        return self._db

    @contextlib.contextmanager
    def unit(self, path: Path) -> Iterator[duckdb.DuckDBPyConnection]:
        """A connection whose default database is the catalog at ``path``, for one unit of work."""
        key = os.path.realpath(path)  # two spellings of one file are one attachment
        with self._lock:
            db = self._database()
            alias, depth = self._attached.get(key) or (self._attach(db, key), 0)
            self._attached[key] = (alias, depth + 1)
            con = db.cursor()
            try:
                con.execute(f"USE {alias}")
                yield con
            finally:
                con.close()  # rolls back a transaction left open by an error
                alias, depth = self._attached[key]
                if depth > 1:
                    self._attached[key] = (alias, depth - 1)
                else:
                    del self._attached[key]
                    db.execute(f"DETACH {alias}")
                    self._recycle_when_idle()

    def _recycle_when_idle(self) -> None:
        """Start a new database every ``CATALOG_RECYCLE_UNITS`` units, between units: each ATTACH
        leaves DuckDB a few hundred bytes it keeps, which a dashboard serving a live run for weeks
        would otherwise accumulate."""
        self._units += 1
        if self._units >= CATALOG_RECYCLE_UNITS and not self._attached and self._db is not None:
            self._db.close()
            self._db, self._units = None, 0

    def _attach(self, db: duckdb.DuckDBPyConnection, path: str) -> str:
        alias = f"catalog_{next(self._aliases)}"
        deadline = time.monotonic() + LOCK_RETRY_S
        mode = ""
        while True:
            try:
                db.execute(f"ATTACH ? AS {alias}{mode}", [path])
                return alias
            except duckdb.Error as exc:
                if is_damaged_catalog(exc):  # its bytes are wrong: waiting would not help
                    raise damaged_catalog(path, exc) from exc
                if not mode and is_read_only(exc):  # a read-only store is read; its writes are refused
                    mode = " (READ_ONLY)"
                    continue
                if mode:
                    raise StabScopeError(f"cannot open the store catalog {path} even to read it: {exc}") from exc
                if not isinstance(exc, duckdb.IOException | duckdb.ConnectionException):
                    raise self._open_here_already(path, exc) from exc
                if time.monotonic() > deadline:
                    raise StabScopeError(f"cannot open the store catalog {path}: {exc}") from exc
                time.sleep(0.05)

    @staticmethod
    def _open_here_already(path: str, exc: duckdb.Error) -> StabScopeError:
        """The file is in DuckDB's registry of this process already."""
        return StabScopeError(
            f"cannot open the store catalog {path}: DuckDB has it open already in this process "
            f"({exc}). Close any other DuckDB connection to that file; a process forked while "
            "another of its threads was using the store must wait for that thread (or use the "
            "'spawn' start method)"
        )


_CATALOGS = _CatalogAttacher()
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_CATALOGS.forget_after_fork)


@dataclass(frozen=True)
class CatalogSnapshot:
    """Catalog rows as of one catalog state: runs (``LIST_RUNS`` order), and by run name the run's
    row, its event rows (step, kind, label, detail) and its spike details (JSON)."""

    runs: list[tuple[Any, ...]]
    by_name: dict[str, tuple[Any, ...]]
    events: dict[str, list[tuple[Any, ...]]]
    spikes: dict[str, list[str]]


class Catalog:
    """The catalog file at ``path``: units of work, and reads cached while the files are unchanged."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._cache: dict[tuple[str, tuple[Any, ...]], list[tuple[Any, ...]]] = {}
        self._cache_state: tuple[Any, ...] | None = None
        self._cache_lock = threading.Lock()
        self._snapshot: CatalogSnapshot | None = None
        with self.unit() as con:
            for statement in queries.CATALOG_SCHEMA:
                try:
                    con.execute(statement)
                except duckdb.InvalidInputException as exc:
                    if not is_read_only(exc):
                        raise
                    break  # a read-only store: its catalog is read as it is

    @contextlib.contextmanager
    def unit(self) -> Iterator[duckdb.DuckDBPyConnection]:
        """A short-lived catalog connection for one unit of work (always read-write: units of work
        are one at a time in a process, so a read-only one would buy nothing); a lock held by another
        process is retried for ``LOCK_RETRY_S``."""
        with _CATALOGS.unit(self.path) as con:
            yield con

    def _state(self) -> tuple[Any, ...]:
        """What changes whenever any process commits to the catalog: identity, size and modification
        time of the database file and of its write-ahead log."""
        state: list[Any] = []
        for path in (self.path, self.path.with_name(self.path.name + ".wal")):
            try:
                st = path.stat()
            except FileNotFoundError:
                state.append(None)
                continue
            state.append((st.st_ino, st.st_size, st.st_mtime_ns))
        return tuple(state)

    def read(self, *statements: tuple[str, Sequence[Any]]) -> list[list[tuple[Any, ...]]]:
        """Rows of each catalog query, answered from memory while the catalog files are unchanged.

        Reading the catalog takes a unit of work (attach, queries, detach, so that other processes
        can write in between), and a page asks for the same rows several times per rerun; the queries
        missing from memory run together in one unit. Any commit, by any process, changes the files'
        state and empties the cache.
        """
        state = self._state()
        keys = [(sql, tuple(params)) for sql, params in statements]
        with self._cache_lock:
            if state != self._cache_state:
                self._cache, self._cache_state = {}, state
            found = {k: self._cache[k] for k in keys if k in self._cache}
        missing = [k for k in dict.fromkeys(keys) if k not in found]
        if missing:
            with self.unit() as con:
                for sql, params in missing:
                    found[(sql, params)] = con.execute(sql, list(params)).fetchall()
            with self._cache_lock:
                if state == self._cache_state:
                    self._cache.update({k: found[k] for k in missing})
        return [found[k] for k in keys]

    def snapshot(self) -> CatalogSnapshot:
        """Every run's catalog row, events and spikes, read in one unit of work and kept while the
        catalog is unchanged: opening a run page costs one catalog unit, not one per call."""
        runs, events, spikes = self.read((queries.LIST_RUNS, ()), (queries.ALL_EVENTS, ()), (queries.ALL_SPIKES, ()))
        with self._cache_lock:
            snapshot = self._snapshot
            if snapshot is not None and snapshot.runs is runs:
                return snapshot
        by_run_events: dict[str, list[tuple[Any, ...]]] = {}
        for row in events:
            by_run_events.setdefault(row[0], []).append(row[1:])
        by_run_spikes: dict[str, list[str]] = {}
        for run, detail in spikes:
            by_run_spikes.setdefault(run, []).append(detail)
        snapshot = CatalogSnapshot(runs, {r[0]: r for r in runs}, by_run_events, by_run_spikes)
        with self._cache_lock:
            self._snapshot = snapshot
        return snapshot

    def staged_files(self, name: str) -> list[str]:
        """The staged batches of run ``name`` not merged yet, oldest first."""
        with self.unit() as con:
            return [r[0] for r in con.execute(queries.GET_STAGED, [name]).fetchall()]


def fetch_one(cursor: duckdb.DuckDBPyConnection) -> tuple[Any, ...] | None:
    """The first row of a result, consuming the rest (DuckDB wants results finished before reuse)."""
    rows = cursor.fetchall()
    return rows[0] if rows else None


def run_row(row: tuple[Any, ...]) -> dict[str, Any]:
    """A ``LIST_RUNS``/``GET_RUN`` row by column name."""
    return dict(zip(queries.RUN_COLUMNS, row, strict=True))


def run_info_of(row: tuple[Any, ...]) -> RunInfo:
    """The ``RunInfo`` of a ``LIST_RUNS``/``GET_RUN`` row."""
    col = run_row(row)
    return RunInfo(
        name=col["name"],
        created=col["created"],
        updated=col["updated"],
        source=col["source"],
        status=col["status"],
        gen=int(col["gen"]),
        first_step=None if col["first_step"] is None else int(col["first_step"]),
        last_step=None if col["last_step"] is None else int(col["last_step"]),
        n_steps=int(col["n_steps"]),
        n_rows=int(col["n_rows"]),
        ranks=int(col["ranks"]),
        metrics=json.loads(col["metrics"]),
        rank_metrics=json.loads(col["rank_metrics"]),
        meta=json.loads(col["meta"]),
        rejected=int(col["rejected"]),
        rejected_examples=json.loads(col["rejected_examples"]),
        heat_bucket=int(col["heat_bucket"]),
        analysis_gen=int(col["analysis_gen"]),
        # NULL in catalogs written before delta parts existed: no deltas, the base is ``gen``
        base_gen=int(col["gen"]) if col["base_gen"] is None else int(col["base_gen"]),
    )


def read_run_row(con: duckdb.DuckDBPyConnection, name: str) -> dict[str, Any]:
    """Run ``name``'s row by column name, inside the caller's unit of work (the run must exist)."""
    row = fetch_one(con.execute(queries.GET_RUN, [name]))
    if row is None:
        raise StabScopeError(f"no run named {name!r} in the catalog")
    return run_row(row)


def change_meta(con: duckdb.DuckDBPyConnection, name: str, change: Callable[[dict[str, Any]], dict[str, Any]]) -> None:
    """Replace run ``name``'s metadata with ``change(current metadata)``, inside the caller's unit of
    work (and its transaction, if one is open): the one read-modify-write of a run's metadata."""
    meta = change(json.loads(read_run_row(con, name)["meta"]))
    con.execute(queries.UPDATE_RUN_META, [json.dumps(meta, default=str), name])


def delete_run_rows(con: duckdb.DuckDBPyConnection, name: str) -> None:
    """Remove every catalog row of run ``name`` (inside the caller's transaction)."""
    for statement in (
        queries.DELETE_RUN,
        queries.DELETE_RUN_OFFSETS,
        queries.DELETE_RUN_STAGED,
        queries.DELETE_RUN_EVENTS,
        queries.DELETE_RUN_SPIKES,
    ):
        con.execute(statement, [name])


def commit_generation(
    con: duckdb.DuckDBPyConnection, name: str, gen: int, files: GenerationFiles, base_gen: int | None = None
) -> None:
    """Make ``gen`` current (inside the caller's transaction) with its catalog figures: a full
    generation, or (``base_gen`` < ``gen``) a delta part on base ``base_gen``."""
    metrics = sorted(m for m, _ in files.metric_rows)
    rank_metrics = sorted(m for m, per_rank in files.metric_rows if per_rank)
    con.execute(
        queries.COMMIT_GENERATION,
        [
            gen,
            gen if base_gen is None else base_gen,
            files.first,
            files.last,
            files.n_steps,
            files.n_rows,
            files.ranks,
            json.dumps(metrics),
            json.dumps(rank_metrics),
            files.width,
            name,
        ],
    )
