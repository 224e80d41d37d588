"""Tail a live shard directory into the store, surviving restarts.

Each pass is a ``Store.compact``: the byte offset of every segment is committed together with the
data it covers, so a restarted watcher resumes exactly where the last committed pass ended (no record
lost, none doubled). New alerts (a new spike, a diverged run, saturated clipping) are passed as JSON
on stdin to ``--on-alert CMD``.
"""

from __future__ import annotations

import json
import subprocess
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ingest.errors import StabScopeError
from ingest.store import Store


def alerts_between(before: list[dict[str, Any]], after: list[dict[str, Any]], run: str) -> list[dict[str, Any]]:
    """Alerts for the spikes in ``after`` that ``before`` did not have (keyed by metric and peak step)."""
    seen = {(s["metric"], s["peak"]) for s in before}
    out = []
    for s in after:
        if (s["metric"], s["peak"]) in seen:
            continue
        kind = "diverging_run" if not s.get("recovered", True) else "new_spike"
        out.append(
            {
                "alert": kind,
                "run": run,
                "step": s["peak"],
                "metric": s["metric"],
                "ratio": s.get("ratio"),
                "cause": s.get("cause"),
                "actions": s.get("actions", []),
            }
        )
    return out


def run_alert_command(command: str, alert: dict[str, Any], timeout_s: float = 30.0) -> int:
    """Run the user's shell ``command`` with ``alert`` as JSON on stdin; returns its exit code."""
    proc = subprocess.run(
        command, shell=True, input=json.dumps(alert, default=str), text=True, timeout=timeout_s, check=False
    )
    return proc.returncode


def watch(
    store: Store,
    run: str,
    shard_dir: Path,
    *,
    interval_s: float = 2.0,
    once: bool = False,
    on_alert: str | None = None,
    log: Callable[[str], None] = lambda _msg: None,
    stop: threading.Event | None = None,
) -> int:
    """Fold new records of ``shard_dir`` into ``run`` every ``interval_s`` seconds; returns passes made."""
    if not shard_dir.is_dir():
        raise StabScopeError(f"shard directory {shard_dir} does not exist")
    stop = stop or threading.Event()
    passes = 0
    try:
        while True:
            before = store.spikes(run) if store.has_run(run) else []
            if any(shard_dir.glob("rank-*/*.ssf")):
                report = store.compact(run, shard_dir, status="finished" if once else "live")
                passes += 1
                if report.rows or report.rejected:
                    log(f"{run}: +{report.rows} rows (generation {report.gen}, {report.rejected} rejected)")
                for alert in alerts_between(before, store.spikes(run), run):
                    log(f"ALERT {alert['alert']}: {run} step {alert['step']} ({alert['cause']})")
                    if on_alert:
                        run_alert_command(on_alert, alert)
            if once or stop.wait(interval_s):
                break
    except KeyboardInterrupt:
        pass
    finally:
        if store.has_run(run):
            store.set_status(run, "finished")
    return passes
