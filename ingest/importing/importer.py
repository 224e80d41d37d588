"""``stabscope import``: read foreign logs with ``ingest.formats`` and store them as runs."""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any, Final

from ingest.errors import StabScopeError
from ingest.store import IngestReport, ProgressFn, Store, skipped_example_texts, validate_run_name

MAX_IMPORT_BYTES = 4 * 1024**3
"""Largest total input accepted by one import (4 GiB); uploads have their own, smaller bound."""


def default_run_name(paths: Sequence[Path]) -> str:
    """A run name from the first path: its stem (or its folder's name for generic file names)."""
    first = paths[0]
    stem = first.stem if first.is_file() else first.name
    if stem.lower() in {
        "metrics",
        "main",
        "trainer_state",
        "trainer_log",
        "run",
        "log",
        "wandb-history",
    } or stem.startswith("events.out"):
        stem = f"{first.resolve().parent.name}-{stem}" if first.is_file() else stem
    name = re.sub(r"[^A-Za-z0-9._-]+", "-", stem).strip("-.") or "imported"
    return name[:128]


def _read_first(paths: Sequence[Path], logs: Sequence[Path]) -> Sequence[Path]:
    """``paths`` from the first one read as a log: a README or PROVENANCE.txt given first does not
    name the run."""
    read = {p.resolve() for p in logs}
    return [p for p in paths if p.resolve() in read] or paths


def import_logs(
    store: Store,
    paths: Sequence[Path],
    *,
    run: str | None = None,
    fmt: str | None = None,
    progress: ProgressFn | None = None,
    metric_map: Mapping[str, str] | None = None,
    existing: str = "append",
    user_meta: Mapping[str, Any] | None = None,
    remove_meta: Sequence[str] = (),
    reader_set: Collection[str] | None = None,
) -> list[dict[str, Any]]:
    """Import ``paths`` as one run; returns the ``--json`` objects (run, format, rows, metrics, steps,
    skipped lines, and from :func:`ingest.importing.import_inputs.read_inputs`: the logs read, the config
    used, the files skipped with why, notes on combined logs). A text log whose steps start again at
    the first step holds several runs: the first is ``run``, the others ``run-2``, ``run-3``, ...,
    listed under ``segments``; ``kept_over`` says which source was kept for a metric two line
    layouts gave (``ingest.formats.segments``). Nothing is written unless the whole
    input parsed. The import report (``lines_read``, ``parsed``, ``ignored`` by reason, ``suspect``:
    :mod:`ingest.formats.accounting`) comes with them and is kept in the run's meta
    (``import_report``). ``metric_map`` (``--map NAME=ROLE``) renames metrics to roles; it is remembered
    with the run and applied again to what is imported into it later (``ingest.importing.metric_map``).
    ``existing`` says what to do when run ``run`` exists (see :data:`EXISTING_RUN`). A log no trainer's
    reader recognises is read by the generic reader: ``mapping`` is what it took for the step and
    each role (``{role: key}``) after the user's corrections (``--map NAME=ROLE``, ``--map KEY=step``),
    None for other readers; ``reader_note`` says the generic reader was used; ``step_source`` says what a
    reader took for the step where the log names none (a CSV's unnamed index column), else None. ``user_meta`` and
    ``remove_meta`` (``--meta KEY=VALUE``, ``--meta KEY=``) are committed with run ``run``'s rows, as
    ``Store.update_meta`` records them: its analyses run once, on them. ``reader_set`` limits detection
    to those built-in readers (``ingest.formats.FALLBACK_READERS``: what a layout no reader knows gets)."""
    from ingest.importing.import_inputs import read_inputs

    if existing not in EXISTING_RUN:
        raise StabScopeError(f"existing must be one of {', '.join(EXISTING_RUN)}, not {existing!r}")

    for p in paths:
        if not p.exists():
            raise StabScopeError(f"{p}: no such file or directory")
    total = sum(_size(p) for p in paths)
    if total > MAX_IMPORT_BYTES:
        raise StabScopeError(
            f"input is {total / 1e9:.1f} GB; the limit for one import is {MAX_IMPORT_BYTES / 1e9:.1f} GB"
        )
    if run is not None:
        validate_run_name(run)  # a bad name is refused before the files are read
    from ingest.importing.metric_map import all_metrics, final_mapping, resolve_map, split_step_key, with_proposal

    given, step_key = split_step_key(metric_map or {})
    read = read_inputs(
        list(paths),
        fmt=fmt,
        progress=progress,
        custom_dir=store.root / "formats",
        step_key=step_key,
        reader_set=reader_set,
    )
    name = validate_run_name(run or default_run_name(_read_first(paths, read.inputs.logs)))
    proposal = read.parsed.meta.get("mapping")
    if step_key is not None and proposal is None:
        raise StabScopeError(
            f"--map {step_key}=step chooses the step key of the generic reader; this log was read as "
            f"{read.parsed.format}, which reads its own steps"
        )
    mapping = final_mapping(proposal, {**given, **({step_key: "step"} if step_key else {})})
    metric_map = with_proposal(given, read.parsed.meta.get("proposed_map"))
    # a bad --map is refused before waiting for the run; a file of several runs is checked against
    # all of them (each run then takes the entries that fit it)
    resolve_map(metric_map, all_metrics(read.parsed))
    if read.parsed.table.num_rows == 0:
        raise StabScopeError(
            f"{paths[0]}: no metric records found in the {read.parsed.format} input "
            f"({read.parsed.skipped} lines skipped)"
        )

    # the run's remembered map is read and the rows written under one hold of the run's writer lock
    with store.writing(name):
        held = _settle_existing_run(store, name, read.parsed.source_files, existing) if store.has_run(name) else []
        parsed = remembered_map_applied(store, name, read.parsed, metric_map or {})
        if held:  # the run's source names every file it holds, so that any of them may be read again
            parsed = replace(parsed, source_files=sorted({*held, *map(_resolved, parsed.source_files)}))
        parsed = with_line_report(parsed)  # after the map: its metrics are the stored names
        line_report = parsed.meta.get("import_report")
        report = store_parsed(store, name, parsed, user_meta=user_meta, remove_meta=remove_meta)
    segments = import_segments(store, name, parsed, metric_map)
    import pyarrow.compute as pc

    steps = parsed.table.column("step")
    # the distinct names only: a Python string per row is slow on a multi-million-row log
    metrics = sorted(str(m) for m in pc.unique(parsed.table.column("metric")).to_pylist())

    return [
        {
            "run": name,
            "format": parsed.format,
            "rows": report.rows,
            "metrics": metrics,
            "steps": [pc.min(steps).as_py(), pc.max(steps).as_py()],
            "skipped": parsed.skipped,
            "skipped_examples": skipped_example_texts(parsed),
            "events": len(parsed.events),
            **read.summary(),
            "warnings": config_warnings(paths),
            "line_range": list(parsed.lines) if parsed.lines else None,
            "segments": segments,
            "kept_over": parsed.kept_over,
            "mapping": mapping,
            "reader_note": parsed.meta.get("generic_reader"),
            "step_source": parsed.meta.get("step_source"),
            **report_fields(line_report),
        }
    ]


