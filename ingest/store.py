"""The run store: per-rank shards and imported logs -> Parquet, catalogued and queried through DuckDB.

On disk (``<store>`` defaults to ``$STABSCOPE_STORE`` or ``~/.local/share/stabscope/store``)::

    catalog.duckdb                        runs, shard offsets, staged batches, events, spikes
    runs/run=<name>/long/g<gen>.parquet   (rank, step, metric, value, wall_time) in blocks of one
                                          (metric, rank) sorted by step; the footer's index gives each
                                          block's rows (merged generations: metric/rank/step order;
                                          a first generation written in one pass: rank/metric order)
    runs/run=<name>/runlevel/g<gen>.parquet the rank -1 rows of the long file (what the overview reads)
    runs/run=<name>/rollup/g<gen>.parquet cross-rank count/mean/min/max/std/argmin/argmax per step
    runs/run=<name>/rankb/g<gen>.parquet  per-rank step buckets for the rank x step heatmap
    runs/run=<name>/tail/g<gen>.parquet   a full generation's last rows of each (metric, rank >= 0)
    runs/run=<name>/derived/a<gen>.parquet analyses materialised per generation (SNR, clip ratio)
    runs/run=<name>/staging/*.parquet     batches read from shards, not yet merged

A generation is a base (the files of generation ``base_gen``) plus one delta part per later
generation up to ``gen``: a live fold that only extends each (metric, rank) writes just its rows
and what they change (see "delta parts" below); anything else merges everything into a new base.

Every write is two-phase: new files are written under temporary names and renamed, then one catalog
transaction makes them current. A crash at any point leaves the previous generation readable, and the
next run finishes the work (files no transaction refers to are garbage).
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import queue
import re
import shutil
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Final, NamedTuple

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from ingest import queries as q
from ingest.errors import StabScopeError
from ingest.paths import default_store_path
from ingest.run_info import RunInfo
from ingest.run_meta import merge_meta
from ingest.shards import (
    LONG_SCHEMA,
    PART_SCHEMA,
    SegmentRead,
    list_segments,
    null_floats,
    read_segment,
    wide_to_long_parts,
)
from stab_core.metrics import RUN_RANK
from stab_core.runview import RankMatrix, RunEvent, RunView, Series

ProgressFn = Callable[[int, int], None]
"""``progress(done, total)``: called as long work advances (bytes or rows)."""

STAGE_ROWS = 2_000_000
"""Rows buffered before a staging Parquet file is written: bounds compaction memory (~100 MB)."""

HEATMAP_MAX_BUCKETS = 4096
"""Per-rank buckets materialised at compaction; a heatmap of up to this many columns needs no raw scan."""

_RUN_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
_LOCK_RETRY_S = 20.0


def validate_run_name(name: str) -> str:
    """Return ``name`` if it is a safe run name (letters, digits, ``._-``; no separators, no ``..``)."""
    if not isinstance(name, str) or not _RUN_NAME.match(name) or ".." in name:
        raise StabScopeError(
            f"invalid run name {name!r}: use 1-128 letters, digits, '.', '_' or '-', starting with a "
            "letter or digit (no path separators, no '..')"
        )
    return name


def _failpoint(stage: str) -> None:
    """Crash here when ``STABSCOPE_CRASH_AT`` names this stage: the crash-safety tests use it."""
    if os.environ.get("STABSCOPE_CRASH_AT") == stage:
        os._exit(137)


@dataclass
class SeriesData:
    """A series as read for display.

    Full fidelity: ``min``/``max`` equal ``values`` for a run-level series, or hold the cross-rank
    band for a per-rank one. Downsampled (``bucketed``): one point per bucket with the bucket's mean
    in ``values`` and its extremes in ``min``/``max`` (at ``min_step``/``max_step``), so a
    single-step spike survives any number of buckets.
    """

    metric: str
    steps: np.ndarray
    values: np.ndarray
    min: np.ndarray
    max: np.ndarray
    source: str
    bucketed: bool
    min_step: np.ndarray | None = None
    max_step: np.ndarray | None = None
    n_nonfinite: np.ndarray | None = None


@dataclass
class IngestReport:
    """What a compaction or import did: rows folded in, records rejected (with where), torn tails."""

    run: str
    rows: int = 0
    frames: int = 0
    segments: int = 0
    rejected: int = 0
    rejected_examples: list[str] = field(default_factory=list)
    torn: list[str] = field(default_factory=list)
    events: int = 0
    gen: int = 0

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


class _CatalogAttacher:
    """Every catalog unit of work of this process, on one in-memory DuckDB: the store's
    ``catalog.duckdb`` is attached for the unit and detached after it.

    A new DuckDB database per unit of work (connect, then close) paid the database's start-up and
    shut-down each time (~30 ms and ~7 ms on a 2-core VM; ~10-40 ms per page read on others);
    ATTACH and DETACH on a database that stays up take ~1 ms each, and DETACH still checkpoints and
    releases the file lock for the other processes (``watch``, the CLI, the app). One database, and
    one unit of work at a time (a re-entrant lock), because DuckDB refuses the same file in two
    databases of one process; a nested unit of the same thread reuses the attachment.
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
        leaves DuckDB a few hundred bytes it keeps (+8 MiB over 40,000 units), which a dashboard
        serving a live run for weeks would otherwise accumulate."""
        self._units += 1
        if self._units >= CATALOG_RECYCLE_UNITS and not self._attached and self._db is not None:
            self._db.close()
            self._db, self._units = None, 0

    def _attach(self, db: duckdb.DuckDBPyConnection, path: str) -> str:
        alias = f"catalog_{next(self._aliases)}"
        deadline = time.monotonic() + _LOCK_RETRY_S
        while True:
            try:
                db.execute(f"ATTACH ? AS {alias}", [path])
                return alias
            except (duckdb.IOException, duckdb.ConnectionException) as exc:
                if time.monotonic() > deadline:
                    raise StabScopeError(f"cannot open the store catalog {path}: {exc}") from exc
                time.sleep(0.05)
            except duckdb.Error as exc:  # the file is in DuckDB's registry of this process already
                raise StabScopeError(
                    f"cannot open the store catalog {path}: DuckDB has it open already in this process "
                    f"({exc}). Close any other DuckDB connection to that file; a process forked while "
                    "another of its threads was using the store must wait for that thread (or use the "
                    "'spawn' start method)"
                ) from exc


CATALOG_RECYCLE_UNITS = 5000
"""Catalog units of work a process runs on one in-memory DuckDB before it starts a new one."""

_CATALOGS = _CatalogAttacher()
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_CATALOGS.forget_after_fork)


GenerationHook = Callable[["Store", str], None]
"""Called with the store and a run's name after each new generation of that run is published (and on
recovery, and after a metadata change): ``ingest.run_analyses.materialise`` is the one the product passes."""


def open_store(root: str | os.PathLike[str] | None = None, *, on_generation: GenerationHook | None = None) -> Store:
    """The store at ``root`` (default: ``$STABSCOPE_STORE`` or the embedded default). Without
    ``on_generation`` nothing is computed after a merge; ``ingest.run_analyses.open_analysed_store`` passes
    the analyses."""
    return Store(root, on_generation=on_generation)


class Store:
    """A StabScope store rooted at a directory (created on first use). ``on_generation`` runs after each
    new generation of a run (see :data:`GenerationHook`)."""

    def __init__(
        self,
        root: str | os.PathLike[str] | None = None,
        *,
        on_generation: GenerationHook | None = None,
    ) -> None:
        self.root = Path(root).expanduser() if root is not None else default_store_path()
        self._on_generation = on_generation
        self.root.mkdir(parents=True, exist_ok=True)
        self.catalog_path = self.root / "catalog.duckdb"
        self._local = threading.local()
        self._read_cache: dict[tuple[str, tuple[Any, ...]], list[tuple[Any, ...]]] = {}
        self._read_cache_key: tuple[Any, ...] | None = None
        self._read_cache_lock = threading.Lock()
        self._snapshot_cache: _CatalogSnapshot | None = None
        self._blocks_cache: dict[str, dict[tuple[str, int], list[_Piece]]] = {}
        self._derived_cache: dict[str, frozenset[str]] = {}
        with self._catalog() as con:
            for statement in q.CATALOG_SCHEMA:
                con.execute(statement)

    # ------------------------------------------------------------------ connections

    @contextlib.contextmanager
    def _catalog(self, read_only: bool = False) -> Iterator[duckdb.DuckDBPyConnection]:
        """A short-lived catalog connection: the file lock is held only for one unit of work, so the
        app, ``watch`` and the CLI take turns; a lock held by another process is retried for 20 s.

        The catalog is attached to one in-memory DuckDB of the process for the unit of work and
        detached after it (:class:`_CatalogAttacher`), which releases the lock as closing a
        connection would: opening and closing a connection per unit of work cost ~30-45 ms of
        database start-up and shut-down, attaching ~2 ms. Always read-write (``read_only``
        documents intent only): a unit of work is one at a time in a process.
        """
        del read_only
        with _CATALOGS.unit(self.catalog_path) as con:
            yield con

    def _catalog_state(self) -> tuple[Any, ...]:
        """What changes whenever any process commits to the catalog: identity, size and modification
        time of the database file and of its write-ahead log."""
        state: list[Any] = []
        for path in (self.catalog_path, self.catalog_path.with_name(self.catalog_path.name + ".wal")):
            try:
                st = path.stat()
            except FileNotFoundError:
                state.append(None)
                continue
            state.append((st.st_ino, st.st_size, st.st_mtime_ns))
        return tuple(state)

    def _read(self, *queries: tuple[str, Sequence[Any]]) -> list[list[tuple[Any, ...]]]:
        """Rows of each catalog query, answered from memory while the catalog files are unchanged.

        Reading the catalog takes a unit of work (attach, queries, detach: ~10 ms on a 2-core VM,
        so that other processes can write in between), and a page asks for the same rows several
        times per rerun; the queries missing from memory run together in one unit. Any commit, by
        any process, changes the files' state and empties the cache.
        """
        state = self._catalog_state()
        keys = [(sql, tuple(params)) for sql, params in queries]
        with self._read_cache_lock:
            if state != self._read_cache_key:
                self._read_cache, self._read_cache_key = {}, state
            found = {k: self._read_cache[k] for k in keys if k in self._read_cache}
        missing = [k for k in dict.fromkeys(keys) if k not in found]
        if missing:
            with self._catalog(read_only=True) as con:
                for sql, params in missing:
                    found[(sql, params)] = con.execute(sql, list(params)).fetchall()
            with self._read_cache_lock:
                if state == self._read_cache_key:
                    self._read_cache.update({k: found[k] for k in missing})
        return [found[k] for k in keys]

    def _snapshot(self) -> _CatalogSnapshot:
        """Every run's catalog row, events and spikes, read on one connection and kept while the
        catalog is unchanged: opening a run page costs one catalog connection, not one per call."""
        runs, events, spikes = self._read((q.LIST_RUNS, ()), (q.ALL_EVENTS, ()), (q.ALL_SPIKES, ()))
        with self._read_cache_lock:
            snapshot = self._snapshot_cache
            if snapshot is not None and snapshot.runs is runs:
                return snapshot
        by_run_events: dict[str, list[tuple[Any, ...]]] = {}
        for row in events:
            by_run_events.setdefault(row[0], []).append(row[1:])
        by_run_spikes: dict[str, list[str]] = {}
        for run, detail in spikes:
            by_run_spikes.setdefault(run, []).append(detail)
        snapshot = _CatalogSnapshot(runs, {r[0]: r for r in runs}, by_run_events, by_run_spikes)
        with self._read_cache_lock:
            self._snapshot_cache = snapshot
        return snapshot

    def _engine(self) -> duckdb.DuckDBPyConnection:
        """An in-memory DuckDB per thread for Parquet reads (no catalog lock involved)."""
        con = getattr(self._local, "engine", None)
        if con is None:
            con = duckdb.connect()
            tmp = self.root / "tmp"
            tmp.mkdir(exist_ok=True)
            con.execute("SET temp_directory = ?", [str(tmp)])
            con.execute("SET memory_limit = '3GB'")
            con.execute("SET preserve_insertion_order = false")
            # Files of a generation never change (a new generation has new names): their footers
            # can be parsed once per connection instead of once per query.
            con.execute("SET parquet_metadata_cache = true")
            self._local.engine = con
        return con

    def _arrow(self, sql: str, params: dict[str, Any]) -> pa.Table:
        """Run a named parameterised query on the Parquet engine and return an Arrow table."""
        table: pa.Table = self._engine().sql(sql, params=params).to_arrow_table()
        return table

    # ------------------------------------------------------------------ catalog reads

    def list_runs(self) -> list[RunInfo]:
        """Every run in the catalog, oldest first."""
        return [_run_info(r) for r in self._snapshot().runs]

    def has_run(self, name: str) -> bool:
        """True when the catalog holds ``name`` (validated first)."""
        validate_run_name(name)
        return name in self._snapshot().by_name

    def run_info(self, name: str) -> RunInfo:
        """The catalog row of ``name``; a clear error when there is no such run."""
        validate_run_name(name)
        row = self._snapshot().by_name.get(name)
        if row is None:
            known = ", ".join(r.name for r in self.list_runs()[:10]) or "none"
            raise StabScopeError(f"no run named {name!r} in store {self.root} (runs: {known})")
        return _run_info(row)

    def events(self, name: str) -> list[RunEvent]:
        """Run events (schedule transitions, checkpoints, rollbacks, data switches) by step."""
        validate_run_name(name)
        rows = self._snapshot().events.get(name, [])
        return [RunEvent(int(s), str(k), str(lbl), json.loads(d)) for s, k, lbl, d in rows]

    def spikes(self, name: str) -> list[dict[str, Any]]:
        """The materialised spike events of ``name`` (the ``stabscope spikes --json`` objects)."""
        validate_run_name(name)
        return [json.loads(detail) for detail in self._snapshot().spikes.get(name, [])]

    def spike_summary(self) -> dict[str, dict[str, Any]]:
        """Per run: number of spikes, worst ratio, whether any diverged."""
        rows = self._read((q.SPIKE_SUMMARY, ()))[0]
        return {r[0]: {"n_spikes": int(r[1]), "worst_ratio": r[2], "any_diverged": bool(r[3])} for r in rows}

    def get_setting(self, key: str) -> str | None:
        rows = self._read((q.GET_SETTING, (key,)))[0]
        return str(rows[0][0]) if rows else None

    def set_setting(self, key: str, value: str) -> None:
        with self._catalog() as con:
            con.execute(q.SET_SETTING, [key, value])

    # ------------------------------------------------------------------ paths

    def run_dir(self, name: str) -> Path:
        return self.root / "runs" / f"run={validate_run_name(name)}"

    def _files(self, name: str, kind: str, gen: int) -> list[str]:
        prefix = "a" if kind == "derived" else "g"
        path = self.run_dir(name) / kind / f"{prefix}{gen:06d}.parquet"
        return [str(path)] if path.exists() else []

    def _part_files(self, info: RunInfo, kind: str) -> list[str]:
        """The ``kind`` files of the current generation: its base's, then each delta part's, in order."""
        if info.gen == 0:
            return []
        return [f for g in range(min(info.base_gen, info.gen), info.gen + 1) for f in self._files(info.name, kind, g)]

    # ------------------------------------------------------------------ writes

    def ensure_run(self, name: str, source: str, meta: dict[str, Any] | None = None) -> RunInfo:
        """Create the catalog row for ``name`` if absent; merge ``meta`` into its metadata."""
        validate_run_name(name)
        with self._catalog() as con:
            row = _one(con.execute(q.GET_RUN, [name]))
            if row is None:
                con.execute(q.INSERT_RUN, [name, source, "finished", json.dumps(meta or {}, default=str)])
            elif meta:
                merged = merge_meta(json.loads(row[13]), meta)
                con.execute(q.UPDATE_RUN_META, [json.dumps(merged, default=str), name])
        return self.run_info(name)

    def update_meta(self, name: str, updates: dict[str, Any], remove: Sequence[str] = ()) -> RunInfo:
        """Set the user's metadata of run ``name`` (validated values, see ``ingest.run_meta``) and delete
        the keys in ``remove``. The keys are recorded as the user's, so a later import's parsed values do
        not replace them; the analyses re-run, since spikes and diagnosis read ``max_norm``, ``precision``
        and ``num_experts``."""
        self.run_info(name)
        with self._catalog() as con:
            con.execute("BEGIN TRANSACTION")
            row = _one(con.execute(q.GET_RUN, [name]))
            assert row is not None
            merged = merge_meta(json.loads(row[13]), updates, by_user=True, remove=remove)
            con.execute(q.UPDATE_RUN_META, [json.dumps(merged, default=str), name])
            con.execute(q.SET_ANALYSIS_GEN, [0, name])  # materialise recomputes when analysis_gen != gen
            con.execute("COMMIT")
        self._materialise_analysis(name)
        return self.run_info(name)

    def compact(
        self,
        name: str,
        shard_dir: str | os.PathLike[str],
        *,
        progress: ProgressFn | None = None,
        status: str = "finished",
    ) -> IngestReport:
        """Fold every new frame of ``shard_dir``'s segments into run ``name``.

        Idempotent (byte offsets per segment are committed with the staged data, so a second pass
        adds nothing); streaming (at most ``STAGE_ROWS`` rows are held); atomic (see module doc).
        """
        shard_root = Path(shard_dir)
        if not shard_root.is_dir():
            raise StabScopeError(f"shard directory {shard_root} does not exist or is not a directory")
        segments = list_segments(shard_root)
        if not segments and not self.has_run(name):
            raise StabScopeError(
                f"no shard segments (rank-*/*.ssf) under {shard_root}: is this a shard directory? "
                "To import a log file use `stabscope import`."
            )
        self.ensure_run(name, f"shards:{shard_root.resolve()}")
        self._finish_pending(name)
        with self._catalog(read_only=True) as con:
            offsets = {f: int(o) for f, o in con.execute(q.GET_OFFSETS, [name]).fetchall()}
        keyed = [(p, str(p.resolve())) for p in segments]
        todo = [(p, key, offsets.get(key, 0)) for p, key in keyed if p.stat().st_size > offsets.get(key, 0)]
        if todo and self.run_info(name).gen == 0:
            try:
                return self._compact_direct(name, segments, todo, progress, status)
            except _NotAppendOnly:
                pass  # repeated or out-of-order records: the staged merge sorts them out
        report = IngestReport(run=name, segments=len(segments))
        stager = _Stager(self, name)
        folded = _Folded()
        for parts in _segment_parts(todo, report, folded, progress):
            stager.add_parts(parts)
        staged = stager.finish()
        report.rows = stager.rows
        report.events = len(folded.events)
        _failpoint("after_stage_files")
        self._commit_stage(name, staged, folded, report, status)
        _failpoint("after_stage_commit")
        report.gen = self._merge(name)
        return report

    def _compact_direct(
        self,
        name: str,
        segments: list[Path],
        todo: list[tuple[Path, str, int]],
        progress: ProgressFn | None,
        status: str,
    ) -> IngestReport:
        """The first generation of a run whose records arrive in order (each (metric, rank) strictly
        ascending in steps, ranks in ascending order): written in one pass, without staging, in
        blocks of (rank, metric). Raises ``_NotAppendOnly`` (having written nothing that counts)
        when the input is not like that."""
        report = IngestReport(run=name, segments=len(segments))
        folded = _Folded()
        merger = _DirectMerger(self.run_dir(name), gen=1)
        try:
            for parts in _segment_parts(todo, report, folded, progress):
                merger.add(parts)
            merged = merger.finish()
        except BaseException:
            merger.abort()
            raise
        report.rows = merged.n_rows
        report.events = len(folded.events)
        _failpoint("after_stage_files")
        _failpoint("after_merge_files")
        for tmp in merged.paths():
            tmp.rename(_final_path(tmp))
        self._commit_stage(name, [], folded, report, status, (1, merged))
        _failpoint("after_stage_commit")
        _failpoint("after_merge_commit")
        report.gen = 1
        self._collect_garbage(name)
        self._materialise_analysis(name)
        return report

    def import_table(
        self,
        name: str,
        table: pa.Table,
        *,
        source: str,
        events: Sequence[RunEvent] = (),
        meta: dict[str, Any] | None = None,
        rejected: int = 0,
        rejected_examples: Sequence[str] = (),
    ) -> IngestReport:
        """Add a long-form table (``LONG_SCHEMA``) to run ``name`` (created if absent), atomically."""
        validate_run_name(name)
        table = _conform_long(table)
        self.ensure_run(name, source)
        self._finish_pending(name)
        stager = _Stager(self, name)
        stager.add(table)
        staged = stager.finish()
        report = IngestReport(
            run=name,
            rows=stager.rows,
            rejected=rejected,
            rejected_examples=list(rejected_examples)[:5],
            events=len(events),
        )
        ev = [{"step": e.step, "kind": e.kind, "label": e.label, "detail": e.detail} for e in events]
        self._commit_stage(name, staged, _Folded(events=ev, meta=dict(meta or {})), report, "finished")
        report.gen = self._merge(name)
        return report

    def import_parsed(self, name: str, parsed: Any) -> IngestReport:
        """Store a ``ingest.formats.ParsedLog`` as run ``name``."""
        from ingest.configs import meta_with_config_facts  # local: yaml/toml only load for an import

        examples = skipped_example_texts(parsed)
        return self.import_table(
            name,
            parsed.table,
            source=f"import:{parsed.format}:" + ",".join(parsed.source_files),
            events=parsed.events,
            meta=meta_with_config_facts(parsed.meta),
            rejected=parsed.skipped,
            rejected_examples=examples,
        )

    def set_status(self, name: str, status: str) -> None:
        validate_run_name(name)
        with self._catalog() as con:
            con.execute(q.UPDATE_RUN_STATUS, [status, name])

    def delete_run(self, name: str) -> None:
        """Remove a run: catalog rows first (so readers stop seeing it), then its files."""
        self.run_info(name)
        with self._catalog() as con:
            con.execute("BEGIN TRANSACTION")
            for statement in (
                q.DELETE_RUN,
                q.DELETE_RUN_OFFSETS,
                q.DELETE_RUN_STAGED,
                q.DELETE_RUN_EVENTS,
                q.DELETE_RUN_SPIKES,
            ):
                con.execute(statement, [name])
            con.execute("COMMIT")
        shutil.rmtree(self.run_dir(name), ignore_errors=True)

    def _commit_stage(
        self,
        name: str,
        staged: list[str],
        folded: _Folded,
        report: IngestReport,
        status: str,
        generation: tuple[int, _MergeResult] | None = None,
    ) -> None:
        """One transaction: staged files (or a whole new ``generation``), shard offsets, events,
        metadata, rejected records and status."""
        with self._catalog() as con:
            con.execute("BEGIN TRANSACTION")
            seq = int(_one(con.execute(q.NEXT_STAGED_SEQ, [name]))[0])  # type: ignore[index]
            for i, path in enumerate(staged):
                con.execute(q.ADD_STAGED, [name, path, seq + i])
            for path, off in folded.offsets.items():
                con.execute(q.UPSERT_OFFSET, [name, path, off])
            for e in folded.events:
                con.execute(
                    q.ADD_EVENT,
                    [name, e["step"], e["kind"], e["label"], json.dumps(e["detail"], default=str)],
                )
            row = _one(con.execute(q.GET_RUN, [name]))
            assert row is not None
            if folded.meta:
                merged = merge_meta(json.loads(row[13]), folded.meta)
                con.execute(q.UPDATE_RUN_META, [json.dumps(merged, default=str), name])
            if report.rejected:
                examples = (json.loads(row[15]) + report.rejected_examples)[:20]
                con.execute(q.ADD_REJECTED, [report.rejected, json.dumps(examples), name])
            con.execute(q.UPDATE_RUN_STATUS, [status, name])
            if generation is not None:
                _commit_generation(con, name, *generation)
            con.execute("COMMIT")

    def _finish_pending(self, name: str) -> None:
        """Complete a merge a crash interrupted, and remove files no transaction refers to."""
        with self._catalog(read_only=True) as con:
            staged = [r[0] for r in con.execute(q.GET_STAGED, [name]).fetchall()]
        if staged:
            self._merge(name)
        self._collect_garbage(name)
        self._materialise_analysis(name)  # a no-op unless a crash came between merge and analyses

    def _collect_garbage(self, name: str) -> None:
        info = self.run_info(name)
        with self._catalog(read_only=True) as con:
            staged = {r[0] for r in con.execute(q.GET_STAGED, [name]).fetchall()}
        parts = range(min(info.base_gen, info.gen), info.gen + 1)
        keep = {f"g{g:06d}.parquet" for g in parts} | {f"a{info.analysis_gen:06d}.parquet"}
        run_dir = self.run_dir(name)
        for kind in ("long", "runlevel", "rollup", "rankb", "tail", "derived", "staging"):
            folder = run_dir / kind
            if not folder.is_dir():
                continue
            for path in folder.iterdir():
                if path.name not in keep and str(path) not in staged:
                    path.unlink(missing_ok=True)

    def _merge(self, name: str) -> int:
        """Fold staged batches into a new generation: a delta part on the current base when the
        staged rows only extend each (metric, rank) past its last step (see ``_write_delta``), else
        a full merge of the base, its deltas and the staged rows into new long, rollup and
        rank-bucket files (which also consolidates the deltas)."""
        info = self.run_info(name)
        with self._catalog(read_only=True) as con:
            staged = [r[0] for r in con.execute(q.GET_STAGED, [name]).fetchall()]
        if not staged:
            return info.gen
        gen = info.gen + 1
        parts = [(long, next(iter(self._files(name, "tail", g)), None)) for g, long in self._part_gens(info)]
        merged = _write_delta(self._engine(), info, parts, staged, self.run_dir(name), gen) if parts else None
        if merged is not None:
            base_gen = info.base_gen
            _failpoint("after_delta_files")
        else:
            base_gen = gen
            sources = [long for long, _ in parts] + staged
            merged = _merge_sources(self._engine(), sources, self.run_dir(name), gen)
            _failpoint("after_merge_files")
        for tmp in merged.paths():
            tmp.rename(_final_path(tmp))
        with self._catalog() as con:
            con.execute("BEGIN TRANSACTION")
            _commit_generation(con, name, gen, merged, base_gen)
            con.execute(q.CLEAR_STAGED, [name])
            con.execute("COMMIT")
        _failpoint("after_delta_commit" if base_gen != gen else "after_merge_commit")
        self._collect_garbage(name)
        self._materialise_analysis(name)
        return gen

    def _part_gens(self, info: RunInfo) -> list[tuple[int, str]]:
        """``(generation, long file)`` of the current base and each of its delta parts."""
        if info.gen == 0:
            return []
        return [
            (g, f) for g in range(min(info.base_gen, info.gen), info.gen + 1) for f in self._files(info.name, "long", g)
        ]

    # ------------------------------------------------------------------ analyses

    def _materialise_analysis(self, name: str) -> None:
        """Run the ``on_generation`` hook (the analyses, ``ingest.run_analyses.materialise``) on ``name``."""
        if self._on_generation is not None:
            self._on_generation(self, name)

    def write_analysis(
        self,
        name: str,
        gen: int,
        derived: pa.Table,
        spikes: Sequence[dict[str, Any]],
        summary: dict[str, Any] | None = None,
    ) -> None:
        """Atomically replace ``name``'s derived series, spike events and ``meta['analysis']`` (``summary``)
        with those of generation ``gen``."""
        path = self.run_dir(name) / "derived" / f"a{gen:06d}.parquet"
        tmp = _tmp_target(path)
        _write_by_metric(_conform_long(derived), tmp)
        tmp.rename(path)
        with self._catalog() as con:
            con.execute("BEGIN TRANSACTION")
            con.execute(q.DELETE_RUN_SPIKES, [name])
            for i, s in enumerate(spikes):
                con.execute(
                    q.ADD_SPIKE,
                    [
                        name,
                        i,
                        s["metric"],
                        s["start"],
                        s["peak"],
                        s["end"],
                        _finite_or_none(s.get("ratio")),
                        bool(s["recovered"]),
                        s["cause"],
                        float(s["confidence"]),
                        json.dumps(s, default=str),
                    ],
                )
            if summary is not None:
                row = _one(con.execute(q.GET_RUN, [name]))
                assert row is not None
                meta = {**json.loads(row[13]), "analysis": summary}
                con.execute(q.UPDATE_RUN_META, [json.dumps(meta, default=str), name])
            con.execute(q.SET_ANALYSIS_GEN, [gen, name])
            con.execute("COMMIT")
        self._collect_garbage(name)

    # ------------------------------------------------------------------ reads

    def read_series(
        self,
        name: str,
        metric: str,
        *,
        start: int | None = None,
        end: int | None = None,
        buckets: int | None = None,
        rank: int | None = None,
    ) -> SeriesData:
        """A metric of run ``name`` over steps [start, end], full fidelity or in ``buckets`` min/max buckets.

        ``rank=None`` gives the run-level series when one was logged (rank -1), else the cross-rank
        mean with the min/max band from the rollup; a rank >= 0 gives that rank's own series.
        Derived metrics (``snr``, ``clip_ratio`` ...) are read the same way.
        """
        info = self.run_info(name)
        lo = info.first_step if start is None else start
        hi = info.last_step if end is None else end
        if lo is None or hi is None or hi < lo:
            return _empty_series(metric)
        files, want_rank, source = self._series_source(info, metric, rank)
        if not files:
            return _empty_series(metric)
        if len(files) > 1:
            return self._series_of_parts(files, source, metric, want_rank, int(lo), int(hi), buckets)
        if buckets and len(files) == 1:
            fast = self._bucketed_fast(files[0], source, metric, want_rank, int(lo), int(hi), int(buckets))
            if fast is not None:
                return fast
        params: dict[str, Any] = {"files": files, "metric": metric, "lo": int(lo), "hi": int(hi)}
        if source == "ranks":
            if buckets:
                t = self._arrow(q.SERIES_ROLLUP_BUCKETS, {**params, "buckets": int(buckets)})
                return _bucketed(metric, t, source)
            t = self._arrow(q.SERIES_ROLLUP, params)
            steps, mean = _col(t, "step", np.int64), _col(t, "mean")
            return SeriesData(
                metric,
                steps,
                mean,
                _col(t, "min"),
                _col(t, "max"),
                source,
                False,
                n_nonfinite=_col(t, "n_nonfinite", np.int64),
            )
        params["rank"] = want_rank
        if source == "rank" and not buckets:
            window = self._block_window(files[0], metric, want_rank, int(lo), int(hi))
            if window is not None:
                return window
        if buckets:
            t = self._arrow(q.SERIES_RUN_LEVEL_BUCKETS, {**params, "buckets": int(buckets)})
            return _bucketed(metric, t, source)
        t = self._arrow(q.SERIES_RUN_LEVEL, params)
        steps, values = _col(t, "step", np.int64), _col(t, "value")
        return SeriesData(metric, steps, values, values, values, source, False)

    def _series_of_parts(
        self, files: list[str], source: str, metric: str, rank: int, lo: int, hi: int, buckets: int | None
    ) -> SeriesData:
        """``read_series`` over a base and its delta parts: as the single-file reads, on the rows
        combined (rollup rows of a later part replace the earlier parts' from its first step on;
        long and run-level rows of parts never share a (metric, rank, step))."""
        if source == "ranks":
            t = self._rollup_rows(files, metric, ["step", "mean", "min", "max", "n_nonfinite"])
            steps = _numpy(t.column("step")) if t.num_rows else np.zeros(0, np.int64)
            keep = slice(int(np.searchsorted(steps, lo)), int(np.searchsorted(steps, hi, side="right")))
            t, steps = t.slice(keep.start, keep.stop - keep.start), steps[keep]
            low, high, mean = (_col(t, c) for c in ("min", "max", "mean"))
            nonfinite = _col(t, "n_nonfinite", np.int64)
            if buckets:
                args = (metric, source, steps, low, high, mean, lo, hi, buckets, nonfinite)
                return _min_max_buckets(*args, nan_is_null=True)
            return SeriesData(metric, steps, mean, low, high, source, False, n_nonfinite=nonfinite)
        windows = [self._block_window(f, metric, rank, lo, hi, nulls=not buckets) for f in files]
        if all(w is not None for w in windows):
            steps = np.concatenate([w.steps for w in windows if w is not None]).astype(np.int64, copy=False)
            values = np.concatenate([w.values for w in windows if w is not None]).astype(float, copy=False)
            if buckets:
                return _min_max_buckets(metric, source, steps, values, values, values, lo, hi, buckets)
            if source == "rank" and not steps.size:
                return _empty_series(metric)  # as ``_block_window`` says it
            return SeriesData(metric, steps, values, values, values, source, False)
        params: dict[str, Any] = {"files": files, "metric": metric, "lo": lo, "hi": hi, "rank": rank}
        if buckets:
            return _bucketed(metric, self._arrow(q.SERIES_RUN_LEVEL_BUCKETS, {**params, "buckets": buckets}), source)
        t = self._arrow(q.SERIES_RUN_LEVEL, params)
        steps, values = _col(t, "step", np.int64), _col(t, "value")
        return SeriesData(metric, steps, values, values, values, source, False)

    def _rollup_rows(self, files: list[str], metric: str, columns: list[str]) -> pa.Table:
        """The rollup rows of ``metric`` over parts, by step: each part's rows before the first step
        of any later part (whose rows replace them from there on)."""
        tables = [_read_metric(self._reader(f).file, metric, columns).combine_chunks() for f in files]
        cut: int | None = None
        for i in reversed(range(len(tables))):
            t = tables[i]
            steps = _numpy(t.column("step")) if t.num_rows else np.zeros(0, np.int64)
            if cut is not None:
                t = tables[i] = t.slice(0, int(np.searchsorted(steps, cut)))
            if steps.size:
                cut = int(steps[0]) if cut is None else min(cut, int(steps[0]))
        return pa.concat_tables(tables)

    def _series_source(self, info: RunInfo, metric: str, rank: int | None) -> tuple[list[str], int, str]:
        derived = self._files(info.name, "derived", info.analysis_gen)
        if rank is not None and rank >= 0:
            return self._part_files(info, "long"), rank, "rank"
        if metric not in info.metrics:
            return [f for f in derived if metric in self._derived_metrics(f)], RUN_RANK, "derived"
        if metric in info.rank_metrics and not self._has_run_level(info, metric):
            return self._part_files(info, "rollup"), RUN_RANK, "ranks"
        return self._part_files(info, "runlevel") or self._part_files(info, "long"), RUN_RANK, "run"

    def _has_run_level(self, info: RunInfo, metric: str) -> bool:
        files = self._part_files(info, "runlevel") or self._part_files(info, "long")
        if not files:
            return False
        indexes = [self._blocks(f) for f in files]
        if all(blocks is not None for blocks in indexes):
            return any(blocks is not None and (metric, RUN_RANK) in blocks for blocks in indexes)
        row = _one(self._engine().execute(q.HAS_RUN_LEVEL, {"files": files, "metric": metric}))
        return bool(row and row[0])

    def _derived_metrics(self, path: str) -> frozenset[str]:
        """The metrics a derived file holds (read once per file: files never change)."""
        metrics = self._derived_cache.get(path)
        if metrics is None:
            meta = self._reader(path).file.metadata
            ranges = [_stats_range(meta.row_group(g), "metric") for g in range(meta.num_row_groups)]
            if all(r is not None and r[0] == r[1] for r in ranges):  # one metric per row group
                metrics = frozenset(str(r[0]) for r in ranges if r is not None)
            else:
                column = pq.read_table(path, columns=["metric"]).column("metric")
                metrics = frozenset(str(m) for m in pc.unique(column).to_pylist())
            self._derived_cache[path] = metrics
        return metrics

    def _reader(self, path: str) -> _SourceReader:
        """A reader of ``path``'s step and value row ranges, kept per thread (its footer is parsed
        once)."""
        readers: dict[str, _SourceReader] = self._local.__dict__.setdefault("readers", {})
        reader = readers.get(path)
        if reader is None:
            reader = readers[path] = _SourceReader(path, ("step", "value"))
        return reader

    def _block_window(
        self, path: str, metric: str, rank: int, lo: int, hi: int, nulls: bool = True
    ) -> SeriesData | None:
        """Steps [lo, hi] of one (metric, rank) straight from its row range in the long file (None
        for a file without a block index, or holding NULL values unless ``nulls``): a few thousand
        rows cost one or two row groups."""
        blocks = self._blocks(path)
        if blocks is None:
            return None
        tables: list[pa.Table] = []
        for piece in blocks.get((metric, rank), []):
            if hi < piece.lo or lo > piece.hi:
                continue
            start, end = piece.start, piece.end
            if end - start == piece.hi - piece.lo + 1:  # one row per step: the rows are known exactly
                start, end = start + max(0, lo - piece.lo), start + min(end - start, hi - piece.lo + 1)
            tables.append(self._reader(path).range(start, end))
        if not tables:
            return _empty_series(metric)
        table = pa.concat_tables(tables) if len(tables) != 1 else tables[0]
        if not nulls and table.column("value").null_count:
            return None
        steps, values = _numpy(table.column("step")), _numpy(table.column("value"), float)
        keep = slice(int(np.searchsorted(steps, lo)), int(np.searchsorted(steps, hi, side="right")))
        steps, values = steps[keep], values[keep]
        return SeriesData(metric, steps, values, values, values, "rank", False)

    def _bucketed_fast(
        self, path: str, source: str, metric: str, rank: int, lo: int, hi: int, buckets: int
    ) -> SeriesData | None:
        """``SERIES_*_BUCKETS`` computed with numpy from the rows read straight from the file (no
        query engine: opening a run should not pay for one); None where that is not possible (a file
        without block index, NULL values), and the SQL runs instead."""
        if source in ("run", "rank"):
            window = self._block_window(path, metric, rank, lo, hi, nulls=False)
            if window is None:
                return None
            return _min_max_buckets(
                metric, source, window.steps, window.values, window.values, window.values, lo, hi, buckets
            )
        columns = ["step", "mean", "min", "max", "n_nonfinite"] if source == "ranks" else ["step", "value"]
        table = self._metric_rows(path, metric, columns)
        if table is None:
            return None
        steps = _numpy(table.column("step"))
        if steps.size > 1 and not bool((np.diff(steps) > 0).all()):
            order = np.argsort(steps, kind="stable")
            table, steps = table.take(order), steps[order]
        keep = slice(int(np.searchsorted(steps, lo)), int(np.searchsorted(steps, hi, side="right")))
        table, steps = table.slice(keep.start, keep.stop - keep.start), steps[keep]
        if source == "ranks":
            low, high, mean = (table.column(c).to_numpy() for c in ("min", "max", "mean"))
            nonfinite = _numpy(table.column("n_nonfinite")) if table.num_rows else np.zeros(0, np.int64)
            return _min_max_buckets(
                metric, source, steps, low, high, mean, lo, hi, buckets, nonfinite, nan_is_null=True
            )
        values = table.column("value").to_numpy()
        return _min_max_buckets(metric, source, steps, values, values, values, lo, hi, buckets)

    def _metric_rows(self, path: str, metric: str, columns: list[str]) -> pa.Table | None:
        """The rows of ``metric`` of a small sorted-by-metric file, reading only the row groups whose
        statistics can hold it; None when a column holds NULLs the SQL would treat differently."""
        table = _read_metric(self._reader(path).file, metric, columns)
        if "value" in columns and table.column("value").null_count:
            return None
        return table.combine_chunks()

    def _blocks(self, path: str) -> dict[tuple[str, int], list[_Piece]] | None:
        """The block index in a long file's footer: the row ranges of each (metric, rank), in step
        order; None for a file without one (files never change once written: read once per path)."""
        blocks = self._blocks_cache.get(path)
        if blocks is None:
            raw = (self._reader(path).file.metadata.metadata or {}).get(INDEX_KEY.encode())
            if raw is None:
                return None
            blocks = self._blocks_cache[path] = _plan([_parse_blocks(raw)])
        return blocks

    def _rank_matrix(self, info: RunInfo, paths: list[str], metric: str) -> RankMatrix:
        """The per-rank matrix of ``metric``: each rank's block read straight from its row range (the
        long file is sorted by metric, rank, step), on the step axis of the rollup (every step some
        rank logged); over a base and its delta parts, each rank's blocks in part order."""
        indexes = [self._blocks(path) for path in paths]
        rollup = self._part_files(info, "rollup")
        if not rollup or any(blocks is None for blocks in indexes):
            return _rank_matrix(self._arrow(q.RANK_MATRIX, {"files": paths, "metric": metric}))
        by_rank: dict[int, list[tuple[_SourceReader, _Piece]]] = {}
        for path, blocks in zip(paths, indexes, strict=True):
            assert blocks is not None
            for (m, r), pieces in blocks.items():
                if m == metric and r >= 0:
                    by_rank.setdefault(r, []).extend((self._reader(path), p) for p in pieces)
        rank_blocks = sorted(by_rank.items())
        query = q.ROLLUP_STEPS if len(rollup) == 1 else q.ROLLUP_STEPS_DISTINCT
        axis = _col(self._arrow(query, {"files": rollup, "metric": metric}), "step", np.int64)
        ranks = np.array([r for r, _ in rank_blocks], np.int64)
        values = np.full((ranks.size, axis.size), np.nan)
        present = np.zeros((ranks.size, axis.size), bool)
        for i, (_, read) in enumerate(rank_blocks):
            for table in (t for reader, piece in read for t in reader.rows(piece.start, piece.end)):
                steps = table.column("step").to_numpy()
                at, n = int(np.searchsorted(axis, steps[0])), steps.size
                # Both runs of consecutive steps from the same first step: the same steps.
                same = at + n <= axis.size and axis[at + n - 1] - axis[at] == n - 1 == steps[-1] - steps[0]
                column: slice | np.ndarray = slice(at, at + n) if same else np.searchsorted(axis, steps)
                values[i, column] = table.column("value").to_numpy()
                present[i, column] = True
        return RankMatrix(ranks, axis, values, present)

    def read_rank_heatmap(
        self, name: str, metric: str, *, buckets: int = 1000, start: int | None = None, end: int | None = None
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(ranks, steps, matrix)``: the per-rank mean of ``metric`` in ``buckets`` step columns,
        from the rank buckets materialised at compaction (NaN where a rank logged nothing)."""
        info = self.run_info(name)
        files = self._part_files(info, "rankb")
        lo = info.first_step if start is None else start
        hi = info.last_step if end is None else end
        if not files or metric not in info.rank_metrics or lo is None or hi is None:
            return np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros((0, 0))
        t = self._rank_buckets(files, metric, int(lo), int(hi), int(buckets))
        ranks_col, cols = _col(t, "rank", np.int64), _col(t, "col", np.int64)
        ranks = np.unique(ranks_col)
        ncols = int(cols.max()) + 1 if cols.size else 0
        matrix = np.full((ranks.size, ncols), np.nan)
        matrix[np.searchsorted(ranks, ranks_col), cols] = _col(t, "mean")
        steps = np.full(ncols, -1, np.int64)
        steps[cols] = _col(t, "step", np.int64)
        return ranks, steps, matrix

    def _rank_buckets(self, paths: list[str], metric: str, lo: int, hi: int, buckets: int) -> pa.Table:
        """``RANK_HEATMAP``'s rows (rank, col, step, mean, max) computed with numpy: the rank buckets
        of ``metric`` (read from the row groups that hold it), sorted by rank then step, are grouped by
        runs of equal (rank, column). Over delta parts, a later part's row of a (rank, bucket)
        replaces the earlier ones."""
        if len(paths) == 1:
            t = _read_metric(self._reader(paths[0]).file, metric, ["rank", "first_step", "mean", "max"], threads=True)
            first, ranks = _numpy(t.column("first_step")), _numpy(t.column("rank"))
            mean, high = _numpy(t.column("mean"), float), _numpy(t.column("max"), float)
        else:
            columns = ["rank", "bucket", "first_step", "mean", "max"]
            tables = [_read_metric(self._reader(p).file, metric, columns).combine_chunks() for p in paths]
            t = pa.concat_tables(tables)
            part = np.concatenate([np.full(x.num_rows, i, np.int64) for i, x in enumerate(tables)])
            ranks, bucket = _numpy(t.column("rank")), _numpy(t.column("bucket"))
            order = np.lexsort((part, bucket, ranks))
            ranks, bucket = ranks[order], bucket[order]
            last = np.ones(order.size, bool)
            last[:-1] = (ranks[1:] != ranks[:-1]) | (bucket[1:] != bucket[:-1])
            order, ranks = order[last], ranks[last]
            first = _numpy(t.column("first_step"))[order]
            mean, high = _numpy(t.column("mean"), float)[order], _numpy(t.column("max"), float)[order]
        if first.size and not (lo <= first.min() and first.max() <= hi):
            inside = (first >= lo) & (first <= hi)
            first, ranks, mean, high = first[inside], ranks[inside], mean[inside], high[inside]
        if not first.size:
            return pa.table({"rank": [], "col": [], "step": [], "mean": [], "max": []})
        cols = (first - lo) * buckets // (hi - lo + 1)
        starts = np.flatnonzero(np.r_[True, (ranks[1:] != ranks[:-1]) | (cols[1:] != cols[:-1])])
        have = ~np.isnan(mean)  # a NULL mean (no finite value in the bucket) is left out, as avg() does
        count = np.add.reduceat(have.astype(np.int64), starts)
        total = np.add.reduceat(np.where(have, mean, 0.0), starts)
        return pa.table(
            {
                "rank": ranks[starts],
                "col": cols[starts],
                "step": first[starts],
                "mean": np.divide(total, count, out=np.full(total.size, np.nan), where=count > 0),
                "max": np.fmax.reduceat(high, starts),
            }
        )

    def read_long(self, name: str, *, include_derived: bool = False) -> pa.Table:
        """The full-fidelity long table of ``name`` (``step, rank, metric, value, wall_time``)."""
        info = self.run_info(name)
        files = self._part_files(info, "long")
        if include_derived:
            files += self._files(name, "derived", info.analysis_gen)
        if not files:
            return LONG_SCHEMA.empty_table()
        return self._arrow(q.READ_LONG, {"files": files})

    def read_wall_times(self, name: str, metric: str = "loss") -> tuple[np.ndarray, np.ndarray]:
        """(steps, wall-clock times in s) of ``metric``'s run-level rows that carry a wall time, by step."""
        files = self._part_files(self.run_info(name), "long")
        if not files:
            return np.empty(0, np.int64), np.empty(0, np.float64)
        # the long files are sorted by metric: the filter prunes row groups of the other metrics
        table = pq.read_table(
            files, columns=["step", "wall_time"], filters=[("metric", "=", metric), ("rank", "=", RUN_RANK)]
        ).filter(pc.is_valid(pc.field("wall_time")))
        order = np.argsort(table.column("step").to_numpy(), kind="stable")
        return table.column("step").to_numpy()[order], table.column("wall_time").to_numpy()[order]

    def export(self, name: str, fmt: str, target: str | os.PathLike[str]) -> int:
        """Write the full-fidelity long table as CSV or Parquet to ``target``; returns rows written."""
        info = self.run_info(name)
        if fmt not in ("csv", "parquet"):
            raise StabScopeError(f"unknown export format {fmt!r}: expected 'csv' or 'parquet'")
        files = self._part_files(info, "long")
        target = Path(target)
        if not target.parent.is_dir():
            raise StabScopeError(f"cannot write {target}: folder {target.parent} does not exist")
        tmp = target.with_name(f".{target.name}.{uuid.uuid4().hex}.tmp")
        if not files:
            pq.write_table(LONG_SCHEMA.empty_table(), tmp) if fmt == "parquet" else tmp.write_text(
                "step,rank,metric,value,wall_time\n"
            )
        else:
            sql = q.EXPORT_LONG if fmt == "csv" else q.EXPORT_LONG_PARQUET
            self._engine().execute(sql, {"files": files, "target": str(tmp)})
        tmp.replace(target)
        return info.n_rows

    def run_view(self, name: str, rank_metrics: Sequence[str] | None = None) -> RunView:
        """Full-fidelity ``RunView`` for analyses: run-level series (per-rank-only metrics become their
        cross-rank mean), the per-rank matrices of ``rank_metrics`` (default: ``step_time_s`` and every
        per-rank gradient norm or loss, which the decision tree's node 3 reads), events and metadata."""
        from stab_core.diagnosis import is_rank_evidence

        if rank_metrics is None:
            info = self.run_info(name)
            rank_metrics = ["step_time_s", *(m for m in info.rank_metrics if is_rank_evidence(m))]
        info = self.run_info(name)
        files = self._part_files(info, "long")
        series: dict[str, Series] = {}
        per_rank: dict[str, RankMatrix] = {}
        if files:
            t = self._arrow(q.ALL_RUN_LEVEL, {"files": self._part_files(info, "runlevel") or files})
            series.update(_split_by_metric(t))
            for metric in info.rank_metrics:
                if metric not in series:
                    s = self.read_series(name, metric)
                    series[metric] = Series(s.steps, s.values)
            for metric in rank_metrics:
                if metric in info.rank_metrics:
                    per_rank[metric] = self._rank_matrix(info, files, metric)
        return RunView(
            name=name, series=series, per_rank=per_rank, events=tuple(self.events(name)), meta=dict(info.meta)
        )


@dataclass(frozen=True)
class _CatalogSnapshot:
    """Catalog rows as of one catalog state: runs (``LIST_RUNS`` order), and by run name the run's
    row, its event rows (step, kind, label, detail) and its spike details (JSON)."""

    runs: list[tuple[Any, ...]]
    by_name: dict[str, tuple[Any, ...]]
    events: dict[str, list[tuple[Any, ...]]]
    spikes: dict[str, list[str]]


class _Stager:
    """Accumulates long rows per metric and writes them as staging Parquet files of at most
    ``STAGE_ROWS`` rows, each sorted by (metric, rank, step) with no repeated key (the last write of
    a key wins) and indexed by block in its footer, ready for the merge (see ``_merge_sources``)."""

    def __init__(self, store: Store, name: str) -> None:
        self.folder = store.run_dir(name) / "staging"
        self.folder.mkdir(parents=True, exist_ok=True)
        self.prefix = f"{time.time_ns():020d}-{uuid.uuid4().hex[:8]}"
        self.pending: dict[str, list[pa.Table]] = {}
        self.pending_rows = 0
        self.rows = 0
        self.files: list[str] = []
        self.written = 0
        self.blocks: list[list[Any]] = []
        self.open_file: tuple[_BackgroundWriter, Path, Path] | None = None

    def add(self, table: pa.Table) -> None:
        """Add a ``LONG_SCHEMA`` table (any order)."""
        self.add_parts(_parts_by_metric(table))

    def add_parts(self, parts: Sequence[tuple[str, pa.Table]]) -> None:
        """Add ``(metric, PART_SCHEMA table)`` pairs, as ``wide_to_long_parts`` makes them."""
        for metric, part in parts:
            if part.num_rows == 0:
                continue
            self.pending.setdefault(metric, []).append(part)
            self.pending_rows += part.num_rows
            self.rows += part.num_rows
        if self.pending_rows >= STAGE_ROWS:
            self._write()

    def _write(self) -> None:
        self._close_previous()
        metrics = sorted(self.pending)
        path = self.folder / f"{self.prefix}-{self.written:05d}.parquet"
        tmp = _tmp_target(path)
        writer = _BackgroundWriter(tmp, _LONG_SCHEMA_DICT, _STAGE_WRITE_OPTIONS)
        for code, metric in enumerate(metrics):
            part = _sort_unique(pa.concat_tables(self.pending.pop(metric)).combine_chunks())
            self.blocks.extend(_blocks_of(metric, part))
            writer.write(_with_metric(part, metrics, code), STAGE_ROW_GROUP)
        # The file is finished while the caller reads the next batch; _close_previous waits for it.
        self.open_file = (writer, tmp, path)
        self.written += 1
        self.pending, self.pending_rows = {}, 0

    def _close_previous(self) -> None:
        if self.open_file is not None:
            writer, tmp, path = self.open_file
            writer.close({INDEX_KEY: json.dumps(self.blocks)})
            tmp.rename(path)
            self.files.append(str(path))
            self.open_file, self.blocks = None, []

    def finish(self) -> list[str]:
        if self.pending:
            self._write()
        self._close_previous()
        return self.files


# --------------------------------------------------------------------------- columnar merge
#
# Staged files and every generation's long file are sorted by (metric, rank, step) without repeated
# keys, and carry in their footer an index of their (metric, rank) blocks: rows, first and last step.
# A merge is then a k-way merge of sorted runs, one block at a time: the blocks of one (metric, rank)
# from several sources are streamed in priority order when their step ranges are disjoint and
# ascending (the append-only case: no sort, no hash table), else concatenated and de-duplicated
# (the last write wins). The cross-rank rollup and the rank buckets are computed on the way, one
# metric at a time, so memory is bounded by a row group per source plus one metric's step span.

INDEX_KEY = "stabscope_index"
"""Footer key of the block index: a JSON list of ``[metric, rank, rows, first_step, last_step]``."""

STAGE_ROW_GROUP = 65_536
LONG_ROW_GROUP = 122_880
"""Rows per row group of the long file: a 5,000-step window of one rank decodes one or two groups."""
RUNLEVEL_ROW_GROUP = 65_536
"""Row groups of the run-level extract (rank -1 rows only), which the overview reads."""
RANKB_ROW_GROUP = 65_536
"""Row groups of the rank buckets: a heatmap reads the groups of its metric only."""

DENSE_SPAN_MAX = 1 << 22
"""Largest step span (last - first + 1) of one metric whose rollup is accumulated in memory
(dense arrays, ~60 bytes a step: 250 MB at most); wider metrics are rolled up by DuckDB."""

Block = tuple[str, int, int, int, int]
"""``(metric, rank, rows, first_step, last_step)``: one sorted run of a (metric, rank) in a file."""

_LONG_SCHEMA_DICT_FIELDS: dict[str, pa.DataType] = {
    "rank": pa.int32(),
    "step": pa.int64(),
    "metric": pa.dictionary(pa.int32(), pa.string()),
    "value": pa.float64(),
    "wall_time": pa.float64(),
}
_LONG_SCHEMA_DICT = pa.schema(_LONG_SCHEMA_DICT_FIELDS)
"""``LONG_SCHEMA`` with the metric names dictionary-encoded, as files are written (read back as strings)."""
_READ_SCHEMA = pa.schema({name: _LONG_SCHEMA_DICT_FIELDS[name] for name in ("step", "value", "wall_time")})
"""The columns a merge reads from a source (the block index gives metric and rank)."""
# Staged files live for one merge: encodings that cost nothing to write (runs, deltas) and a fast
# codec. The long file is read for years: zstd, with the floats split by byte for it.
_STAGE_WRITE_OPTIONS: dict[str, Any] = {
    "compression": "lz4",
    "use_dictionary": ["rank", "metric"],
    "write_statistics": ["rank", "step", "metric"],
    "column_encoding": {"step": "DELTA_BINARY_PACKED", "value": "BYTE_STREAM_SPLIT", "wall_time": "BYTE_STREAM_SPLIT"},
    "store_schema": False,
}
_LONG_WRITE_OPTIONS: dict[str, Any] = {
    "compression": "zstd",
    "use_dictionary": ["rank", "metric"],
    "write_statistics": ["rank", "step", "metric"],
    "column_encoding": {"step": "DELTA_BINARY_PACKED", "value": "BYTE_STREAM_SPLIT", "wall_time": "BYTE_STREAM_SPLIT"},
    "store_schema": False,
}
_ROLLUP_WRITE_OPTIONS: dict[str, Any] = {
    "compression": "zstd",
    "use_dictionary": ["metric"],
    "write_statistics": ["metric", "step"],
    "store_schema": False,
}
_RANKB_WRITE_OPTIONS: dict[str, Any] = {
    "compression": "zstd",
    "use_dictionary": ["metric", "rank"],
    "write_statistics": ["metric", "rank", "first_step"],
    "store_schema": False,
}


def _parts_by_metric(table: pa.Table) -> list[tuple[str, pa.Table]]:
    """A ``LONG_SCHEMA`` table as ``(metric, PART_SCHEMA table)`` pairs, rows kept in arrival order.
    Batches whose metric column is a one-name dictionary (as ``read_log`` builds them) are parts as
    they are: no hashing, sorting or copying of their rows."""
    if table.num_rows == 0:
        return []
    if pa.types.is_dictionary(table.schema.field("metric").type):
        parts: list[tuple[str, pa.Table]] = []
        for batch in table.to_batches():
            metric: Any = batch.column("metric")  # a DictionaryArray
            if len(metric.dictionary) == 1 and metric.null_count == 0:
                parts.append((str(metric.dictionary[0]), pa.Table.from_batches([batch]).select(PART_SCHEMA.names)))
            elif batch.num_rows:
                decoded = pa.Table.from_batches([batch]).set_column(
                    LONG_SCHEMA.get_field_index("metric"), "metric", metric.dictionary_decode()
                )
                parts.extend(_parts_by_metric(decoded))
        return parts
    encoded = table.column("metric").combine_chunks().dictionary_encode()
    codes = encoded.indices.to_numpy(zero_copy_only=False)
    order = np.argsort(codes, kind="stable")
    cuts = np.flatnonzero(np.diff(codes[order])) + 1
    rest = table.select(PART_SCHEMA.names)
    return [
        (str(encoded.dictionary[int(codes[order[a]])]), rest.take(order[a:b]))
        for a, b in zip(np.r_[0, cuts], np.r_[cuts, codes.size], strict=True)
    ]


def _sort_unique(part: pa.Table) -> pa.Table:
    """``part`` sorted by (rank, step) keeping the last arrival of a repeated key; a table already
    in strictly ascending order (the usual case) is returned as it is."""
    ranks, steps = _numpy(part.column("rank")), _numpy(part.column("step"))
    if _strictly_ascending(ranks, steps):
        return part
    order = np.argsort(steps, kind="stable")
    order = order[np.argsort(ranks[order], kind="stable")]
    r, s = ranks[order], steps[order]
    last = np.ones(order.size, bool)
    last[:-1] = (r[1:] != r[:-1]) | (s[1:] != s[:-1])
    return part.take(order[last])


def _numpy(column: pa.ChunkedArray[Any], nulls_as: type | None = None) -> np.ndarray:
    """A column as one numpy array (``ChunkedArray.to_numpy`` is slow on many chunks); a column
    with nulls needs ``nulls_as=float`` (nulls become NaN)."""
    chunks: list[np.ndarray]
    if nulls_as is not None:
        chunks = [c.to_numpy(zero_copy_only=False).astype(nulls_as, copy=False) for c in column.chunks]
    else:
        chunks = [c.to_numpy() for c in column.chunks]
    if len(chunks) == 1:
        return chunks[0]
    return np.concatenate(chunks) if chunks else np.zeros(0)


def _strictly_ascending(ranks: np.ndarray, steps: np.ndarray) -> bool:
    if ranks.size < 2:
        return True
    d_rank, d_step = np.diff(ranks), np.diff(steps)
    return bool(np.all((d_rank > 0) | ((d_rank == 0) & (d_step > 0))))


def _blocks_of(metric: str, part: pa.Table) -> list[list[Any]]:
    """The index entries of a part sorted by (rank, step)."""
    ranks, steps = _numpy(part.column("rank")), _numpy(part.column("step"))
    if ranks.size == 0:
        return []
    cuts = np.flatnonzero(ranks[1:] != ranks[:-1]) + 1
    starts, ends = np.r_[0, cuts], np.r_[cuts, ranks.size]
    return [
        [metric, int(ranks[a]), int(b - a), int(steps[a]), int(steps[b - 1])]
        for a, b in zip(starts.tolist(), ends.tolist(), strict=True)
    ]


def _with_metric(part: pa.Table, metrics: list[str], code: int) -> pa.Table:
    n = part.num_rows
    metric = pa.DictionaryArray.from_arrays(np.full(n, code, np.int32), pa.array(metrics, pa.string()))
    rank, step, value, wall_time = part.columns
    return pa.Table.from_arrays([rank, step, metric, value, wall_time], schema=_LONG_SCHEMA_DICT)


class _Piece(NamedTuple):
    """Rows ``[start, end)`` of source ``source``: one block, first and last step ``lo``/``hi``.

    A named tuple: opening a window builds one per block of the long file's index (2,052 for 256
    ranks x 8 metrics), and a frozen dataclass costs ~3x as much to construct."""

    source: int
    start: int
    end: int
    lo: int
    hi: int


class _SourceReader:
    """Reads row ranges of a sorted source, in ascending order, a row group at a time; keeps the
    group it is in until it is used up (the next block of the file usually starts there)."""

    def __init__(self, path: str, columns: Sequence[str] = _READ_SCHEMA.names) -> None:
        self.file = pq.ParquetFile(path)
        self.schema = pa.schema([_READ_SCHEMA.field(c) for c in columns])
        meta = self.file.metadata
        sizes = [meta.row_group(i).num_rows for i in range(meta.num_row_groups)]
        self.starts = np.concatenate([[0], np.cumsum(sizes, dtype=np.int64)])
        self._cached: tuple[int, pa.Table] | None = None

    def rows(self, start: int, end: int) -> Iterator[pa.Table]:
        group = int(np.searchsorted(self.starts, start, side="right")) - 1
        while start < end:
            table = self._group(group)
            first, stop = int(self.starts[group]), min(end, int(self.starts[group + 1]))
            yield table.slice(start - first, stop - start)
            if stop == int(self.starts[group + 1]):
                self._cached = None
            start, group = stop, group + 1

    def range(self, start: int, end: int) -> pa.Table:
        """Rows [start, end) as one table, the row groups decoded in parallel (for reads, where
        nothing else runs: the merge uses ``rows``)."""
        first = int(np.searchsorted(self.starts, start, side="right")) - 1
        last = int(np.searchsorted(self.starts, end, side="left"))
        table = self.file.read_row_groups(list(range(first, last)), columns=self.schema.names, use_threads=True)
        table = table if table.schema == self.schema else table.cast(self.schema)
        return table.slice(start - int(self.starts[first]), end - start)

    def _group(self, group: int) -> pa.Table:
        cached = self._cached
        if cached is not None and cached[0] == group:
            return cached[1]
        # One thread: groups are small, and the merge's writer threads use the other core.
        table = self.file.read_row_group(group, columns=self.schema.names, use_threads=False)
        table = table if table.schema == self.schema else table.cast(self.schema)
        self._cached = (group, table)
        return table


def _block_chunks(readers: list[_SourceReader], pieces: list[_Piece]) -> Iterator[pa.Table]:
    """The rows of one (metric, rank) in step order, one key once (the highest source wins)."""
    if all(a.hi < b.lo for a, b in itertools.pairwise(pieces)):
        for p in pieces:
            yield from readers[p.source].rows(p.start, p.end)
        return
    table = pa.concat_tables([t for p in pieces for t in readers[p.source].rows(p.start, p.end)]).combine_chunks()
    steps = table.column("step").to_numpy()
    order = np.argsort(steps, kind="stable")
    ordered = steps[order]
    last = np.ones(order.size, bool)
    last[:-1] = ordered[1:] != ordered[:-1]
    yield table.take(order[last])


class _RollupAccumulator:
    """Cross-rank statistics of one metric per step over ``[lo, hi]``, fed one rank at a time
    (each rank's steps strictly ascending). Mean and variance by Welford's update (Welford 1962;
    Chan, Golub & LeVeque 1983), stable when the mean dwarfs the spread; ties of min/max go to
    the lowest rank."""

    def __init__(self, lo: int, hi: int) -> None:
        span = hi - lo + 1
        self.lo = lo
        self.n = np.zeros(span, np.int64)
        self.n_nonfinite = np.zeros(span, np.int64)
        self.count = np.zeros(span, np.int64)
        self.mean = np.zeros(span)
        self.m2 = np.zeros(span)
        self.min = np.full(span, np.inf)
        self.max = np.full(span, -np.inf)
        self.argmin = np.zeros(span, np.int32)
        self.argmax = np.zeros(span, np.int32)

    _FIELDS = ("n", "n_nonfinite", "count", "mean", "m2", "min", "max", "argmin", "argmax")
    _FILL: ClassVar[dict[str, float]] = {"min": np.inf, "max": -np.inf}

    @property
    def nbytes(self) -> int:
        return sum(getattr(self, f).nbytes for f in self._FIELDS)

    def cover(self, lo: int, hi: int) -> None:
        """Grow the step range to hold [lo, hi] (by half as much again when it grows upwards)."""
        end = self.lo + self.n.size
        if lo >= self.lo and hi < end:
            return
        base = min(lo, self.lo)
        size = max(hi + 1, end) - base
        size += size // 2 if hi >= end else 0
        for name in self._FIELDS:
            old = getattr(self, name)
            grown = np.full(size, self._FILL.get(name, 0), old.dtype)
            grown[self.lo - base : self.lo - base + old.size] = old
            setattr(self, name, grown)
        self.lo = base

    def add(self, rank: int, chunk: _Chunk) -> None:
        idx = chunk.steps - self.lo
        dense = int(idx[-1]) - int(idx[0]) + 1 == idx.size
        where: slice | np.ndarray = slice(int(idx[0]), int(idx[-1]) + 1) if dense else idx
        self.n[where] += 1
        values = chunk.values
        if not chunk.all_finite:
            self.n_nonfinite[where] += chunk.nonfinite
            where, values = idx[chunk.finite], values[chunk.finite]
            if values.size == 0:
                return
        count = self.count[where] + 1
        mean = self.mean[where]
        delta = values - mean
        mean = mean + delta / count
        self.m2[where] += delta * (values - mean)
        self.mean[where] = mean
        self.count[where] = count
        low = self.min[where]
        lower = values < low
        self.min[where] = np.where(lower, values, low)
        self.argmin[where] = np.where(lower, rank, self.argmin[where])
        high = self.max[where]
        higher = values > high
        self.max[where] = np.where(higher, values, high)
        self.argmax[where] = np.where(higher, rank, self.argmax[where])

    def table(self, metric: str) -> pa.Table:
        """Rows for the steps some rank logged, as ``BUILD_ROLLUP`` defines them."""
        at = np.flatnonzero(self.n > 0)
        count = self.count[at]
        none = count == 0

        def col(values: np.ndarray) -> pa.Array[Any]:
            array: pa.Array[Any] = pa.array(values, mask=none if none.any() else None)
            return array

        return pa.table(
            {
                "metric": pa.repeat(pa.scalar(metric), at.size),
                "step": pa.array(at + self.lo),
                "n": pa.array(self.n[at]),
                "n_nonfinite": pa.array(self.n_nonfinite[at]),
                "mean": col(self.mean[at]),
                "min": col(self.min[at]),
                "max": col(self.max[at]),
                "std": col(np.sqrt(self.m2[at] / np.maximum(count, 1))),
                "argmin_rank": col(self.argmin[at]),
                "argmax_rank": col(self.argmax[at]),
            }
        )


@dataclass
class _Chunk:
    """Consecutive rows of one (metric, rank) as numpy arrays (``nonfinite`` is meaningful only
    when not ``all_finite``)."""

    table: pa.Table
    steps: np.ndarray
    values: np.ndarray
    all_finite: bool
    finite: np.ndarray
    nonfinite: np.ndarray

    @classmethod
    def of(cls, table: pa.Table) -> _Chunk:
        values_col = table.column("value")
        values = values_col.to_numpy()
        finite = np.isfinite(values)
        if finite.all():
            return cls(table, table.column("step").to_numpy(), values, True, finite, finite)
        # NULL (a value-less record) is neither finite nor non-finite, as in SQL.
        nonfinite = ~finite & values_col.is_valid().to_numpy() if values_col.null_count else ~finite
        return cls(table, table.column("step").to_numpy(), values, False, finite, nonfinite)


class _RankBuckets:
    """Per-rank step buckets of width ``width`` for the heatmap: per (metric, rank, step // width)
    the first and last step, the mean and max of the finite values and the count of the others."""

    def __init__(self, width: int) -> None:
        self.width = width
        self.tables: list[pa.Table] = []
        self._parts: list[tuple[np.ndarray, ...]] = []

    def add(self, chunk: _Chunk) -> None:
        buckets = np.floor_divide(chunk.steps, self.width)
        starts = np.r_[0, np.flatnonzero(np.diff(buckets)) + 1]
        ends = np.r_[starts[1:], buckets.size]
        if chunk.all_finite:
            finite_values, highs = chunk.values, chunk.values
            counts = ends - starts
            nonfinite = np.zeros(starts.size, np.int64)
        else:
            finite_values = np.where(chunk.finite, chunk.values, 0.0)
            highs = np.where(chunk.finite, chunk.values, -np.inf)
            counts = np.add.reduceat(chunk.finite.astype(np.int64), starts)
            nonfinite = np.add.reduceat(chunk.nonfinite.astype(np.int64), starts)
        self._parts.append(
            (
                buckets[starts],
                chunk.steps[starts],
                chunk.steps[ends - 1],
                np.add.reduceat(finite_values, starts),
                counts,
                np.maximum.reduceat(highs, starts),
                nonfinite,
            )
        )

    def finish_block(self, metric: str, rank: int) -> None:
        """Close the block of (metric, rank): join buckets split across chunks into one row."""
        if not self._parts:
            return
        bucket, first, last, total, count, high, nonfinite = (np.concatenate(c) for c in zip(*self._parts, strict=True))
        self._parts = []
        starts = np.r_[0, np.flatnonzero(np.diff(bucket)) + 1]
        if starts.size < bucket.size:
            ends = np.r_[starts[1:], bucket.size]
            bucket, first, last = bucket[starts], first[starts], last[ends - 1]
            total, count = np.add.reduceat(total, starts), np.add.reduceat(count, starts)
            high, nonfinite = np.maximum.reduceat(high, starts), np.add.reduceat(nonfinite, starts)
        none = count == 0
        mask = none if none.any() else None
        self.tables.append(
            pa.table(
                {
                    "metric": pa.repeat(pa.scalar(metric), bucket.size),
                    "rank": pa.array(np.full(bucket.size, rank, np.int32)),
                    "bucket": pa.array(bucket),
                    "first_step": pa.array(first),
                    "last_step": pa.array(last),
                    "mean": pa.array(total / np.maximum(count, 1), mask=mask),
                    "max": pa.array(high, mask=mask),
                    "n_nonfinite": pa.array(nonfinite),
                }
            )
        )


class _BackgroundWriter:
    """A Parquet file written by a worker thread: encoding and compression (which release the GIL)
    overlap the caller's reading and arithmetic; at most two tables wait in the queue."""

    def __init__(self, path: Path, schema: pa.Schema, options: dict[str, Any]) -> None:
        self._writer = pq.ParquetWriter(path, schema, **options)
        self._queue: queue.Queue[tuple[pa.Table, int | None] | None] = queue.Queue(maxsize=2)
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name=f"write {path.name}", daemon=True)
        self._thread.start()

    def write(self, table: pa.Table, row_group_size: int | None = None) -> None:
        if self._error is not None:
            raise self._error
        self._queue.put((table, row_group_size))

    def _run(self) -> None:
        while (item := self._queue.get()) is not None:
            if self._error is None:
                try:
                    self._writer.write_table(item[0], row_group_size=item[1])
                except BaseException as exc:  # handed to the caller in close()
                    self._error = exc

    def close(self, metadata: dict[str, str] | None = None) -> None:
        """Wait for the queued tables, add footer ``metadata`` and close; re-raises a write error."""
        self._queue.put(None)
        self._thread.join()
        if self._error is not None:
            self._writer.close()
            raise self._error
        if metadata:
            self._writer.add_key_value_metadata(metadata)
        self._writer.close()


