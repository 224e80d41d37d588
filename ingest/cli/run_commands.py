"""The commands that put runs into the store, list, show, export, check and delete them:
``compact``, ``watch``, ``import``, ``runs``, ``show``, ``export``, ``delete``, ``check``, ``meta``."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from ingest.cli.output import (
    cli_store,
    print_json,
    print_safe,
    progress_bar,
    store_location_arg,
    terminal_safe,
)
from ingest.errors import StabScopeError


def cmd_compact(args: argparse.Namespace) -> int:
    from ingest.store.engines.spark_engine import parts_reader  # the engine is the CLI's choice, given to the store

    read_parts = parts_reader(args.engine, args.master)
    store = cli_store(args)
    with progress_bar(f"compact {args.run}") as progress:
        report = store.compact(args.run, args.shard_dir, progress=progress, read_parts=read_parts)
    report_ingest(args, report)
    return 0


def report_ingest(args: argparse.Namespace, report: Any) -> None:
    if args.json:
        print_json(report.to_json())
        return
    print_safe(
        f"{report.run}: {report.rows} rows from {report.frames} frames in {report.segments} segments "
        f"(generation {report.gen})"
    )
    if report.rejected:
        print_safe(f"  rejected {report.rejected} records, e.g.:", file=sys.stderr)
        for example in report.rejected_examples:
            print_safe(f"    {example}", file=sys.stderr)
    for torn in report.torn:
        print_safe(f"  note: {torn}", file=sys.stderr)


def cmd_watch(args: argparse.Namespace) -> int:
    # the follower is imported once the source is known: a shard watcher (restarted after every crash or
    # kill) then starts without loading the log format readers, which only a log watcher needs
    from ingest.live.watch_source import is_log_source, wait_for_content

    store = cli_store(args)
    if not str(args.shard_dir).startswith("s3://") and not Path(args.shard_dir).exists():
        raise StabScopeError(f"{args.shard_dir} does not exist: nothing to watch")
    if not args.once and not str(args.shard_dir).startswith("s3://"):
        try:
            wait_for_content(
                Path(args.shard_dir), args.interval, lambda msg: print_safe(msg, file=sys.stderr, flush=True)
            )
        except KeyboardInterrupt:
            return 0
    common = {
        "interval_s": args.interval,
        "once": args.once,
        "on_alert": args.on_alert,
        "log": lambda msg: print_safe(msg, file=sys.stderr, flush=True),
        "wait_s": args.wait,
    }
    if is_log_source(args.shard_dir, args.format):
        from ingest.live.watch_logs import watch_logs

        watch_logs(store, args.run, args.shard_dir, fmt=args.format, **common)
    else:
        from ingest.live.watch import watch

        watch(store, args.run, args.shard_dir, **common)
    return 0


def cmd_runs(args: argparse.Namespace) -> int:
    store = cli_store(args)
    from ingest.services.run_status import run_status
    from ingest.store.run_meta import run_tags

    runs = store.list_runs()
    if args.tag:
        runs = [r for r in runs if set(args.tag) <= set(run_tags(r.meta))]
    # "finished" in the catalog means nothing writes the run any more; how far it got is the status text
    texts = {r.name: run_status(store, r.name) for r in runs}
    damage = {r.name: store.damage(r.name) for r in runs}  # why a file of the run is missing or damaged
    if args.json:
        labels = [{"tags": run_tags(r.meta), "notes": r.meta.get("notes", ""), "damaged": damage[r.name]} for r in runs]
        print_json(
            [{**r.to_json(), "status_text": texts[r.name], **label} for r, label in zip(runs, labels, strict=True)]
        )
        return 0
    if not runs:
        if args.tag:
            print_safe(
                f"no runs in {store.location} have the tags {', '.join(args.tag)}: `stabscope meta RUN tags=a,b`"
            )
            return 0
        print_safe(f"no runs in {store.location}: `stabscope demo` adds demo runs, `stabscope import LOG` a log")
        return 0
    width = max(9, *(len(t) for t in texts.values()))
    print_safe(f"{'name':32} {'status':{width}} {'steps':>19} {'ranks':>5}  metrics")
    for r in runs:
        steps = f"{r.first_step}..{r.last_step}"
        print_safe(f"{r.name:32} {texts[r.name]:{width}} {steps:>19} {r.ranks:>5}  {', '.join(r.metrics)}")
    for name, why in damage.items():
        if why is not None:
            print_safe(f"warning: run {name} is damaged: {why}", file=sys.stderr)
    return 0


def cmd_show(args: argparse.Namespace) -> int:
    from ingest.store.run_meta import run_tags

    store = cli_store(args)
    info = store.run_info(args.run)
    out = info.to_json()
    out["events"] = [{"step": e.step, "kind": e.kind, "label": e.label} for e in store.events(args.run)]
    out["rejected_examples"] = info.rejected_examples
    out["tags"], out["notes"] = run_tags(info.meta), info.meta.get("notes", "")
    if args.json:
        print_json(out)
        return 0
    for key in ("name", "status", "source", "steps", "n_steps", "ranks", "rows", "metrics", "rejected"):
        print_safe(f"{key:>10}: {out[key]}")
    if out["tags"]:
        print_safe(f"{'tags':>10}: {', '.join(out['tags'])}")
    if out["notes"]:
        print_safe(f"{'notes':>10}: {terminal_safe(out['notes'], keep_newlines=False)}")
    for e in out["events"][:20]:
        label = terminal_safe(f"{e['kind']} {e['label']}", keep_newlines=False)
        print_safe(f"     event: step {e['step']}: {label}")
    return 0


STDOUT_TARGET = "-"
"""``export -o -``: the table goes to standard output (for a pipe), not to a file named ``-``."""


def cmd_export(args: argparse.Namespace) -> int:
    store = cli_store(args)
    if args.output == STDOUT_TARGET:
        return _export_to_stdout(store, args)
    target = args.output or f"{args.run}.{args.format}"
    rows = _export_file(store, args, Path(target))
    print_safe(f"wrote {rows} rows to {target}", file=sys.stderr)
    return 0


def _export_file(store: Any, args: argparse.Namespace, target: Path) -> int:
    """``store.export`` into ``target``; a write that fails (a full disk, a read-only folder) is one
    paragraph naming the file, what the system said and the space left on its file system."""
    import shutil

    try:
        return int(store.export(args.run, args.format, target))
    except StabScopeError:
        raise
    except Exception as exc:  # duckdb.IOException, pyarrow.ArrowIOError, OSError: all say "cannot write"
        if not _is_write_failure(exc):
            raise
        folder = target.resolve().parent
        try:
            free = f"{shutil.disk_usage(folder).free / 1024**2:,.1f} MiB are free there"
        except OSError:
            free = "its free space could not be read"
        what = " ".join(str(exc).split())
        raise StabScopeError(
            f"cannot write the export of run {args.run!r} to {target}: {what}. {free}; nothing was left "
            "behind. Free some space or give another file with -o (or -o - to write to standard output)"
        ) from exc


_WRITE_FAILURE_WORDS = ("no space left", "disk quota", "read-only file system", "could not write", "permission denied")


def _is_write_failure(exc: BaseException) -> bool:
    """Whether ``exc`` (an ``OSError``, or DuckDB's/Arrow's wrapping of one) is a failed file write."""
    import errno

    if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES):
        return True
    return any(word in str(exc).lower() for word in _WRITE_FAILURE_WORDS)


def _export_to_stdout(store: Any, args: argparse.Namespace) -> int:
    """``export -o -``: the table written to a private temporary file, then its bytes copied to standard
    output (Parquet's footer is written last, so it cannot be streamed as it is made)."""
    import shutil
    import tempfile

    if args.format == "parquet" and sys.stdout.isatty():
        raise StabScopeError("refusing to write Parquet (binary) to the terminal: pipe it (-o - | ...) or give a file")
    with tempfile.TemporaryDirectory(prefix="stabscope-export-") as folder:
        staged = Path(folder) / f"export.{args.format}"
        rows = _export_file(store, args, staged)
        sys.stdout.flush()
        with open(staged, "rb") as table:
            shutil.copyfileobj(table, sys.stdout.buffer)
        sys.stdout.buffer.flush()
    print_safe(f"wrote {rows} rows to standard output", file=sys.stderr)
    return 0


def cmd_delete(args: argparse.Namespace) -> int:
    store = cli_store(args)
    store.delete_run(args.run)
    print_safe(f"deleted run {args.run}", file=sys.stderr)
    return 0


def cmd_check(args: argparse.Namespace) -> int:
    from ingest.store.check import check_store
    from ingest.store.check_repair import repair_store
    from ingest.store.paths import default_store_location

    root = store_location_arg(args.store or default_store_location())
    if isinstance(root, str):  # an s3:// URL: its objects against its manifests
        from ingest.store.check_remote import check_object_store

        report = check_object_store(root, args.run, repair=args.repair)
    elif args.repair:
        from ingest.services.run_analyses import materialise

        report = repair_store(root, args.run, on_generation=materialise, wait_s=args.wait)
    else:
        report = check_store(root, args.run, wait_s=args.wait)
    if args.json:
        print_json([f.to_json() for f in report.findings])
    for f in [] if args.json else report.findings:
        print_safe(f.line(after_repair=args.repair))
    what = f"run {args.run!r} of store {root}" if args.run else f"store {root}"
    if report.clean:
        done = f", after {sum(f.repaired for f in report.findings)} repair(s)" if report.findings else ""
        print_safe(f"stabscope check: {what} is clean{done}", file=sys.stderr)
        return 0
    left = sum(not f.repaired for f in report.findings)
    hint = "" if args.repair else "; `stabscope check --repair` does what each line says"
    print_safe(f"stabscope check: {what}: {left} problem(s){hint}", file=sys.stderr)
    return 1


def cmd_import(args: argparse.Namespace) -> int:
    from ingest.formats.accounting import summary_line, suspect_warning
    from ingest.importing.importer import import_logs
    from ingest.importing.metric_map import parse_map_args
    from ingest.store.run_meta import parse_assignments

    user_meta, removals = parse_assignments(args.meta)  # refused before anything is written
    store = cli_store(args)
    with progress_bar("import") as progress:
        results = import_logs(
            store,
            [Path(p) for p in args.paths],
            run=args.run,
            fmt=args.format,
            progress=progress,
            metric_map=parse_map_args(args.map),
            existing=args.existing or "refuse",  # another file into an existing run: say so, lose nothing
            user_meta=user_meta,  # committed with the rows: the analyses run once, on the user's values
            remove_meta=removals,
        )
    for res in results:
        if args.json:
            print_safe(json.dumps(res, default=str))
        else:
            print_safe(
                f"{res['run']}: {res['rows']} rows of {', '.join(res['metrics'])} "
                f"(steps {res['steps'][0]}..{res['steps'][1]}, format {res['format']}, "
                f"{res['skipped']} lines skipped)"
            )
            if res.get("mapping"):  # no trainer's format matched: say what the generic reader took for what
                taken = ", ".join(f"{role} = {key}" for role, key in res["mapping"].items())
                print_safe(f"  {res['reader_note']}: {taken}")
            if res.get("step_source"):  # the log names no step: say what was taken for it
                print_safe(f"  step: {res['step_source']}")
            if res.get("lines_read") is not None:
                print_safe(f"  {summary_line(res)}")
            if res.get("config"):
                print_safe(f"  config: {res['config']}")
            for skipped in res.get("skipped_files", []):
                print_safe(f"  skipped {skipped['file']}: {skipped['why']}")
            for note in res.get("notes", []):
                print_safe(f"  note: {note}")
            for kept in res.get("kept_over", []):
                print_safe(
                    f"  {kept['metric']}: kept {kept['kept']} over {kept['over']} "
                    f"(stored as {kept['stored_as']}; rule: {kept['rule']})"
                )
            for name, moved in (res.get("moved") or {}).items():  # nothing read is dropped without a word
                print_safe(f"  {name}: not a series ({moved['why']}); kept in the run's meta log_settings")
            for seg in res.get("segments", []):
                lines = f", lines {seg['lines'][0]}..{seg['lines'][1]}" if seg.get("lines") else ""
                print_safe(
                    f"  the steps start again: {seg['run']}: {seg['rows']} rows "
                    f"(steps {seg['first_step']}..{seg['last_step']}{lines}), imported as its own run"
                )
            for warning in res.get("warnings", []):
                print_safe(f"  warning: {warning}", file=sys.stderr)
            suspect = suspect_warning(res)
            if suspect:
                print_safe(f"  warning: {suspect}", file=sys.stderr)
    return 0


def cmd_meta(args: argparse.Namespace) -> int:
    """Print a run's settable metadata, or set (``KEY=VALUE``) and remove (``KEY=``) keys."""
    from ingest.store.run_meta import parse_assignments, settable_meta, user_keys

    store = cli_store(args)
    info = store.run_info(args.run)
    if args.assignments:
        updates, removals = parse_assignments(args.assignments)
        info = store.update_meta(args.run, updates, removals)
    shown = settable_meta(info.meta)
    if args.json:
        print_json(shown)
        return 0
    if not shown:
        print_safe(f"{args.run}: no run metadata set; e.g. `stabscope meta {args.run} gpus=8 usd_per_gpu_hour=2.0`")
    mine = user_keys(info.meta)
    for key, value in shown.items():
        print_safe(f"{key:>22} = {value}" + ("  (set by you)" if key in mine else "  (from the log)"))
    return 0
