"""Writer locks: one writer per run (and one demo seeding per store) across processes and threads.

A lock is an exclusive ``fcntl.flock`` on a small file under ``<store>/locks/`` (``layout.run_lock_file``),
outside the run's folder so that deleting a run can hold it. The operating system drops a flock when
the last descriptor of its holder goes, so a writer killed with SIGKILL never leaves its run locked.
Plain ``fcntl`` rather than the ``filelock`` package: Linux and macOS have it, and nothing more is needed.

Within one process (the dashboard's sessions are threads of one server) a re-entrant thread lock per
file comes first: one thread at a time holds the file, and a thread that holds it may take it again
(``Store.compact`` calls ``ensure_run``, the analyses' ``write_analysis``...) without waiting on itself.

The holder writes its pid, command line and start time into the file (``LockHolder``); a writer that
waited longer than it was allowed raises ``WriterBusy``, whose message names them. The file is never
removed: removing a lock file another process has open would let two processes lock two files of one name.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import errno
import fcntl
import json
import os
import shlex
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from ingest.errors import StabScopeError

DEFAULT_WRITER_WAIT_S = 30.0
"""Seconds a writer waits for another writer of the same run before giving up (``--wait``)."""

POLL_S = 0.1
"""Seconds between two tries of a lock another writer holds."""

LEAST_WAIT_S = 0.05
"""Seconds a writer told not to wait still tries: a look at who holds a lock (``read_holder``) takes it,
shared, for an instant, which must not make a free run look busy."""

WAIT_REPORT_S = 0.5
"""Seconds between two calls of a waiter's ``on_wait`` (a progress bar that says who it waits for)."""

BUSY_EXIT_STATUS = 1
"""The CLI's exit status when a writer gave up waiting for another (other errors exit 2)."""


@dataclass(frozen=True)
class LockHolder:
    """Who holds a lock: process id, its command line, and since when (ISO 8601, local time)."""

    pid: int
    command: str
    since: str

    def describe(self) -> str:
        return f"pid {self.pid} ({self.command}) since {self.since}"


class WriterBusy(StabScopeError):
    """Another writer held a lock for longer than this one was allowed to wait.

    ``exit_code`` is the status the CLI exits with (``BUSY_EXIT_STATUS``), ``holder`` who held it
    (None when it could not be read), ``short`` the same in one line for a log (``watch``)."""

    exit_code = BUSY_EXIT_STATUS

    def __init__(self, message: str, *, short: str, holder: LockHolder | None, page: str | None = None) -> None:
        super().__init__(message, page=page)
        self.short = short
        self.holder = holder


def _this_process() -> LockHolder:
    return LockHolder(os.getpid(), command_line(), dt.datetime.now().astimezone().isoformat(timespec="seconds"))


def command_line(argv: list[str] | None = None) -> str:
    """This process's command line as a user would recognise it: ``stabscope watch ...`` for the CLI
    however it was started (``python -m ingest``, the installed script), the interpreter and a script by
    their base names otherwise; at most 300 characters."""
    words = list(argv if argv is not None else getattr(sys, "orig_argv", sys.argv))
    if words[1:3] == ["-m", "ingest"]:
        words = ["stabscope", *words[3:]]
    elif len(words) > 1 and Path(words[1]).name == "stabscope":
        words = ["stabscope", *words[2:]]
    else:  # e.g. /usr/bin/python3 /venv/bin/streamlit run app.py -> python3 streamlit run app.py
        words = [Path(w).name if i < 2 and not w.startswith("-") else w for i, w in enumerate(words)]
    command = shlex.join(words) or "python"
    return command if len(command) <= 300 else command[:297] + "..."


