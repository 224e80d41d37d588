"""A store read back from its own files, for ``stabscope check`` and its ``--repair``: what a catalog holds
(or what can still be read of a damaged one), each Parquet file's footer and block index, and each run's
newest complete generation with the catalog figures its files give."""

from __future__ import annotations

import contextlib
import functools
import re
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Final

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from ingest.errors import StabScopeError
from ingest.store import queries
from ingest.store.blocks import INDEX_KEY, Block, file_blocks, parse_blocks
from ingest.store.check_findings import (
    BAD_BLOCK_INDEX,
    CATALOG_TABLES,
    CHECK_LOCK_WAIT_S,
    MISSING_FILE,
    UNREADABLE_FILE,
    first_line,
)
from ingest.store.layout import (
    LONG,
    RANK_BUCKETS,
    ROLLUP,
    RUN_LEVEL,
    STAGING,
    TAIL,
    RunLayout,
    part_generations,
    run_lock_file,
)
from ingest.store.run_info import RunInfo
from ingest.store.run_lock import WriterBusy, held, run_busy
from ingest.store.types import validate_run_name

GENERATION_FILE = re.compile(r"^[ga](\d{6})\.parquet$")


# ----------------------------------------------------------------------------- catalog


@dataclass
class CatalogRows:
    """What a catalog holds (``runs`` by name as ``LIST_RUNS`` rows, and per run its staged files,
    offsets and events), or, for a damaged one, what could be read of it (``unreadable``: the tables
    that could not)."""

    runs: dict[str, tuple[Any, ...]] = field(default_factory=dict)
    staged: dict[str, list[str]] = field(default_factory=dict)
    offsets: dict[str, list[tuple[str, int]]] = field(default_factory=dict)
    events: dict[str, list[tuple[Any, ...]]] = field(default_factory=dict)
    settings: list[tuple[str, str]] = field(default_factory=list)
    unreadable: list[str] = field(default_factory=list)

    def lost(self, table: str) -> bool:
        """Whether ``table`` could not be read (or nothing could)."""
        return any(u.split(" ", 1)[0] in (table, "the") for u in self.unreadable)


def _is_lock_conflict(exc: Exception) -> bool:
    """A catalog another process holds (DuckDB: "Could not set lock on file ... Conflicting lock is held")."""
    text = str(exc).lower()
    return "could not set lock" in text or "conflicting lock" in text


@contextlib.contextmanager
def _attached_read_only(path: Path, wait_s: float) -> Iterator[duckdb.DuckDBPyConnection | Exception]:
    """A connection using the catalog at ``path`` read-only, or the error it does not open with; a lock
    held by a writer of another process is waited for up to ``wait_s`` seconds."""
    db = duckdb.connect(config={"threads": 1})
    try:
        deadline = time.monotonic() + wait_s
        while True:
            try:
                db.execute("ATTACH ? AS checked (READ_ONLY)", [str(path)])
                db.execute("USE checked")
                break
            except duckdb.Error as exc:
                if not _is_lock_conflict(exc):
                    yield exc
                    return
                if time.monotonic() > deadline:
                    raise StabScopeError(
                        f"cannot check the store catalog {path}: another process keeps it locked "
                        f"({first_line(exc)}). Run the check again when that process has finished"
                    ) from exc
                time.sleep(0.05)
        yield db
    finally:
        db.close()


def read_catalog(path: Path, *, wait_s: float = CHECK_LOCK_WAIT_S) -> CatalogRows | str:
    """Every row of the catalog at ``path`` (each table read in full, so DuckDB verifies each block's
    checksum), or why it is damaged."""
    if not path.exists():
        return "missing"
    with _attached_read_only(path, wait_s) as con:
        if isinstance(con, Exception):
            return f"does not open as a DuckDB database ({first_line(con)})"
        rows = _read_rows(con)
    if rows.unreadable:
        return "tables that cannot be read: " + "; ".join(rows.unreadable)
    return rows


