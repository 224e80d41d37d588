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
them is missing or damaged (a new generation, no row lost), or from the run-level file when a long file
is lost and every row of the run is run-level (the run-level file then holds the same rows), adopts a
complete generation newer than the catalog's (a catalog restored from a backup: never deleted as a
stopped writer's), re-runs lost analyses, and rebuilds a missing
or corrupt catalog from the run files: each run's newest complete generation (its files' footers give the
rows, metrics, ranks and steps), its unmerged staged batches, and what can still be read of the damaged
catalog (moved aside to ``catalog.duckdb.corrupt-<time>``). What lived only in the catalog and could not be
read back (metadata, events, source, shard offsets) is named in a finding.

This module finds; ``check_findings`` holds the finding codes and the report, ``check_recovery`` reads a
store back from its own files (catalog rows, footers, each run's newest complete generation), and
``check_repair`` repairs, committing new generations through the commit protocol (``commit``).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

from ingest.errors import StabScopeError
from ingest.store.catalog import run_info_of
from ingest.store.check_findings import (
    CATALOG_BEHIND_FILES,
    CATALOG_CORRUPT,
    CATALOG_FIGURES_MISMATCH,
    CATALOG_MISSING,
    CATALOG_NAME,
    CHECK_LOCK_WAIT_S,
    NOT_A_RUN_FOLDER,
    ORPHAN_FILE,
    ORPHAN_TMP,
    ROW_COUNT_MISMATCH,
    RUN_BUSY,
    UNMERGED_STAGED,
    UNREGISTERED_RUN,
    Action,
    CheckReport,
    Finding,
)
from ingest.store.check_recovery import (
    GENERATION_FILE,
    FileState,
    figures_of,
    foreign_folders,
    intact_sources,
    newest_generation,
    read_catalog,
    read_footer,
    recover_run,
    run_folders,
    run_lock,
)
from ingest.store.layout import (
    DERIVED,
    GENERATION_KINDS,
    LONG,
    RUN_LEVEL,
    STAGING,
    TAIL,
    RunLayout,
    part_generations,
    run_folder,
)
from ingest.store.run_info import RunInfo
from ingest.store.run_lock import WriterBusy
from ingest.store.types import validate_run_name
from stab_core.metrics import RUN_RANK

_UNSORTED_BUCKETS = re.compile(r"^u(\d{6})\.arrow$")

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
        report.findings.append(Finding(code, None, str(catalog_path), problem, Action.REBUILD, how))
        for name, folder in run_folders(root):
            if run is None or name == run:
                report.findings.extend(_unregistered(root, name, folder, why="the catalog is lost"))
    else:
        names = [run] if run is not None else sorted(set(catalog.runs) | {n for n, _ in run_folders(root)})
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
                    Action.NONE,
                    how="none: move it out of the store",
                )
                for p in foreign_folders(root)
            )
    report.clean = not report.findings
    return report


def _check_run_locked(root: Path, name: str, wait_s: float) -> list[Finding]:
    try:
        with run_lock(root, name, wait_s):
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
                Action.NONE,
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
    newer = _newer_generation(layout, info)
    if newer is not None:
        return [_behind_files(layout, info, *newer)]
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
    restorable = not longs_ok and intact_sources(layout, info) is not None
    for state in longs:
        if not state.ok:
            found(
                state.code or "",
                state.path,
                str(state.problem),
                *((Action.RESTORE,) if restorable else (Action.NONE, lost_rows)),
            )
    for state in damaged_derived:
        found(
            state.code or "",
            state.path,
            str(state.problem),
            Action.REMERGE if longs_ok or restorable else Action.NONE,
            "" if longs_ok or restorable else "none until the long files are restored (see their finding)",
        )
    if longs_ok and info.gen > 0:
        rows = sum(s.metadata.num_rows for s in longs if s.metadata is not None)
        if rows != info.n_rows:
            found(
                ROW_COUNT_MISMATCH,
                layout.folder / LONG,
                f"the catalog records {info.n_rows} rows for the run, its long files hold {rows}",
                Action.REMERGE,
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
                    Action.REMERGE,
                )
    if info.analysis_gen > 0:
        state = read_footer(layout.file(DERIVED, info.analysis_gen), indexed=True)
        if not state.ok:
            found(state.code or "", state.path, f"the run's analyses: {state.problem}", Action.REANALYSE)
    staged_states = [read_footer(Path(p), indexed=True) for p in staged]
    for state in staged_states:
        if not state.ok:
            found(
                state.code or "", state.path, f"a staged batch the catalog lists: {state.problem}", Action.FORGET_STAGED
            )
    if staged and all(s.ok for s in staged_states):
        found(
            UNMERGED_STAGED,
            layout.folder / STAGING,
            f"{len(staged)} batch(es) staged but not merged (a writer stopped between staging and merging)",
            Action.MERGE_STAGED,
        )
    for path in _leftovers(layout, info, set(staged)):
        code, problem = _leftover_problem(path, info)
        found(code, path, problem, Action.DELETE)
    return findings


def _newer_generation(layout: RunLayout, info: RunInfo) -> tuple[int, int] | None:
    """``(gen, base_gen)`` of a complete generation in the run's files newer than the catalog's, if any."""
    folder = layout.folder / LONG
    numbers = [int(m[1]) for p in folder.iterdir() if (m := GENERATION_FILE.match(p.name))] if folder.is_dir() else []
    if not any(n > info.gen for n in numbers):
        return None  # the usual case, told without reading a footer
    newest = newest_generation(layout)
    return newest if newest is not None and newest[0] > info.gen else None


def _behind_files(layout: RunLayout, info: RunInfo, gen: int, base_gen: int) -> Finding:
    """A complete generation newer than the catalog's is adopted, never deleted: it is either committed
    data the catalog does not know (a catalog restored from a backup, or copied apart from the run files)
    or a merge a writer published but did not commit, which holds every row of the catalog's generation
    and of the staged batches it merged (which stay staged: merged again, each row is kept once)."""
    parts = f"generation {gen}" + (f" (base {base_gen} and its delta parts)" if base_gen != gen else "")
    return Finding(
        CATALOG_BEHIND_FILES,
        info.name,
        str(layout.folder),
        f"the run's files hold a complete {parts}, newer than the catalog's generation {info.gen}: the catalog "
        "is older than the files (restored from a backup, copied apart from them) or a writer stopped between "
        "publishing and committing it",
        Action.ADOPT,
        how=f"make generation {gen} the run's current one in the catalog, with the figures its files give "
        "(nothing is deleted), and run its analyses again",
    )


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
    number = GENERATION_FILE.match(path.name)
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


def _unregistered(root: Path, name: str, folder: Path, *, why: str) -> list[Finding]:
    recovered = recover_run(RunLayout(folder), name)
    if not recovered.has_data:
        return [
            Finding(
                UNREGISTERED_RUN,
                name,
                str(folder),
                f"run folder the catalog does not know ({why}), with no complete generation or batch",
                Action.DELETE,
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
            Action.REGISTER,
            how=f"add the run to the catalog from its files ({what})",
        )
    ]
