"""``stabscope check --repair``: see ``check``'s docstring for what each finding's repair does."""

from __future__ import annotations

import contextlib
import json
import shutil
from collections.abc import Callable, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any, Final

import duckdb
import pyarrow as pa

from ingest.errors import StabScopeError
from ingest.store import queries
from ingest.store.catalog import Catalog, run_info_of
from ingest.store.check import check_store
from ingest.store.check_findings import (
    CATALOG_DATA_LOST,
    CATALOG_NAME,
    CHECK_LOCK_WAIT_S,
    Action,
    CheckReport,
    Finding,
    first_line,
)
from ingest.store.check_recovery import (
    CatalogRows,
    RecoveredRun,
    intact_sources,
    read_footer,
    recover_run,
    run_folders,
    run_lock,
    salvage_catalog,
)
from ingest.store.commit import CommitProtocol
from ingest.store.generation import GenerationFiles, bucket_width
from ingest.store.layout import (
    LONG,
    RANK_BUCKETS,
    ROLLUP,
    RUN_LEVEL,
    RunLayout,
    run_folder,
)
from ingest.store.read import StoreReader
from ingest.store.run_info import RunInfo

REPAIR_ROUNDS: Final = 3
"""Check-and-repair rounds at most: a rebuilt catalog is checked again, and its runs' leftovers repaired."""


# ----------------------------------------------------------------------------- repair

RunHook = Callable[[Any, str], None]
"""``on_generation(store, name)``: the analyses the product runs after a new generation
(``ingest.services.run_analyses.materialise``)."""


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
        if not any(f.action != Action.NONE for f in found):
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
    rebuild = [f for f in findings if f.action == Action.REBUILD]
    if rebuild:
        lost = _rebuild_catalog(root, wait_s)
        for f in rebuild:
            f.repaired = True
        for f in findings:
            if f.action == Action.REGISTER:
                f.repaired = True
        findings = [f for f in findings if f.action not in (Action.REBUILD, Action.REGISTER)]
        _analyse(root, [f.run for f in rebuild + findings if f.run], on_generation, all_runs=True)
    by_run: dict[str, list[Finding]] = {}
    for f in findings:
        if f.run is not None and f.action != Action.NONE:
            by_run.setdefault(f.run, []).append(f)
    touched = []
    for name, mine in by_run.items():
        try:
            with run_lock(root, name, wait_s):
                _repair_run(root, name, mine)
            touched.append(name)
        except (StabScopeError, OSError, duckdb.Error, pa.ArrowException) as exc:
            for f in mine:
                if not f.repaired:
                    f.how = f"{f.repair} (failed: {first_line(exc)})"
    _analyse(root, touched, on_generation)
    return lost


def _repair_run(root: Path, name: str, findings: list[Finding]) -> None:
    actions = {f.action for f in findings}
    layout = RunLayout(run_folder(root, name))
    if Action.REGISTER in actions:
        catalog = Catalog(root / CATALOG_NAME)
        _register(catalog, recover_run(layout, name), None)
        _mark(findings, Action.REGISTER)
        return  # its leftovers are the next round's
    deletions = [f for f in findings if f.action == Action.DELETE]
    for f in deletions:
        path = Path(f.path)
        if path.is_dir():
            shutil.rmtree(path)
        else:
            path.unlink(missing_ok=True)
        f.repaired = True
    if not actions - {Action.DELETE}:
        return
    catalog = Catalog(root / CATALOG_NAME)
    reader = StoreReader(root)
    protocol = _protocol(catalog, root, reader)
    if Action.ADOPT in actions:
        _adopt(protocol, name)
        _mark(findings, Action.ADOPT)
        return  # the adopted generation is checked in the next round
    if actions & {Action.REMERGE, Action.RESTORE, Action.FORGET_STAGED}:
        _merge_again(catalog, protocol, name, forget_offsets=Action.FORGET_STAGED in actions)
        _mark(findings, Action.REMERGE, Action.RESTORE, Action.FORGET_STAGED, Action.MERGE_STAGED, Action.REANALYSE)
    if Action.MERGE_STAGED in actions:
        protocol.merge(name)
        _mark(findings, Action.MERGE_STAGED)
    if Action.REANALYSE in actions:
        with catalog.unit() as con:
            con.execute(queries.SET_ANALYSIS_GEN, [0, name])  # the analyses recompute when analysis_gen != gen
        _mark(findings, Action.REANALYSE)
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


def _merge_again(catalog: Catalog, protocol: CommitProtocol, name: str, *, forget_offsets: bool) -> None:
    """A new full generation of ``name`` from its long files (or their intact copies, ``intact_sources``)
    and its readable staged batches (lowest priority first, as a merge takes them), through the commit
    protocol."""
    info = protocol.run_info(name)
    sources = intact_sources(protocol.layout(name), info)
    if sources is None:
        raise StabScopeError(f"run {name!r}: some of its rows have no intact copy left to merge again from")
    staged = [p for p in catalog.staged_files(name) if read_footer(Path(p), indexed=True).ok]
    protocol.merge_from(name, sources + staged, forget_offsets=forget_offsets)


def _adopt(protocol: CommitProtocol, name: str) -> None:
    """Make the newest complete generation in run ``name``'s files its current one (``check``'s
    ``_behind_files`` says why it is adopted rather than deleted)."""
    layout = protocol.layout(name)
    run = recover_run(layout, name)
    f = run.figures
    if f is None:
        raise StabScopeError(f"run {name!r}: no complete generation left in its files to adopt")
    files = GenerationFiles(
        long_path=layout.file(LONG, run.gen),
        run_level_path=layout.file(RUN_LEVEL, run.gen),
        rollup_path=layout.file(ROLLUP, run.gen),
        rank_buckets_path=layout.file(RANK_BUCKETS, run.gen),
        first=f.first,
        last=f.last,
        n_steps=run.n_steps,
        n_rows=f.n_rows,
        ranks=f.ranks,
        metric_rows=[(m, m in f.rank_metrics) for m in f.metrics],
        width=bucket_width(f.last - f.first + 1) if f.first is not None and f.last is not None else 1,
    )
    protocol.adopt(name, run.gen, files, run.base_gen)


def _analyse(root: Path, names: Sequence[str | None], on_generation: RunHook | None, *, all_runs: bool = False) -> None:
    """Run the analyses (``on_generation``) of the runs ``names`` (every run with ``all_runs``)."""
    if on_generation is None or (not names and not all_runs):
        return
    from ingest.store.facade import Store  # local: the facade is above this module

    store = Store(root, on_generation=on_generation)
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
        salvaged = salvage_catalog(kept, [name for name, _ in run_folders(root)])
    catalog = Catalog(path)
    lost: list[Finding] = []
    folders = run_folders(root)
    with contextlib.ExitStack() as locks:
        for name, _ in folders:
            locks.enter_context(run_lock(root, name, wait_s))
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
                            Action.NONE,
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
                Action.NONE,
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
