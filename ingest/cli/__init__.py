"""``stabscope`` / ``python -m ingest``: the command line over the store.

Every subcommand takes ``--store PATH`` (default: ``$STABSCOPE_STORE`` or the embedded store) and
``--json`` where it prints data. Failures exit non-zero with one paragraph on stderr, no traceback.
The commands that write a run take ``--wait SECONDS``: how long to wait for another process writing the
same run before exiting with status 1 (other failures exit 2).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import secrets
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TextIO

import ingest
from ingest.errors import StabScopeError

EXIT_ERROR = 2
WRITER_WAIT_S = 30.0
SENSITIVITY_CHOICES = ("low", "default", "high")
"""``spikes --sensitivity``: the names of ``stab_core.severity.SENSITIVITIES``, spelled out so that the
parser is built without importing numpy (tests/test_severity.py checks they agree)."""
"""Default of ``--wait``: seconds a write waits for another process writing the same run
(``ingest.store.run_lock.DEFAULT_WRITER_WAIT_S``; not imported here, so that ``--help`` loads no store)."""


def _store(args: argparse.Namespace) -> Any:
    from ingest.services.run_analyses import open_analysed_store

    store = open_analysed_store(args.store)
    if getattr(args, "wait", None) is not None:  # the writing commands' --wait
        store.writer_wait_s = args.wait
    return store


def _location(store: str, *, resolve: bool = False) -> str | Path:
    """``--store``'s value: an ``s3://`` URL as it is, else a path (``~`` expanded)."""
    if store.startswith("s3://"):
        return store
    path = Path(store).expanduser()
    return path.resolve() if resolve else path


_TERMINAL_CONTROLS = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
"""Characters a terminal acts on instead of showing: C0 controls but the newline (ESC starts the
sequences that retitle, clear or recolour a terminal), DEL, C1 controls (0x9b is a one-byte CSI) and
the bidirectional overrides that reorder what is shown."""


def terminal_safe(text: str, *, keep_newlines: bool = True) -> str:
    """``text`` with every terminal control written as a visible escape (ESC as ``\\x1b``): a log's run
    names, event labels and metric names, and error messages quoting a file, reach the terminal as
    text, never as commands. Newlines are kept where they are the CLI's own line structure."""
    pattern = _TERMINAL_CONTROLS if keep_newlines else _TERMINAL_CONTROLS_AND_NEWLINE
    return pattern.sub(_visible_escape, text)


_TERMINAL_CONTROLS_AND_NEWLINE = re.compile("[\x00-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
"""The same and the newline too: for a one-line field (an event label) that must not forge lines."""


def _visible_escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}"


def _print(*parts: object, file: TextIO | None = None, flush: bool = False) -> None:
    """``print`` for everything the CLI writes to the terminal: each part made :func:`terminal_safe`
    (``--json`` output is safe already: ``json.dumps`` escapes every control character)."""
    print(*(terminal_safe(str(p)) for p in parts), file=file, flush=flush)


@contextmanager
def _progress(desc: str, unit: str = "B") -> Iterator[Callable[[int, int], None]]:
    """A tqdm bar on stderr fed by ``progress(done, total)`` callbacks (silent when not a terminal)."""
    from tqdm import tqdm

    bar = tqdm(desc=desc, unit=unit, unit_scale=True, file=sys.stderr, disable=None, leave=False)

    def update(done: int, total: int) -> None:
        bar.total = total
        bar.n = done
        bar.refresh()

    try:
        yield update
    finally:
        bar.close()


def _print_json(obj: Any) -> None:
    print(
        json.dumps(obj, indent=2, default=str, allow_nan=False)
        if not _has_nonfinite(obj)
        else json.dumps(_nonfinite_to_str(obj), indent=2, default=str)
    )


def _has_nonfinite(obj: Any) -> bool:
    try:
        json.dumps(obj, allow_nan=False, default=str)
        return False
    except ValueError:
        return True


