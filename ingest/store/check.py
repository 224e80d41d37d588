"""``stabscope check``: a file-system check of a store, and its ``--repair``.

Checked, for every run (or one), under the run's writer lock (``run_lock``) so that no writer is half-way:

- every file of the current generation the catalog names exists, its Parquet footer reads, and its block
  index (footer key ``blocks.INDEX_KEY``) parses and covers exactly the file's rows: the base's and each
  delta part's long, run-level, rollup and rank-bucket files, the base's tail file when it has one, the
  file of the current analyses, and the staged batches the catalog lists;
- the catalog's figures of the run (rows, metrics, ranks, first and last step) agree with the files;
- nothing is left over by a killed writer: temporary files (``*.tmp``), generations newer or older than
  the current one, staging files no catalog row names, batches staged but never merged, run folders the
  catalog does not know.

And for the store: ``catalog.duckdb`` exists, opens and every table of it reads in full (DuckDB checks
each block's checksum). Checking only reads: the catalog is attached read-only.

``repair`` deletes what is left over, merges a run again from its long files when a file derived from
them is missing or damaged (a new generation, no row lost), re-runs lost analyses, and rebuilds a missing
or corrupt catalog from the run files: each run's newest complete generation (its files' footers give the
rows, metrics, ranks and steps), its unmerged staged batches, and what can still be read of the damaged
catalog (moved aside to ``catalog.duckdb.corrupt-<time>``). What lived only in the catalog and could not be
read back (metadata, events, source, shard offsets) is named in a finding.
"""

from __future__ import annotations

import contextlib
import json
import re
import shutil
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

from ingest import queries
from ingest.errors import StabScopeError
from ingest.run_info import RunInfo
from ingest.store.blocks import INDEX_KEY, Block, file_blocks, parse_blocks
from ingest.store.catalog import Catalog, commit_generation, run_info_of
from ingest.store.commit import CommitProtocol, publish
from ingest.store.full_merge import merge_sources
from ingest.store.generation import bucket_width
from ingest.store.layout import (
    DERIVED,
    GENERATION_KINDS,
    LONG,
    RANK_BUCKETS,
    ROLLUP,
    RUN_LEVEL,
    STAGING,
    TAIL,
    RunLayout,
    part_generations,
    run_folder,
    run_lock_file,
)
from ingest.store.read import StoreReader
from ingest.store.run_lock import WriterBusy, held, run_busy
from ingest.store.types import validate_run_name
from stab_core.metrics import RUN_RANK

CATALOG_NAME: Final = "catalog.duckdb"
CATALOG_TABLES: Final = ("runs", "offsets", "staged", "events", "spikes", "settings")
"""Every table of the catalog (``queries.CATALOG_SCHEMA``): a check reads each in full."""
CHECK_LOCK_WAIT_S: Final = 30.0
"""Seconds a check waits for a run's writer (``--wait``) before reporting the run as busy."""
REPAIR_ROUNDS: Final = 3
"""Check-and-repair rounds at most: a rebuilt catalog is checked again, and its runs' leftovers repaired."""

# Finding codes: stable names for scripts (``--json``'s ``code``).
CATALOG_MISSING: Final = "catalog_missing"
CATALOG_CORRUPT: Final = "catalog_corrupt"
CATALOG_DATA_LOST: Final = "catalog_data_lost"
MISSING_FILE: Final = "missing_file"
UNREADABLE_FILE: Final = "unreadable_file"
BAD_BLOCK_INDEX: Final = "bad_block_index"
ROW_COUNT_MISMATCH: Final = "row_count_mismatch"
CATALOG_FIGURES_MISMATCH: Final = "catalog_figures_mismatch"
UNMERGED_STAGED: Final = "unmerged_staged"
ORPHAN_TMP: Final = "orphan_tmp"
ORPHAN_FILE: Final = "orphan_file"
UNREGISTERED_RUN: Final = "unregistered_run"
NOT_A_RUN_FOLDER: Final = "not_a_run_folder"
RUN_BUSY: Final = "run_busy"