def store_parsed(
    store: Store,
    name: str,
    parsed: Any,
    *,
    user_meta: Mapping[str, Any] | None = None,
    remove_meta: Sequence[str] = (),
) -> IngestReport:
    """Store an ``ingest.formats.ParsedLog`` as run ``name`` (``Store.import_table``): its rows, events,
    rejected lines and the metadata it states (with its config's facts, ``ingest.importing.configs``), and the
    user's ``user_meta``/``remove_meta`` in the same commit."""
    from ingest.importing.configs import meta_with_config_facts  # local: yaml/toml only load for an import

    return store.import_table(
        name,
        parsed.table,
        source=f"import:{parsed.format}:" + ",".join(parsed.source_files),
        events=parsed.events,
        meta=meta_with_config_facts(parsed.meta),
        rejected=parsed.skipped,
        rejected_examples=skipped_example_texts(parsed),
        user_meta=user_meta,
        remove_meta=remove_meta,
    )


def with_line_report(parsed: Any) -> Any:
    """``parsed`` with its import report (:func:`ingest.formats.accounting.import_report`) in its
    meta, and in each further run's (the report describes the whole input): kept with the run, shown
    on its overview. Unchanged when its reader kept no account."""
    from ingest.formats.accounting import import_report

    line_report = import_report(parsed)
    if line_report is None:
        return parsed
    for segment in parsed.segments:
        segment.meta["import_report"] = line_report
    return replace(parsed, meta={**parsed.meta, "import_report": line_report})


def report_fields(line_report: dict[str, Any] | None) -> dict[str, Any]:
    """The import report's ``--json`` fields (issue #31's Contract): ``lines`` (lines read, or records
    for tabular/TensorBoard/Parquet input, as ``lines_unit`` says; ``lines_read`` is the same number),
    ``parsed``, ``ignored`` by reason, ``suspect``. The first and last line of the rows, which a
    pre-report ``lines`` held, is ``line_range``."""
    if line_report is None:
        return {}
    fields = dict(line_report)
    fields["lines_unit"] = fields.pop("unit")
    fields["lines"] = fields["lines_read"]
    return fields


EXISTING_RUN: Final = ("refuse", "append", "replace")
"""What an import into a run that exists does: ``refuse`` when the run came from other files (the same
files again update it), ``append`` merges (at a step both hold, the new file's value wins), ``replace``
deletes the run first. The CLI refuses unless told (``--append``/``--replace``); the Upload page warns."""


