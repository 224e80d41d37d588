"""``Store``: the one object the rest of StabScope holds, a thin facade over the catalog (``catalog``),
the commit protocol (``commit``), the planners that write generations (``direct_merge``, ``delta``,
``full_merge``) and the reads (``read``). See the package docstring for the files on disk.

Every method that writes a run holds the run's writer lock (``run_lock``, through ``Store.writing``), so
one process at a time writes a run, whichever command or page started the write; reads take no lock.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import shutil
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Concatenate, ParamSpec, TypeVar

import duckdb
import numpy as np
import pyarrow as pa

from ingest.errors import StabScopeError
from ingest.store import queries
from ingest.store.blocks import conform_long
from ingest.store.catalog import Catalog, change_meta, delete_run_rows, fetch_one, run_info_of
from ingest.store.check_recovery import run_damage
from ingest.store.commit import CommitProtocol, failpoint
from ingest.store.direct_merge import DirectMerger, NotAppendOnly
from ingest.store.layout import LONG, RunLayout, run_folder, run_lock_file, spool_folder
from ingest.store.object_store import ObjectUrl, is_object_url
from ingest.store.paths import default_store_location
from ingest.store.read import StoreReader
from ingest.store.run_info import RunInfo
from ingest.store.run_lock import DEFAULT_WRITER_WAIT_S, LockHolder, WaitReport, held, read_holder, run_busy
from ingest.store.run_meta import merge_meta
from ingest.store.shards import SegmentRef, find_segments, shard_location_name
from ingest.store.stage import PartsReader, SegmentExtras, Stager, segment_parts
from ingest.store.storage_errors import DamagedRunFile, write_failure
from ingest.store.types import IngestReport, ProgressFn, SeriesData, validate_run_name
from stab_core.runview import RunEvent, RunView

if TYPE_CHECKING:
    from ingest.store.remote import RemoteRuns

GenerationHook = Callable[["Store", str], None]
"""Called with the store and a run's name after each new generation of that run is published (and on
recovery, and after a metadata change): ``ingest.services.run_analyses.materialise`` is the one the product passes."""

READ_ATTEMPTS = 20
"""Times a read starts again on a newer generation when a writer removed the files it began on."""

_Args = ParamSpec("_Args")
_Result = TypeVar("_Result")


def _writes_run(
    method: Callable[Concatenate[Store, str, _Args], _Result],
) -> Callable[Concatenate[Store, str, _Args], _Result]:
    """The decorated ``Store`` method writes the run named by its first argument: it runs holding that
    run's writer lock (``Store.writing``, waiting up to ``Store.writer_wait_s`` for another writer)."""

    def locked(self: Store, name: str, /, *args: _Args.args, **kwargs: _Args.kwargs) -> _Result:
        with self.writing(name), self._publishing(name):
            try:
                return method(self, name, *args, **kwargs)
            except (OSError, duckdb.Error) as exc:  # a full disk, a read-only store: one paragraph
                failure = write_failure(self.root, exc)
                if failure is None:
                    raise
                self._forget_failed_write(name)
                raise failure from exc

    functools.update_wrapper(locked, method)  # its name and docstring
    return locked


