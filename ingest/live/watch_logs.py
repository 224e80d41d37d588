"""``stabscope watch`` on the logs a job already writes: a growing text log, a folder of per-rank logs,
a TensorBoard log directory, a CSV or JSON-lines metrics file.

Each pass copies what the source gained into the run's spool (``ingest.live.log_spool``: complete lines
and records only, from the byte offset the copy ends at), then, when something was copied, reads the
whole spool again with ``ingest.importing.import_inputs.read_inputs``, the code ``stabscope import`` reads
with, and stores the rows that are new or changed since the last pass (``ingest.live.new_rows``; the
store keeps the newer value at a key both hold). Re-reading the complete
prefix keeps every import rule at once (prefixes, aliases, a restart's further runs ``RUN-2``...,
a rewind's later values, the skipped-line report), which parsing only the new bytes could not:
a reader's state at a line depends on the lines before it. The format is detected on the first pass
that has a complete line (or given with ``--format``) and kept in the spool's state.

Alerts and ``--on-alert`` work as for shard directories (``ingest.live.watch``); the run is "live" while
a watcher follows it and "finished" when it stops.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import pyarrow as pa

from ingest.errors import StabScopeError
from ingest.formats import FORMATS, LONG_HEAD_BYTES
from ingest.live.log_spool import LogSpool
from ingest.live.new_rows import new_or_changed, rows_table
from ingest.live.watch import mark_finished, run_passes
from ingest.store import Store
from ingest.store.run_lock import DEFAULT_WRITER_WAIT_S

PATIENT_BYTES: Final = LONG_HEAD_BYTES
"""Complete bytes of a log that does not read yet that a watcher waits through before it gives up: as
far as format detection looks for a first metric line."""


@dataclass
class LogWatcher:
    """One watched log source folded into run ``run`` of ``store`` (see the module's docstring)."""

    store: Store
    run: str
    path: Path
    fmt: str | None = None
    log: Callable[[str], None] = lambda _msg: None
    spool: LogSpool = field(init=False)
    stored: dict[str, pa.Table] = field(default_factory=dict)
    """The rows each run (the watched run, a further run ``RUN-2``... the log started) held after the
    last pass (``ingest.live.new_rows.rows_table``)."""
    waiting: str = ""
    """Why the log did not read yet (logged once while it lasts)."""

    def __post_init__(self) -> None:
        if self.fmt is not None and self.fmt not in FORMATS and not self.fmt.startswith("custom:"):
            known = ", ".join(sorted(FORMATS))
            raise StabScopeError(f"unknown format {self.fmt!r}; known formats: {known}")
        self.spool = LogSpool(self.store.root, self.run, self.path)
        remembered = self._remembered_format()
        if self.fmt is not None and remembered is not None and remembered != self.fmt:
            raise StabScopeError(f"run {self.run!r} was watched as {remembered}, not --format {self.fmt}")
        self.fmt = self.fmt or remembered

    def _remembered_format(self) -> str | None:
        path = self.spool.root / "format"
        return path.read_text().strip() or None if path.is_file() else None

    def _remember_format(self, fmt: str) -> None:
        self.spool.root.mkdir(parents=True, exist_ok=True)
        (self.spool.root / "format").write_text(fmt)

    def pass_once(self, *, status: str, wait_s: float, patient: bool = True) -> int:
        """Copy what is new and store what it adds; returns the rows written (0 when nothing changed).
        Raises ``WriterBusy`` when another writer held one of the runs ``wait_s`` seconds.

        Until its first rows are stored a log may not read yet (a banner, an argument dump, no metric
        line so far): when ``patient`` that is waited for, one line logged, while the log is under
        ``PATIENT_BYTES``; then, or when not ``patient`` (``--once``), the reader's error is raised.
        A log that stops reading after that is logged and read again once it changes.

        The pass holds the run's writer lock throughout: a second watcher of the run (or an import
        into it) waits, so the copy is never appended to by two processes."""
        with self.store.writing(self.run, wait_s=wait_s):
            return self._pass(status, wait_s, patient)

    def _pass(self, status: str, wait_s: float, patient: bool) -> int:
        copied = self.spool.sync()
        first = not self.stored
        if not copied and (not first or self.waiting):
            return 0  # nothing new; or nothing since the log last failed to read
        inputs = self.spool.inputs()
        size = sum(p.stat().st_size for p in _files(inputs))
        if not size:
            return 0  # not one complete line yet
        try:
            parsed = self._read(inputs)
        except StabScopeError as exc:
            # once rows were stored, a log that stops reading (a file written whole caught half
            # written) is read again when it changes; before, only while it may still be a banner
            if not patient or (first and size >= PATIENT_BYTES):
                raise
            if str(exc) != self.waiting:
                self.waiting = str(exc)
                self.log(f"{self.run}: waiting for the log to read: {exc}")
            return 0
        self.waiting = ""
        written = 0
        runs = [(self.run, parsed)]
        from ingest.importing.importer import remembered_map_applied, segment_run_name

        runs += [(segment_run_name(self.run, i), s) for i, s in enumerate(parsed.segments)]
        for name, part in runs:
            with self.store.writing(name, wait_s=wait_s):
                written += self._store_new(name, remembered_map_applied(self.store, name, part, {}), status)
        return written

    def _read(self, inputs: list[Path]) -> Any:
        from ingest.importing.import_inputs import read_inputs

        # one file, or its rotated copies, is read with the format found once (``self.fmt``); a
        # folder is sorted by import's rule every pass unless --format was given (its files come and go)
        try:
            read = read_inputs(inputs, fmt=self.fmt, custom_dir=self.store.root / "formats")
        except StabScopeError as exc:
            raise StabScopeError(f"{self.path}: {exc.args[0] if exc.args else exc}") from exc
        parsed = read.parsed
        if self.fmt is None and not self.spool.state.folder and "+" not in parsed.format:
            self.fmt = parsed.format
            self._remember_format(parsed.format)
            self.log(f"{self.run}: {self.path} is a {parsed.format} log")
        return parsed

    def _store_new(self, name: str, parsed: Any, status: str) -> int:
        """Store ``parsed``'s rows, events and skipped lines that run ``name`` does not hold yet."""
        from ingest.importing.configs import meta_with_config_facts
        from ingest.store import skipped_example_texts

        # rows are kept from the last pass (a row another watcher stored meanwhile is only sent
        # again, with its value); events and the skipped count are the store's, read each pass
        held = self.stored[name] if name in self.stored else self._held_rows(name)
        info = self.store.run_info(name) if self.store.has_run(name) else None
        held_events = {(e.step, e.kind, e.label) for e in self.store.events(name)} if info else set()
        now = rows_table(parsed.table)
        fresh = new_or_changed(now, held)
        events = [e for e in parsed.events if (e.step, e.kind, e.label) not in held_events]
        skipped = max(0, parsed.skipped - (info.rejected if info else 0))
        self.stored[name] = now
        if fresh.size == 0 and not events and not skipped:
            if info is not None and info.status != status:
                self.store.set_status(name, status)
            return 0
        self.store.import_table(
            name,
            parsed.table.take(pa.array(fresh)),
            source=f"watch:{parsed.format}:{self.spool.source}",
            events=events,
            meta=meta_with_config_facts(parsed.meta),
            rejected=skipped,
            rejected_examples=skipped_example_texts(parsed) if skipped else (),
            status=status,
        )
        return int(fresh.size)

    def _held_rows(self, name: str) -> pa.Table:
        """The rows run ``name`` holds already (a restarted watcher, or a run imported before)."""
        return rows_table(self.store.read_long(name) if self.store.has_run(name) else _EMPTY)


_EMPTY = pa.table(
    {
        "rank": pa.array([], pa.int32()),
        "step": pa.array([], pa.int64()),
        "metric": pa.array([], pa.string()),
        "value": pa.array([], pa.float64()),
    }
)


def _files(inputs: list[Path]) -> list[Path]:
    return [f for p in inputs for f in (sorted(p.rglob("*")) if p.is_dir() else [p]) if f.is_file()]


def watch_logs(
    store: Store,
    run: str,
    path: str | os.PathLike[str],
    *,
    fmt: str | None = None,
    interval_s: float = 2.0,
    once: bool = False,
    on_alert: str | None = None,
    log: Callable[[str], None] = lambda _msg: None,
    stop: threading.Event | None = None,
    wait_s: float = DEFAULT_WRITER_WAIT_S,
) -> int:
    """Fold what the log at ``path`` gains into ``run`` every ``interval_s`` seconds until stopped (or
    once); returns passes made. A pass that waited ``wait_s`` seconds for another writer is skipped;
    with ``once`` ``WriterBusy`` is raised instead. A log no reader recognises is a ``StabScopeError``."""
    watcher = LogWatcher(store, run, Path(path), fmt, log)

    def one_pass(status: str) -> str:
        rows = watcher.pass_once(status=status, wait_s=wait_s, patient=not once)
        return f"+{rows} rows" if rows else ""

    def finish() -> None:
        for name in watcher.stored:
            mark_finished(store, name, log)

    return run_passes(
        store, run, one_pass, finish, interval_s=interval_s, once=once, on_alert=on_alert, log=log, stop=stop
    )