# What --repair does about a finding (internal; the finding's ``repair`` says it in words).
_DELETE, _REMERGE, _FORGET_STAGED, _MERGE_STAGED, _REANALYSE, _REGISTER, _REBUILD, _NONE = (
    "delete",
    "remerge",
    "forget_staged",
    "merge_staged",
    "reanalyse",
    "register",
    "rebuild_catalog",
    "none",
)
_REPAIR_TEXT: Final = {
    _DELETE: "delete it",
    _REMERGE: "merge the run again from its long files into a new generation (no row is lost)",
    _FORGET_STAGED: "merge the run again from its long files and its readable staged batches, and forget its "
    "shard offsets, so that the next `stabscope compact` or `watch` reads its shards again (each record is "
    "kept once)",
    _MERGE_STAGED: "merge the staged batches into a new generation, as the run's next writer would",
    _REANALYSE: "run the run's analyses again",
    _REGISTER: "add the run to the catalog from its files",
    _REBUILD: "move it aside to catalog.duckdb.corrupt-<time> and rebuild the catalog from the run files",
}

_GENERATION_FILE = re.compile(r"^[ga](\d{6})\.parquet$")
_UNSORTED_BUCKETS = re.compile(r"^u(\d{6})\.arrow$")


@dataclass
class Finding:
    """One thing wrong: ``run`` (None for the store's catalog), the ``path`` concerned, ``code`` (a stable
    name, see the constants), what is wrong (``problem``) and what ``--repair`` does about it (``repair``;
    ``none: ...`` says what the user can do instead). ``repaired`` is set by ``repair``."""

    code: str
    run: str | None
    path: str
    problem: str
    action: str
    how: str = ""
    repaired: bool = False

    @property
    def repair(self) -> str:
        return self.how or _REPAIR_TEXT.get(self.action, "none")

    def to_json(self) -> dict[str, Any]:
        """The ``stabscope check --json`` object (contract: run, path, code, problem, repair, repaired)."""
        return {
            "run": self.run,
            "path": self.path,
            "code": self.code,
            "problem": self.problem,
            "repair": self.repair,
            "repaired": self.repaired,
        }

    def line(self, *, after_repair: bool = False) -> str:
        if after_repair:
            done = "repaired: " if self.repaired else "not repaired: "
            return f"{self.path}: {self.problem}; {done}{self.repair}"
        return f"{self.path}: {self.problem}; --repair: {self.repair}"


@dataclass
class CheckReport:
    """Every finding of a check (``repair``: of every round, ``clean`` telling whether the store is
    clean after the repairs)."""

    root: Path
    findings: list[Finding] = field(default_factory=list)
    clean: bool = True


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


def _first_line(exc: Exception) -> str:
    return " ".join(str(exc).split())[:300]


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
                        f"({_first_line(exc)}). Run the check again when that process has finished"
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
            return f"does not open as a DuckDB database ({_first_line(con)})"
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
            return CatalogRows(unreadable=[f"the whole catalog ({_first_line(con)})"])
        return _read_rows(con, names)


def _read_rows(con: duckdb.DuckDBPyConnection, names: Sequence[str] = ()) -> CatalogRows:
    rows = CatalogRows()
    for table in CATALOG_TABLES:  # every block of every table, whatever the runs table says
        try:
            con.execute(f"SELECT * FROM {table}").fetchall()
        except duckdb.Error as exc:
            rows.unreadable.append(f"{table} ({_first_line(exc)})")
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
        why = _first_line(exc).rstrip(".")
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


# ----------------------------------------------------------------------------- check


