"""Tail a live shard directory (or ``s3://`` shard location) into the store, surviving restarts (the
logs a job writes itself, text or TensorBoard, are followed by ``ingest.live.watch_logs``).

Each pass is a ``Store.compact``: the byte offset of every segment is committed together with the
data it covers, so a restarted watcher resumes exactly where the last committed pass ended (no record
lost, none doubled). A pass holds the run's writer lock (``Store.writing``): while another process writes
the run (an import, a compact, another watcher) the pass waits up to ``wait_s``, then is skipped with one
line and tried again at the next interval. New alerts (a new spike, a diverging run, saturated clipping,
a straggler rank: ``ingest.services.run_alerts``) are logged and passed as JSON on stdin to ``--on-alert CMD``.
"""

from __future__ import annotations

import json
import os
import subprocess
import threading
from collections.abc import Callable
from typing import Any

from ingest.services.run_alerts import run_alerts
from ingest.store import Store
from ingest.store.run_lock import DEFAULT_WRITER_WAIT_S, WriterBusy
from ingest.store.shards import find_segments
from stab_core.alerts import Alert


def new_alerts(store: Store, run: str, seen: set[tuple[str, str, int]]) -> list[Alert]:
    """The run's current alerts (``ingest.services.run_alerts.run_alerts``, as for a live run) whose key is not in
    ``seen``; ``seen`` becomes the current keys, so an alert comes once while its condition lasts and
    again if it clears and returns."""
    current = run_alerts(store, run, live=True) if store.has_run(run) else []
    fresh = [a for a in current if a.key not in seen]
    seen.clear()
    seen.update(a.key for a in current)
    return fresh


ALERT_COMMAND_TIMEOUT_EXIT = 124
"""Exit code reported for an ``--on-alert`` command killed at its timeout (as timeout(1) reports it)."""


def report_new_alerts(
    store: Store, run: str, seen: set[tuple[str, str, int]], on_alert: str | None, log: Callable[[str], None]
) -> None:
    """Log each alert of ``run`` not in ``seen`` and run ``on_alert`` with it (one watch pass's alerts,
    the same for shards and for followed logs)."""
    for alert in new_alerts(store, run, seen):
        log(f"ALERT {alert.kind}: {alert.message}")
        code = run_alert_command(on_alert, alert.to_json()) if on_alert else 0
        if code:
            log(f"--on-alert command exited with {code} for the {alert.kind} alert")


def run_alert_command(command: str, alert: dict[str, Any], timeout_s: float = 30.0) -> int:
    """Run the user's shell ``command`` with ``alert`` as JSON on stdin; returns its exit code. A
    command that hangs is killed after ``timeout_s`` seconds: the watcher must go on folding."""
    try:
        proc = subprocess.run(
            command, shell=True, input=json.dumps(alert, default=str), text=True, timeout=timeout_s, check=False
        )
    except subprocess.TimeoutExpired:
        return ALERT_COMMAND_TIMEOUT_EXIT
    return proc.returncode


def watch(
    store: Store,
    run: str,
    shard_dir: str | os.PathLike[str],
    *,
    interval_s: float = 2.0,
    once: bool = False,
    on_alert: str | None = None,
    log: Callable[[str], None] = lambda _msg: None,
    stop: threading.Event | None = None,
    wait_s: float = DEFAULT_WRITER_WAIT_S,
) -> int:
    """Fold new records of ``shard_dir`` (a directory or an ``s3://`` shard location) into ``run`` every
    ``interval_s`` seconds; returns passes made.

    A pass that waited ``wait_s`` seconds for another writer of the run is skipped (logged in one line)
    and not counted; with ``once`` there is no later pass, so ``WriterBusy`` is raised instead."""
    find_segments(shard_dir)  # a clear error now for a directory that does not exist, an unreachable bucket

    def one_pass(status: str) -> str | None:
        # Once the run exists, compact lists the segments itself: one listing a pass (on object
        # storage a LIST request per 1,000 objects), not two.
        if not (store.has_run(run) or find_segments(shard_dir)):
            return None
        with store.writing(run, wait_s=wait_s):
            report = store.compact(run, shard_dir, status=status)
        if report.rows or report.rejected:
            return f"+{report.rows} rows (generation {report.gen}, {report.rejected} rejected)"
        return ""

    def finish() -> None:
        mark_finished(store, run, log)

    return run_passes(
        store, run, one_pass, finish, interval_s=interval_s, once=once, on_alert=on_alert, log=log, stop=stop
    )


def run_passes(
    store: Store,
    run: str,
    one_pass: Callable[[str], str | None],
    finish: Callable[[], None],
    *,
    interval_s: float,
    once: bool,
    on_alert: str | None,
    log: Callable[[str], None],
    stop: threading.Event | None,
) -> int:
    """The pass loop of a watcher (shards here, followed logs in ``ingest.live.watch_logs``): call
    ``one_pass(status)`` every ``interval_s`` seconds (``status`` is ``finished`` with ``once``, else
    ``live``) until ``stop`` is set or after one pass with ``once``; returns the passes made.

    ``one_pass`` returns a line to log about the pass (``""``: nothing to say) or None where there was
    nothing to fold yet (not counted, no alerts). A pass that raises ``WriterBusy`` (it waited for
    another writer of the run) is skipped with one line and tried again at the next interval; with
    ``once`` there is no later pass, so it is raised, and ``finish`` is not called (the run is the other
    writer's: its status too). After each pass the run's new alerts are logged and sent to
    ``on_alert``; ``finish`` runs as the loop ends otherwise (Ctrl-C included)."""
    stop = stop or threading.Event()
    passes = 0
    gave_up = False
    seen: set[tuple[str, str, int]] = set()
    new_alerts(store, run, seen)  # what already held before this watcher started is not news
    try:
        while True:
            try:
                said = one_pass("finished" if once else "live")
            except WriterBusy as busy:
                if once:
                    gave_up = True
                    raise
                log(f"{run}: pass skipped: {busy.short}; trying again in {interval_s:g} s")
                if stop.wait(interval_s):
                    break
                continue
            if said is not None:
                passes += 1
                if said:
                    log(f"{run}: {said}")
                report_new_alerts(store, run, seen, on_alert, log)
            if once or stop.wait(interval_s):
                break
    except KeyboardInterrupt:
        pass
    except RuntimeError as exc:
        if not ctrl_c_in_query(exc):
            raise
    finally:
        if not gave_up:
            finish()
    return passes


def ctrl_c_in_query(exc: BaseException) -> bool:
    """Whether ``exc`` is a Ctrl-C that landed while DuckDB ran a query: DuckDB consumes the pending
    KeyboardInterrupt and raises ``RuntimeError('Query interrupted')`` instead, which a watcher stopped
    with Ctrl-C (or SIGINT) must treat as the stop it is, not as an error."""
    return isinstance(exc, RuntimeError) and str(exc).strip() == "Query interrupted"


def mark_finished(store: Store, run: str, log: Callable[[str], None]) -> None:
    """Mark ``run`` finished as the watcher stops, unless another writer holds it now (then that writer
    says what the run is)."""
    try:
        with store.writing(run, wait_s=0):
            if store.has_run(run):
                store.set_status(run, "finished")
    except WriterBusy as busy:
        log(f"{run}: status left as it is: {busy.short}")
