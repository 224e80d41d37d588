"""What the store says when the storage under it fails: a damaged catalog or run file, a full disk, a
read-only store. Each is one ``StabScopeError`` paragraph naming the path and what to do, instead of the
library's own error (DuckDB's, Arrow's or the operating system's) with no advice, or none at all.
"""

from __future__ import annotations

import errno
import re
from pathlib import Path

from ingest.errors import StabScopeError

_DAMAGED_CATALOG = ("not a valid DuckDB database", "Corrupt database file", "checksum")
"""DuckDB's words for a catalog file whose bytes are wrong (not a lock held by another process)."""
_READ_ONLY = ("Read-only file system", "Permission denied", "attached in read-only mode")
_FULL = ("No space left on device", "File too large", "Disk quota exceeded")
_FULL_ERRNOS = {errno.ENOSPC, errno.EFBIG, errno.EDQUOT}
_READ_ONLY_ERRNOS = {errno.EROFS, errno.EACCES, errno.EPERM}


def is_damaged_catalog(exc: BaseException) -> bool:
    """Did DuckDB refuse the catalog file because its contents are damaged?"""
    return any(words in str(exc) for words in _DAMAGED_CATALOG)


def is_read_only(exc: BaseException) -> bool:
    """Did the operating system (or DuckDB, for a catalog it opened read-only) refuse a write?"""
    if isinstance(exc, OSError) and exc.errno in _READ_ONLY_ERRNOS:
        return True
    return any(words in str(exc) for words in _READ_ONLY)


def damaged_catalog(path: Path | str, exc: BaseException) -> StabScopeError:
    """The store's catalog file cannot be read: the runs' data files are not in it and are not lost."""
    reason = " ".join(str(exc).split())
    return StabScopeError(
        f"the store catalog is damaged ({reason}), so no run can be listed or written until it is rebuilt. "
        "The runs' data are in the Parquet files under runs/, not in the catalog: `stabscope check --repair` "
        "rebuilds the catalog from them (and keeps the damaged file beside it)",
        path=str(path),
    )


class DamagedRunFile(StabScopeError):
    """A file of run ``run``'s current generation cannot be read: that run is damaged, the others are not."""

    def __init__(self, run: str, message: str, *, path: str, page: str) -> None:
        super().__init__(message, path=path, page=page)
        self.run = run


def damaged_run(run: str, why: str) -> DamagedRunFile:
    """Run ``run`` is damaged: ``why`` names its files that are missing or do not read (``Store.damage``)."""
    message = (
        f"run {run!r} is damaged: {why}. `stabscope check {run}` lists what is wrong and `stabscope check {run} "
        "--repair` rebuilds what an intact copy still holds; re-importing the run's log (or compacting its shards "
        "again) rewrites it. Other runs are not affected"
    )
    folder = Path(why.split(": ", 1)[0]).parent.parent  # <run folder>/<kind>/g<gen>.parquet: the run's folder
    return DamagedRunFile(run, message, path=str(folder), page=message)


def damaged_file(path: Path | str, exc: BaseException) -> DamagedRunFile:
    """A file of a run's current generation cannot be read (truncated, overwritten)."""
    run = _run_of(Path(path))
    reason = " ".join(str(exc).split())
    return DamagedRunFile(
        run,
        f"this file of run {run!r} is damaged and cannot be read ({reason}). `stabscope check {run}` lists "
        f"what is wrong with the run and `stabscope check {run} --repair` repairs what can be repaired; "
        "re-importing the run's log (or compacting its shards again) rewrites it. Other runs are not affected",
        path=str(path),
        page=f"this file of run {run!r} is damaged and cannot be read ({reason}). To see what is wrong and "
        f"repair it, run `stabscope check {run} --repair` on the machine holding the store; re-importing the "
        "run's log rewrites it. Other runs are not affected",
    )


def damaged_file_in(message: str, root: Path) -> Path | None:
    """The run file a DuckDB error message names (DuckDB quotes the file it failed on), if any."""
    for quoted in re.findall(r"'([^']+\.parquet)'|\"([^\"]+\.parquet)\"", message):
        name = next(q for q in quoted if q)
        if Path(name).is_relative_to(root):
            return Path(name)
    return None


def write_failure(root: Path, exc: BaseException) -> StabScopeError | None:
    """A write to the store at ``root`` refused by the storage (a full disk, a read-only store) as one
    paragraph; None for any other failure."""
    reason = " ".join((exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)).split())
    full = (isinstance(exc, OSError) and exc.errno in _FULL_ERRNOS) or any(words in str(exc) for words in _FULL)
    if full:
        return StabScopeError(
            f"cannot write to the store {root}: {reason}. Every run keeps its last complete state (nothing "
            "half-written is shown; what this write committed before it stopped is finished by the run's "
            "next write). Free space on that disk (or raise the file size limit), or give --store (or "
            "STABSCOPE_STORE) a folder on a disk with room, then run the command again"
        )
    if is_read_only(exc):
        return StabScopeError(
            f"cannot write to the store {root}: it is read-only ({reason}). Its runs can be read, not "
            f"changed. Give --store (or STABSCOPE_STORE) a writable folder, or make {root} writable "
            "(remount it read-write, or give your user write permission), then run the command again"
        )
    return None


def _run_of(path: Path) -> str:
    """The run a file of ``runs/run=<name>/<kind>/`` belongs to."""
    for part in reversed(path.parts):
        if part.startswith("run="):
            return part.removeprefix("run=")
    return path.parent.parent.name