def check_store(root: str | Path, run: str | None = None, *, wait_s: float = CHECK_LOCK_WAIT_S) -> CheckReport:
    """Check the store at ``root`` (every run, or ``run``): see the module docstring. Reads only."""
    root = Path(root).expanduser()
    catalog_path = root / CATALOG_NAME
    if not catalog_path.exists() and not (root / "runs").is_dir():
        raise StabScopeError(f"no StabScope store at {root} (neither {CATALOG_NAME} nor runs/): check --store PATH")
    if run is not None:
        validate_run_name(run)
    report = CheckReport(root)
    catalog = read_catalog(catalog_path, wait_s=wait_s)
    if isinstance(catalog, str):
        code = CATALOG_MISSING if catalog == "missing" else CATALOG_CORRUPT
        problem = "the catalog is missing" if catalog == "missing" else f"the catalog is damaged: {catalog}"
        how = "rebuild the catalog from the run files" if catalog == "missing" else ""
        report.findings.append(Finding(code, None, str(catalog_path), problem, _REBUILD, how))
        for name, folder in _run_folders(root):
            if run is None or name == run:
                report.findings.extend(_unregistered(root, name, folder, why="the catalog is lost"))
    else:
        names = [run] if run is not None else sorted(set(catalog.runs) | {n for n, _ in _run_folders(root)})
        if run is not None and run not in catalog.runs and not run_folder(root, run).is_dir():
            raise StabScopeError(f"no run named {run!r} in store {root} (neither in its catalog nor under runs/)")
        for name in names:
            report.findings.extend(_check_run_locked(root, name, wait_s))
        if run is None:
            report.findings.extend(
                Finding(
                    NOT_A_RUN_FOLDER,
                    None,
                    str(p),
                    "not a run folder (runs/run=<valid name>)",
                    _NONE,
                    how="none: move it out of the store",
                )
                for p in _foreign_folders(root)
            )
    report.clean = not report.findings
    return report


def _run_folders(root: Path) -> list[tuple[str, Path]]:
    """``(name, folder)`` of each ``runs/run=<name>`` folder with a valid name, by name."""
    found = []
    runs = root / "runs"
    if runs.is_dir():
        for folder in sorted(runs.iterdir()):
            name = folder.name.removeprefix("run=")
            if folder.is_dir() and folder.name.startswith("run=") and _valid(name):
                found.append((name, folder))
    return found


def _foreign_folders(root: Path) -> list[Path]:
    runs = root / "runs"
    if not runs.is_dir():
        return []
    valid = {folder for _, folder in _run_folders(root)}
    return [p for p in sorted(runs.iterdir()) if p not in valid]


def _valid(name: str) -> bool:
    try:
        validate_run_name(name)
        return True
    except StabScopeError:
        return False


@contextlib.contextmanager
def _run_lock(root: Path, name: str, wait_s: float) -> Iterator[None]:
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


def _check_run_locked(root: Path, name: str, wait_s: float) -> list[Finding]:
    try:
        with _run_lock(root, name, wait_s):
            catalog = read_catalog(root / CATALOG_NAME, wait_s=wait_s)  # as of now that no writer is half-way
            if isinstance(catalog, str):
                return []  # damaged in between: the next check says so
            row = catalog.runs.get(name)
            if row is None:
                return _unregistered(root, name, run_folder(root, name), why="the catalog has no row for it")
            return check_run(root, run_info_of(row), catalog.staged.get(name, []))
    except WriterBusy as exc:
        return [
            Finding(
                RUN_BUSY,
                name,
                str(run_folder(root, name)),
                f"not checked: {exc.short}",
                _NONE,
                how="none: check again when that writer has finished, or give a longer --wait",
            )
        ]


