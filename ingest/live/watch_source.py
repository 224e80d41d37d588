"""What ``stabscope watch PATH`` follows, decided before the follower is imported: a log
(``ingest.live.watch_logs``, which loads every format reader) or a shard directory
(``ingest.live.watch``, which needs none of them). Kept apart from both so that a watcher of shards,
restarted often, starts without importing the readers.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path


def is_log_source(path: str | os.PathLike[str], fmt: str | None) -> bool:
    """Whether ``stabscope watch PATH`` follows a log (else a shard directory, as before logs could be
    watched): a file, a folder given ``--format``, or a folder with files and no shard segments."""
    text = os.fspath(path)
    if text.startswith("s3://"):
        return False
    p = Path(text)
    if fmt is not None or p.is_file():
        return True
    if not p.is_dir():
        return False
    from ingest.store.shards import list_segments

    if list_segments(p):
        return False
    # an empty folder is a shard directory the writers have not written to yet (as before)
    return any(f.is_file() and not f.name.startswith(".") for f in p.rglob("*"))


def wait_for_content(path: Path, interval_s: float, log: Callable[[str], None]) -> None:
    """Wait while folder ``path`` is empty (a job's log or shard folder made before its first file):
    whether it holds a log or shards is only known from what appears in it."""
    if not path.is_dir() or _holds_a_file(path):
        return
    log(f"{path} is empty: waiting for a log or shard files to appear")
    while path.is_dir() and not _holds_a_file(path):
        time.sleep(interval_s)


def _holds_a_file(folder: Path) -> bool:
    return any(f.is_file() for f in folder.rglob("*"))
