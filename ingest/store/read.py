"""Reads of a run's files: series (full fidelity or downsampled), the rank heatmap, the per-rank matrix,
the long table, wall times, export and the ``RunView`` the analyses take.

A generation is a base plus delta parts (see ``delta``); every read here combines the parts' files.
Series and matrices are read with numpy from each (metric, rank)'s row ranges, found through the
block index of the file (``blocks.file_blocks``: from the footer, or computed from the rows for a
file written before files carried one: the one route for files of older versions). DuckDB runs
where it is the better tool: scans of every run-level row, the ordered long table and its export.
"""

from __future__ import annotations

import os
import threading
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Final

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from ingest.errors import StabScopeError
from ingest.long_schema import LONG_SCHEMA
from ingest.store import queries
from ingest.store.blocks import (
    Piece,
    SourceReader,
    column_numpy,
    file_blocks,
    plan_blocks,
    read_metric,
    stats_range,
)
from ingest.store.downsample import downsample
from ingest.store.layout import DERIVED, LONG, RANK_BUCKETS, ROLLUP, RUN_LEVEL, RunLayout, part_generations
from ingest.store.report_meta import suspect_lines
from ingest.store.run_info import RunInfo
from ingest.store.storage_errors import DamagedRunFile, damaged_file, damaged_file_in
from ingest.store.types import SeriesData, empty_series
from stab_core.metrics import RUN_RANK, SUSPECT_LINES
from stab_core.rank_heatmap import heatmap_columns
from stab_core.runview import RankMatrix, RunEvent, RunView, Series

_ROLLUP_COLUMNS: Final = ["step", "mean", "min", "max", "n_nonfinite"]