def check_run(root: Path, info: RunInfo, staged: Sequence[str]) -> list[Finding]:
    """The findings of one catalogued run (its writer lock held by the caller)."""
    name = info.name
    layout = RunLayout(run_folder(root, name))
    findings: list[Finding] = []

    def found(code: str, path: Path | str, problem: str, action: str, how: str = "") -> None:
        findings.append(Finding(code, name, str(path), problem, action, how))

    lost_rows = (
        "none: the rows of this file are lost; the run's other files are intact. To restore them, "
        f"delete the run and import or compact it again from its source ({info.source})"
    )
    longs: list[FileState] = []
    damaged_derived: list[FileState] = []
    for g in part_generations(info):
        for kind in GENERATION_KINDS:
            path = layout.file(kind, g)
            if kind == TAIL and not path.exists():
                continue  # a delta part has none, nor has a base written before tail files existed
            state = read_footer(path, indexed=kind in (LONG, RUN_LEVEL, TAIL))
            if kind == LONG:
                longs.append(state)
                if not state.ok:
                    found(state.code or "", path, str(state.problem), _NONE, lost_rows)
            elif not state.ok:
                damaged_derived.append(state)
            if kind == RUN_LEVEL and state.ok and longs[-1].ok and longs[-1].blocks is not None:
                expected = sum(n for _, r, n, _, _ in longs[-1].blocks if r == RUN_RANK)
                held_rows = state.metadata.num_rows if state.metadata is not None else 0
                if held_rows != expected:
                    state.code = ROW_COUNT_MISMATCH
                    state.problem = f"holds {held_rows} rows, its long file has {expected} run-level rows"
                    damaged_derived.append(state)
    longs_ok = all(s.ok for s in longs)
    for state in damaged_derived:
        found(
            state.code or "",
            state.path,
            str(state.problem),
            _REMERGE if longs_ok else _NONE,
            "" if longs_ok else "none until the long files are restored (see their finding)",
        )
    if longs_ok and info.gen > 0:
        rows = sum(s.metadata.num_rows for s in longs if s.metadata is not None)
        if rows != info.n_rows:
            found(
                ROW_COUNT_MISMATCH,
                layout.folder / LONG,
                f"the catalog records {info.n_rows} rows for the run, its long files hold {rows}",
                _REMERGE,
            )
        elif all(s.blocks is not None for s in longs):
            files = figures_of([b for s in longs for b in (s.blocks or [])], rows)
            differences = [
                f"{label}: catalog {catalogued!r}, files {held_value!r}"
                for label, catalogued, held_value in (
                    ("first step", info.first_step, files.first),
                    ("last step", info.last_step, files.last),
                    ("ranks", info.ranks, files.ranks),
                    ("metrics", info.metrics, files.metrics),
                    ("per-rank metrics", info.rank_metrics, files.rank_metrics),
                )
                if catalogued != held_value
            ]
            if differences:
                found(
                    CATALOG_FIGURES_MISMATCH,
                    layout.folder / LONG,
                    "the catalog's figures differ from the files': " + "; ".join(differences),
                    _REMERGE,
                )
    if info.analysis_gen > 0:
        state = read_footer(layout.file(DERIVED, info.analysis_gen), indexed=True)
        if not state.ok:
            found(state.code or "", state.path, f"the run's analyses: {state.problem}", _REANALYSE)
    staged_states = [read_footer(Path(p), indexed=True) for p in staged]
    for state in staged_states:
        if not state.ok:
            found(state.code or "", state.path, f"a staged batch the catalog lists: {state.problem}", _FORGET_STAGED)
    if staged and all(s.ok for s in staged_states):
        found(
            UNMERGED_STAGED,
            layout.folder / STAGING,
            f"{len(staged)} batch(es) staged but not merged (a writer stopped between staging and merging)",
            _MERGE_STAGED,
        )
    for path in _leftovers(layout, info, set(staged)):
        code, problem = _leftover_problem(path, info)
        found(code, path, problem, _DELETE)
    return findings


def _leftovers(layout: RunLayout, info: RunInfo, staged: set[str]) -> list[Path]:
    """The files no committed state refers to (``RunLayout.garbage``) and any temporary file in the run's folder."""
    paths = set(layout.garbage(info, staged))
    if layout.folder.is_dir():
        paths |= {p for p in layout.folder.rglob("*.tmp") if p.is_file()}
    return sorted(paths)


def _leftover_problem(path: Path, info: RunInfo) -> tuple[str, str]:
    if path.name.endswith(".tmp"):
        return ORPHAN_TMP, "temporary file of a writer that stopped (killed?) before finishing it"
    if path.parent.name == STAGING:
        return ORPHAN_FILE, "staging file no catalog row names (its writer stopped before committing it)"
    if _UNSORTED_BUCKETS.match(path.name):
        return ORPHAN_FILE, "unsorted rank buckets of a one-pass merge that did not finish"
    number = _GENERATION_FILE.match(path.name)
    if number is not None and path.parent.name == DERIVED:
        return ORPHAN_FILE, f"analyses of generation {int(number[1])}, not the current ones ({info.analysis_gen})"
    if number is not None and int(number[1]) > info.gen:
        return ORPHAN_FILE, (
            f"generation {int(number[1])} is newer than the catalog's ({info.gen}): a writer stopped between "
            "writing and committing it"
        )
    if number is not None:
        return ORPHAN_FILE, f"superseded generation {int(number[1])} (its removal was interrupted)"
    return ORPHAN_FILE, "not a file of any generation the catalog names"


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
        {int(m[1]) for p in folder.iterdir() if (m := _GENERATION_FILE.match(p.name))} if folder.is_dir() else set()
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