class _LongWriter:
    """Writes the long file in row groups of ``LONG_ROW_GROUP`` rows and its block index."""

    def __init__(self, path: Path, metrics: list[str], row_group: int = LONG_ROW_GROUP) -> None:
        self.dictionary = pa.array(metrics, pa.string())
        self.codes = {m: i for i, m in enumerate(metrics)}
        self.writer = _BackgroundWriter(path, _LONG_SCHEMA_DICT, _LONG_WRITE_OPTIONS)
        self.row_group = row_group
        self.buffer: list[pa.Table] = []
        self.buffered = 0
        self.blocks: list[list[Any]] = []

    def add(self, metric: str, rank: int, chunk: pa.Table) -> None:
        n = chunk.num_rows
        self.buffer.append(
            pa.Table.from_arrays(
                [
                    pa.array(np.full(n, rank, np.int32)),
                    chunk.column("step"),
                    pa.DictionaryArray.from_arrays(np.full(n, self._code(metric), np.int32), self.dictionary),
                    chunk.column("value"),
                    chunk.column("wall_time"),
                ],
                schema=_LONG_SCHEMA_DICT,
            )
        )
        self.buffered += n
        if self.buffered >= self.row_group:
            self._flush(final=False)

    def _code(self, metric: str) -> int:
        """The metric's index in the dictionary, which grows as metrics appear (older codes stay)."""
        code = self.codes.get(metric)
        if code is None:
            code = self.codes[metric] = len(self.codes)
            self.dictionary = pa.array(list(self.codes), pa.string())
        return code

    def _flush(self, final: bool) -> None:
        table = pa.concat_tables(self.buffer)
        keep = table.num_rows if final else table.num_rows - table.num_rows % self.row_group
        self.writer.write(table.slice(0, keep), self.row_group)
        rest = table.slice(keep)
        self.buffer, self.buffered = ([rest] if rest.num_rows else []), rest.num_rows

    def close(self) -> None:
        """Finish the file with the index of the blocks added (``add_block`` after each block)."""
        if self.buffered:
            self._flush(final=True)
        self.writer.close({INDEX_KEY: json.dumps(self.blocks)})