def salvage_catalog(path: Path, names: Sequence[str] = ()) -> CatalogRows:
    """What can still be read of a damaged catalog (a table whose blocks fail their checksum is left out
    and named in ``unreadable``); the staged files and offsets of runs ``names`` are read even when the
    runs table cannot be."""
    if not path.exists():
        return CatalogRows(unreadable=["the whole catalog (missing)"])
    with _attached_read_only(path, 0.0) as con:
        if isinstance(con, Exception):
            return CatalogRows(unreadable=[f"the whole catalog ({first_line(con)})"])
        return _read_rows(con, names)


def _read_rows(con: duckdb.DuckDBPyConnection, names: Sequence[str] = ()) -> CatalogRows:
    rows = CatalogRows()
    for table in CATALOG_TABLES:  # every block of every table, whatever the runs table says
        try:
            con.execute(f"SELECT * FROM {table}").fetchall()
        except duckdb.Error as exc:
            rows.unreadable.append(f"{table} ({first_line(exc)})")
    readers: list[tuple[str, Callable[[], None]]] = [
        ("runs", lambda: rows.runs.update({r[0]: r for r in con.execute(queries.LIST_RUNS).fetchall()})),
        ("events", lambda: _group(rows.events, con.execute(queries.ALL_EVENTS).fetchall())),
        ("settings", lambda: rows.settings.extend(con.execute(queries.ALL_SETTINGS).fetchall())),
    ]
    for _table, read in readers:
        with contextlib.suppress(duckdb.Error):
            read()
    for name in dict.fromkeys([*rows.runs, *names]):
        with contextlib.suppress(duckdb.Error):
            rows.staged[name] = [str(r[0]) for r in con.execute(queries.GET_STAGED, [name]).fetchall()]
        with contextlib.suppress(duckdb.Error):
            rows.offsets[name] = [(str(f), int(o)) for f, o in con.execute(queries.GET_OFFSETS, [name]).fetchall()]
    return rows


def _group(into: dict[str, list[tuple[Any, ...]]], rows: list[tuple[Any, ...]]) -> None:
    for row in rows:
        into.setdefault(str(row[0]), []).append(row[1:])


# ----------------------------------------------------------------------------- files


@dataclass
class FileState:
    """What a check learned of one Parquet file: its footer (None when it does not read), its block
    index (None without one) and what is wrong with it (``code``, ``problem``; None when nothing)."""

    path: Path
    metadata: pq.FileMetaData | None = None
    blocks: list[Block] | None = None
    code: str | None = None
    problem: str | None = None

    @property
    def ok(self) -> bool:
        return self.code is None


def read_footer(path: Path, *, indexed: bool) -> FileState:
    """Open ``path``'s footer and, for a file with a block index (``indexed``), check that the index parses
    and covers exactly the file's rows (a file of an older version without one is accepted)."""
    state = FileState(path)
    try:
        state.metadata = pq.read_metadata(path)
    except FileNotFoundError:
        state.code, state.problem = MISSING_FILE, "missing"
        return state
    except (OSError, pa.ArrowException) as exc:
        why = first_line(exc).rstrip(".")
        state.code, state.problem = UNREADABLE_FILE, f"does not read as Parquet (truncated or damaged?): {why}"
        return state
    raw = (state.metadata.metadata or {}).get(INDEX_KEY.encode())
    if not indexed or raw is None:
        return state
    try:
        blocks = parse_blocks(raw)
        if not all(
            isinstance(m, str) and all(isinstance(x, int) for x in (r, n, lo, hi)) and n > 0 and lo <= hi
            for m, r, n, lo, hi in blocks
        ):
            raise ValueError("an entry is not [metric, rank, rows > 0, first step, last step >= first]")
    except (ValueError, TypeError) as exc:
        state.code, state.problem = BAD_BLOCK_INDEX, f"its block index ({INDEX_KEY}) does not parse: {exc}"
        return state
    indexed_rows = sum(n for _, _, n, _, _ in blocks)
    if indexed_rows != state.metadata.num_rows:
        state.code = BAD_BLOCK_INDEX
        state.problem = f"its block index covers {indexed_rows} rows, the file holds {state.metadata.num_rows}"
        return state
    state.blocks = blocks
    return state