def _nonfinite_to_str(obj: Any) -> Any:
    """JSON has no NaN/Inf: write them as the strings "nan"/"inf"/"-inf" (parsers of scripts can)."""
    if (isinstance(obj, float) and obj != obj) or obj in (float("inf"), float("-inf")):
        return str(obj)
    if isinstance(obj, dict):
        return {k: _nonfinite_to_str(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_nonfinite_to_str(v) for v in obj]
    return obj


# ----------------------------------------------------------------------------- commands


def cmd_compact(args: argparse.Namespace) -> int:
    from ingest.store.engines.spark_engine import parts_reader  # the engine is the CLI's choice, given to the store

    read_parts = parts_reader(args.engine, args.master)
    store = _store(args)
    with _progress(f"compact {args.run}") as progress:
        report = store.compact(args.run, args.shard_dir, progress=progress, read_parts=read_parts)
    _report_ingest(args, report)
    return 0


def _report_ingest(args: argparse.Namespace, report: Any) -> None:
    if args.json:
        _print_json(report.to_json())
        return
    _print(
        f"{report.run}: {report.rows} rows from {report.frames} frames in {report.segments} segments "
        f"(generation {report.gen})"
    )
    if report.rejected:
        _print(f"  rejected {report.rejected} records, e.g.:", file=sys.stderr)
        for example in report.rejected_examples:
            _print(f"    {example}", file=sys.stderr)
    for torn in report.torn:
        _print(f"  note: {torn}", file=sys.stderr)


def cmd_watch(args: argparse.Namespace) -> int:
    from ingest.live.watch import watch
    from ingest.live.watch_logs import is_log_source, wait_for_content, watch_logs

    store = _store(args)
    if not str(args.shard_dir).startswith("s3://") and not Path(args.shard_dir).exists():
        raise StabScopeError(f"{args.shard_dir} does not exist: nothing to watch")
    if not args.once and not str(args.shard_dir).startswith("s3://"):
        try:
            wait_for_content(Path(args.shard_dir), args.interval, lambda msg: _print(msg, file=sys.stderr, flush=True))
        except KeyboardInterrupt:
            return 0
    common = {
        "interval_s": args.interval,
        "once": args.once,
        "on_alert": args.on_alert,
        "log": lambda msg: _print(msg, file=sys.stderr, flush=True),
        "wait_s": args.wait,
    }
    if is_log_source(args.shard_dir, args.format):
        watch_logs(store, args.run, args.shard_dir, fmt=args.format, **common)
    else:
        watch(store, args.run, args.shard_dir, **common)
    return 0


def cmd_runs(args: argparse.Namespace) -> int:
    store = _store(args)
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
        _print_json(
            [{**r.to_json(), "status_text": texts[r.name], **label} for r, label in zip(runs, labels, strict=True)]
        )
        return 0
    if not runs:
        if args.tag:
            _print(f"no runs in {store.location} have the tags {', '.join(args.tag)}: `stabscope meta RUN tags=a,b`")
            return 0
        _print(f"no runs in {store.location}: `stabscope demo` adds demo runs, `stabscope import LOG` a log")
        return 0
    width = max(9, *(len(t) for t in texts.values()))
    _print(f"{'name':32} {'status':{width}} {'steps':>19} {'ranks':>5}  metrics")
    for r in runs:
        steps = f"{r.first_step}..{r.last_step}"
        _print(f"{r.name:32} {texts[r.name]:{width}} {steps:>19} {r.ranks:>5}  {', '.join(r.metrics)}")
    for name, why in damage.items():
        if why is not None:
            _print(f"warning: run {name} is damaged: {why}", file=sys.stderr)
    return 0


def cmd_show(args: argparse.Namespace) -> int:
    from ingest.store.run_meta import run_tags

    store = _store(args)
    info = store.run_info(args.run)
    out = info.to_json()
    out["events"] = [{"step": e.step, "kind": e.kind, "label": e.label} for e in store.events(args.run)]
    out["rejected_examples"] = info.rejected_examples
    out["tags"], out["notes"] = run_tags(info.meta), info.meta.get("notes", "")
    if args.json:
        _print_json(out)
        return 0
    for key in ("name", "status", "source", "steps", "n_steps", "ranks", "rows", "metrics", "rejected"):
        _print(f"{key:>10}: {out[key]}")
    if out["tags"]:
        _print(f"{'tags':>10}: {', '.join(out['tags'])}")
    if out["notes"]:
        _print(f"{'notes':>10}: {terminal_safe(out['notes'], keep_newlines=False)}")
    for e in out["events"][:20]:
        label = terminal_safe(f"{e['kind']} {e['label']}", keep_newlines=False)
        _print(f"     event: step {e['step']}: {label}")
    return 0


STDOUT_TARGET = "-"
"""``export -o -``: the table goes to standard output (for a pipe), not to a file named ``-``."""


def cmd_export(args: argparse.Namespace) -> int:
    store = _store(args)
    if args.output == STDOUT_TARGET:
        return _export_to_stdout(store, args)
    target = args.output or f"{args.run}.{args.format}"
    rows = _export_file(store, args, Path(target))
    _print(f"wrote {rows} rows to {target}", file=sys.stderr)
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
    _print(f"wrote {rows} rows to standard output", file=sys.stderr)
    return 0


def cmd_delete(args: argparse.Namespace) -> int:
    store = _store(args)
    store.delete_run(args.run)
    _print(f"deleted run {args.run}", file=sys.stderr)
    return 0


def cmd_check(args: argparse.Namespace) -> int:
    from ingest.store.check import check_store
    from ingest.store.check_repair import repair_store
    from ingest.store.paths import default_store_location

    root = _location(args.store or default_store_location())
    if isinstance(root, str):  # an s3:// URL: its objects against its manifests
        from ingest.store.check_remote import check_object_store

        report = check_object_store(root, args.run, repair=args.repair)
    elif args.repair:
        from ingest.services.run_analyses import materialise

        report = repair_store(root, args.run, on_generation=materialise, wait_s=args.wait)
    else:
        report = check_store(root, args.run, wait_s=args.wait)
    if args.json:
        _print_json([f.to_json() for f in report.findings])
    for f in [] if args.json else report.findings:
        _print(f.line(after_repair=args.repair))
    what = f"run {args.run!r} of store {root}" if args.run else f"store {root}"
    if report.clean:
        done = f", after {sum(f.repaired for f in report.findings)} repair(s)" if report.findings else ""
        _print(f"stabscope check: {what} is clean{done}", file=sys.stderr)
        return 0
    left = sum(not f.repaired for f in report.findings)
    hint = "" if args.repair else "; `stabscope check --repair` does what each line says"
    _print(f"stabscope check: {what}: {left} problem(s){hint}", file=sys.stderr)
    return 1


def cmd_demo(args: argparse.Namespace) -> int:
    from ingest.services.demo import seed_demo_store

    store = _store(args)
    with _progress("demo runs", unit="run") as progress:
        names = seed_demo_store(store, force=True, progress=progress, on_wait=_say_demo_wait(), wait_s=args.wait)
    if names:
        _print(f"demo runs in {store.location}: {', '.join(names)}", file=sys.stderr)
    else:
        _print(f"demo runs in {store.location}: written by another process meanwhile", file=sys.stderr)
    return 0


def _say_demo_wait() -> Callable[[Any], None]:
    """An ``on_wait`` for ``seed_demo_store``: one line on stderr, the first time, naming who prepares them."""
    said: list[bool] = []

    def waiting(holder: Any) -> None:
        if not said:
            said.append(True)
            who = f" by {holder.describe()}" if holder is not None else ""
            _print(f"the demo runs are being prepared{who}: waiting for them", file=sys.stderr, flush=True)

    return waiting


# `serve` runs app.py's server in this very process (os.execv: same PID, so a `kill` of the command
# stops the server; a child would be left serving as an orphan). The server side lives in
# pages/server.py: ingest never loads Streamlit.
_SERVE_BOOT = (
    "import sys\nsys.path.insert(0, sys.argv.pop(1))\nfrom pages.server import main\n"
    "sys.exit(main(int(sys.argv[1]), sys.argv[2]))\n"
)


def cmd_serve(args: argparse.Namespace) -> int:
    """Replace this process with the dashboard's server (pages/server.py) on the chosen store."""
    from ingest.store.paths import default_store_location

    # the folder holding the ingest and pages packages: the source tree, or site-packages for a wheel
    root = Path(ingest.__file__).resolve().parents[1]
    missing = [name for name in ("navigation.py", "server.py") if not (root / "pages" / name).is_file()]
    if missing:
        raise StabScopeError(
            f"cannot find the app in {root / 'pages'} (missing {', '.join(missing)}): the dashboard's pages "
            "package is not installed beside ingest. Reinstall StabScope: pip install . (or the wheel)"
        )
    store = _location(args.store or default_store_location(), resolve=True)
    os.environ["STABSCOPE_STORE"] = str(store)
    if args.no_demo:
        os.environ["STABSCOPE_NO_DEMO"] = "1"
    host = args.host.strip().removeprefix("[").removesuffix("]")
    _check_listen_address(host)
    token = None if args.no_token else _serve_token(args)
    os.environ.pop(GENERATED_TOKEN_ENV, None)
    if token is None and not args.no_token:
        # private by default, as Jupyter: loopback is shared by every user of a login node
        token = secrets.token_urlsafe(24)
        os.environ[GENERATED_TOKEN_ENV] = "1"
    if token is None:
        _print(
            "stabscope serve: warning: --no-token: every user of this machine (and of any machine that reaches "
            "--host) can read, upload and delete the runs of this store. Leave --no-token out for a token made "
            "at each start.",
            file=sys.stderr,
        )
        os.environ.pop(SERVE_TOKEN_ENV, None)
    else:  # the server reads it from its environment, which other users cannot read (unlike its argv)
        os.environ[SERVE_TOKEN_ENV] = token
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        os.execv(sys.executable, [sys.executable, "-c", _SERVE_BOOT, str(root), str(args.port), host])
    except OSError as exc:
        raise StabScopeError(f"cannot start the server ({sys.executable}): {exc}") from exc
    return 0  # not reached: execv does not return


SERVE_TOKEN_ENV = "STABSCOPE_TOKEN"
"""The environment variable holding the dashboard's shared access token (pages.parts.token_gate reads it)."""
GENERATED_TOKEN_ENV = "STABSCOPE_TOKEN_GENERATED"
"""Set to 1 when serve made the token itself (``pages.server.GENERATED_TOKEN_ENV``: it then prints the
address carrying it; repeated, not imported: ingest loads nothing of pages)."""


def _serve_token(args: argparse.Namespace) -> str | None:
    """The access token from --token, --token-file or $STABSCOPE_TOKEN, in that order; None when none is
    given. Surrounding whitespace (a file's final newline) is not part of it."""
    if args.token_file is not None:
        path = Path(args.token_file).expanduser()
        try:
            token = path.read_text(encoding="utf-8").strip()
        except (OSError, UnicodeDecodeError) as exc:
            raise StabScopeError(
                f"cannot read the access token from {path} (--token-file): {exc}. Give a readable UTF-8 "
                "text file holding the token on its own, e.g. made with: python -c 'import secrets; "
                f"print(secrets.token_urlsafe(24))' > {path} && chmod 600 {path}"
            ) from exc
        if not token:
            raise StabScopeError(f"the access token file {path} (--token-file) is empty: write the token in it")
        if path.stat().st_mode & 0o077:
            _print(
                f"stabscope serve: note: other users of this machine can read {path} (chmod 600 it)", file=sys.stderr
            )
        return _long_enough(token, f"the token in {path} (--token-file)")
    if args.token is not None:
        if not args.token.strip():
            raise StabScopeError("--token is empty: give the token, or leave --token out for no token")
        return _long_enough(str(args.token).strip(), "--token")
    token = os.environ.get(SERVE_TOKEN_ENV, "").strip()
    return _long_enough(token, f"${SERVE_TOKEN_ENV}") if token else None


MIN_TOKEN_CHARS = 16
"""Shortest access token accepted: a short one is guessed (the gate slows, not stops, guessing)."""


def _long_enough(token: str, where: str) -> str:
    """``token`` when it has at least :data:`MIN_TOKEN_CHARS` characters, else a refusal saying how to make one."""
    if len(token) < MIN_TOKEN_CHARS:
        raise StabScopeError(token_too_short(where, len(token)))
    return token


def token_too_short(where: str, length: int) -> str:
    """The one paragraph refusing a token of ``length`` characters given in ``where`` (the gate says it too)."""
    return (
        f"the access token in {where} has {length} character(s); at least {MIN_TOKEN_CHARS} are needed, so that "
        "it cannot be guessed. Make one with: python -c 'import secrets; print(secrets.token_urlsafe(24))' "
        "> token.txt && chmod 600 token.txt, then start with --token-file token.txt (or STABSCOPE_TOKEN)"
    )


def _check_listen_address(host: str) -> None:
    """Refuse, before the server starts, a --host the server could not listen on: a name that does not
    resolve or an address that is not this machine's. Binds port 0 of it as Streamlit will bind it (an
    address with a colon as IPv6, anything else as IPv4)."""
    import socket

    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    try:
        with socket.socket(family, socket.SOCK_STREAM) as probe:
            probe.bind((host, 0))
    except OSError as exc:
        reason = exc.strerror or str(exc)
        raise StabScopeError(
            f"cannot listen on --host {host!r}: {reason}. Give an address of this machine: 127.0.0.1 "
            "(this machine only, the default), one of its network addresses, or 0.0.0.0 (every interface)"
        ) from exc


def seed_before_serving() -> int:
    """In the server process, before it listens: write the demo runs on a first start, with a
    terminal progress bar, so the first page the browser opens is instant. Returns the exit status
    (errors reported as the CLI does)."""

    def seed() -> int:
        from ingest.services.demo import DEMO_SEEDED_KEY, seed_demo_store
        from ingest.store import Store

        # a store seeded before (every start but the first) is told by one setting, without loading the
        # analyses that seeding needs
        if Store(os.environ["STABSCOPE_STORE"]).get_setting(DEMO_SEEDED_KEY):
            return 0
        from ingest.services.run_analyses import open_analysed_store

        with _progress("first start: demo runs", unit="run") as progress:
            store = open_analysed_store(os.environ["STABSCOPE_STORE"])
            seed_demo_store(store, progress=progress, on_wait=_say_demo_wait())
        return 0

    return _reported("serve", seed)


def cmd_import(args: argparse.Namespace) -> int:
    from ingest.formats.accounting import summary_line, suspect_warning
    from ingest.importing.importer import import_logs
    from ingest.importing.metric_map import parse_map_args
    from ingest.store.run_meta import parse_assignments

    user_meta, removals = parse_assignments(args.meta)  # refused before anything is written
    store = _store(args)
    with _progress("import") as progress:
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
            _print(json.dumps(res, default=str))
        else:
            _print(
                f"{res['run']}: {res['rows']} rows of {', '.join(res['metrics'])} "
                f"(steps {res['steps'][0]}..{res['steps'][1]}, format {res['format']}, "
                f"{res['skipped']} lines skipped)"
            )
            if res.get("mapping"):  # no trainer's format matched: say what the generic reader took for what
                taken = ", ".join(f"{role} = {key}" for role, key in res["mapping"].items())
                _print(f"  {res['reader_note']}: {taken}")
            if res.get("lines_read") is not None:
                _print(f"  {summary_line(res)}")
            if res.get("config"):
                _print(f"  config: {res['config']}")
            for skipped in res.get("skipped_files", []):
                _print(f"  skipped {skipped['file']}: {skipped['why']}")
            for note in res.get("notes", []):
                _print(f"  note: {note}")
            for kept in res.get("kept_over", []):
                _print(
                    f"  {kept['metric']}: kept {kept['kept']} over {kept['over']} "
                    f"(stored as {kept['stored_as']}; rule: {kept['rule']})"
                )
            for seg in res.get("segments", []):
                lines = f", lines {seg['lines'][0]}..{seg['lines'][1]}" if seg.get("lines") else ""
                _print(
                    f"  the steps start again: {seg['run']}: {seg['rows']} rows "
                    f"(steps {seg['first_step']}..{seg['last_step']}{lines}), imported as its own run"
                )
            for warning in res.get("warnings", []):
                _print(f"  warning: {warning}", file=sys.stderr)
            suspect = suspect_warning(res)
            if suspect:
                _print(f"  warning: {suspect}", file=sys.stderr)
    return 0


def cmd_spikes(args: argparse.Namespace) -> int:
    from ingest.services.run_findings import finding_entries, stored_findings, with_lr_transitions
    from stab_core.analysis import (
        INCIDENT_VERDICT,
        analysis_notes,
        analyze_run,
        incident_headline,
        params_for,
        statements,
        verdict_words,
    )
    from stab_core.severity import DEFAULT_SENSITIVITY, blips_line, shown_by_default

    store = _store(args)
    info = store.run_info(args.run)
    stored = info.meta.get("sensitivity") or DEFAULT_SENSITIVITY
    if args.sensitivity is not None and args.sensitivity != stored:
        # another setting than the run's: analysed here, for this listing only (nothing is stored)
        spikes = analyze_run(store.run_view(args.run), params_for(args.sensitivity)).spike_dicts()
    else:
        spikes = store.spikes(args.run)
    # overfitting and throughput loss follow the incidents, each with kind "overfitting"/"throughput_loss"
    findings = finding_entries(stored_findings(store, info))
    if args.json:  # each incident with the stored LR transition before it (the charts' markers)
        _print_json(with_lr_transitions(spikes, info) + findings)
        return 0
    analysis = info.meta.get("analysis") or {}
    shown = spikes if args.all else [s for s in spikes if shown_by_default(s.get("severity"))]
    if not spikes:
        _print(f"{args.run}: no incident detected")
    elif not shown:
        _print(f"{args.run}: no spike or divergence")
    for s in shown:
        certainty = " (less certain: its level comes from few samples)" if s.get("certainty") == "low" else ""
        _print(f"[{s.get('severity', 'spike')}] {incident_headline(s)}; {verdict_words(s)}{certainty}")
        # every sentence below is a claim whose check held on the run (stab_core.claims)
        for line in statements(s, INCIDENT_VERDICT):
            _print(f"{'':>12}{line}")
        _print(f"{'':>12}path: " + " -> ".join(f"{n['node']}={n['answer']}" for n in s.get("path", [])))
        for action in statements(s, ("action",)):
            _print(f"{'':>12}- {action}")
    for finding in findings:
        _print(str(finding["summary"]))
        for action in finding["actions"]:
            _print(f"{'':>12}- {action}")
    blips = blips_line(spikes)
    if blips is not None and not args.all:
        _print(f"{blips} (--all lists them)")
    for line in analysis_notes(analysis):
        _print(line)
    return 0


def cmd_diagnose(args: argparse.Namespace) -> int:
    from stab_core.analysis import INCIDENT_VERDICT, incident_headline, statements, verdict_words

    store = _store(args)
    store.run_info(args.run)
    spikes = store.spikes(args.run)
    hit = [s for s in spikes if _covers(s, args.step, args.metric)]
    note = ""
    if hit:
        s = min(hit, key=lambda s: abs(s["peak"] - args.step))
    elif not args.force:
        nearest = _nearest(spikes, args.step)
        if args.json:
            _print_json({"step": args.step, "incident": None, "nearest": nearest})
            return 0
        _print(f"no incident covers step {args.step} of {args.run}: nothing to diagnose there.")
        for n in nearest:
            _print(f"  nearest {n['side']}: {n['kind']} at step {n['peak']} ({n['start']}-{n['until']}), {n['cause']}")
        if not nearest:
            _print("  the run has no detected incident.")
        _print("  (--force walks the tree for this step as if it were a spike)")
        return 0
    else:
        # A spike seen elsewhere (or below our thresholds): walk the tree for this step anyway.
        from stab_core.analysis import explain_step

        try:
            s = explain_step(store.run_view(args.run), args.step, args.metric or "loss").to_dict()
        except ValueError as exc:
            raise StabScopeError(str(exc)) from exc
        note = (
            f"(no detected {args.metric or 'loss'} incident covers step {args.step}: the step was diagnosed as if "
            "it were one)"
        )
    if args.json:
        _print_json(s)
        return 0
    if note:
        _print(note)
    _print(f"{incident_headline(s)}; {verdict_words(s)}")
    for line in statements(s, INCIDENT_VERDICT):
        _print(f"  {line}")
    for node in s.get("path", []):
        ev = ", ".join(f"{k}={_short(v)}" for k, v in node.get("evidence", {}).items())
        _print(f"  [{node['node']}] {node.get('question', '')}\n      -> {node['answer']}  ({ev})")
    if s.get("missing"):
        _print("data that would settle the unknown nodes: " + "; ".join(s["missing"]))
    _print("actions:")
    for action in statements(s, ("action",)):
        _print(f"  - {action}")
    withheld = [c for c in s.get("action_evidence", []) if c.get("holds") is False]
    for check in withheld:
        _print(f"  (not advised: {check['action']} -- its premise '{check['premise']}' does not hold in this run)")
    return 0


def _covers(s: dict[str, Any], step: int, metric: str | None) -> bool:
    """Does incident ``s`` cover ``step`` (from its start to its last recovery), with ``metric`` (when
    given) among its members over that step?"""
    if metric is None:
        return int(s["start"]) <= step <= int(s.get("until", s["end"]))
    for m in s.get("members") or [s]:
        until = m.get("recovery_step") if m.get("recovery_step") is not None else m["end"]
        if m["metric"] == metric and m["start"] <= step <= until:
            return True
    return False


def _nearest(spikes: list[dict[str, Any]], step: int) -> list[dict[str, Any]]:
    """The closest incident before and after ``step``."""
    before = [s for s in spikes if s["start"] < step]
    after = [s for s in spikes if s["start"] > step]
    out = []
    for side, group, key in (("before", before, max), ("after", after, min)):
        if group:
            s = key(group, key=lambda s: s["start"])
            out.append(
                {
                    "side": side,
                    "kind": s.get("kind", "spike"),
                    "start": s["start"],
                    "peak": s["peak"],
                    "until": s.get("until", s["end"]),
                    "metrics": s.get("metrics", [s["metric"]]),
                    "cause": s["cause"],
                }
            )
    return out


def cmd_meta(args: argparse.Namespace) -> int:
    """Print a run's settable metadata, or set (``KEY=VALUE``) and remove (``KEY=``) keys."""
    from ingest.store.run_meta import parse_assignments, settable_meta, user_keys

    store = _store(args)
    info = store.run_info(args.run)
    if args.assignments:
        updates, removals = parse_assignments(args.assignments)
        info = store.update_meta(args.run, updates, removals)
    shown = settable_meta(info.meta)
    if args.json:
        _print_json(shown)
        return 0
    if not shown:
        _print(f"{args.run}: no run metadata set; e.g. `stabscope meta {args.run} gpus=8 usd_per_gpu_hour=2.0`")
    mine = user_keys(info.meta)
    for key, value in shown.items():
        _print(f"{key:>22} = {value}" + ("  (set by you)" if key in mine else "  (from the log)"))
    return 0


def _short(value: Any) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


# ----------------------------------------------------------------------------- parser


WRITING_COMMANDS = frozenset({"import", "compact", "watch", "delete", "demo", "meta"})
"""The commands that write runs, so take ``--wait`` (one writer per run: ``ingest.store.run_lock``)."""


def build_parser(*, training: bool = True) -> argparse.ArgumentParser:
    """The ``stabscope`` parser; with ``training`` also the training side's commands (demo-train,
    experiment), whose parsers load numpy."""
    return _parser_and_commands(training=training)[0]


def _parser_and_commands(*, training: bool) -> tuple[argparse.ArgumentParser, frozenset[str]]:
    """:func:`build_parser` and the names of the commands it knows."""
    parser = argparse.ArgumentParser(prog="stabscope", description=__doc__.splitlines()[0])
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--store",
        default=None,
        help="store directory or s3://bucket/prefix (default: $STABSCOPE_STORE or ~/.local/share/stabscope/store)",
    )
    common.add_argument("--json", action="store_true", help="machine-readable output on stdout")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def add(name: str, fn: Callable[[argparse.Namespace], int], help_: str) -> argparse.ArgumentParser:
        p = sub.add_parser(name, parents=[common], help=help_, description=help_)
        p.set_defaults(fn=fn)
        if name in WRITING_COMMANDS:
            p.add_argument(
                "--wait",
                type=float,
                default=WRITER_WAIT_S,
                metavar="SECONDS",
                help=f"wait this long for another process writing the same run, then "
                f"{'skip the pass (--once: exit with status 1)' if name == 'watch' else 'exit with status 1'} "
                f"(default {WRITER_WAIT_S:g}; 0: do not wait)",
            )
        return p

    p = add("compact", cmd_compact, "fold archived per-rank shards into a run")
    p.add_argument("shard_dir", help="the shard directory, or an s3://bucket/prefix shard location")
    p.add_argument("--run", required=True)
    p.add_argument(
        "--engine",
        choices=["embedded", "spark"],
        default="embedded",
        help="embedded: this process (default); spark: decode and de-duplicate on Spark (pip install -e '.[spark]')",
    )
    p.add_argument("--master", default=None, metavar="URL", help="Spark master for --engine spark (default local[*])")
    p = add("watch", cmd_watch, "follow a growing log (text, TensorBoard, CSV, JSON lines) or shards into a run")
    p.add_argument(
        "shard_dir",
        metavar="PATH",
        help="a log file, a folder of logs (per-rank logs, a TensorBoard log dir), a shard directory, "
        "or an s3://bucket/prefix shard location",
    )
    p.add_argument("--run", required=True)
    p.add_argument(
        "--format", default=None, metavar="NAME", help="the log's format (default: detected once, as import does)"
    )
    p.add_argument("--interval", type=float, default=2.0, help="seconds between passes (default 2)")
    p.add_argument("--once", action="store_true", help="fold in what is there and exit")
    p.add_argument("--on-alert", default=None, metavar="CMD", help="shell command run with each alert as JSON on stdin")
    p = add("runs", cmd_runs, "list the runs in the store")
    p.add_argument(
        "--tag", action="append", default=[], metavar="TAG", help="only runs with this tag (repeatable: all)"
    )
    p = add("show", cmd_show, "show one run's catalog entry and events")
    p.add_argument("run")
    p = add("export", cmd_export, "export a run's full-fidelity long table")
    p.add_argument("run")
    p.add_argument("--format", choices=["csv", "parquet"], default="csv")
    p.add_argument("-o", "--output", default=None, help="output file (default RUN.FORMAT; - for standard output)")
    p = add("delete", cmd_delete, "delete a run and its files")
    p.add_argument("run")
    p = add("serve", cmd_serve, "start the dashboard (Streamlit)")
    p.add_argument("--port", type=int, default=8501)
    p.add_argument(
        "--host",
        default="127.0.0.1",
        metavar="ADDR",
        help="address to listen on (default 127.0.0.1: this machine only; 0.0.0.0: every interface, then set a token)",
    )
    token = p.add_mutually_exclusive_group()
    token.add_argument(
        "--token-file",
        default=None,
        metavar="PATH",
        help="viewers must enter the token this file holds (or set STABSCOPE_TOKEN)",
    )
    token.add_argument(
        "--token",
        default=None,
        help="viewers must enter TOKEN (other users see it in `ps` until the server starts: prefer "
        "--token-file or STABSCOPE_TOKEN)",
    )
    token.add_argument(
        "--no-token",
        action="store_true",
        help="no access token (by default serve makes one at each start and prints the address carrying it): "
        "anyone who reaches the port reads and deletes runs",
    )
    p.add_argument("--no-demo", action="store_true", help="do not add the demo runs to an empty store")
    p = add(
        "check",
        cmd_check,
        "check the store's files and catalog like fsck (exit 1 when anything is wrong); --repair fixes what it can",
    )
    p.add_argument("run", nargs="?", default=None, help="check this run only (default: every run)")
    p.add_argument(
        "--repair",
        action="store_true",
        help="delete leftovers of killed writers, merge damaged runs again from their long files, rebuild a "
        "missing or corrupt catalog from the run files",
    )
    p.add_argument(
        "--wait", type=float, default=30.0, metavar="SECONDS", help="how long to wait for a run's writer (default 30)"
    )
    add("demo", cmd_demo, "(re)create the demo runs in the store")
    p = add("import", cmd_import, "import training logs (auto-detected format)")
    p.add_argument("paths", nargs="+")
    p.add_argument("--run", default=None, help="run name (default: derived from the file name)")
    p.add_argument("--format", default=None, help="force a format (see the error listing candidates)")
    p.add_argument(
        "--meta",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="set run metadata (repeatable; see `stabscope meta --help`); it wins over what the log states",
    )
    p.add_argument(
        "--map",
        action="append",
        default=[],
        metavar="NAME=ROLE",
        help="store the log's metric NAME as the canonical ROLE (e.g. --map my_loss=loss; repeatable); "
        "remembered with the run and applied again to later imports into it; for a log read by the generic "
        "reader it corrects the proposed mapping, and --map KEY=step chooses its step key",
    )
    into = p.add_mutually_exclusive_group()
    into.add_argument(
        "--append",
        dest="existing",
        action="store_const",
        const="append",
        help="add to the run when it already holds other files (at a step both hold, the new value wins)",
    )
    into.add_argument(
        "--replace", dest="existing", action="store_const", const="replace", help="replace the run when it exists"
    )
    p = add(
        "meta",
        cmd_meta,
        "print or set a run's metadata: gpus, usd_per_gpu_hour, step_time_s, max_norm, precision, "
        "tokens_per_step, num_experts, planned_steps, world_size, tensor/pipeline_parallel_size, save_interval, "
        "sensitivity (low, default, high: the spike thresholds the pages and alerts use), "
        'and the labels tags=a,b and notes="..." (KEY= removes a key; the analyses re-run)',
    )
    p.add_argument("run")
    p.add_argument("assignments", nargs="*", metavar="KEY=VALUE")
    p = add("spikes", cmd_spikes, "list a run's detected spikes with cause and actions")
    p.add_argument("run")
    p.add_argument(
        "--all",
        action="store_true",
        help="list the blips too (incidents absorbed within a few steps, hidden by default)",
    )
    p.add_argument(
        "--sensitivity",
        choices=SENSITIVITY_CHOICES,
        default=None,
        help="detection thresholds and longest blip for this listing: low, default or high (default: the one "
        "stored with the run, `stabscope meta RUN sensitivity=high` to store one)",
    )
    p = add("diagnose", cmd_diagnose, "explain the spike at a step")
    p.add_argument("run")
    p.add_argument("--step", type=int, required=True)
    p.add_argument("--metric", default=None, help="only an incident holding this metric (default: any)")
    p.add_argument(
        "--force", action="store_true", help="walk the tree for the step even when no detected incident covers it"
    )
    if training:
        _add_training_commands(add)
    return parser, frozenset(sub.choices or ())