@dataclass
class _MergeResult:
    """What a merge wrote (temporary paths) and the catalog figures of the new generation."""

    long_path: Path
    runlevel_path: Path
    rollup_path: Path
    rankb_path: Path
    first: int | None
    last: int | None
    n_steps: int
    n_rows: int
    ranks: int
    metric_rows: list[tuple[str, bool]]
    width: int
    tail_path: Path | None = None

    @classmethod
    def of_generation(
        cls,
        run_dir: Path,
        gen: int,
        keys: Sequence[tuple[str, int]],
        *,
        first: int | None,
        last: int | None,
        n_steps: int,
        n_rows: int,
        width: int,
        tail: bool = False,
    ) -> _MergeResult:
        """Temporary paths of generation ``gen``'s files (and its tail file with ``tail``), with ranks and
        metric rows counted from the merged (metric, rank) ``keys``."""

        def target(kind: str) -> Path:
            return _tmp_target(run_dir / kind / f"g{gen:06d}.parquet")

        metrics = sorted({m for m, _ in keys})
        return cls(
            long_path=target("long"),
            runlevel_path=target("runlevel"),
            rollup_path=target("rollup"),
            rankb_path=target("rankb"),
            ranks=len({r for _, r in keys if r >= 0}),
            metric_rows=[(m, any(k == m and r >= 0 for k, r in keys)) for m in metrics],
            first=first,
            last=last,
            n_steps=n_steps,
            n_rows=n_rows,
            width=width,
            tail_path=target("tail") if tail else None,
        )

    def paths(self) -> tuple[Path, ...]:
        tail = () if self.tail_path is None else (self.tail_path,)
        return (self.long_path, self.runlevel_path, self.rollup_path, self.rankb_path, *tail)