def _unregistered(root: Path, name: str, folder: Path, *, why: str) -> list[Finding]:
    recovered = recover_run(RunLayout(folder), name)
    if not recovered.has_data:
        return [
            Finding(
                UNREGISTERED_RUN,
                name,
                str(folder),
                f"run folder the catalog does not know ({why}), with no complete generation or batch",
                _DELETE,
                how="delete the folder (nothing in it can be read back)",
            )
        ]
    what = f"generation {recovered.gen}" if recovered.gen else "no generation yet"
    rows = f", {recovered.figures.n_rows} rows" if recovered.figures else ""
    staged = f", {len(recovered.staged)} staged batch(es)" if recovered.staged else ""
    return [
        Finding(
            UNREGISTERED_RUN,
            name,
            str(folder),
            f"run folder the catalog does not know ({why}); its files hold {what}{rows}{staged}",
            _REGISTER,
            how=f"add the run to the catalog from its files ({what})",
        )
    ]


# ----------------------------------------------------------------------------- repair

RunHook = Callable[[Any, str], None]
"""``on_generation(store, name)``: the analyses the product runs after a new generation
(``ingest.run_analyses.materialise``)."""


def repair_store(
    root: str | Path,
    run: str | None = None,
    *,
    on_generation: RunHook | None = None,
    wait_s: float = CHECK_LOCK_WAIT_S,
) -> CheckReport:
    """Check the store and repair what can be repaired, round after round (a rebuilt catalog is checked
    again); ``clean`` tells whether the final check found nothing."""
    root = Path(root).expanduser()
    rounds: list[Finding] = []
    for _ in range(REPAIR_ROUNDS):
        found = check_store(root, run, wait_s=wait_s).findings
        rounds.extend(found)
        if not any(f.action != _NONE for f in found):
            break
        rounds.extend(_repair_round(root, found, on_generation, wait_s))
    final = check_store(root, run, wait_s=wait_s).findings
    report = CheckReport(root, clean=not final)
    seen: set[tuple[str, str, str, bool]] = set()
    for f in [*rounds, *final]:  # a finding left as it was appears once; one that came back, again
        key = (f.code, f.run or "", f.path, f.repaired)
        if key not in seen:
            seen.add(key)
            report.findings.append(f)
    return report


def _repair_round(root: Path, findings: list[Finding], on_generation: RunHook | None, wait_s: float) -> list[Finding]:
    """Repair what ``findings`` say can be (marking them ``repaired``); returns findings on what a catalog
    rebuild could not read back."""
    lost: list[Finding] = []
    rebuild = [f for f in findings if f.action == _REBUILD]
    if rebuild:
        lost = _rebuild_catalog(root, wait_s)
        for f in rebuild:
            f.repaired = True
        for f in findings:
            if f.action == _REGISTER:
                f.repaired = True
        findings = [f for f in findings if f.action not in (_REBUILD, _REGISTER)]
        _analyse(root, [f.run for f in rebuild + findings if f.run], on_generation, all_runs=True)
    by_run: dict[str, list[Finding]] = {}
    for f in findings:
        if f.run is not None and f.action != _NONE:
            by_run.setdefault(f.run, []).append(f)
    touched = []
    for name, mine in by_run.items():
        try:
            with _run_lock(root, name, wait_s):
                _repair_run(root, name, mine)
            touched.append(name)
        except (StabScopeError, OSError, duckdb.Error, pa.ArrowException) as exc:
            for f in mine:
                if not f.repaired:
                    f.how = f"{f.repair} (failed: {_first_line(exc)})"
    _analyse(root, touched, on_generation)
    return lost