class StoreReader:
    """Reads of the files of the store at ``root``. What it learns of a file (its footer, its block
    index, the metrics of a derived file) is kept: files never change once written (a new generation
    has new names)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._local = threading.local()
        self._blocks_cache: dict[str, dict[tuple[str, int], list[Piece]]] = {}
        self._derived_cache: dict[str, frozenset[str]] = {}
        self.open_remote: Callable[[str], Any] | None = None
        """For an object store: a file object reading the object of a cache path by ranges (a file that
        ``layout.RunLayout.part_sources`` named without fetching it)."""

    def engine(self) -> duckdb.DuckDBPyConnection:
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
        try:
            table: pa.Table = self.engine().sql(sql, params=params).to_arrow_table()
        except duckdb.Error as exc:
            raise self._damage_named(exc) from exc
        return table

    def _damage_named(self, exc: duckdb.Error) -> Exception:
        """A DuckDB read error on a damaged run file as ``storage_errors.damaged_file``; else ``exc``."""
        path = damaged_file_in(str(exc), self.root)
        return exc if path is None else damaged_file(path, exc)

    def _reader(self, path: str) -> SourceReader:
        """A reader of ``path``'s step and value row ranges, kept per thread (its footer is parsed once).
        A file whose footer cannot be read (truncated, overwritten) is named as damaged."""
        readers: dict[str, SourceReader] = self._local.__dict__.setdefault("readers", {})
        reader = readers.get(path)
        if reader is None:
            try:
                remote = self.open_remote if self.open_remote is not None and not os.path.exists(path) else None
                source = remote(path) if remote is not None else None
                reader = readers[path] = SourceReader(path, ("step", "value"), source)
            except (OSError, pa.ArrowException) as exc:
                raise damaged_file(path, exc) from exc
        return reader

    def blocks(self, path: str) -> dict[tuple[str, int], list[Piece]]:
        """The row ranges of each (metric, rank) of a file, in step order."""
        blocks = self._blocks_cache.get(path)
        if blocks is None:
            blocks = self._blocks_cache[path] = plan_blocks([file_blocks(path, self._reader(path).file)])
        return blocks

    # ------------------------------------------------------------------ series

    def read_series(
        self,
        info: RunInfo,
        layout: RunLayout,
        metric: str,
        *,
        start: int | None,
        end: int | None,
        buckets: int | None,
        rank: int | None,
    ) -> SeriesData:
        """See ``Store.read_series``."""
        lo = info.first_step if start is None else start
        hi = info.last_step if end is None else end
        if lo is None or hi is None or hi < lo:
            return empty_series(metric)
        files, want_rank, source = self._series_source(info, layout, metric, rank)
        if not files:
            return empty_series(metric)
        if source == "ranks":
            return self._rollup_series(files, metric, int(lo), int(hi), buckets)
        return self._rows_series(files, source, metric, want_rank, int(lo), int(hi), buckets)

    def _series_source(
        self, info: RunInfo, layout: RunLayout, metric: str, rank: int | None
    ) -> tuple[list[str], int, str]:
        """The files to read, the rank to read in them, and the series' source: ``rank`` (one rank's
        rows), ``derived`` (an analysis), ``ranks`` (the rollup of a per-rank-only metric) or ``run``."""
        if rank is not None and rank >= 0:  # a few row ranges of the long file
            return layout.part_sources(info, LONG), rank, "rank"
        if metric not in info.metrics:
            derived = layout.existing(DERIVED, info.analysis_gen)
            return [f for f in derived if metric in self._derived_metrics(f)], RUN_RANK, "derived"
        run_level = layout.part_files(info, RUN_LEVEL) or layout.part_files(info, LONG)
        if metric in info.rank_metrics and not any((metric, RUN_RANK) in self.blocks(f) for f in run_level):
            return layout.part_files(info, ROLLUP), RUN_RANK, "ranks"
        return run_level, RUN_RANK, "run"

    def _rollup_series(self, files: list[str], metric: str, lo: int, hi: int, buckets: int | None) -> SeriesData:
        """The cross-rank mean with its min/max band over steps [lo, hi], from the rollup of each part."""
        t = self._rollup_rows(files, metric, _ROLLUP_COLUMNS)
        steps = column_numpy(t.column("step")) if t.num_rows else np.zeros(0, np.int64)
        keep = slice(int(np.searchsorted(steps, lo)), int(np.searchsorted(steps, hi, side="right")))
        t, steps = t.slice(keep.start, keep.stop - keep.start), steps[keep]
        low, high, mean = (_column(t, c) for c in ("min", "max", "mean"))
        nonfinite = _column(t, "n_nonfinite", np.int64)
        if buckets:
            return downsample(
                metric,
                "ranks",
                steps,
                low,
                high,
                mean,
                lo=lo,
                hi=hi,
                buckets=buckets,
                nonfinite=nonfinite,
                nan_is_null=True,
            )
        return SeriesData(metric, steps, mean, low, high, "ranks", bucketed=False, n_nonfinite=nonfinite)

    def _rollup_rows(self, files: list[str], metric: str, columns: list[str]) -> pa.Table:
        """The rollup rows of ``metric`` over parts, by step: each part's rows before the first step
        of any later part (whose rows replace them from there on)."""
        tables = [read_metric(self._reader(f).file, metric, columns).combine_chunks() for f in files]
        cut: int | None = None
        for i in reversed(range(len(tables))):
            t = tables[i]
            steps = column_numpy(t.column("step")) if t.num_rows else np.zeros(0, np.int64)
            if cut is not None:
                t = tables[i] = t.slice(0, int(np.searchsorted(steps, cut)))
            if steps.size:
                cut = int(steps[0]) if cut is None else min(cut, int(steps[0]))
        return pa.concat_tables(tables)

    def _rows_series(
        self, files: list[str], source: str, metric: str, rank: int, lo: int, hi: int, buckets: int | None
    ) -> SeriesData:
        """One rank's (or the run level's) rows of ``metric`` over steps [lo, hi], from the row ranges
        of each part (rows of parts never share a (metric, rank, step))."""
        windows = [self._block_window(f, metric, rank, lo, hi) for f in files]
        steps = np.concatenate([np.zeros(0, np.int64), *(w[0] for w in windows)]).astype(np.int64, copy=False)
        values = np.concatenate([np.zeros(0), *(w[1] for w in windows)]).astype(float, copy=False)
        valid = np.concatenate([np.zeros(0, bool), *(w[2] for w in windows)])
        if buckets:
            return downsample(
                metric,
                source,
                steps,
                values,
                values,
                values,
                lo=lo,
                hi=hi,
                buckets=buckets,
                valid=None if valid.all() else valid,
            )
        if source == "rank" and not steps.size:
            return empty_series(metric)
        return SeriesData(metric, steps, values, values, values, source, bucketed=False)

    def _block_window(
        self, path: str, metric: str, rank: int, lo: int, hi: int
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Steps [lo, hi] of one (metric, rank) straight from its row ranges in a file: ``(steps, values,
        valid)`` (a value-less record reads as NaN, and not valid). A few thousand rows cost one or two
        row groups."""
        tables: list[pa.Table] = []
        for piece in self.blocks(path).get((metric, rank), []):
            if hi < piece.lo or lo > piece.hi:
                continue
            start, end = piece.start, piece.end
            if end - start == piece.hi - piece.lo + 1:  # one row per step: the rows are known exactly
                start, end = start + max(0, lo - piece.lo), start + min(end - start, hi - piece.lo + 1)
            tables.append(self._reader(path).range(start, end))
        if not tables:
            return np.zeros(0, np.int64), np.zeros(0), np.zeros(0, bool)
        table = pa.concat_tables(tables) if len(tables) != 1 else tables[0]
        steps, values = column_numpy(table.column("step")), column_numpy(table.column("value"), float)
        value_column = table.column("value")
        valid = value_column.is_valid().to_numpy(zero_copy_only=False) if value_column.null_count else None
        keep = slice(int(np.searchsorted(steps, lo)), int(np.searchsorted(steps, hi, side="right")))
        steps, values = steps[keep], values[keep]
        return steps, values, np.ones(steps.size, bool) if valid is None else valid[keep]

    def _derived_metrics(self, path: str) -> frozenset[str]:
        """The metrics a derived file holds (read once per file: files never change)."""
        metrics = self._derived_cache.get(path)
        if metrics is None:
            meta = self._reader(path).file.metadata
            ranges = [stats_range(meta.row_group(g), "metric") for g in range(meta.num_row_groups)]
            if all(r is not None and r[0] == r[1] for r in ranges):  # one metric per row group
                metrics = frozenset(str(r[0]) for r in ranges if r is not None)
            else:
                column = pq.read_table(path, columns=["metric"]).column("metric")
                metrics = frozenset(str(m) for m in pc.unique(column).to_pylist())
            self._derived_cache[path] = metrics
        return metrics

    # ------------------------------------------------------------------ ranks

    def rank_matrix(self, info: RunInfo, layout: RunLayout, metric: str) -> RankMatrix:
        """The per-rank matrix of ``metric``: each rank's blocks read straight from their row ranges,
        in part order, on the step axis of the rollup (every step some rank logged)."""
        by_rank: dict[int, list[tuple[SourceReader, Piece]]] = {}
        for path in layout.part_files(info, LONG):
            for (m, r), pieces in self.blocks(path).items():
                if m == metric and r >= 0:
                    by_rank.setdefault(r, []).extend((self._reader(path), p) for p in pieces)
        rank_blocks = sorted(by_rank.items())
        rollup = layout.part_files(info, ROLLUP)
        if rollup:
            axis_parts = [
                column_numpy(read_metric(self._reader(f).file, metric, ["step"]).column("step")) for f in rollup
            ]
        else:  # the steps of the ranks' rows themselves
            axis_parts = [
                column_numpy(t.column("step"))
                for _, read in rank_blocks
                for reader, piece in read
                for t in reader.rows(piece.start, piece.end)
            ]
        axis = np.unique(np.concatenate([np.zeros(0, np.int64), *axis_parts]).astype(np.int64, copy=False))
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
        self, info: RunInfo, layout: RunLayout, metric: str, *, buckets: int, start: int | None, end: int | None
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """See ``Store.read_rank_heatmap``: the stored rank buckets grouped into columns by
        ``stab_core.rank_heatmap.heatmap_columns``, the one grouping the analyses use in memory too."""
        files = layout.part_files(info, RANK_BUCKETS)
        lo = info.first_step if start is None else start
        hi = info.last_step if end is None else end
        if not files or metric not in info.rank_metrics or lo is None or hi is None:
            return np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros((0, 0))
        ranks, first, mean = self._rank_buckets(files, metric)
        return heatmap_columns(ranks, first, mean, lo=int(lo), hi=int(hi), buckets=int(buckets))

    def _rank_buckets(self, paths: list[str], metric: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The rank buckets of ``metric`` (read from the row groups that hold it) as (rank, first step,
        mean) sorted by rank then step. Over delta parts, a later part's row of a (rank, bucket)
        replaces the earlier ones."""
        if len(paths) == 1:
            t = read_metric(self._reader(paths[0]).file, metric, ["rank", "first_step", "mean"], threads=True)
            return (
                column_numpy(t.column("rank")),
                column_numpy(t.column("first_step")),
                column_numpy(t.column("mean"), float),
            )
        columns = ["rank", "bucket", "first_step", "mean"]
        tables = [read_metric(self._reader(p).file, metric, columns).combine_chunks() for p in paths]
        t = pa.concat_tables(tables)
        part = np.concatenate([np.full(x.num_rows, i, np.int64) for i, x in enumerate(tables)])
        ranks, bucket = column_numpy(t.column("rank")), column_numpy(t.column("bucket"))
        order = np.lexsort((part, bucket, ranks))
        ranks, bucket = ranks[order], bucket[order]
        last = np.ones(order.size, bool)
        last[:-1] = (ranks[1:] != ranks[:-1]) | (bucket[1:] != bucket[:-1])
        order, ranks = order[last], ranks[last]
        return ranks, column_numpy(t.column("first_step"))[order], column_numpy(t.column("mean"), float)[order]

    # ------------------------------------------------------------------ whole tables

    def read_long(self, info: RunInfo, layout: RunLayout, *, include_derived: bool) -> pa.Table:
        """See ``Store.read_long``."""
        files = layout.part_files(info, LONG)
        if include_derived:
            files += layout.existing(DERIVED, info.analysis_gen)
        if not files:
            return LONG_SCHEMA.empty_table()
        return self._arrow(queries.READ_LONG, {"files": files})

    def read_wall_times(self, info: RunInfo, layout: RunLayout, metric: str) -> tuple[np.ndarray, np.ndarray]:
        """See ``Store.read_wall_times``."""
        files = layout.part_files(info, LONG)
        if not files:
            return np.empty(0, np.int64), np.empty(0, np.float64)
        for path in files:  # a damaged file is named (Arrow's error on a list of files names none)
            self._reader(path)
        # the long files are sorted by metric: the filter prunes row groups of the other metrics
        table = pq.read_table(
            files, columns=["step", "wall_time"], filters=[("metric", "=", metric), ("rank", "=", RUN_RANK)]
        ).filter(pc.is_valid(pc.field("wall_time")))
        order = np.argsort(table.column("step").to_numpy(), kind="stable")
        return table.column("step").to_numpy()[order], table.column("wall_time").to_numpy()[order]

    def export(self, info: RunInfo, layout: RunLayout, fmt: str, target: str | os.PathLike[str]) -> int:
        """See ``Store.export``."""
        if fmt not in ("csv", "parquet"):
            raise StabScopeError(f"unknown export format {fmt!r}: expected 'csv' or 'parquet'")
        files = layout.part_files(info, LONG)
        target = Path(target)
        if not target.parent.is_dir():
            raise StabScopeError(f"cannot write {target}: folder {target.parent} does not exist")
        tmp = target.with_name(f".{target.name}.{uuid.uuid4().hex}.tmp")
        written = 0
        if not files:
            pq.write_table(LONG_SCHEMA.empty_table(), tmp) if fmt == "parquet" else tmp.write_text(
                "step,rank,metric,value,wall_time\n"
            )
        else:
            sql = queries.EXPORT_LONG if fmt == "csv" else queries.EXPORT_LONG_PARQUET
            try:
                counted = self.engine().execute(sql, {"files": files, "target": str(tmp)}).fetchone()
            except duckdb.Error as exc:
                tmp.unlink(missing_ok=True)  # no half-written export left beside the target
                raise self._damage_named(exc) from exc
            written = int(counted[0]) if counted else 0
        if written != info.n_rows:  # a long file of the run is missing: never a silently partial export
            tmp.unlink(missing_ok=True)
            # damage, so that an export that raced a merge removing this generation's files starts again
            why = self._short_export(info, layout, written)
            raise DamagedRunFile(info.name, why, path=str(layout.folder), page=why)
        tmp.replace(target)
        return written

    @staticmethod
    def _short_export(info: RunInfo, layout: RunLayout, written: int) -> str:
        """Why an export of ``info`` found ``written`` rows, not the catalog's ``n_rows``: which of its
        long files are missing, and what to do."""
        expected = [layout.file(LONG, g) for g in part_generations(info)]
        missing = [str(path) for path in expected if not path.exists()]
        where = f"missing: {', '.join(missing)}" if missing else "its files disagree with the catalog"
        return (
            f"run {info.name!r} is damaged: the catalog records {info.n_rows} rows but its long files hold "
            f"{written} ({where}). Nothing was written. `stabscope check {info.name} --repair` rebuilds a lost long "
            "file from its run-level file when every row of the run is run-level; otherwise its rows are lost: "
            "delete the run and import or compact it again"
        )

    def run_view(
        self, info: RunInfo, layout: RunLayout, rank_metrics: Sequence[str], events: Sequence[RunEvent]
    ) -> RunView:
        """See ``Store.run_view``."""
        series: dict[str, Series] = {}
        per_rank: dict[str, RankMatrix] = {}
        files = layout.part_files(info, LONG)
        if files:
            t = self._arrow(queries.ALL_RUN_LEVEL, {"files": layout.part_files(info, RUN_LEVEL) or files})
            series.update(split_by_metric(t))
            for metric in info.rank_metrics:
                if metric not in series:
                    s = self.read_series(info, layout, metric, start=None, end=None, buckets=None, rank=None)
                    series[metric] = Series(s.steps, s.values)
            for metric in rank_metrics:
                if metric in info.rank_metrics:
                    per_rank[metric] = self.rank_matrix(info, layout, metric)
        # the import report's suspect lines, for the analysis's "unread, not absent" (it never reads the report)
        meta = {**info.meta, SUSPECT_LINES: suspect_lines(info.meta)}
        return RunView(name=info.name, series=series, per_rank=per_rank, events=tuple(events), meta=meta)


def _column(table: pa.Table, name: str, dtype: Any = np.float64) -> np.ndarray:
    """Column ``name`` as numpy (nulls as NaN for floats); zeros when the table has no such column."""
    return (
        np.asarray(table.column(name).to_numpy(zero_copy_only=False), dtype=dtype)
        if name in table.column_names
        else np.zeros(table.num_rows, dtype)
    )


def split_by_metric(t: pa.Table) -> dict[str, Series]:
    """One ``Series`` per metric (by name), steps ascending, from rows in any order. Each metric's
    runs of rows are gathered and copied once; only a metric whose steps then come out of order is
    sorted. Runs are found with Arrow's compares: a Python string per row was most of a large
    import's ``run_view``."""
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