class Store:
    """A StabScope store rooted at a directory (created on first use; default: ``$STABSCOPE_STORE`` or
    the embedded default), or at an ``s3://bucket/prefix`` URL, whose local cache directory is then
    ``root`` (``cache_dir``, default ``remote.cache_dir_for``; see ``remote``). ``on_generation`` runs
    after each new generation of a run (see :data:`GenerationHook`); without it nothing is computed
    after a merge (``ingest.services.run_analyses.open_analysed_store`` passes the analyses)."""

    def __init__(
        self,
        root: str | os.PathLike[str] | None = None,
        *,
        on_generation: GenerationHook | None = None,
        cache_dir: str | os.PathLike[str] | None = None,
    ) -> None:
        location = os.fspath(root) if root is not None else default_store_location()
        url = ObjectUrl.parse(location) if is_object_url(location) else None
        if url is not None:
            from ingest.store.remote import cache_dir_for

            self.root = Path(cache_dir).expanduser() if cache_dir is not None else cache_dir_for(url)
        else:
            self.root = Path(location).expanduser()
        self.location = str(url) if url is not None else str(self.root)
        """What the user named: the directory, or the ``s3://`` URL (``root`` is then the local cache)."""
        self._on_generation = on_generation
        self.writer_wait_s = DEFAULT_WRITER_WAIT_S
        """Seconds a write waits for another process (or thread) writing the same run before it raises
        ``run_lock.WriterBusy`` (the CLI's ``--wait``); ``writing`` can give a write its own."""
        self.root.mkdir(parents=True, exist_ok=True)
        self.catalog_path = self.root / "catalog.duckdb"
        self._catalog_db = Catalog(self.catalog_path)
        self._reader = StoreReader(self.root)
        self._commit = CommitProtocol(
            self._catalog_db,
            layout=self._layout,
            run_info=self.run_info,
            engine=self._reader.engine,
            after_generation=self._materialise_analysis,
        )
        self._remote: RemoteRuns | None = None
        if url is not None:
            from ingest.store.remote import RemoteRuns

            self._remote = RemoteRuns(self.location, self.root, self._catalog_db)
            self._reader.open_remote = self._remote.open_ranged
            self._remote.refresh(force=True)

    @contextlib.contextmanager
    def _catalog(self) -> Iterator[duckdb.DuckDBPyConnection]:
        """A catalog connection for one unit of work (see ``catalog.Catalog.unit``)."""
        with self._catalog_db.unit() as con:
            yield con

    def _layout(self, name: str) -> RunLayout:
        remote = self._remote
        if remote is None:
            return RunLayout(self.run_dir(name))
        return RunLayout(self.run_dir(name), remote.fetch, remote.ranged)

    def _publishing(self, name: str) -> contextlib.AbstractContextManager[None]:
        """Around each write of run ``name``: on an object store, ``remote.RemoteRuns.publishing``."""
        return self._remote.publishing(name) if self._remote is not None else contextlib.nullcontext()

    def refresh(self) -> None:
        """On an object store: take every run's newest published state now (reads do it at most once per
        ``remote.REFRESH_S``); a local store is always current."""
        if self._remote is not None:
            self._remote.refresh(force=True)

    @property
    def object_counters(self) -> dict[str, int] | None:
        """Requests, bytes read and bytes written to object storage by this handle (None: a local store)."""
        return self._remote.objects.counters.as_dict() if self._remote is not None else None

    @contextlib.contextmanager
    def writing(self, name: str, *, wait_s: float | None = None, on_wait: WaitReport | None = None) -> Iterator[None]:
        """Hold run ``name``'s writer lock for the ``with`` block: one writer per run across processes and
        threads, dropped by the operating system if this process dies. Waits for another writer up to
        ``wait_s`` seconds (default ``writer_wait_s``; 0: one try), calling ``on_wait(holder)`` now and
        then meanwhile, then raises ``run_lock.WriterBusy`` naming the holder. Re-entrant: the writes
        below take it again at once; a caller takes it first to give several writes one wait, or its own."""
        path = run_lock_file(self.root, name)
        with held(
            path,
            wait_s=self.writer_wait_s if wait_s is None else wait_s,
            busy=lambda holder, waited_s: run_busy(name, path, holder, waited_s),
            on_wait=on_wait,
        ):
            yield

    def _forget_failed_write(self, name: str) -> None:
        """Remove what a write of run ``name`` that the storage refused left (its staged and temporary
        files, which no committed state refers to), so that a full disk gets its space back; on a
        read-only store there is nothing to remove, and nothing can be."""
        with contextlib.suppress(OSError, duckdb.Error, StabScopeError):
            if self.has_run(name):
                self._commit.collect_garbage(name)

    def run_writer(self, name: str) -> LockHolder | None:
        """Who writes run ``name`` now (pid, command, since when), or None; never waits."""
        return read_holder(run_lock_file(self.root, name))

    def _materialise_analysis(self, name: str) -> None:
        """Run the ``on_generation`` hook (the analyses, ``ingest.services.run_analyses.materialise``) on ``name``."""
        if self._on_generation is not None:
            self._on_generation(self, name)

    # ------------------------------------------------------------------ catalog reads

    def list_runs(self) -> list[RunInfo]:
        """Every run with a committed generation, oldest first. A run's catalog row is made before its
        first data are (``ensure_run``): until its first generation is committed, or when the writer was
        killed before that, the run has nothing to show and is not listed."""
        if self._remote is not None:
            self._remote.refresh()
        infos = (run_info_of(r) for r in self._catalog_db.snapshot().runs)
        return [info for info in infos if info.gen > 0]

    def has_run(self, name: str) -> bool:
        """True when the catalog holds ``name`` (validated first)."""
        validate_run_name(name)
        if self._remote is not None:
            self._remote.refresh()
        return name in self._catalog_db.snapshot().by_name

    def run_info(self, name: str) -> RunInfo:
        """The catalog row of ``name``; a clear error when there is no such run."""
        validate_run_name(name)
        if self._remote is not None:
            self._remote.refresh()
        row = self._catalog_db.snapshot().by_name.get(name)
        if row is None:
            known = ", ".join(r.name for r in self.list_runs()[:10]) or "none"
            raise StabScopeError(f"no run named {name!r} in store {self.location} (runs: {known})")
        return run_info_of(row)

    def damage(self, name: str) -> str | None:
        """Why run ``name`` is damaged (a file of its current generation missing or not reading: see
        ``check_recovery.run_damage``), or None; ``stabscope check NAME --repair`` says what can be done.
        A store on object storage fetches a file when it is read, so only its local cache is not judged
        (``stabscope check`` checks its objects)."""
        if self._remote is not None:
            return None
        info = self.run_info(name)
        why = run_damage(self._layout(name), info)
        if why is not None and self.run_info(name).gen != info.gen:  # a merge replaced the files meanwhile
            why = run_damage(self._layout(name), self.run_info(name))
        return why

    def events(self, name: str) -> list[RunEvent]:
        """Run events (schedule transitions, checkpoints, rollbacks, data switches) by step."""
        validate_run_name(name)
        rows = self._catalog_db.snapshot().events.get(name, [])
        return [RunEvent(int(s), str(k), str(lbl), json.loads(d)) for s, k, lbl, d in rows]

    def spikes(self, name: str) -> list[dict[str, Any]]:
        """The materialised spike events of ``name`` (the ``stabscope spikes --json`` objects)."""
        validate_run_name(name)
        return [json.loads(detail) for detail in self._catalog_db.snapshot().spikes.get(name, [])]

    def spike_summary(self) -> dict[str, dict[str, Any]]:
        """Per run: number of spikes, worst ratio, whether any diverged."""
        rows = self._catalog_db.read((queries.SPIKE_SUMMARY, ()))[0]
        return {r[0]: {"n_spikes": int(r[1]), "worst_ratio": r[2], "any_diverged": bool(r[3])} for r in rows}

    def get_setting(self, key: str) -> str | None:
        """A store setting (an object store's are objects, so every machine sees them)."""
        rows = self._catalog_db.read((queries.GET_SETTING, (key,)))[0]
        if rows or self._remote is None:
            return str(rows[0][0]) if rows else None
        value = self._remote.get_setting(key)
        if value is not None:
            with self._catalog() as con:
                con.execute(queries.SET_SETTING, [key, value])
        return value

    def set_setting(self, key: str, value: str) -> None:
        if self._remote is not None:
            self._remote.set_setting(key, value)
        with self._catalog() as con:
            con.execute(queries.SET_SETTING, [key, value])

    def run_dir(self, name: str) -> Path:
        """The folder of run ``name``'s files (see ``layout``)."""
        return run_folder(self.root, name)

    # ------------------------------------------------------------------ writes

    @_writes_run
    def ensure_run(self, name: str, source: str, meta: dict[str, Any] | None = None) -> RunInfo:
        """Create the catalog row for ``name`` if absent; merge ``meta`` into its metadata."""
        validate_run_name(name)
        with self._catalog() as con:
            if fetch_one(con.execute(queries.GET_RUN, [name])) is None:
                con.execute(queries.INSERT_RUN, [name, source, "finished", json.dumps(meta or {}, default=str)])
            elif meta:
                change_meta(con, name, lambda current: merge_meta(current, meta))
        return self.run_info(name)

    @_writes_run
    def update_meta(self, name: str, updates: dict[str, Any], remove: Sequence[str] = ()) -> RunInfo:
        """Set the user's metadata of run ``name`` (validated values, see ``ingest.store.run_meta``) and delete
        the keys in ``remove``. The keys are recorded as the user's, so a later import's parsed values do
        not replace them; the analyses re-run, since spikes and diagnosis read ``max_norm``, ``precision``
        and ``num_experts``."""
        self.run_info(name)
        with self._catalog() as con:
            con.execute("BEGIN TRANSACTION")
            change_meta(con, name, lambda current: merge_meta(current, updates, by_user=True, remove=remove))
            con.execute(queries.SET_ANALYSIS_GEN, [0, name])  # materialise recomputes when analysis_gen != gen
            con.execute("COMMIT")
        self._materialise_analysis(name)
        return self.run_info(name)

    @_writes_run
    def compact(
        self,
        name: str,
        shard_dir: str | os.PathLike[str],
        *,
        progress: ProgressFn | None = None,
        status: str = "finished",
        read_parts: PartsReader = segment_parts,
    ) -> IngestReport:
        """Fold every new frame of ``shard_dir``'s segments into run ``name``.

        ``read_parts`` is the engine that reads the new frames: the embedded one (``stage.segment_parts``)
        unless the caller gives another; ``stabscope compact --engine spark`` gives the Spark engine's
        (``ingest.store.engines.spark_engine.parts_reader``), which decodes and de-duplicates the frames on
        Spark. The store never imports an engine; the generation is written and committed the same way.

        Idempotent (byte offsets per segment are committed with the staged data, so a second pass
        adds nothing); streaming (at most ``stage.STAGE_ROWS`` rows are held); atomic (see ``commit``).
        A run's first generation whose records arrive in order is written in one pass (``direct_merge``).
        """
        segments = find_segments(shard_dir)
        if not segments and not self.has_run(name):
            raise StabScopeError(
                f"no shard segments (rank-*/*.ssf) under {shard_dir}: is this a shard directory? "
                "To import a log file use `stabscope import`."
            )
        self.ensure_run(name, f"shards:{shard_location_name(shard_dir)}")
        self._commit.finish_pending(name)
        with self._catalog() as con:
            offsets = {f: int(o) for f, o in con.execute(queries.GET_OFFSETS, [name]).fetchall()}
        todo = [(s, s.key, offsets.get(s.key, 0)) for s in segments if s.size > offsets.get(s.key, 0)]
        if todo and self.run_info(name).gen == 0:
            try:
                return self._compact_in_one_pass(name, segments, todo, progress, status, read_parts)
            except NotAppendOnly:
                pass  # repeated or out-of-order records: the staged merge sorts them out
        report = IngestReport(run=name, segments=len(segments))
        stager = Stager(self._layout(name))
        extras = SegmentExtras()
        for parts in read_parts(todo, report, extras, progress):
            stager.add_parts(parts)
        staged = stager.finish()
        extras.add_rollbacks(self._stored_last_steps(name))
        report.rows = stager.rows
        report.events = len(extras.events)
        failpoint("after_stage_files")
        self._commit.commit_stage(name, staged, extras, report, status)
        failpoint("after_stage_commit")
        report.gen = self._commit.merge(name)
        return report

    def _stored_last_steps(self, name: str) -> dict[int, int]:
        """Each rank's last step (over every metric) in run ``name``'s committed long files, from their
        block indexes: what a compaction's restarts are compared with."""
        info = self.run_info(name)
        last: dict[int, int] = {}
        if info.gen == 0:
            return last
        for path in self._layout(name).part_files(info, LONG):
            for (_, rank), pieces in self._reader.blocks(path).items():
                last[rank] = max(last.get(rank, pieces[-1].hi), max(p.hi for p in pieces))
        return last

    def _compact_in_one_pass(
        self,
        name: str,
        segments: list[SegmentRef],
        todo: list[tuple[SegmentRef, str, int]],
        progress: ProgressFn | None,
        status: str,
        read_parts: PartsReader,
    ) -> IngestReport:
        """The first generation of a run whose records arrive in order, written in one pass without
        staging (``direct_merge``). Raises ``NotAppendOnly`` (having written nothing that counts) when
        the input is not like that."""
        report = IngestReport(run=name, segments=len(segments))
        extras = SegmentExtras()
        merger = DirectMerger(self._layout(name), gen=1)
        try:
            for parts in read_parts(todo, report, extras, progress):
                merger.add(parts)
            files = merger.finish()
        except BaseException:
            merger.abort()
            raise
        extras.add_rollbacks({})  # a first generation: nothing stored before it
        report.rows = files.n_rows
        report.events = len(extras.events)
        self._commit.commit_first_generation(name, files, extras, report, status)
        report.gen = 1
        return report

    @_writes_run
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
        status: str = "finished",
        user_meta: Mapping[str, Any] | None = None,
        remove_meta: Sequence[str] = (),
    ) -> IngestReport:
        """Add a long-form table (``LONG_SCHEMA``) to run ``name`` (created if absent), atomically; the
        run's catalog status becomes ``status`` ("live" while ``stabscope watch`` follows a log).
        ``meta``: what the log stated (a key the user set keeps the user's value); ``user_meta`` and
        ``remove_meta``: the user's own settings and removals, committed in the same transaction as
        :meth:`update_meta` would record them, so the analyses run once, on them."""
        validate_run_name(name)
        table = conform_long(table)
        self.ensure_run(name, source)
        self._commit.finish_pending(name)
        stager = Stager(self._layout(name))
        stager.add(table)
        staged = stager.finish()
        report = IngestReport(
            run=name,
            rows=stager.rows,
            rejected=rejected,
            rejected_examples=list(rejected_examples)[:5],
            events=len(events),
        )
        event_rows = [{"step": e.step, "kind": e.kind, "label": e.label, "detail": e.detail} for e in events]
        extras = SegmentExtras(
            events=event_rows, meta=dict(meta or {}), user_meta=dict(user_meta or {}), user_removals=tuple(remove_meta)
        )
        self._commit.commit_stage(name, staged, extras, report, status)
        report.gen = self._commit.merge(name)
        return report

    @_writes_run
    def set_status(self, name: str, status: str) -> None:
        validate_run_name(name)
        with self._catalog() as con:
            con.execute(queries.UPDATE_RUN_STATUS, [status, name])

    @_writes_run
    def delete_run(self, name: str) -> None:
        """Remove a run: catalog rows first (so readers stop seeing it), then its files. A run another
        process is writing is not deleted: ``run_lock.WriterBusy`` once ``writer_wait_s`` has passed."""
        self.run_info(name)
        with self._catalog() as con:
            con.execute("BEGIN TRANSACTION")
            delete_run_rows(con, name)
            con.execute("COMMIT")
        shutil.rmtree(self.run_dir(name), ignore_errors=True)
        # a watched log's copy goes too: watching the log again into this name reads it from its start
        shutil.rmtree(spool_folder(self.root, name), ignore_errors=True)

    @_writes_run
    def write_analysis(
        self,
        name: str,
        gen: int,
        derived: pa.Table,
        spikes: Sequence[dict[str, Any]],
        summary: dict[str, Any] | None = None,
    ) -> None:
        """Atomically replace ``name``'s derived series, spike events and ``meta['analysis']`` (``summary``)
        with those of generation ``gen``; nothing is written for a run no longer in the catalog (deleted)."""
        self._commit.commit_analysis(name, gen, derived, spikes, summary)

    # ------------------------------------------------------------------ reads

    def _read_current(self, name: str, read: Callable[[RunInfo, RunLayout], _Result]) -> _Result:
        """``read(info, layout)`` of run ``name``'s current committed generation, without waiting for its
        writer. A writer publishes a new generation (or analyses) and then removes the files of the old
        one, which a read begun on the old one may then miss: that read starts again on the new one. A
        file missing while the run's generation stays the same is an error, as before."""
        info = self.run_info(name)
        for _ in range(READ_ATTEMPTS - 1):
            try:
                return read(info, self._layout(name))
            except (FileNotFoundError, duckdb.IOException, DamagedRunFile):  # a reader may name the miss as damage
                self.refresh()  # on an object store, a newer manifest may have replaced the objects
                newer = self.run_info(name)
                if (newer.gen, newer.analysis_gen) == (info.gen, info.analysis_gen):
                    raise
                info = newer
        return read(info, self._layout(name))

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
        return self._read_current(
            name,
            lambda info, layout: self._reader.read_series(
                info, layout, metric, start=start, end=end, buckets=buckets, rank=rank
            ),
        )

    def read_rank_heatmap(
        self, name: str, metric: str, *, buckets: int = 1000, start: int | None = None, end: int | None = None
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(ranks, steps, matrix)``: the per-rank mean of ``metric`` in ``buckets`` step columns,
        from the rank buckets materialised at compaction (NaN where a rank logged nothing)."""
        return self._read_current(
            name,
            lambda info, layout: self._reader.read_rank_heatmap(
                info, layout, metric, buckets=buckets, start=start, end=end
            ),
        )

    def read_long(self, name: str, *, include_derived: bool = False) -> pa.Table:
        """The full-fidelity long table of ``name`` (``step, rank, metric, value, wall_time``)."""
        return self._read_current(
            name, lambda info, layout: self._reader.read_long(info, layout, include_derived=include_derived)
        )

    def read_wall_times(self, name: str, metric: str = "loss") -> tuple[np.ndarray, np.ndarray]:
        """(steps, wall-clock times in s) of ``metric``'s run-level rows that carry a wall time, by step."""
        return self._read_current(name, lambda info, layout: self._reader.read_wall_times(info, layout, metric))

    def export(self, name: str, fmt: str, target: str | os.PathLike[str]) -> int:
        """Write the full-fidelity long table as CSV or Parquet to ``target``; returns rows written."""
        return self._read_current(name, lambda info, layout: self._reader.export(info, layout, fmt, target))

    def run_view(self, name: str, rank_metrics: Sequence[str] | None = None) -> RunView:
        """Full-fidelity ``RunView`` for analyses: run-level series (per-rank-only metrics become their
        cross-rank mean), the per-rank matrices of ``rank_metrics`` (default: ``step_time_s`` and every
        per-rank gradient norm or loss, which the decision tree's node 3 reads), events and metadata."""
        from stab_core.tree_nodes import is_rank_evidence

        def view(info: RunInfo, layout: RunLayout) -> RunView:
            wanted = rank_metrics
            if wanted is None:
                wanted = ["step_time_s", *(m for m in info.rank_metrics if is_rank_evidence(m))]
            return self._reader.run_view(info, layout, wanted, self.events(name))

        return self._read_current(name, view)