def _source_blocks(engine: duckdb.DuckDBPyConnection, path: str) -> list[Block]:
    """A source's block index: from its footer, else (a long file written before the index
    existed, sorted by metric, rank, step all the same) computed by DuckDB."""
    raw = (pq.read_metadata(path).metadata or {}).get(INDEX_KEY.encode())
    if raw is not None:
        return _parse_blocks(raw)
    if Path(path).parent.name == "staging":
        raise StabScopeError(
            f"{path}: staged file without a block index (written by an older StabScope): finish the "
            "compaction with that version, or delete the run and compact it again"
        )
    rows = engine.execute(q.BLOCK_INDEX, {"files": [path]}).fetchall()
    return [(str(m), int(r), int(n), int(lo), int(hi)) for m, r, n, lo, hi in rows]


def _parse_blocks(raw: bytes) -> list[Block]:
    """The footer's block index (JSON written by :class:`_LongWriter`: names and integers already)."""
    return [(m, r, n, lo, hi) for m, r, n, lo, hi in json.loads(raw)]


def _plan(blocks_by_source: list[list[Block]]) -> dict[tuple[str, int], list[_Piece]]:
    plan: dict[tuple[str, int], list[_Piece]] = {}
    for source, blocks in enumerate(blocks_by_source):
        offset = 0
        for metric, rank, n, lo, hi in blocks:
            end = offset + n
            plan.setdefault((metric, rank), []).append(_Piece(source, offset, end, lo, hi))
            offset = end
    return plan


