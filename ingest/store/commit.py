"""The commit protocol: stage, publish, recover, collect garbage.

Every write is two-phase. New files are written under temporary names (``layout.tmp_target``) and
renamed to their final names (``publish``); then one catalog transaction makes them current: staged
batches (``commit_stage``), a new generation (``merge``, ``commit_first_generation``) or a run's
analyses (``commit_analysis``). A crash at any point leaves the previous state readable, and the next
writer finishes the work (``finish_pending``): staged batches no generation holds yet are merged, and
files no transaction refers to are garbage (``collect_garbage``). ``STABSCOPE_CRASH_AT`` names a
failpoint to crash at, for the crash-safety tests.

The file operations the protocol needs are ``publish`` (rename a complete file into place) and
``collect_garbage`` (list a run's folders, remove a file). A store on object storage runs this same
protocol on its local cache directory, and publishes the run's committed state to the objects after
each write (``remote``: data objects first, a conditional manifest last).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import duckdb
import numpy as np
import pyarrow as pa

from ingest.store import queries
from ingest.store.blocks import conform_long, write_by_metric
from ingest.store.catalog import Catalog, change_meta, commit_generation, fetch_one, read_run_row
from ingest.store.delta import write_delta
from ingest.store.full_merge import merge_sources
from ingest.store.generation import GenerationFiles
from ingest.store.layout import DERIVED, LONG, TAIL, RunLayout, final_path, part_generations, tmp_target
from ingest.store.run_info import RunInfo
from ingest.store.run_meta import merge_meta
from ingest.store.stage import SegmentExtras
from ingest.store.types import IngestReport


def failpoint(stage: str) -> None:
    """Crash here when ``STABSCOPE_CRASH_AT`` names this stage: the crash-safety tests use it."""
    if os.environ.get("STABSCOPE_CRASH_AT") == stage:
        os._exit(137)


def publish(paths: Sequence[Path]) -> None:
    """Rename complete temporary files to their final names (not current until a transaction says so)."""
    for tmp in paths:
        tmp.rename(final_path(tmp))


class CommitProtocol:
    """Commits to the store whose catalog is ``catalog``: ``layout(name)`` gives a run's files,
    ``run_info(name)`` its current catalog row, ``engine()`` the Parquet engine of the thread, and
    ``after_generation(name)`` runs after each new generation (the store's ``on_generation`` hook)."""

    def __init__(
        self,
        catalog: Catalog,
        *,
        layout: Callable[[str], RunLayout],
        run_info: Callable[[str], RunInfo],
        engine: Callable[[], duckdb.DuckDBPyConnection],
        after_generation: Callable[[str], None],
    ) -> None:
        self.catalog = catalog
        self.layout = layout
        self.run_info = run_info
        self.engine = engine
        self.after_generation = after_generation

    def commit_stage(
        self,
        name: str,
        staged: list[str],
        extras: SegmentExtras,
        report: IngestReport,
        status: str,
        generation: tuple[int, GenerationFiles] | None = None,
    ) -> None:
        """One transaction: staged files (or a whole new ``generation``), shard offsets, events,
        metadata, rejected records and status."""
        with self.catalog.unit() as con:
            con.execute("BEGIN TRANSACTION")
            seq = int(fetch_one(con.execute(queries.NEXT_STAGED_SEQ, [name]))[0])  # type: ignore[index]
            for i, path in enumerate(staged):
                con.execute(queries.ADD_STAGED, [name, path, seq + i])
            for path, offset in extras.offsets.items():
                con.execute(queries.UPSERT_OFFSET, [name, path, offset])
            for e in extras.events:
                con.execute(
                    queries.ADD_EVENT,
                    [name, e["step"], e["kind"], e["label"], json.dumps(e["detail"], default=str)],
                )
            if extras.meta:
                change_meta(con, name, lambda meta: merge_meta(meta, extras.meta))
            if extras.user_meta or extras.user_removals:  # after the parsed values: the user's win
                change_meta(
                    con,
                    name,
                    lambda meta: merge_meta(meta, extras.user_meta, by_user=True, remove=extras.user_removals),
                )
            if report.rejected:
                examples = (json.loads(read_run_row(con, name)["rejected_examples"]) + report.rejected_examples)[:20]
                con.execute(queries.ADD_REJECTED, [report.rejected, json.dumps(examples), name])
            con.execute(queries.UPDATE_RUN_STATUS, [status, name])
            if generation is not None:
                commit_generation(con, name, *generation)
            con.execute("COMMIT")

    def commit_first_generation(
        self, name: str, files: GenerationFiles, extras: SegmentExtras, report: IngestReport, status: str
    ) -> None:
        """Publish a first generation written in one pass (no staged batches) with what was read besides
        its rows, in one transaction."""
        failpoint("after_stage_files")
        failpoint("after_merge_files")
        publish(files.paths())
        self.commit_stage(name, [], extras, report, status, (1, files))
        failpoint("after_stage_commit")
        failpoint("after_merge_commit")
        self.collect_garbage(name)
        self.after_generation(name)

    def merge(self, name: str) -> int:
        """Fold staged batches into a new generation: a delta part on the current base when the
        staged rows only extend each (metric, rank) past its last step (see ``delta``), else a full
        merge of the base, its deltas and the staged rows (which also consolidates the deltas)."""
        info = self.run_info(name)
        staged = self.catalog.staged_files(name)
        if not staged:
            return info.gen
        gen = info.gen + 1
        layout = self.layout(name)
        parts = [
            (long, next(iter(layout.existing(TAIL, g)), None))
            for g in part_generations(info)
            for long in layout.existing(LONG, g)
        ]
        files = write_delta(info, parts, staged, layout, gen) if parts else None
        if files is not None:
            base_gen = info.base_gen
            failpoint("after_delta_files")
        else:
            base_gen = gen
            files = merge_sources(self.engine(), [long for long, _ in parts] + staged, layout, gen)
            failpoint("after_merge_files")
        self._commit_merge(name, gen, files, base_gen)
        failpoint("after_delta_commit" if base_gen != gen else "after_merge_commit")
        self.collect_garbage(name)
        self.after_generation(name)
        return gen

    def merge_from(self, name: str, sources: Sequence[str], *, forget_offsets: bool = False) -> int:
        """A new full generation of ``name`` from ``sources`` (long-format Parquet files, lowest priority
        first) in place of its current files and staged batches, committed as ``merge`` commits;
        ``forget_offsets`` drops the run's shard offsets in the same transaction, so that its next
        compaction reads its shards again. ``stabscope check --repair`` merges a run again this way
        from whichever intact copy of its rows it has."""
        gen = self.run_info(name).gen + 1
        files = merge_sources(self.engine(), list(sources), self.layout(name), gen)
        self._commit_merge(name, gen, files, gen, forget_offsets=forget_offsets)
        self.collect_garbage(name)
        self.after_generation(name)
        return gen

    def adopt(self, name: str, gen: int, files: GenerationFiles, base_gen: int) -> None:
        """Make generation ``gen`` (on base ``base_gen``), already complete under its final file names
        (``files`` gives its figures), current, and its analyses due again: a catalog older than the
        run's files (restored from a backup) learns the generation they hold. Files of the catalog's
        older generation become garbage."""
        with self.catalog.unit() as con:
            con.execute("BEGIN TRANSACTION")
            commit_generation(con, name, gen, files, base_gen)
            con.execute(queries.SET_ANALYSIS_GEN, [0, name])
            con.execute("COMMIT")
        self.collect_garbage(name)
        self.after_generation(name)

    def _commit_merge(
        self, name: str, gen: int, files: GenerationFiles, base_gen: int, *, forget_offsets: bool = False
    ) -> None:
        """Publish a merge's files, then one transaction: the new generation, no staged batch left."""
        publish(files.paths())
        with self.catalog.unit() as con:
            con.execute("BEGIN TRANSACTION")
            commit_generation(con, name, gen, files, base_gen)
            con.execute(queries.CLEAR_STAGED, [name])
            if forget_offsets:
                con.execute(queries.DELETE_RUN_OFFSETS, [name])
            con.execute("COMMIT")

    def finish_pending(self, name: str) -> None:
        """Complete a merge a crash interrupted, and remove files no transaction refers to."""
        if self.catalog.staged_files(name):
            self.merge(name)
        self.collect_garbage(name)
        self.after_generation(name)  # a no-op unless a crash came between merge and analyses

    def has_run(self, name: str) -> bool:
        """True when the catalog holds a row for run ``name`` (read now, not from a cached snapshot)."""
        with self.catalog.unit() as con:
            return fetch_one(con.execute(queries.GET_RUN, [name])) is not None

    def collect_garbage(self, name: str) -> None:
        """Remove the files of run ``name`` that no committed state refers to."""
        info = self.run_info(name)
        staged = set(self.catalog.staged_files(name))
        for path in list(self.layout(name).garbage(info, staged)):
            path.unlink(missing_ok=True)

    def commit_analysis(
        self,
        name: str,
        gen: int,
        derived: pa.Table,
        spikes: Sequence[dict[str, Any]],
        summary: dict[str, Any] | None,
    ) -> None:
        """Replace ``name``'s derived series, spike events and ``meta['analysis']`` (``summary``) with
        those of generation ``gen``: the file published first, then one transaction. A run no longer in
        the catalog (deleted while its analyses were computed) gets nothing: no file, no rows."""
        if not self.has_run(name):
            return
        path = self.layout(name).file(DERIVED, gen)
        tmp = tmp_target(path)
        write_by_metric(conform_long(derived), tmp)
        publish([tmp])
        with self.catalog.unit() as con:
            con.execute("BEGIN TRANSACTION")
            if fetch_one(con.execute(queries.GET_RUN, [name])) is None:
                con.execute("ROLLBACK")
                path.unlink(missing_ok=True)
                return
            con.execute(queries.DELETE_RUN_SPIKES, [name])
            for i, s in enumerate(spikes):
                con.execute(queries.ADD_SPIKE, spike_row(name, i, s))
            if summary is not None:
                change_meta(con, name, lambda meta: {**meta, "analysis": summary})
            con.execute(queries.SET_ANALYSIS_GEN, [gen, name])
            con.execute("COMMIT")
        self.collect_garbage(name)


def spike_row(name: str, index: int, spike: dict[str, Any]) -> list[Any]:
    """``queries.ADD_SPIKE``'s parameters for run ``name``'s ``index``-th spike object."""
    return [
        name,
        index,
        spike["metric"],
        spike["start"],
        spike["peak"],
        spike["end"],
        _finite_or_none(spike.get("ratio")),
        bool(spike["recovered"]),
        spike["cause"],
        float(spike["confidence"]),
        json.dumps(spike, default=str),
    ]


def _finite_or_none(x: Any) -> float | None:
    return float(x) if x is not None and np.isfinite(x) else None