def _repair_run(root: Path, name: str, findings: list[Finding]) -> None:
    actions = {f.action for f in findings}
    layout = RunLayout(run_folder(root, name))
    if _REGISTER in actions:
        catalog = Catalog(root / CATALOG_NAME)
        _register(catalog, recover_run(layout, name), None)
        _mark(findings, _REGISTER)
        return  # its leftovers are the next round's
    deletions = [f for f in findings if f.action == _DELETE]
    for f in deletions:
        path = Path(f.path)
        if path.is_dir():
            shutil.rmtree(path)
        else:
            path.unlink(missing_ok=True)
        f.repaired = True
    if not actions - {_DELETE}:
        return
    catalog = Catalog(root / CATALOG_NAME)
    reader = StoreReader(root)
    protocol = _protocol(catalog, root, reader)
    if actions & {_REMERGE, _FORGET_STAGED}:
        _merge_again(catalog, reader, protocol, name, forget_offsets=_FORGET_STAGED in actions)
        _mark(findings, _REMERGE, _FORGET_STAGED, _MERGE_STAGED, _REANALYSE)
    if _MERGE_STAGED in actions:
        protocol.merge(name)
        _mark(findings, _MERGE_STAGED)
    if _REANALYSE in actions:
        with catalog.unit() as con:
            con.execute(queries.SET_ANALYSIS_GEN, [0, name])  # the analyses recompute when analysis_gen != gen
        _mark(findings, _REANALYSE)
    protocol.collect_garbage(name)


def _mark(findings: list[Finding], *actions: str) -> None:
    for f in findings:
        if f.action in actions:
            f.repaired = True


def _protocol(catalog: Catalog, root: Path, reader: StoreReader) -> CommitProtocol:
    def run_info(name: str) -> RunInfo:
        with catalog.unit() as con:
            rows = con.execute(queries.GET_RUN, [name]).fetchall()
        if not rows:
            raise StabScopeError(f"no run named {name!r} in the catalog")
        return run_info_of(rows[0])

    return CommitProtocol(
        catalog,
        layout=lambda name: RunLayout(run_folder(root, name)),
        run_info=run_info,
        engine=reader.engine,
        after_generation=lambda name: None,  # the analyses run once, after the repairs (``_analyse``)
    )


def _merge_again(
    catalog: Catalog, reader: StoreReader, protocol: CommitProtocol, name: str, *, forget_offsets: bool
) -> None:
    """A new full generation of ``name`` from its long files and its readable staged batches (lowest
    priority first, as a merge takes them), committed with the figures of the merge."""
    info = protocol.run_info(name)
    layout = protocol.layout(name)
    longs = [str(layout.file(LONG, g)) for g in part_generations(info)]
    staged = [p for p in catalog.staged_files(name) if read_footer(Path(p), indexed=True).ok]
    gen = info.gen + 1
    files = merge_sources(reader.engine(), longs + staged, layout, gen)
    publish(files.paths())
    with catalog.unit() as con:
        con.execute("BEGIN TRANSACTION")
        commit_generation(con, name, gen, files, gen)
        con.execute(queries.CLEAR_STAGED, [name])
        if forget_offsets:
            con.execute(queries.DELETE_RUN_OFFSETS, [name])
        con.execute("COMMIT")


def _analyse(root: Path, names: Sequence[str | None], on_generation: RunHook | None, *, all_runs: bool = False) -> None:
    """Run the analyses (``on_generation``) of the runs ``names`` (every run with ``all_runs``)."""
    if on_generation is None or (not names and not all_runs):
        return
    from ingest.store.facade import open_store  # local: the facade is above this module

    store = open_store(root, on_generation=on_generation)
    for name in [r.name for r in store.list_runs()] if all_runs else dict.fromkeys(n for n in names if n):
        if store.has_run(name):
            on_generation(store, name)