_ROLLUP_SCHEMA_FIELDS: dict[str, pa.DataType] = {
    "metric": pa.string(),
    "step": pa.int64(),
    "n": pa.int64(),
    "n_nonfinite": pa.int64(),
    "mean": pa.float64(),
    "min": pa.float64(),
    "max": pa.float64(),
    "std": pa.float64(),
    "argmin_rank": pa.int32(),
    "argmax_rank": pa.int32(),
}
_ROLLUP_SCHEMA = pa.schema(_ROLLUP_SCHEMA_FIELDS)
_RANKB_SCHEMA_FIELDS: dict[str, pa.DataType] = {
    "metric": pa.string(),
    "rank": pa.int32(),
    "bucket": pa.int64(),
    "first_step": pa.int64(),
    "last_step": pa.int64(),
    "mean": pa.float64(),
    "max": pa.float64(),
    "n_nonfinite": pa.int64(),
}
_RANKB_SCHEMA = pa.schema(_RANKB_SCHEMA_FIELDS)


def _merge_sources(engine: duckdb.DuckDBPyConnection, sources: list[str], run_dir: Path, gen: int) -> _MergeResult:
    """Merge sorted sources (lowest priority first) into the long, rollup and rank-bucket files of ``gen``."""
    plan = _plan([_source_blocks(engine, path) for path in sources])
    keys = sorted(plan)
    pieces = [p for ps in plan.values() for p in ps]
    first = min((p.lo for p in pieces), default=None)
    last = max((p.hi for p in pieces), default=None)
    span = 0 if first is None or last is None else last - first + 1
    metrics = sorted({m for m, _ in keys})
    width = max(1, -(-span // HEATMAP_MAX_BUCKETS))
    result = _MergeResult.of_generation(
        run_dir, gen, keys, tail=True, first=first, last=last, n_steps=0, n_rows=0, width=width
    )
    merger = _Merger(sources, plan, result, span)
    for metric in metrics:
        merger.merge_metric(metric, [r for m, r in keys if m == metric])
    merger.close(engine)
    return result


class _Merger:
    """Streams every block of a plan into the new generation's files (see ``_merge_sources``)."""

    def __init__(
        self, sources: list[str], plan: dict[tuple[str, int], list[_Piece]], result: _MergeResult, span: int
    ) -> None:
        self.readers = [_SourceReader(path) for path in sources]
        self.plan = plan
        self.result = result
        self.steps_seen = np.zeros(span if span <= DENSE_SPAN_MAX else 0, bool)
        metrics = sorted({m for m, _ in plan})
        self.long = _LongWriter(result.long_path, metrics)
        self.runlevel = _LongWriter(result.runlevel_path, metrics, RUNLEVEL_ROW_GROUP)
        self.rollup = _BackgroundWriter(result.rollup_path, _ROLLUP_SCHEMA, _ROLLUP_WRITE_OPTIONS)
        self.rankb = _BackgroundWriter(result.rankb_path, _RANKB_SCHEMA, _RANKB_WRITE_OPTIONS)
        self.rank_buckets = _RankBuckets(result.width)
        self.wide_metrics: list[str] = []
        assert result.tail_path is not None
        self.tail = _LongWriter(result.tail_path, metrics, RUNLEVEL_ROW_GROUP)

    def merge_metric(self, metric: str, ranks: list[int]) -> None:
        rank_pieces = [p for r in ranks if r >= 0 for p in self.plan[(metric, r)]]
        acc = None
        if rank_pieces:
            lo, hi = min(p.lo for p in rank_pieces), max(p.hi for p in rank_pieces)
            if hi - lo + 1 <= DENSE_SPAN_MAX:
                acc = _RollupAccumulator(lo, hi)
            else:
                self.wide_metrics.append(metric)
        for rank in ranks:
            self._merge_block(metric, rank, acc)
        if acc is not None:
            self.rollup.write(acc.table(metric))
        if self.rank_buckets.tables:
            self.rankb.write(pa.concat_tables(self.rank_buckets.tables).cast(_RANKB_SCHEMA), RANKB_ROW_GROUP)
            self.rank_buckets.tables = []

    def _merge_block(self, metric: str, rank: int, acc: _RollupAccumulator | None) -> None:
        rows, lo, hi = 0, 0, 0
        pieces = self.plan[(metric, rank)]
        tail = _TailBlock(metric, rank, _tail_start(max(p.hi for p in pieces), self.result)) if rank >= 0 else None
        for table in _block_chunks(self.readers, pieces):
            chunk = _Chunk.of(table)
            if tail is not None:
                tail.add(chunk)
            self.long.add(metric, rank, table)
            if rank == RUN_RANK:
                self.runlevel.add(metric, rank, table)
            if self.steps_seen.size and self.result.first is not None:
                self.steps_seen[chunk.steps - self.result.first] = True
            if rank >= 0:
                if acc is not None:
                    acc.add(rank, chunk)
                self.rank_buckets.add(chunk)
            lo = int(chunk.steps[0]) if rows == 0 else lo
            hi = int(chunk.steps[-1])
            rows += chunk.steps.size
        if rank >= 0:
            self.rank_buckets.finish_block(metric, rank)
        if tail is not None:
            tail.write(self.tail)
        self.long.blocks.append([metric, rank, rows, lo, hi])
        if rank == RUN_RANK:
            self.runlevel.blocks.append([metric, rank, rows, lo, hi])
        self.result.n_rows += rows

    def close(self, engine: duckdb.DuckDBPyConnection) -> None:
        """Finish the files; metrics too wide for the in-memory rollup are rolled up by DuckDB."""
        self.long.close()
        self.runlevel.close()
        self.tail.close()
        files = [str(self.result.long_path)]
        for metric in self.wide_metrics:
            table = engine.sql(q.BUILD_ROLLUP, params={"files": files, "metric": metric}).to_arrow_table()
            self.rollup.write(table.cast(_ROLLUP_SCHEMA))
        self.rollup.close()
        self.rankb.close()
        if self.steps_seen.size:
            self.result.n_steps = int(np.count_nonzero(self.steps_seen))
        elif self.result.n_rows:
            row = _one(engine.execute(q.COUNT_STEPS, {"files": files}))
            self.result.n_steps = int(row[0]) if row else 0


# --------------------------------------------------------------------------- delta parts
#
# A live run grows at its end: each fold usually brings, for every (metric, rank), steps after the
# last one stored. Such a fold is written as a delta part (long, run-level, rollup and rank-bucket
# files of the new generation holding just what changes) instead of rewriting the whole run:
#
# - long / runlevel: the staged rows (no (metric, rank, step) of a part repeats one of another part);
# - rollup: for each metric, every step from the first staged step of a rank >= 0 on, recomputed from
#   all ranks' rows (the older rows of those steps read back from the parts): these rows replace the
#   earlier parts' rows of the same and later steps;
# - rank buckets: each staged (metric, rank)'s buckets, the one it shares with the older rows
#   recomputed from them: these rows replace the earlier parts' rows of the same (rank, bucket).
#
# Older rows are read from the part that holds them: a full generation's tail file (the last rows of
# each (metric, rank >= 0): its last bucket and the last ``TAIL_STEPS`` steps of the run) when it
# covers them, else its long file. Reads combine the parts (see ``Store._part_files``).

TAIL_STEPS = 128
"""Steps at the end of the run whose rows a full generation also keeps in its small tail file: a
rank up to this far behind the others catches up without reading the long file back."""

DELTA_PARTS_MAX = 24
"""Delta parts on one base before a fold consolidates them into a full generation (reads open every part)."""

DELTA_ROWS_FRACTION = 0.25
"""Rows in delta parts, as a fraction of the base's, before a fold consolidates them."""


def _tail_start(hi: int, result: _MergeResult) -> int:
    """First step of a (metric, rank)'s rows (last step ``hi``) that a full generation's tail keeps."""
    assert result.last is not None
    return min(hi // result.width * result.width, result.last - TAIL_STEPS + 1)


class _TailBlock:
    """The rows of one (metric, rank) from step ``start`` on, collected chunk by chunk for the tail file."""

    def __init__(self, metric: str, rank: int, start: int) -> None:
        self.metric, self.rank, self.start = metric, rank, start
        self.tables: list[pa.Table] = []
        self.steps: list[np.ndarray] = []

    def add(self, chunk: _Chunk) -> None:
        i = int(np.searchsorted(chunk.steps, self.start))
        if i < chunk.steps.size:  # copied: a slice would hold the whole row group until the tail is written
            self.tables.append(chunk.table.take(np.arange(i, chunk.steps.size)))
            self.steps.append(chunk.steps[i:].copy())

    def write(self, writer: _LongWriter) -> None:
        if not self.tables:
            return
        for table in self.tables:
            writer.add(self.metric, self.rank, table)
        rows = sum(s.size for s in self.steps)
        writer.blocks.append([self.metric, self.rank, rows, int(self.steps[0][0]), int(self.steps[-1][-1])])


class _OldRows:
    """Rows of the current generation's parts, by (metric, rank) from a given step on (the end of a
    block, as a delta needs them): from a part's tail file when it covers them, else its long file."""

    def __init__(self, parts: list[tuple[str, str | None]], blocks: list[list[Block]]) -> None:
        self.parts = parts
        self.plan = _plan(blocks)
        self.tails: list[dict[tuple[str, int], list[_Piece]]] = [
            _plan([_parse_blocks(_footer_index(tail) or b"[]")]) if tail else {} for _, tail in parts
        ]
        self.readers: dict[str, _SourceReader] = {}

    def _range(self, path: str, start: int, end: int) -> pa.Table:
        """Rows [start, end) of ``path``; the row group last decoded is kept (blocks are asked for in
        file order, and a small part holds many in one group)."""
        reader = self.readers.get(path)
        if reader is None:
            reader = self.readers[path] = _SourceReader(path)
        return pa.concat_tables(list(reader.rows(start, end)))

    def rows_from(self, metric: str, rank: int, step: int) -> list[pa.Table]:
        out: list[pa.Table] = []
        pieces = [p for p in self.plan.get((metric, rank), []) if p.hi >= step]
        for source in sorted({p.source for p in pieces}):
            in_part = [p for p in pieces if p.source == source]
            tail = self.tails[source].get((metric, rank), [])
            if len(tail) == 1 and tail[0].lo <= max(step, in_part[0].lo) and tail[0].hi == in_part[-1].hi:
                path, in_part = self.parts[source][1], tail
            else:
                path = self.parts[source][0]
            assert path is not None
            for p in in_part:
                start = p.start
                if p.end - p.start == p.hi - p.lo + 1:  # one row per step: the first row wanted is known
                    start += max(0, step - p.lo)
                table = self._range(path, start, p.end)
                table = table.slice(int(np.searchsorted(table.column("step").to_numpy(), step)))
                if table.num_rows:
                    out.append(table)
        return out


def _footer_index(path: str) -> bytes | None:
    raw: bytes | None = (pq.read_metadata(path).metadata or {}).get(INDEX_KEY.encode())
    return raw


def _write_delta(
    engine: duckdb.DuckDBPyConnection,
    info: RunInfo,
    parts: list[tuple[str, str | None]],
    staged: list[str],
    run_dir: Path,
    gen: int,
) -> _MergeResult | None:
    """Write the staged rows as delta part ``gen`` on the current parts (``(long file, tail file)``,
    base first), or return None (nothing written) when they need a full merge instead: a staged
    (metric, rank) reaching back to or before its stored last step, a rank below -1, a heatmap
    bucket width that changes, a rollup too wide for memory, a base without block index, or deltas
    that have piled up (``DELTA_PARTS_MAX``, ``DELTA_ROWS_FRACTION``)."""
    if info.first_step is None or info.last_step is None or len(parts) > DELTA_PARTS_MAX:
        return None
    raw = [_footer_index(long) for long, _ in parts]
    if any(r is None for r in raw):
        return None
    old_blocks = [_parse_blocks(r) for r in raw if r is not None]
    base_rows = sum(n for _, _, n, _, _ in old_blocks[0])
    new_blocks = [_source_blocks(engine, path) for path in staged]
    staged_rows = sum(n for blocks in new_blocks for _, _, n, _, _ in blocks)
    if info.n_rows - base_rows + staged_rows > DELTA_ROWS_FRACTION * base_rows:
        return None
    old = _OldRows(parts, old_blocks)
    new_plan = _plan(new_blocks)
    if not new_plan or any(r < RUN_RANK for _, r in (*old.plan, *new_plan)):
        return None
    old_hi = {k: max(p.hi for p in ps) for k, ps in old.plan.items()}
    new_lo = {k: min(p.lo for p in ps) for k, ps in new_plan.items()}
    new_hi = {k: max(p.hi for p in ps) for k, ps in new_plan.items()}
    if any(k in old_hi and lo <= old_hi[k] for k, lo in new_lo.items()):
        return None
    first, last = min(info.first_step, *new_lo.values()), max(info.last_step, *new_hi.values())
    width = _bucket_width(last - first + 1)
    if width != info.heat_bucket:
        return None
    keys = sorted(set(old.plan) | set(new_plan))
    span: dict[str, tuple[int, int]] = {}
    for (metric, rank), pieces in (*old.plan.items(), *new_plan.items()):
        if rank >= 0:
            lo, hi = span.get(metric, (pieces[0].lo, pieces[0].hi))
            span[metric] = (min(lo, *(p.lo for p in pieces)), max(hi, *(p.hi for p in pieces)))
    if any(hi - lo + 1 > DENSE_SPAN_MAX for lo, hi in span.values()):
        return None  # the full merge rolls such a metric up with DuckDB

    metrics = sorted({m for m, _ in keys})
    result = _MergeResult.of_generation(
        run_dir, gen, keys, first=first, last=last, n_steps=info.n_steps, n_rows=info.n_rows, width=width
    )
    readers = [_SourceReader(path) for path in staged]
    long = _LongWriter(result.long_path, metrics)
    runlevel = _LongWriter(result.runlevel_path, metrics, RUNLEVEL_ROW_GROUP)
    rollup = _BackgroundWriter(result.rollup_path, _ROLLUP_SCHEMA, _ROLLUP_WRITE_OPTIONS)
    rankb = _BackgroundWriter(result.rankb_path, _RANKB_SCHEMA, _RANKB_WRITE_OPTIONS)
    new_steps: list[np.ndarray] = []
    try:
        for metric in sorted({m for m, _ in new_plan}):
            ranks = sorted(r for m, r in new_plan if m == metric)
            chunks: dict[int, list[_Chunk]] = {}
            for rank in ranks:
                chunks[rank] = [_Chunk.of(t) for t in _block_chunks(readers, new_plan[(metric, rank)]) if t.num_rows]
                rows = sum(c.steps.size for c in chunks[rank])
                block = [metric, rank, rows, int(chunks[rank][0].steps[0]), int(chunks[rank][-1].steps[-1])]
                for writer in (long, runlevel) if rank == RUN_RANK else (long,):
                    for c in chunks[rank]:
                        writer.add(metric, rank, c.table)
                    writer.blocks.append(block)
                new_steps.extend(c.steps for c in chunks[rank])
                result.n_rows += rows
            per_rank = [r for r in ranks if r >= 0]
            if not per_rank:
                continue
            # Rollup: every step from the first new one on, from all ranks' rows, rank by rank.
            cut = min(new_lo[(metric, r)] for r in per_rank)
            behind = {r for m, r in old.plan if m == metric and r >= 0 and old_hi[(m, r)] >= cut}
            acc = _RollupAccumulator(cut, cut)
            for rank in sorted(behind | set(per_rank)):
                held = [_Chunk.of(t) for t in old.rows_from(metric, rank, cut)] if rank in behind else []
                for c in (*held, *chunks.get(rank, [])):
                    acc.cover(int(c.steps[0]), int(c.steps[-1]))
                    acc.add(rank, c)
            rollup.write(acc.table(metric))
            # Rank buckets: each new block's, the bucket it shares with the older rows recomputed.
            buckets = _RankBuckets(width)
            for rank in per_rank:
                prev = old_hi.get((metric, rank))
                if prev is not None and prev // width == new_lo[(metric, rank)] // width:
                    for t in old.rows_from(metric, rank, prev // width * width):
                        buckets.add(_Chunk.of(t))
                for c in chunks[rank]:
                    buckets.add(c)
                buckets.finish_block(metric, rank)
            rankb.write(pa.concat_tables(buckets.tables).cast(_RANKB_SCHEMA), RANKB_ROW_GROUP)
    finally:
        long.close()
        runlevel.close()
        rollup.close()
        rankb.close()
    steps = np.unique(np.concatenate(new_steps))
    known = steps[steps <= info.last_step]
    if known.size:  # steps up to the old last step may be there already (another rank's, or run-level)
        old_steps = [
            _numpy(pq.read_table(path, columns=["step"], filters=[("step", ">=", int(known[0]))]).column("step"))
            for path in _sibling_files(parts, ("rollup", "runlevel"))
        ]
        known = known[np.isin(known, np.concatenate([np.zeros(0, np.int64), *old_steps]), invert=True)]
    result.n_steps += int(known.size + np.count_nonzero(steps > info.last_step))
    return result


def _sibling_files(parts: list[tuple[str, str | None]], kinds: Sequence[str]) -> list[str]:
    """The ``kinds`` files of the same generations as the long files of ``parts``."""
    out = []
    for long, _ in parts:
        path = Path(long)
        for kind in kinds:
            sibling = path.parent.parent / kind / path.name
            if sibling.exists():
                out.append(str(sibling))
    return out


@dataclass
class _Folded:
    """What a compaction read besides metric rows: new byte offsets per segment, events, metadata."""

    offsets: dict[str, int] = field(default_factory=dict)
    events: list[dict[str, Any]] = field(default_factory=list)
    meta: dict[str, Any] = field(default_factory=dict)


def _segment_parts(
    todo: Sequence[tuple[Path, str, int]], report: IngestReport, folded: _Folded, progress: ProgressFn | None
) -> Iterator[list[tuple[str, pa.Table]]]:
    """Each new segment's metric rows as ``wide_to_long_parts``; its frames, rejected records, torn
    tail, events, metadata and end offset are recorded in ``report`` and ``folded`` on the way."""
    total = sum(p.stat().st_size - start for p, _, start in todo)
    done = 0
    for (path, key, start), seg in zip(todo, _read_ahead(todo), strict=True):
        if seg.metrics:
            yield wide_to_long_parts(pa.concat_tables(seg.metrics, promote_options="default"))
        folded.events.extend(seg.events)
        folded.meta.update(seg.meta)
        report.frames += seg.frames
        report.rejected += len(seg.errors)
        report.rejected_examples.extend(str(e) for e in seg.errors[:5])
        if seg.torn_tail:
            report.torn.append(f"{path}: byte {seg.end_offset}: unfinished last frame (kept for later)")
        folded.offsets[key] = seg.end_offset
        done += seg.end_offset - start
        if progress:
            progress(done, max(total, done))


def _commit_generation(
    con: duckdb.DuckDBPyConnection, name: str, gen: int, merged: _MergeResult, base_gen: int | None = None
) -> None:
    """Make ``gen`` current (inside the caller's transaction) with its catalog figures: a full
    generation, or (``base_gen`` < ``gen``) a delta part on base ``base_gen``."""
    metrics = sorted(m for m, _ in merged.metric_rows)
    rank_metrics = sorted(m for m, per_rank in merged.metric_rows if per_rank)
    con.execute(
        q.COMMIT_GENERATION,
        [
            gen,
            gen if base_gen is None else base_gen,
            merged.first,
            merged.last,
            merged.n_steps,
            merged.n_rows,
            merged.ranks,
            json.dumps(metrics),
            json.dumps(rank_metrics),
            merged.width,
            name,
        ],
    )


def _min_max_buckets(
    metric: str,
    source: str,
    steps: np.ndarray,
    low: np.ndarray,
    high: np.ndarray,
    mean: np.ndarray,
    lo: int,
    hi: int,
    buckets: int,
    nonfinite: np.ndarray | None = None,
    nan_is_null: bool = False,
) -> SeriesData:
    """Steps in ``buckets`` equal step ranges over [lo, hi] (``floor((step - lo) * buckets / span)``,
    as the SQL groups them): first step, min of ``low`` and max of ``high`` with the step where each
    is (the first, on ties), mean of the finite ``mean``, and the non-finite count (``nonfinite`` per
    row when given, else the non-finite ``mean`` values). NaN orders above every number, as in DuckDB:
    a bucket holding a NaN has NaN as its max, and as its min only when it holds nothing else; with
    ``nan_is_null`` (NaN stands for SQL NULL) it is left out of both."""
    if steps.size == 0:
        return SeriesData(metric, steps, mean, low, high, source, True, steps, steps, np.zeros(0, np.int64))
    # Bucket k holds the steps s with k * span <= (s - lo) * buckets < (k + 1) * span: it starts at
    # the first step >= lo + ceil(k * span / buckets). Empty buckets give repeated starts.
    span = hi - lo + 1
    bounds = lo - (-np.arange(buckets, dtype=np.int64) * span // buckets)
    starts = np.searchsorted(steps, bounds)
    starts = starts[np.r_[True, np.diff(starts) > 0] & (starts < steps.size)]
    finite = np.isfinite(mean)
    if finite.all():
        count = np.diff(np.r_[starts, steps.size])
        total = np.add.reduceat(mean, starts)
        nonfinite = np.zeros(starts.size, np.int64) if nonfinite is None else np.add.reduceat(nonfinite, starts)
    else:
        count = np.add.reduceat(finite.astype(np.int64), starts)
        total = np.add.reduceat(np.where(finite, mean, 0.0), starts)
        nonfinite = np.add.reduceat((~finite if nonfinite is None else nonfinite).astype(np.int64), starts)
    small = np.fmin.reduceat(low, starts)
    large = (np.fmax if nan_is_null else np.maximum).reduceat(high, starts)
    return SeriesData(
        metric,
        steps[starts],
        np.divide(total, count, out=np.full(total.size, np.nan), where=count > 0),
        small,
        large,
        source,
        True,
        min_step=steps[_first_equal(low, small, starts)],
        max_step=steps[_first_equal(high, large, starts)],
        n_nonfinite=nonfinite,
    )


def _first_equal(values: np.ndarray, per_bucket: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """Index of the first value of each bucket equal to the bucket's figure (NaN equals NaN; a
    bucket without one, all NULL, points at its first row)."""
    ends = np.r_[starts[1:], values.size]
    wanted = np.repeat(per_bucket, ends - starts)
    equal = values == wanted
    if np.isnan(per_bucket).any():
        equal |= np.isnan(values) & np.isnan(wanted)
    hits = np.flatnonzero(equal)
    if not hits.size:
        return starts
    first = hits[np.minimum(np.searchsorted(hits, starts), hits.size - 1)]
    return np.where(first < ends, first, starts)


def _stats_range(group: Any, column: str) -> tuple[Any, Any] | None:
    """``(min, max)`` of ``column`` in a row group's statistics, None without them."""
    for i in range(group.num_columns):
        chunk = group.column(i)
        if chunk.path_in_schema == column:
            stats = chunk.statistics
            return (stats.min, stats.max) if stats is not None and stats.has_min_max else None
    return None


def _read_metric(file: pq.ParquetFile, metric: str, columns: list[str], threads: bool = False) -> pa.Table:
    """``columns`` of the rows of ``metric`` of a file sorted by metric, in file order: row groups
    holding only it are read without the metric column, groups it shares are read and filtered."""
    meta = file.metadata
    parts: list[pa.Table] = []
    pure: list[int] = []
    for g in range(meta.num_row_groups + 1):
        bounds = _stats_range(meta.row_group(g), "metric") if g < meta.num_row_groups else None
        if g < meta.num_row_groups and bounds is not None and bounds[0] == bounds[1] == metric:
            pure.append(g)
            continue
        if pure:  # a run of groups of this metric alone ends here
            parts.append(file.read_row_groups(pure, columns=columns, use_threads=threads))
            pure = []
        if g < meta.num_row_groups and (bounds is None or bounds[0] <= metric <= bounds[1]):
            mixed = file.read_row_group(g, columns=["metric", *columns], use_threads=False)
            parts.append(mixed.filter(pc.equal(mixed.column("metric"), pa.scalar(metric))).select(columns))
    if not parts:
        return file.schema_arrow.empty_table().select(columns)
    return pa.concat_tables(parts)


def _write_by_metric(table: pa.Table, path: Path) -> None:
    """A long table sorted by metric and step, written one metric per row group (of at most 65,536
    rows), so a reader of one metric reads its groups only and the metrics are in the statistics."""
    table = table.sort_by([("metric", "ascending"), ("rank", "ascending"), ("step", "ascending")])
    metrics = table.column("metric").to_numpy(zero_copy_only=False)
    cuts = np.flatnonzero(metrics[1:] != metrics[:-1]) + 1 if metrics.size else np.zeros(0, np.int64)
    with pq.ParquetWriter(path, LONG_SCHEMA, **_LONG_WRITE_OPTIONS) as writer:
        for a, b in zip(np.r_[0, cuts].tolist(), np.r_[cuts, metrics.size].tolist(), strict=True):
            if b > a:
                writer.write_table(table.slice(a, b - a), row_group_size=RUNLEVEL_ROW_GROUP)
        if not metrics.size:
            writer.write_table(table)


class _NotAppendOnly(Exception):
    """The input is not in order for a one-pass first generation (see ``Store._compact_direct``)."""


ROLLUP_MEMORY_MAX = 512 * 2**20
"""Bytes of rollup accumulators a one-pass compaction may hold (it holds every metric's at once)."""


class _DirectMerger:
    """Writes a run's first generation in one pass over its segments' parts: each (metric, rank)
    goes to the long file as it arrives, so the file is ordered by blocks of (rank, metric), which
    its block index records; rollups of every metric grow as steps arrive; rank buckets are closed
    rank by rank and sorted by metric at the end. Anything that would need sorting or de-duplicating
    raises ``_NotAppendOnly`` instead."""

    def __init__(self, run_dir: Path, gen: int) -> None:
        self.result = _MergeResult(
            long_path=_tmp_target(run_dir / "long" / f"g{gen:06d}.parquet"),
            runlevel_path=_tmp_target(run_dir / "runlevel" / f"g{gen:06d}.parquet"),
            rollup_path=_tmp_target(run_dir / "rollup" / f"g{gen:06d}.parquet"),
            rankb_path=_tmp_target(run_dir / "rankb" / f"g{gen:06d}.parquet"),
            first=None,
            last=None,
            n_steps=0,
            n_rows=0,
            ranks=0,
            metric_rows=[],
            width=1,
            tail_path=_tmp_target(run_dir / "tail" / f"g{gen:06d}.parquet"),
        )
        self.unsorted_rankb = _tmp_target(run_dir / "rankb" / f"u{gen:06d}.arrow")
        self.long = _LongWriter(self.result.long_path, [])
        self.runlevel = _LongWriter(self.result.runlevel_path, [], RUNLEVEL_ROW_GROUP)
        # Rank buckets arrive rank by rank; they are kept as Arrow IPC batches (no encoding) and
        # copied metric by metric at the end, one metric's rows in memory at a time.
        self.rankb_sink = pa.OSFile(str(self.unsorted_rankb), "wb")
        self.rankb = pa.ipc.new_file(self.rankb_sink, _RANKB_SCHEMA)
        self.rankb_metrics: list[str] = []
        self.rollups: dict[str, _RollupAccumulator] = {}
        self.buckets: dict[tuple[str, int], _RankBuckets] = {}
        self.last_step: dict[tuple[str, int], int] = {}
        self.tails: dict[tuple[str, int], pa.Table] = {}
        self.steps = _StepSet()
        self.rank: int | None = None
        self.width: int | None = None

    def add(self, parts: list[tuple[str, pa.Table]]) -> None:
        """One segment's parts (``wide_to_long_parts``)."""
        parts = [(metric, part.combine_chunks()) for metric, part in parts]
        if self.width is None and parts:
            # The heatmap's bucket width depends on the run's step span: the first segment (a whole
            # rank's history, as a rule) tells it; finish() checks and gives up if it was wrong.
            lo = min(int(_numpy(t.column("step")).min()) for _, t in parts)
            hi = max(int(_numpy(t.column("step")).max()) for _, t in parts)
            self.width = _bucket_width(hi - lo + 1)
        for metric, part in parts:
            for rank, table in _split_by_rank(part):
                self._add_block(metric, rank, table)

    def _add_block(self, metric: str, rank: int, table: pa.Table) -> None:
        chunk = _Chunk.of(table)
        steps, key = chunk.steps, (metric, rank)
        if steps[0] <= self.last_step.get(key, steps[0] - 1) or (steps.size > 1 and not (np.diff(steps) > 0).all()):
            raise _NotAppendOnly(f"{metric} of rank {rank}: steps repeat or go back")
        if rank >= 0 and self.rank is not None and rank < self.rank:
            raise _NotAppendOnly(f"rank {rank} after rank {self.rank}")
        if rank >= 0 and rank != self.rank:
            self._close_buckets()
            self.rank = rank
        self.last_step[key] = int(steps[-1])
        block = [metric, rank, int(steps.size), int(steps[0]), int(steps[-1])]
        self.long.add(metric, rank, table)
        self.long.blocks.append(block)
        if rank == RUN_RANK:
            self.runlevel.add(metric, rank, table)
            self.runlevel.blocks.append(block)
        self.steps.add(steps)
        self.result.n_rows += steps.size
        if rank >= 0:
            acc = self.rollups.get(metric)
            if acc is None:
                acc = self.rollups[metric] = _RollupAccumulator(int(steps[0]), int(steps[-1]))
            acc.cover(int(steps[0]), int(steps[-1]))
            if sum(a.nbytes for a in self.rollups.values()) > ROLLUP_MEMORY_MAX:
                raise _NotAppendOnly("rollups too wide for one pass")
            acc.add(rank, chunk)
            assert self.width is not None
            self.buckets.setdefault(key, _RankBuckets(self.width)).add(chunk)
            self._keep_tail(key, table, self.width + TAIL_STEPS)

    def _keep_tail(self, key: tuple[str, int], table: pa.Table, keep: int) -> None:
        """Hold the last ``keep`` rows of each (metric, rank), copied (a slice would pin the
        segment's buffers): they hold every row the tail file needs (``_tail_start``)."""
        held = self.tails.get(key)
        table = table if held is None else pa.concat_tables([held, table])
        n = table.num_rows
        self.tails[key] = table.take(np.arange(max(0, n - keep), n))

    def _close_buckets(self) -> None:
        for (metric, rank), buckets in self.buckets.items():
            buckets.finish_block(metric, rank)
            for table in buckets.tables:
                for batch in table.cast(_RANKB_SCHEMA).to_batches():
                    self.rankb.write_batch(batch)
                    self.rankb_metrics.append(metric)
        self.buckets = {}

    def finish(self) -> _MergeResult:
        self._close_buckets()
        self.long.close()
        self.runlevel.close()
        self.rankb.close()
        self.rankb_sink.close()
        r = self.result
        r.first, r.last, r.n_steps = self.steps.first, self.steps.last, self.steps.count
        r.width = _bucket_width(0 if r.first is None or r.last is None else r.last - r.first + 1)
        if self.width is not None and r.width != self.width:
            raise _NotAppendOnly("the first segment did not span the run")
        keys = self.last_step
        metrics = sorted({m for m, _ in keys})
        r.metric_rows = [(m, m in self.rollups) for m in metrics]
        r.ranks = len({rank for _, rank in keys if rank >= 0})
        rollup = _BackgroundWriter(r.rollup_path, _ROLLUP_SCHEMA, _ROLLUP_WRITE_OPTIONS)
        for metric in sorted(self.rollups):
            rollup.write(self.rollups.pop(metric).table(metric))
        rollup.close()
        _group_by_metric(self.unsorted_rankb, self.rankb_metrics, r.rankb_path, metrics)
        self.unsorted_rankb.unlink()
        assert r.tail_path is not None
        tail = _LongWriter(r.tail_path, metrics, RUNLEVEL_ROW_GROUP)
        for metric, rank in sorted(self.tails):
            block = _TailBlock(metric, rank, _tail_start(keys[(metric, rank)], r))
            block.add(_Chunk.of(self.tails.pop((metric, rank))))
            block.write(tail)
        tail.close()
        return r

    def abort(self) -> None:
        """Stop the writers and remove what was written (nothing of it is committed)."""
        for writer in (self.long.writer, self.runlevel.writer, self.rankb, self.rankb_sink):
            with contextlib.suppress(Exception):
                writer.close()
        for path in (*self.result.paths(), self.unsorted_rankb):
            path.unlink(missing_ok=True)


def _group_by_metric(source: Path, batch_metrics: list[str], target: Path, metrics: list[str]) -> None:
    """Copy rank buckets kept rank by rank (Arrow IPC batches, ``batch_metrics[i]`` the metric of
    batch i) metric by metric, so that a metric's rows lie together, ranks ascending."""
    by_metric: dict[str, list[int]] = {}
    for i, metric in enumerate(batch_metrics):
        by_metric.setdefault(metric, []).append(i)
    writer = _BackgroundWriter(target, _RANKB_SCHEMA, _RANKB_WRITE_OPTIONS)
    try:
        with pa.OSFile(str(source), "rb") as f:
            reader = pa.ipc.open_file(f)
            for metric in metrics:
                if by_metric.get(metric):
                    batches = [reader.get_batch(i) for i in by_metric[metric]]
                    writer.write(pa.Table.from_batches(batches, _RANKB_SCHEMA), RANKB_ROW_GROUP)
    finally:
        writer.close()


class _StepSet:
    """The distinct steps seen, as a growing bitmap from the first step seen."""

    def __init__(self) -> None:
        self.base = 0
        self.seen = np.zeros(0, bool)

    def add(self, steps: np.ndarray) -> None:
        lo, hi = int(steps[0]), int(steps[-1])
        if self.seen.size == 0:
            self.base, self.seen = lo, np.zeros(hi - lo + 1, bool)
        elif lo < self.base or hi >= self.base + self.seen.size:
            base = min(lo, self.base)
            size = max(hi + 1, self.base + self.seen.size) - base
            if size > 8 * DENSE_SPAN_MAX:
                raise _NotAppendOnly("step span too wide for one pass")
            grown = np.zeros(size + size // 2 if hi >= self.base + self.seen.size else size, bool)
            grown[self.base - base : self.base - base + self.seen.size] = self.seen
            self.base, self.seen = base, grown
        dense = hi - lo + 1 == steps.size
        self.seen[slice(lo - self.base, hi - self.base + 1) if dense else steps - self.base] = True

    @property
    def count(self) -> int:
        return int(np.count_nonzero(self.seen))

    @property
    def first(self) -> int | None:
        hits = np.flatnonzero(self.seen)
        return int(hits[0]) + self.base if hits.size else None

    @property
    def last(self) -> int | None:
        hits = np.flatnonzero(self.seen)
        return int(hits[-1]) + self.base if hits.size else None


def _bucket_width(span: int) -> int:
    """Steps per rank bucket for a run spanning ``span`` steps (at most ``HEATMAP_MAX_BUCKETS``)."""
    return max(1, -(-span // HEATMAP_MAX_BUCKETS))


def _split_by_rank(part: pa.Table) -> list[tuple[int, pa.Table]]:
    """A part's rows by rank, in ascending rank order, each rank's rows in arrival order."""
    ranks = _numpy(part.column("rank"))
    if ranks.size == 0:
        return []
    if ranks[0] == ranks[-1] and bool((ranks == ranks[0]).all()):
        return [(int(ranks[0]), part)]
    order = np.argsort(ranks, kind="stable")
    ordered = ranks[order]
    cuts = np.flatnonzero(np.diff(ordered)) + 1
    return [
        (int(ordered[a]), part.take(order[a:b]))
        for a, b in zip(np.r_[0, cuts].tolist(), np.r_[cuts, ordered.size].tolist(), strict=True)
    ]


def _read_ahead(todo: Sequence[tuple[Path, str, int]]) -> Iterator[SegmentRead]:
    """``read_segment`` of each ``(path, key, offset)``, the next one read by a worker thread while the
    caller processes the current one (file reads and CRCs release the GIL): two segments in memory."""
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="read-ahead") as pool:
        pending = pool.submit(read_segment, todo[0][0], todo[0][2]) if todo else None
        for i in range(len(todo)):
            assert pending is not None
            current = pending.result()
            pending = pool.submit(read_segment, todo[i + 1][0], todo[i + 1][2]) if i + 1 < len(todo) else None
            yield current


def _tmp_target(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    return path.with_name(path.name + f".{uuid.uuid4().hex[:8]}.tmp")


def _one(cursor: duckdb.DuckDBPyConnection) -> tuple[Any, ...] | None:
    """The first row of a result, consuming the rest (DuckDB wants results finished before reuse)."""
    rows = cursor.fetchall()
    return rows[0] if rows else None


def skipped_example_texts(parsed: Any) -> list[str]:
    """``file: line N: reason`` for each skipped example of a ParsedLog (``byte N`` for binary formats,
    whose readers report byte offsets)."""
    unit = "byte" if parsed.format == "tensorboard" else "line"
    return [f"{f}: {unit} {pos}: {why}" for f, pos, why in parsed.skipped_examples]


def _final_path(tmp: Path) -> Path:
    """The name a ``_tmp_target`` file is renamed to once complete."""
    return tmp.with_name(tmp.name.rsplit(".", 2)[0])


def _conform_long(table: pa.Table) -> pa.Table:
    missing = [c for c in ("rank", "step", "metric", "value") if c not in table.column_names]
    if missing:
        raise StabScopeError(f"table lacks the long-form columns {missing} (expected {LONG_SCHEMA.names})")
    if "wall_time" not in table.column_names:
        table = table.append_column("wall_time", null_floats(table.num_rows))
    schema = LONG_SCHEMA
    metric_type = table.schema.field("metric").type
    if pa.types.is_dictionary(metric_type) and pa.types.is_string(metric_type.value_type):
        # read_log's dictionary column stays one (see _parts_by_metric): no string per row
        schema = schema.set(
            schema.get_field_index("metric"), pa.field("metric", _LONG_SCHEMA_DICT.field("metric").type)
        )
    return table.select(LONG_SCHEMA.names).cast(schema)


def _finite_or_none(x: Any) -> float | None:
    return float(x) if x is not None and np.isfinite(x) else None


def _run_info(row: tuple[Any, ...]) -> RunInfo:
    return RunInfo(
        name=row[0],
        created=row[1],
        updated=row[2],
        source=row[3],
        status=row[4],
        gen=int(row[5]),
        first_step=None if row[6] is None else int(row[6]),
        last_step=None if row[7] is None else int(row[7]),
        n_steps=int(row[8]),
        n_rows=int(row[9]),
        ranks=int(row[10]),
        metrics=json.loads(row[11]),
        rank_metrics=json.loads(row[12]),
        meta=json.loads(row[13]),
        rejected=int(row[14]),
        rejected_examples=json.loads(row[15]),
        heat_bucket=int(row[16]),
        analysis_gen=int(row[17]),
        base_gen=int(row[5]) if len(row) < 19 or row[18] is None else int(row[18]),
    )


def _col(table: pa.Table, name: str, dtype: Any = np.float64) -> np.ndarray:
    return (
        np.asarray(table.column(name).to_numpy(zero_copy_only=False), dtype=dtype)
        if name in table.column_names
        else np.zeros(table.num_rows, dtype)
    )


def _empty_series(metric: str) -> SeriesData:
    e = np.zeros(0)
    return SeriesData(metric, np.zeros(0, np.int64), e, e, e, "none", False)


def _bucketed(metric: str, t: pa.Table, source: str) -> SeriesData:
    return SeriesData(
        metric,
        _col(t, "step", np.int64),
        _col(t, "mean"),
        _col(t, "min"),
        _col(t, "max"),
        source,
        True,
        min_step=_col(t, "min_step", np.int64),
        max_step=_col(t, "max_step", np.int64),
        n_nonfinite=_col(t, "n_nonfinite", np.int64),
    )


def _split_by_metric(t: pa.Table) -> dict[str, Series]:
    """One ``Series`` per metric (by name), steps ascending, from rows in any order. Each metric's
    runs of rows are gathered and copied once; only a metric whose steps then come out of order is
    sorted. A Python string per row to find the runs cost 2.8 s of a 9M-row import's 4.1 s
    ``run_view``; Arrow's compares take 0.1 s."""
    n = t.num_rows
    if n == 0:
        return {}
    starts = _run_starts(t.column("metric"))
    if len(starts) > _MAX_METRIC_RUNS:  # rows shuffled: one sort beats gathering thousands of runs
        t = t.sort_by([("metric", "ascending"), ("step", "ascending")])
        starts = _run_starts(t.column("metric"))
    metric, steps, values = t.column("metric"), t.column("step"), t.column("value")
    runs: dict[str, list[tuple[int, int]]] = {}
    for a, b in zip(starts, [*starts[1:], n], strict=True):
        runs.setdefault(str(metric[a].as_py()), []).append((a, b - a))
    out: dict[str, Series] = {}
    for name in sorted(runs):
        step = _gathered(steps, runs[name], np.int64)
        value = _gathered(values, runs[name], np.float64)
        if step.size > 1 and not np.all(step[1:] >= step[:-1]):
            order = np.argsort(step, kind="stable")
            step, value = step[order], value[order]
        out[name] = Series(step, value)
    return out


_MAX_METRIC_RUNS: Final = 10_000


def _gathered(column: Any, runs: list[tuple[int, int]], dtype: Any) -> np.ndarray:
    """The rows of ``runs`` (offset, length) of a chunked column, in order, as one array of its own
    (a zero-copy view of Arrow's memory is read-only: one run is copied only then)."""
    parts = [np.asarray(column.slice(a, k).to_numpy(zero_copy_only=False), dtype) for a, k in runs]
    if len(parts) > 1:
        return np.concatenate(parts)
    return parts[0] if parts[0].flags.writeable else parts[0].copy()


def _run_starts(column: Any) -> list[int]:
    """The first row of each run of equal values (Arrow compares, chunk by chunk)."""
    starts: list[int] = []
    offset, previous = 0, None
    for chunk in column.chunks:
        if len(chunk) == 0:
            continue
        if pa.types.is_dictionary(chunk.type):
            chunk = chunk.cast(chunk.type.value_type)
        if previous is None or chunk[0].as_py() != previous:
            starts.append(offset)
        if len(chunk) > 1:
            changed = pc.not_equal(chunk.slice(1), chunk.slice(0, len(chunk) - 1))
            starts.extend((pc.indices_nonzero(changed).to_numpy() + (offset + 1)).tolist())
        previous = chunk[-1].as_py()
        offset += len(chunk)
    return starts


def _rank_matrix(t: pa.Table) -> RankMatrix:
    ranks_col, steps_col, values = _col(t, "rank", np.int64), _col(t, "step", np.int64), _col(t, "value")
    ranks, steps = np.unique(ranks_col), np.unique(steps_col)
    matrix = np.full((ranks.size, steps.size), np.nan)
    present = np.zeros((ranks.size, steps.size), bool)
    i, j = np.searchsorted(ranks, ranks_col), np.searchsorted(steps, steps_col)
    matrix[i, j] = values
    present[i, j] = True
    return RankMatrix(ranks, steps, matrix, present)