class _LockFile:
    """One lock file in this process: the thread lock in front of it and, while held, its descriptor."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.thread_lock = threading.RLock()
        self.fd: int | None = None
        self.depth = 0  # nested acquisitions by the thread that holds ``thread_lock``


_REGISTRY_LOCK = threading.Lock()
_LOCK_FILES: dict[str, _LockFile] = {}


def _lock_file(path: Path) -> _LockFile:
    key = os.path.realpath(path)  # two spellings of one file are one lock
    with _REGISTRY_LOCK:
        found = _LOCK_FILES.get(key)
        if found is None:
            found = _LOCK_FILES[key] = _LockFile(path)
        return found


def _forget_after_fork() -> None:
    """In a forked child: the parent's locks are the parent's. The inherited descriptors are closed
    without unlocking (an unlock through them would free the parent's lock), and the thread locks
    are new (the threads that held them are not in the child)."""
    global _REGISTRY_LOCK
    for entry in _LOCK_FILES.values():
        if entry.fd is not None:
            with contextlib.suppress(OSError):
                os.close(entry.fd)
    _LOCK_FILES.clear()
    _REGISTRY_LOCK = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_after_fork)


def _open(path: Path) -> int:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        return os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    except OSError as exc:
        raise StabScopeError(
            f"cannot create the writer lock file {path}: {exc.strerror or exc}. Writing to a store needs "
            f"write access to its folder {path.parent.parent} (a read-only store can only be read)"
        ) from exc


def _try_flock(fd: int, mode: int) -> bool:
    try:
        fcntl.flock(fd, mode | fcntl.LOCK_NB)
        return True
    except OSError as exc:
        if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
            return False
        raise


def read_holder(path: Path) -> LockHolder | None:
    """Who holds the lock file ``path`` now; None when nobody does (or the file says nothing readable).
    Never waits: a shared probe is tried once and let go."""
    entry = _lock_file(path)
    if entry.depth > 0:  # held by a thread of this process
        return _recorded_holder(path)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None  # no file: never locked
    try:
        if _try_flock(fd, fcntl.LOCK_SH):
            fcntl.flock(fd, fcntl.LOCK_UN)
            return None
        return _recorded_holder(path)
    finally:
        os.close(fd)


def _recorded_holder(path: Path) -> LockHolder | None:
    try:
        recorded = json.loads(path.read_text(encoding="utf-8"))
        return LockHolder(int(recorded["pid"]), str(recorded["command"]), str(recorded["since"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None  # being rewritten by a new holder this very moment


BusyMessage = Callable[[LockHolder | None, float], WriterBusy]
"""Makes the error for a writer that waited ``seconds`` for ``holder`` (None: unknown) in vain."""

WaitReport = Callable[[LockHolder | None], None]
"""Called every ``WAIT_REPORT_S`` while a writer waits, with who holds the lock."""


@contextlib.contextmanager
def held(path: Path, *, wait_s: float, busy: BusyMessage, on_wait: WaitReport | None = None) -> Iterator[None]:
    """Hold the lock file ``path`` (created if absent) for the ``with`` block, waiting for another holder
    at most ``wait_s`` seconds (0: no wait, see ``LEAST_WAIT_S``), then raising ``busy(holder, waited_s)``.
    A thread that holds it already takes it again at once."""
    entry = _lock_file(path)
    started = time.monotonic()
    deadline = started + max(wait_s, LEAST_WAIT_S)
    last_report = started - WAIT_REPORT_S  # the first wait is reported at once
    step_s = POLL_S if wait_s > LEAST_WAIT_S else LEAST_WAIT_S / 5

    def waiting() -> None:
        nonlocal last_report
        now = time.monotonic()
        if now >= deadline:
            raise busy(read_holder(path), now - started)
        if on_wait is not None and now - last_report >= WAIT_REPORT_S:
            last_report = now
            on_wait(read_holder(path))
        time.sleep(min(step_s, deadline - now))

    while not entry.thread_lock.acquire(blocking=False):
        waiting()
    try:
        if entry.depth == 0:
            fd = _open(path)
            try:
                while not _try_flock(fd, fcntl.LOCK_EX):
                    waiting()
                _record(fd, _this_process())
            except BaseException:
                os.close(fd)  # drops the flock if it was taken
                raise
            entry.fd = fd
        entry.depth += 1
        try:
            yield
        finally:
            entry.depth -= 1
            if entry.depth == 0 and entry.fd is not None:
                fd, entry.fd = entry.fd, None
                os.close(fd)  # the flock goes with the last descriptor
    finally:
        entry.thread_lock.release()


def _record(fd: int, holder: LockHolder) -> None:
    """Write who holds the lock into its file (for the message of those who wait)."""
    data = json.dumps({"pid": holder.pid, "command": holder.command, "since": holder.since}).encode()
    os.ftruncate(fd, 0)
    os.pwrite(fd, data, 0)


def run_busy(run: str, lock_path: Path, holder: LockHolder | None, waited_s: float) -> WriterBusy:
    """The error of a writer of ``run`` that waited ``waited_s`` for ``holder`` in vain."""
    who = holder.describe() if holder is not None else "another process (its details were being written)"
    waited = f"; waited {waited_s:.0f} s for it to finish" if waited_s >= 1 else ""
    why = (
        f"run {run!r} is being written by {who}{waited}. "
        "Only one process writes a run at a time (import, compact, watch, the Upload page, demo seeding, "
        "delete, metadata changes)."
    )
    cli = (
        f"{why} Retry when it has finished, give a longer --wait SECONDS, or stop that process if it is stuck "
        f"(the lock {lock_path} goes when its holder exits, even when killed)."
    )
    page = f"{why} Try again when it has finished."
    short = f"run {run!r} is being written by {who}"
    return WriterBusy(cli, short=short, holder=holder, page=page)
