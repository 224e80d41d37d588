"""The run store: per-rank shards and imported logs -> Parquet, catalogued and queried through DuckDB.

On disk (``<store>`` defaults to ``$STABSCOPE_STORE`` or ``~/.local/share/stabscope/store``)::

    catalog.duckdb                        runs, shard offsets, staged batches, events, spikes
    runs/run=<name>/long/g<gen>.parquet   (rank, step, metric, value, wall_time), sorted metric/rank/step
    runs/run=<name>/rollup/g<gen>.parquet cross-rank count/mean/min/max/std/argmin/argmax per step
    runs/run=<name>/rankb/g<gen>.parquet  per-rank step buckets for the rank x step heatmap
    runs/run=<name>/derived/a<gen>.parquet analyses materialised per generation (SNR, clip ratio)
    runs/run=<name>/staging/*.parquet     batches read from shards, not yet merged

Every write is two-phase: new files are written under temporary names and renamed, then one catalog
transaction makes them current. A crash at any point leaves the previous generation readable, and the
next run finishes the work (files no transaction refers to are garbage).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from ingest import queries as q
from ingest.errors import StabScopeError
from ingest.shards import LONG_SCHEMA, list_segments, read_segment, wide_to_long
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


def default_store_path() -> Path:
    """``$STABSCOPE_STORE``, else ``$XDG_DATA_HOME/stabscope/store`` (``~/.local/share/...``)."""
    env = os.environ.get("STABSCOPE_STORE")
    if env:
        return Path(env).expanduser()
    data_home = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(data_home) / "stabscope" / "store"


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


@dataclass(frozen=True)
class RunInfo:
    """One catalog row. Steps are optimizer steps; ``ranks`` counts ranks with per-rank data."""

    name: str
    created: datetime
    updated: datetime
    source: str
    status: str
    gen: int
    first_step: int | None
    last_step: int | None
    n_steps: int
    n_rows: int
    ranks: int
    metrics: list[str]
    rank_metrics: list[str]
    meta: dict[str, Any]
    rejected: int
    rejected_examples: list[str]
    heat_bucket: int
    analysis_gen: int

    def to_json(self) -> dict[str, Any]:
        """The ``stabscope runs --json`` object (contract: name, steps, ranks, metrics)."""
        return {
            "name": self.name,
            "steps": [self.first_step, self.last_step],
            "n_steps": self.n_steps,
            "ranks": self.ranks,
            "metrics": self.metrics,
            "rank_metrics": self.rank_metrics,
            "rows": self.n_rows,
            "status": self.status,
            "source": self.source,
            "created": self.created.isoformat(),
            "updated": self.updated.isoformat(),
            "rejected": self.rejected,
            "meta": self.meta,
        }


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


class Store:
    """A StabScope store rooted at a directory (created on first use)."""

    def __init__(self, root: str | os.PathLike[str] | None = None) -> None:
        self.root = Path(root).expanduser() if root is not None else default_store_path()
        self.root.mkdir(parents=True, exist_ok=True)
        self.catalog_path = self.root / "catalog.duckdb"
        self._local = threading.local()
        with self._catalog() as con:
            for statement in q.CATALOG_SCHEMA:
                con.execute(statement)

    # ------------------------------------------------------------------ connections

    @contextlib.contextmanager
    def _catalog(self, read_only: bool = False) -> Iterator[duckdb.DuckDBPyConnection]:
        """A short-lived catalog connection: the file lock is held only for one unit of work, so the
        app, ``watch`` and the CLI take turns; a lock held by another process is retried for 20 s.

        Connections always open read-write: DuckDB refuses a read-only and a read-write connection
        to one file inside one process, and threads of the app and ``watch`` may share a process.
        ``read_only`` documents intent only.
        """
        del read_only
        deadline = time.monotonic() + _LOCK_RETRY_S
        while True:
            try:
                con = duckdb.connect(str(self.catalog_path))
                break
            except (duckdb.IOException, duckdb.ConnectionException) as exc:
                if time.monotonic() > deadline:
                    raise StabScopeError(f"cannot open the store catalog {self.catalog_path}: {exc}") from exc
                time.sleep(0.05)
        try:
            yield con
        finally:
            con.close()

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
            self._local.engine = con
        return con

    def _arrow(self, sql: str, params: dict[str, Any]) -> pa.Table:
        """Run a named parameterised query on the Parquet engine and return an Arrow table."""
        table: pa.Table = self._engine().sql(sql, params=params).to_arrow_table()
        return table

    # ------------------------------------------------------------------ catalog reads

    def list_runs(self) -> list[RunInfo]:
        """Every run in the catalog, oldest first."""
        with self._catalog(read_only=True) as con:
            rows = con.execute(q.LIST_RUNS).fetchall()
        return [_run_info(r) for r in rows]

    def has_run(self, name: str) -> bool:
        """True when the catalog holds ``name`` (validated first)."""
        validate_run_name(name)
        with self._catalog(read_only=True) as con:
            return _one(con.execute(q.GET_RUN, [name])) is not None

    def run_info(self, name: str) -> RunInfo:
        """The catalog row of ``name``; a clear error when there is no such run."""
        validate_run_name(name)
        with self._catalog(read_only=True) as con:
            row = _one(con.execute(q.GET_RUN, [name]))
        if row is None:
            known = ", ".join(r.name for r in self.list_runs()[:10]) or "none"
            raise StabScopeError(f"no run named {name!r} in store {self.root} (runs: {known})")
        return _run_info(row)

    def events(self, name: str) -> list[RunEvent]:
        """Run events (schedule transitions, checkpoints, rollbacks, data switches) by step."""
        validate_run_name(name)
        with self._catalog(read_only=True) as con:
            rows = con.execute(q.GET_EVENTS, [name]).fetchall()
        return [RunEvent(int(s), str(k), str(lbl), json.loads(d)) for s, k, lbl, d in rows]

    def spikes(self, name: str) -> list[dict[str, Any]]:
        """The materialised spike events of ``name`` (the ``stabscope spikes --json`` objects)."""
        validate_run_name(name)
        with self._catalog(read_only=True) as con:
            rows = con.execute(q.GET_SPIKES, [name]).fetchall()
        return [json.loads(r[0]) for r in rows]

    def spike_summary(self) -> dict[str, dict[str, Any]]:
        """Per run: number of spikes, worst ratio, whether any diverged."""
        with self._catalog(read_only=True) as con:
            rows = con.execute(q.SPIKE_SUMMARY).fetchall()
        return {r[0]: {"n_spikes": int(r[1]), "worst_ratio": r[2], "any_diverged": bool(r[3])} for r in rows}

    def get_setting(self, key: str) -> str | None:
        with self._catalog(read_only=True) as con:
            row = _one(con.execute(q.GET_SETTING, [key]))
        return None if row is None else str(row[0])

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

    # ------------------------------------------------------------------ writes

    def ensure_run(self, name: str, source: str, meta: dict[str, Any] | None = None) -> RunInfo:
        """Create the catalog row for ``name`` if absent; merge ``meta`` into its metadata."""
        validate_run_name(name)
        with self._catalog() as con:
            row = _one(con.execute(q.GET_RUN, [name]))
            if row is None:
                con.execute(q.INSERT_RUN, [name, source, "finished", json.dumps(meta or {}, default=str)])
            elif meta:
                merged = {**json.loads(row[13]), **meta}
                con.execute(q.UPDATE_RUN_META, [json.dumps(merged, default=str), name])
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
        report = IngestReport(run=name, segments=len(segments))
        total = sum(max(p.stat().st_size - offsets.get(str(p.resolve()), 0), 0) for p in segments)
        done = 0
        stager = _Stager(self, name)
        new_offsets: dict[str, int] = {}
        meta: dict[str, Any] = {}
        events: list[dict[str, Any]] = []
        for path in segments:
            key = str(path.resolve())
            start = offsets.get(key, 0)
            if path.stat().st_size <= start:
                continue
            seg = read_segment(path, start)
            for table in seg.metrics:
                stager.add(wide_to_long(table))
            events.extend(seg.events)
            meta.update(seg.meta)
            report.frames += seg.frames
            report.rejected += len(seg.errors)
            report.rejected_examples.extend(str(e) for e in seg.errors[:5])
            if seg.torn_tail:
                report.torn.append(f"{path}: byte {seg.end_offset}: unfinished last frame (kept for later)")
            new_offsets[key] = seg.end_offset
            done += seg.end_offset - start
            if progress:
                progress(done, total)
        staged = stager.finish()
        report.rows = stager.rows
        report.events = len(events)
        _failpoint("after_stage_files")
        self._commit_stage(name, staged, new_offsets, events, meta, report, status)
        _failpoint("after_stage_commit")
        report.gen = self._merge(name)
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
        self._commit_stage(name, staged, {}, ev, meta or {}, report, "finished")
        report.gen = self._merge(name)
        return report

    def import_parsed(self, name: str, parsed: Any) -> IngestReport:
        """Store a ``ingest.formats.ParsedLog`` as run ``name``."""
        examples = [f"{f}: line {ln}: {why}" for f, ln, why in parsed.skipped_examples]
        return self.import_table(
            name,
            parsed.table,
            source=f"import:{parsed.format}:" + ",".join(parsed.source_files),
            events=parsed.events,
            meta=parsed.meta,
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
        offsets: dict[str, int],
        events: list[dict[str, Any]],
        meta: dict[str, Any],
        report: IngestReport,
        status: str,
    ) -> None:
        with self._catalog() as con:
            con.execute("BEGIN TRANSACTION")
            seq = int(_one(con.execute(q.NEXT_STAGED_SEQ, [name]))[0])  # type: ignore[index]
            for i, path in enumerate(staged):
                con.execute(q.ADD_STAGED, [name, path, seq + i])
            for path, off in offsets.items():
                con.execute(q.UPSERT_OFFSET, [name, path, off])
            for e in events:
                con.execute(
                    q.ADD_EVENT,
                    [name, e["step"], e["kind"], e["label"], json.dumps(e["detail"], default=str)],
                )
            row = _one(con.execute(q.GET_RUN, [name]))
            assert row is not None
            if meta:
                merged = {**json.loads(row[13]), **meta}
                con.execute(q.UPDATE_RUN_META, [json.dumps(merged, default=str), name])
            if report.rejected:
                examples = (json.loads(row[15]) + report.rejected_examples)[:20]
                con.execute(q.ADD_REJECTED, [report.rejected, json.dumps(examples), name])
            con.execute(q.UPDATE_RUN_STATUS, [status, name])
            con.execute("COMMIT")

    def _finish_pending(self, name: str) -> None:
        """Complete a merge a crash interrupted, and remove files no transaction refers to."""
        with self._catalog(read_only=True) as con:
            staged = [r[0] for r in con.execute(q.GET_STAGED, [name]).fetchall()]
        if staged:
            self._merge(name)
        self._collect_garbage(name)

    def _collect_garbage(self, name: str) -> None:
        info = self.run_info(name)
        with self._catalog(read_only=True) as con:
            staged = {r[0] for r in con.execute(q.GET_STAGED, [name]).fetchall()}
        keep = {f"g{info.gen:06d}.parquet", f"a{info.analysis_gen:06d}.parquet"}
        run_dir = self.run_dir(name)
        for kind in ("long", "rollup", "rankb", "derived", "staging"):
            folder = run_dir / kind
            if not folder.is_dir():
                continue
            for path in folder.iterdir():
                if path.name not in keep and str(path) not in staged:
                    path.unlink(missing_ok=True)

    def _merge(self, name: str) -> int:
        """Fold staged batches into a new generation of long, rollup and rank-bucket files."""
        info = self.run_info(name)
        with self._catalog(read_only=True) as con:
            staged = [r[0] for r in con.execute(q.GET_STAGED, [name]).fetchall()]
        if not staged:
            return info.gen
        gen = info.gen + 1
        run_dir = self.run_dir(name)
        sources = self._files(name, "long", info.gen) + staged
        long_path = _tmp_target(run_dir / "long" / f"g{gen:06d}.parquet")
        self._engine().execute(q.MERGE_LONG, {"sources": sources, "target": str(long_path)})
        summary = _one(self._engine().execute(q.LONG_SUMMARY, {"files": [str(long_path)]}))
        assert summary is not None
        first, last, n_steps, n_rows, ranks = summary
        metric_rows = self._engine().execute(q.LONG_METRICS, {"files": [str(long_path)]}).fetchall()
        rollup_path = _tmp_target(run_dir / "rollup" / f"g{gen:06d}.parquet")
        self._engine().execute(q.BUILD_ROLLUP, {"files": [str(long_path)], "target": str(rollup_path)})
        span = 0 if first is None else int(last) - int(first) + 1
        width = max(1, -(-span // HEATMAP_MAX_BUCKETS))
        rankb_path = _tmp_target(run_dir / "rankb" / f"g{gen:06d}.parquet")
        self._engine().execute(
            q.BUILD_RANK_BUCKETS, {"files": [str(long_path)], "target": str(rankb_path), "width": width}
        )
        _failpoint("after_merge_files")
        for tmp in (long_path, rollup_path, rankb_path):
            tmp.rename(_final_path(tmp))
        metrics = sorted(m for m, _ in metric_rows)
        rank_metrics = sorted(m for m, per_rank in metric_rows if per_rank)
        with self._catalog() as con:
            con.execute("BEGIN TRANSACTION")
            con.execute(
                q.COMMIT_GENERATION,
                [
                    gen,
                    first,
                    last,
                    n_steps or 0,
                    n_rows or 0,
                    ranks or 0,
                    json.dumps(metrics),
                    json.dumps(rank_metrics),
                    width,
                    name,
                ],
            )
            con.execute(q.CLEAR_STAGED, [name])
            con.execute("COMMIT")
        _failpoint("after_merge_commit")
        self._collect_garbage(name)
        self._materialise_analysis(name)
        return gen

    # ------------------------------------------------------------------ analyses

    def _materialise_analysis(self, name: str) -> None:
        """Hook for the per-generation analyses (SNR, clipping, spikes); see ``ingest.analyses``."""
        from ingest import analyses  # local: analyses import this module

        analyses.materialise(self, name)

    def write_analysis(self, name: str, gen: int, derived: pa.Table, spikes: Sequence[dict[str, Any]]) -> None:
        """Atomically replace ``name``'s derived series and spike events with those of ``gen``."""
        path = self.run_dir(name) / "derived" / f"a{gen:06d}.parquet"
        tmp = _tmp_target(path)
        pq.write_table(_conform_long(derived), tmp, compression="zstd")
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
        if buckets:
            t = self._arrow(q.SERIES_RUN_LEVEL_BUCKETS, {**params, "buckets": int(buckets)})
            return _bucketed(metric, t, source)
        t = self._arrow(q.SERIES_RUN_LEVEL, params)
        steps, values = _col(t, "step", np.int64), _col(t, "value")
        return SeriesData(metric, steps, values, values, values, source, False)

    def _series_source(self, info: RunInfo, metric: str, rank: int | None) -> tuple[list[str], int, str]:
        derived = self._files(info.name, "derived", info.analysis_gen)
        if rank is not None and rank >= 0:
            return self._files(info.name, "long", info.gen), rank, "rank"
        if metric not in info.metrics:
            return derived, RUN_RANK, "derived"
        if metric in info.rank_metrics and not self._has_run_level(info, metric):
            return self._files(info.name, "rollup", info.gen), RUN_RANK, "ranks"
        return self._files(info.name, "long", info.gen), RUN_RANK, "run"

    def _has_run_level(self, info: RunInfo, metric: str) -> bool:
        files = self._files(info.name, "long", info.gen)
        row = _one(self._engine().execute(q.HAS_RUN_LEVEL, {"files": files, "metric": metric}))
        return bool(row and row[0])

    def read_rank_heatmap(
        self, name: str, metric: str, *, buckets: int = 1000, start: int | None = None, end: int | None = None
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(ranks, steps, matrix)``: the per-rank mean of ``metric`` in ``buckets`` step columns,
        from the rank buckets materialised at compaction (NaN where a rank logged nothing)."""
        info = self.run_info(name)
        files = self._files(name, "rankb", info.gen)
        lo = info.first_step if start is None else start
        hi = info.last_step if end is None else end
        if not files or metric not in info.rank_metrics or lo is None or hi is None:
            return np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros((0, 0))
        params = {"files": files, "metric": metric, "lo": int(lo), "hi": int(hi), "buckets": int(buckets)}
        t = self._arrow(q.RANK_HEATMAP, params)
        ranks_col, cols = _col(t, "rank", np.int64), _col(t, "col", np.int64)
        ranks = np.unique(ranks_col)
        ncols = int(cols.max()) + 1 if cols.size else 0
        matrix = np.full((ranks.size, ncols), np.nan)
        matrix[np.searchsorted(ranks, ranks_col), cols] = _col(t, "mean")
        steps = np.full(ncols, -1, np.int64)
        steps[cols] = _col(t, "step", np.int64)
        return ranks, steps, matrix

    def read_long(self, name: str, *, include_derived: bool = False) -> pa.Table:
        """The full-fidelity long table of ``name`` (``step, rank, metric, value, wall_time``)."""
        info = self.run_info(name)
        files = self._files(name, "long", info.gen)
        if include_derived:
            files += self._files(name, "derived", info.analysis_gen)
        if not files:
            return LONG_SCHEMA.empty_table()
        return self._arrow(q.READ_LONG, {"files": files})

    def export(self, name: str, fmt: str, target: str | os.PathLike[str]) -> int:
        """Write the full-fidelity long table as CSV or Parquet to ``target``; returns rows written."""
        info = self.run_info(name)
        if fmt not in ("csv", "parquet"):
            raise StabScopeError(f"unknown export format {fmt!r}: expected 'csv' or 'parquet'")
        files = self._files(name, "long", info.gen)
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

    def run_view(self, name: str, rank_metrics: Sequence[str] = ("grad_norm_local", "loss", "step_time_s")) -> RunView:
        """Full-fidelity ``RunView`` for analyses: run-level series (per-rank-only metrics become their
        cross-rank mean), the per-rank matrices of ``rank_metrics``, events and metadata."""
        info = self.run_info(name)
        files = self._files(name, "long", info.gen)
        series: dict[str, Series] = {}
        per_rank: dict[str, RankMatrix] = {}
        if files:
            t = self._arrow(q.ALL_RUN_LEVEL, {"files": files})
            series.update(_split_by_metric(t))
            for metric in info.rank_metrics:
                if metric not in series:
                    s = self.read_series(name, metric)
                    series[metric] = Series(s.steps, s.values)
            for metric in rank_metrics:
                if metric in info.rank_metrics:
                    per_rank[metric] = _rank_matrix(self._arrow(q.RANK_MATRIX, {"files": files, "metric": metric}))
        return RunView(
            name=name, series=series, per_rank=per_rank, events=tuple(self.events(name)), meta=dict(info.meta)
        )


class _Stager:
    """Accumulates long rows and writes them as staging Parquet files of at most ``STAGE_ROWS`` rows."""

    def __init__(self, store: Store, name: str) -> None:
        self.folder = store.run_dir(name) / "staging"
        self.folder.mkdir(parents=True, exist_ok=True)
        self.prefix = f"{time.time_ns():020d}-{uuid.uuid4().hex[:8]}"
        self.pending: list[pa.Table] = []
        self.pending_rows = 0
        self.rows = 0
        self.files: list[str] = []

    def add(self, table: pa.Table) -> None:
        if table.num_rows == 0:
            return
        self.pending.append(table)
        self.pending_rows += table.num_rows
        if self.pending_rows >= STAGE_ROWS:
            self._write()

    def _write(self) -> None:
        table = pa.concat_tables(self.pending)
        # _ord orders writes: the highest wins when (rank, step, metric) repeats.
        base = (len(self.files) + 1) << 40
        table = table.append_column("_ord", pa.array(np.arange(base, base + table.num_rows, dtype=np.int64)))
        path = self.folder / f"{self.prefix}-{len(self.files):05d}.parquet"
        tmp = _tmp_target(path)
        pq.write_table(table, tmp, compression="zstd")
        tmp.rename(path)
        self.files.append(str(path))
        self.rows += table.num_rows
        self.pending, self.pending_rows = [], 0

    def finish(self) -> list[str]:
        if self.pending:
            self._write()
        return self.files


def _tmp_target(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    return path.with_name(path.name + f".{uuid.uuid4().hex[:8]}.tmp")


def _one(cursor: duckdb.DuckDBPyConnection) -> tuple[Any, ...] | None:
    """The first row of a result, consuming the rest (DuckDB wants results finished before reuse)."""
    rows = cursor.fetchall()
    return rows[0] if rows else None


def _final_path(tmp: Path) -> Path:
    """The name a ``_tmp_target`` file is renamed to once complete."""
    return tmp.with_name(tmp.name.rsplit(".", 2)[0])


def _conform_long(table: pa.Table) -> pa.Table:
    missing = [c for c in ("rank", "step", "metric", "value") if c not in table.column_names]
    if missing:
        raise StabScopeError(f"table lacks the long-form columns {missing} (expected {LONG_SCHEMA.names})")
    if "wall_time" not in table.column_names:
        table = table.append_column("wall_time", pa.nulls(table.num_rows, pa.float64()))
    return table.select(LONG_SCHEMA.names).cast(LONG_SCHEMA)


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
    metrics = np.asarray(t.column("metric").to_numpy(zero_copy_only=False), dtype=object)
    steps, values = _col(t, "step", np.int64), _col(t, "value")
    out: dict[str, Series] = {}
    if metrics.size == 0:
        return out
    cuts = np.flatnonzero(metrics[1:] != metrics[:-1]) + 1
    for a, b in zip(np.r_[0, cuts], np.r_[cuts, metrics.size], strict=True):
        out[str(metrics[a])] = Series(steps[a:b].copy(), values[a:b].copy())
    return out


def _rank_matrix(t: pa.Table) -> RankMatrix:
    ranks_col, steps_col, values = _col(t, "rank", np.int64), _col(t, "step", np.int64), _col(t, "value")
    ranks, steps = np.unique(ranks_col), np.unique(steps_col)
    matrix = np.full((ranks.size, steps.size), np.nan)
    present = np.zeros((ranks.size, steps.size), bool)
    i, j = np.searchsorted(ranks, ranks_col), np.searchsorted(steps, steps_col)
    matrix[i, j] = values
    present[i, j] = True
    return RankMatrix(ranks, steps, matrix, present)