def _add_training_commands(add: Callable[..., argparse.ArgumentParser]) -> None:
    """``demo-train`` and ``experiment`` live with the training side (ingest.training) when present."""
    try:
        from ingest.training.demo_trainer import add_cli
        from ingest.training.experiment_cli import add_cli as add_experiment_cli
    except ImportError:
        return
    add_cli(add)
    add_experiment_cli(add)


def main(argv: Sequence[str] | None = None) -> int:
    words = list(sys.argv[1:] if argv is None else argv)
    # a core command (serve above all, which execs the server at once) does not load the training side's
    # parsers and their numpy; any other word, --help included, gets the full parser
    core, names = _parser_and_commands(training=False)
    parser = core if words and words[0] in names else build_parser()
    args = parser.parse_args(words)
    return _reported(args.command, lambda: int(args.fn(args)))


def _reported(command: str, call: Callable[[], int]) -> int:
    """``call()``'s exit status; an error becomes one paragraph on stderr and ``EXIT_ERROR``. Output
    closed early by its reader (``stabscope spikes RUN | head``) ends the command quietly, with status 0."""
    try:
        status = call()
        sys.stdout.flush()  # here, not at exit: a reader gone by now is a closed pipe, handled below
        return status
    except BrokenPipeError:
        _silence_stdout()
        return 0
    except StabScopeError as exc:
        _print(f"stabscope {command}: error: {exc}", file=sys.stderr)
        return int(getattr(exc, "exit_code", EXIT_ERROR))  # 1: another process writes the run (WriterBusy)
    except KeyboardInterrupt:
        return 130
    except Exception as exc:  # the contract: one paragraph, never a traceback (STABSCOPE_DEBUG=1 shows it)
        if os.environ.get("STABSCOPE_DEBUG"):
            raise
        text = " ".join(str(exc).split())
        _print(f"stabscope {command}: error: {type(exc).__name__}: {text}", file=sys.stderr)
        return EXIT_ERROR


def _silence_stdout() -> None:
    """Point stdout at /dev/null: its reader has gone, and the interpreter's flush at exit would
    otherwise fail again (``Exception ignored ... BrokenPipeError``) on the output still buffered."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, sys.stdout.fileno())
    finally:
        os.close(devnull)


if __name__ == "__main__":
    sys.exit(main())