def _rebuild_catalog(root: Path, wait_s: float) -> list[Finding]:
    """Move a damaged catalog aside and write a new one from the run files; returns findings naming what
    could not be read back."""
    path = root / CATALOG_NAME
    stamp = datetime.now().strftime("%Y%m%dT%H%M%S")
    kept = path.with_name(f"{CATALOG_NAME}.corrupt-{stamp}")
    salvaged = CatalogRows(unreadable=["the whole catalog (missing)"])
    where = path
    if path.exists():
        where = kept
        path.rename(kept)
        wal = path.with_name(CATALOG_NAME + ".wal")
        if wal.exists():
            wal.rename(kept.with_name(kept.name + ".wal"))  # beside its database, where DuckDB looks for it
        salvaged = salvage_catalog(kept, [name for name, _ in _run_folders(root)])
    catalog = Catalog(path)
    lost: list[Finding] = []
    folders = _run_folders(root)
    with contextlib.ExitStack() as locks:
        for name, _ in folders:
            locks.enter_context(_run_lock(root, name, wait_s))
        recovered = [recover_run(RunLayout(folder), name) for name, folder in folders]
        order = sorted(recovered, key=lambda r: (_created(salvaged.runs.get(r.name)) or r.created, r.name))
        for run in order:
            if run.has_data:
                missing = _register(catalog, run, salvaged)
                if missing:
                    lost.append(
                        Finding(
                            CATALOG_DATA_LOST,
                            run.name,
                            str(where),
                            "kept only in the lost catalog and not recoverable from the files: " + ", ".join(missing),
                            _NONE,
                            how="none: set the metadata again with `stabscope meta`; a run from shards gets its "
                            "events and offsets back from its next `stabscope compact` or `watch` (which reads "
                            "its shards again, each record kept once)",
                        )
                    )
        with catalog.unit() as con:
            for key, value in salvaged.settings:
                con.execute(queries.SET_SETTING, [key, value])
    if salvaged.unreadable and not salvaged.settings:
        lost.append(
            Finding(
                CATALOG_DATA_LOST,
                None,
                str(where),
                "the store's settings (e.g. whether the demo runs were added) could not be read back",
                _NONE,
                how="none: they are set again as needed",
            )
        )
    return lost


def _created(row: tuple[Any, ...] | None) -> datetime | None:
    return None if row is None else row[queries.RUN_COLUMNS.index("created")]


def _register(catalog: Catalog, run: RecoveredRun, salvaged: CatalogRows | None) -> list[str]:
    """Insert ``run``'s catalog rows (what ``salvaged`` still holds of it, the rest from its files);
    returns what of the run's catalog-only data could not be read back."""
    old = (
        dict(zip(queries.RUN_COLUMNS, salvaged.runs[run.name], strict=True))
        if salvaged and run.name in salvaged.runs
        else None
    )
    missing = (
        [] if old else ["source, status, creation time, metadata (user-set keys included), rejected-record counts"]
    )
    if salvaged is not None and salvaged.lost("events"):
        missing.append("events (schedule transitions, checkpoints)")
    if salvaged is not None and (salvaged.lost("offsets") or run.name not in salvaged.offsets):
        missing.append("shard offsets")
    if salvaged is None:
        missing = []  # a folder added to a working catalog: nothing was there to lose
    f = run.figures
    values: dict[str, Any] = {
        "name": run.name,
        "created": old["created"] if old else run.created,
        "updated": old["updated"] if old else run.created,
        "source": old["source"] if old else f"recovered:{run.folder}",
        "status": old["status"] if old else "finished",
        "gen": run.gen,
        "first_step": f.first if f else None,
        "last_step": f.last if f else None,
        "n_steps": run.n_steps,
        "n_rows": f.n_rows if f else 0,
        "ranks": f.ranks if f else 0,
        "metrics": json.dumps(f.metrics if f else []),
        "rank_metrics": json.dumps(f.rank_metrics if f else []),
        "meta": old["meta"] if old else "{}",
        "rejected": old["rejected"] if old else 0,
        "rejected_examples": old["rejected_examples"] if old else "[]",
        "heat_bucket": bucket_width(f.last - f.first + 1) if f and f.first is not None and f.last is not None else 1,
        "analysis_gen": 0,  # the analyses run again
        "base_gen": run.base_gen if run.gen else None,
    }
    with catalog.unit() as con:
        con.execute("BEGIN TRANSACTION")
        con.execute(queries.RESTORE_RUN, [values[c] for c in queries.RUN_COLUMNS])
        for seq, path in enumerate(run.staged, start=1):
            con.execute(queries.ADD_STAGED, [run.name, path, seq])
        for step, kind, label, detail in salvaged.events.get(run.name, []) if salvaged else []:
            con.execute(queries.ADD_EVENT, [run.name, step, kind, label, detail])
        for file, offset in salvaged.offsets.get(run.name, []) if salvaged else []:
            con.execute(queries.UPSERT_OFFSET, [run.name, file, offset])
        con.execute("COMMIT")
    return missing