@dataclass
class Figures:
    """A generation's catalog figures as its files give them (``queries.COMMIT_GENERATION``'s)."""

    first: int | None
    last: int | None
    n_rows: int
    ranks: int
    metrics: list[str]
    rank_metrics: list[str]


def figures_of(blocks: Sequence[Block], n_rows: int) -> Figures:
    """The figures of a generation whose long files' block indexes together are ``blocks``."""
    metrics = sorted({m for m, _, _, _, _ in blocks})
    rank_metrics = sorted({m for m, r, _, _, _ in blocks if r >= 0})
    return Figures(
        first=min((lo for *_, lo, _ in blocks), default=None),
        last=max((hi for *_, hi in blocks), default=None),
        n_rows=n_rows,
        ranks=len({r for _, r, _, _, _ in blocks if r >= 0}),
        metrics=metrics,
        rank_metrics=rank_metrics,
    )


# ----------------------------------------------------------------------------- recovery from the files


@dataclass
class RecoveredRun:
    """A run as its files give it: its newest complete generation ``gen`` on base ``base_gen``, its
    catalog figures, and the readable staged batches (oldest first)."""

    name: str
    folder: Path
    gen: int
    base_gen: int
    figures: Figures | None
    n_steps: int
    staged: list[str]
    created: datetime

    @property
    def has_data(self) -> bool:
        return self.gen > 0 or bool(self.staged)


def _generation_complete(layout: RunLayout, gen: int) -> bool:
    kinds = (LONG, RUN_LEVEL, ROLLUP, RANK_BUCKETS)
    if not all(read_footer(layout.file(k, gen), indexed=k in (LONG, RUN_LEVEL)).ok for k in kinds):
        return False
    tail = layout.file(TAIL, gen)
    return not tail.exists() or read_footer(tail, indexed=True).ok


def newest_generation(layout: RunLayout) -> tuple[int, int] | None:
    """``(gen, base_gen)`` of the newest complete generation in ``layout``'s files: a full generation
    (one with a tail file; a base written before tail files existed is taken alone) and the delta parts
    after it, each with every file reading; None when there is none."""
    folder = layout.folder / LONG
    numbers = sorted(
        {int(m[1]) for p in folder.iterdir() if (m := GENERATION_FILE.match(p.name))} if folder.is_dir() else set()
    )
    complete = {g for g in numbers if _generation_complete(layout, g)}
    any_tail = any(layout.file(TAIL, g).exists() for g in complete)
    for top in reversed(numbers):
        g = top
        while g in complete:
            if layout.file(TAIL, g).exists() or not any_tail:
                return top, g
            g -= 1
    return None


DAMAGE_KINDS: Final = (LONG, RUN_LEVEL, ROLLUP, RANK_BUCKETS)
"""The files of each part of a generation that every read needs (the tail is read by the next merge)."""


def run_damage(layout: RunLayout, info: RunInfo) -> str | None:
    """Why run ``info``'s current generation is damaged (which of its ``DAMAGE_KINDS`` files is missing
    or does not read, with its block index, as Parquet), or None. A file's verdict is kept while its
    size and modification time stay, so that listing many runs reads each footer once."""
    problems = []
    for g in part_generations(info):
        for kind in DAMAGE_KINDS:
            path = layout.file(kind, g)
            try:
                stat = path.stat()
            except FileNotFoundError:
                problems.append(f"{path}: missing")
                continue
            problem = _footer_problem(str(path), stat.st_size, stat.st_mtime_ns)
            if problem is not None:
                problems.append(f"{path}: {problem}")
    return "; ".join(problems) or None


@functools.lru_cache(maxsize=4096)
def _footer_problem(path: str, size: int, mtime_ns: int) -> str | None:
    """``read_footer``'s problem with the file at ``path`` as it is at ``size`` bytes, ``mtime_ns``."""
    return read_footer(Path(path), indexed=Path(path).parent.name in (LONG, RUN_LEVEL)).problem