def _settle_existing_run(store: Store, name: str, files: Sequence[str], existing: str) -> list[str]:
    """Apply ``existing`` to run ``name``, which exists, before ``files`` are imported into it; the
    files the run already holds, which it keeps (none once replaced)."""
    if existing == "replace":
        store.delete_run(name)
        return []
    source = store.run_info(name).source
    before = _imported_files(source)
    if existing == "append" or (before is not None and {_resolved(f) for f in files} <= before):
        return sorted(before or ())  # appended, or one of its own logs again (grown, or re-read)
    came_from = ", ".join(sorted(before)) if before else source
    raise StabScopeError(
        f"run {name!r} already holds {came_from}; importing {', '.join(files)} into it would mix the two or "
        f"overwrite its steps. Give --run NEW-NAME for a run of its own, --append to add to {name!r} (at a "
        "step both hold, the new value wins), or --replace to replace it"
    )


def _imported_files(source: str) -> set[str] | None:
    """The files an imported run came from (its catalog ``source``: ``import:FORMAT:FILE,FILE``), or
    None for a run that was not imported (compacted shards, a demo)."""
    kind, _, rest = source.partition(":")
    if kind != "import":
        return None
    _, _, files = rest.partition(":")
    return {_resolved(f) for f in files.split(",") if f}


def _resolved(path: str) -> str:
    return str(Path(path).resolve())


_CONFIG_NAME = re.compile(r"config|hparams|args|params|settings", re.I)
_CONFIG_SUFFIXES = (".yaml", ".yml", ".json", ".toml")


def config_warnings(paths: Sequence[Path]) -> list[str]:
    """One line per file among ``paths`` (or in a folder of them) named and suffixed like a run config
    that does not read: the log is imported all the same, and this says why the config's settings
    are left out (its error names the file and, where known, the line)."""
    from ingest.importing.configs import MAX_CONFIG_BYTES, read_run_config_file

    candidates = [f for p in paths for f in (sorted(p.rglob("*")) if p.is_dir() else [p])]
    warnings = []
    for f in candidates:
        if f.suffix.lower() not in _CONFIG_SUFFIXES or not _CONFIG_NAME.search(f.name):
            continue
        if not f.is_file() or f.stat().st_size > MAX_CONFIG_BYTES:
            continue
        try:
            read_run_config_file(f)
        except StabScopeError as exc:
            warnings.append(f"config not used: {exc}")
    return warnings


def segment_run_name(name: str, index: int) -> str:
    """The run the ``index``-th further run in one input is stored as: ``NAME-2``, ``NAME-3``, ...
    (shortened so the suffix always fits a run name)."""
    suffix = f"-{index + 2}"
    return validate_run_name(name[: 128 - len(suffix)] + suffix)


def import_segments(
    store: Store, name: str, parsed: Any, metric_map: Mapping[str, str] | None = None
) -> list[dict[str, Any]]:
    """Store the further runs ``parsed`` held (``parsed.segments``: its steps started again) as
    ``name-2``, ``name-3``, ...; one description each (run, steps, input lines, rows, events)."""
    return [_import_segment(store, segment_run_name(name, i), s, metric_map) for i, s in enumerate(parsed.segments)]


FILE_PLAN_KEYS: tuple[str, ...] = ("planned_steps", "total_steps")
"""The planned total a reader states once per file (the first ``Epoch 1/50``, ``iteration 1/ 1000``): a further
run of the file (a segment) is no evidence of it, so a segment does not carry it (issue #32: a run's plan is said
only where the log states one for that run)."""


def _import_segment(store: Store, run: str, parsed: Any, metric_map: Mapping[str, str] | None) -> dict[str, Any]:
    parsed.meta = {k: v for k, v in parsed.meta.items() if k not in FILE_PLAN_KEYS}
    with store.writing(run):
        mapped = remembered_map_applied(store, run, parsed, metric_map or {})
        report = store_parsed(store, run, mapped)
    first, last = mapped.step_range or (None, None)
    return {
        "run": run,
        "first_step": first,
        "last_step": last,
        "lines": list(mapped.lines) if mapped.lines else None,
        "rows": report.rows,
        "events": len(mapped.events),
    }


def remembered_map_applied(store: Store, run: str, parsed: Any, given: Mapping[str, str]) -> Any:
    """``parsed`` with the user's mapping (``given``, and what run ``run`` remembers) applied."""
    from ingest.importing.metric_map import apply_metric_map, map_for_part, stored_map

    known = {r.name: r for r in store.list_runs()}
    remembered = stored_map(known[run].meta) if run in known else {}
    return apply_metric_map(parsed, map_for_part(given, parsed.metrics), remembered)


def _size(path: Path) -> int:
    if path.is_dir():
        return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())
    return path.stat().st_size