def intact_sources(layout: RunLayout, info: RunInfo) -> list[str] | None:
    """The files that hold every row of run ``info``'s current generation: each part's long file, or
    where it is missing or damaged, the part's run-level file, which holds the same rows when every row
    of the run is run-level (the catalog records no rank and no per-rank metric; then the files' rows
    must add up to the catalog's too). None when some rows have no intact copy."""
    every_row_run_level = info.ranks == 0 and not info.rank_metrics
    sources: list[str] = []
    rows, substituted = 0, False
    for g in part_generations(info):
        for kind in (LONG, RUN_LEVEL) if every_row_run_level else (LONG,):
            state = read_footer(layout.file(kind, g), indexed=True)
            if state.ok and state.metadata is not None:
                sources.append(str(state.path))
                rows += state.metadata.num_rows
                substituted |= kind == RUN_LEVEL
                break
        else:
            return None
    return None if substituted and rows != info.n_rows else sources


def recover_run(layout: RunLayout, name: str) -> RecoveredRun:
    """Run ``name`` as its files give it (see ``RecoveredRun``)."""
    newest = newest_generation(layout)
    staging = layout.folder / STAGING
    staged = sorted(
        str(p)
        for p in (staging.iterdir() if staging.is_dir() else ())
        if p.name.endswith(".parquet") and read_footer(p, indexed=True).ok
    )
    times = [p.stat().st_mtime for p in layout.folder.rglob("*") if p.is_file()] if layout.folder.is_dir() else []
    created = datetime.fromtimestamp(min(times, default=time.time()))
    if newest is None:
        return RecoveredRun(name, layout.folder, 0, 0, None, 0, staged, created)
    gen, base = newest
    info = _bare_info(name, gen, base)
    longs = [layout.file(LONG, g) for g in part_generations(info)]
    blocks = [b for path in longs for b in file_blocks(str(path))]
    figures = figures_of(blocks, sum(pq.read_metadata(path).num_rows for path in longs))
    steps = [
        pq.read_table(path, columns=["step"]).column("step").to_numpy()
        for g in part_generations(info)
        for path in (layout.file(ROLLUP, g), layout.file(RUN_LEVEL, g))
    ]
    n_steps = int(np.unique(np.concatenate([np.zeros(0, np.int64), *steps])).size)
    return RecoveredRun(name, layout.folder, gen, base, figures, n_steps, staged, created)


def _bare_info(name: str, gen: int, base_gen: int) -> RunInfo:
    now = datetime.now()
    return RunInfo(name, now, now, "", "", gen, None, None, 0, 0, 0, [], [], {}, 0, [], 1, 0, base_gen)


def run_folders(root: Path) -> list[tuple[str, Path]]:
    """``(name, folder)`` of each ``runs/run=<name>`` folder with a valid name, by name."""
    found = []
    runs = root / "runs"
    if runs.is_dir():
        for folder in sorted(runs.iterdir()):
            name = folder.name.removeprefix("run=")
            if folder.is_dir() and folder.name.startswith("run=") and _valid(name):
                found.append((name, folder))
    return found


def foreign_folders(root: Path) -> list[Path]:
    runs = root / "runs"
    if not runs.is_dir():
        return []
    valid = {folder for _, folder in run_folders(root)}
    return [p for p in sorted(runs.iterdir()) if p not in valid]


def _valid(name: str) -> bool:
    try:
        validate_run_name(name)
        return True
    except StabScopeError:
        return False


@contextlib.contextmanager
def run_lock(root: Path, name: str, wait_s: float) -> Iterator[None]:
    """Hold run ``name``'s writer lock (a store that cannot be written cannot be being written either:
    then no lock is needed, and none is taken)."""
    path = run_lock_file(root, name)
    try:
        lock = held(path, wait_s=wait_s, busy=lambda holder, waited: run_busy(name, path, holder, waited))
        lock.__enter__()
    except WriterBusy:
        raise
    except StabScopeError:
        yield  # the lock file cannot be created: a read-only store
        return
    try:
        yield
    finally:
        lock.__exit__(None, None, None)
