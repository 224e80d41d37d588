"""The complete part of a growing log, copied into the store as it grows (what ``stabscope watch`` parses).

A watched source (one log file, or a folder of logs: per-rank text logs, a TensorBoard tree, CSV or
JSON-lines metrics) is mirrored under ``<store>/watch/run=<name>/`` ("the spool"). Each pass copies
only the bytes a file gained since the last one, and only up to its last complete unit: a text
file's last newline, an event file's last complete TFRecord. A partial last line or a torn record
stays in the source until the writer completes it. A file's spool copy's size *is* its byte offset
in the source, so a restarted watcher continues where the copy ends, whatever killed the last one.

Rotation (``train.log`` renamed ``train.log.1``, a new ``train.log``) is seen as a new inode under the
watched name: the old file is found again by its inode, its last bytes copied, its copy renamed as
the file is now named, and the new file starts a copy of its own. Truncation in place (copytruncate)
closes the copy the same way under ``NAME.1`` (``NAME.2``, ... when taken). The state file
``spool.json`` records which source file (by inode) each copy follows and the order copies began.
"""

from __future__ import annotations

import json
import os
import shutil
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO, Final

from ingest.errors import StabScopeError
from ingest.formats.raw_text import looks_binary, read_head
from ingest.formats.tensorboard import is_event_file
from ingest.store.layout import spool_folder, tmp_target

STATE_FILE: Final = "spool.json"
WHOLE_FILE_SUFFIXES: Final = (".json", ".parquet")
"""Files written whole, not appended to (``trainer_state.json``, golden values, Parquet): copied whole."""
COPY_CHUNK_BYTES: Final = 8 * 1024 * 1024
"""Bytes copied per read while a spool catches up with its source."""
_TFRECORD_HEADER: Final = 12
"""A TFRecord's length (8 bytes) and its CRC (4), before the payload; the payload's CRC (4) follows it."""


@dataclass
class SpoolState:
    """What ``spool.json`` holds: the watched ``source`` (absolute), whether it is a ``folder``, the
    copy each source file is followed into (``follows``: source name relative to the source ->
    ``{"inode", "copy"}``) and every copy in the order it began (``order``)."""

    source: str
    folder: bool
    follows: dict[str, dict[str, Any]] = field(default_factory=dict)
    order: list[str] = field(default_factory=list)


class LogSpool:
    """The spool of one watched source (see the module's docstring)."""

    def __init__(self, store_root: Path, run: str, source: Path) -> None:
        self.root = spool_folder(store_root, run)
        self.store_root = Path(os.path.abspath(store_root))
        self.source = Path(os.path.abspath(source))
        if not self.source.exists():
            raise StabScopeError(f"{source} does not exist: nothing to watch")
        self.state = self._load()

    def _load(self) -> SpoolState:
        path = self.root / STATE_FILE
        if not path.is_file():
            return SpoolState(str(self.source), self.source.is_dir())
        try:
            raw = json.loads(path.read_text())
            state = SpoolState(raw["source"], bool(raw["folder"]), dict(raw["follows"]), list(raw["order"]))
        except (ValueError, KeyError, TypeError) as exc:
            damaged = f"the watch state {path} is damaged ({exc}); delete {self.root} to read the log again"
            raise StabScopeError(damaged) from exc
        if state.source != str(self.source):
            raise StabScopeError(
                f"this run is watching {state.source}, not {self.source}: give another --run, or delete the "
                "run to watch the new source into it"
            )
        return state

    def _save(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        target = self.root / STATE_FILE
        tmp = tmp_target(target)
        tmp.write_text(json.dumps(self.state.__dict__, indent=1))
        os.replace(tmp, target)

    # ------------------------------------------------------------------ what the readers read

    def inputs(self) -> list[Path]:
        """What to read as the watched source: the spool's folder for a folder (read as ``stabscope
        import FOLDER`` reads it), else the copies of the file, oldest first."""
        if self.state.folder:
            return [self.root / "tree"]
        return [self.root / "tree" / copy for copy in self.state.order if (self.root / "tree" / copy).is_file()]

    def copied_bytes(self) -> int:
        """Bytes copied so far, every copy together."""
        tree = self.root / "tree"
        return sum(p.stat().st_size for p in tree.rglob("*") if p.is_file()) if tree.is_dir() else 0

    # ------------------------------------------------------------------ one pass

    def sync(self) -> int:
        """Copy what the source gained (complete lines and records only); returns the bytes copied.
        The caller holds the run's writer lock (``LogWatcher.pass_once``)."""
        if not self.source.exists():
            # between a rotation's rename and the new file's creation: nothing to read this pass
            return 0
        self.state = self._load()  # as the last pass left it, whichever process made that pass
        names = self._source_files()
        added = 0
        for name in names:
            added += self._follow(name)
        self._save()
        return added

    def _source_files(self) -> list[str]:
        if not self.state.folder:
            return [self.source.name]
        found = []
        for path in sorted(self.source.rglob("*")):
            rel = path.relative_to(self.source)
            if any(part.startswith(".") for part in rel.parts) or not path.is_file():
                continue
            if Path(os.path.abspath(path)).is_relative_to(self.store_root):
                continue  # a store kept inside the watched folder: its files (this copy too) are no log
            if is_event_file(path) or not looks_binary(read_head(path, 4096)):
                found.append(str(rel))
        return found

    def _source_path(self, name: str) -> Path:
        return self.source / name if self.state.folder else self.source

    def _follow(self, name: str) -> int:
        """Copy ``name``'s new complete bytes, after closing its copy if it was rotated or truncated."""
        path = self._source_path(name)
        try:
            stat = path.stat()
        except FileNotFoundError:
            return 0
        entry = self.state.follows.get(name)
        if path.suffix.lower() in WHOLE_FILE_SUFFIXES:
            return self._replace_whole(name, path, stat, entry)
        added = 0
        if entry is not None:
            copy = self.root / "tree" / entry["copy"]
            offset = copy.stat().st_size if copy.is_file() else 0
            if entry["inode"] != stat.st_ino:
                added += self._close_rotated(name, entry, path.parent)
                entry = None
            elif stat.st_size < offset:
                self._close_copy(name, entry, self._free_copy_name(f"{name}.1"))
                entry = None
        if entry is None:
            if self._followed_inode(stat.st_ino) is not None:
                return added  # a rotated file already followed under its new name
            entry = {"inode": stat.st_ino, "copy": self._free_copy_name(name)}
            self.state.follows[name] = entry
            self.state.order.append(entry["copy"])
        return added + self._append(path, self.root / "tree" / entry["copy"], final=False)

    def _replace_whole(self, name: str, path: Path, stat: os.stat_result, entry: dict[str, Any] | None) -> int:
        """A file written whole (a ``trainer_state.json``, a Parquet file) is copied whole whenever its
        size or modification time changes: appending to it would not make a longer file of it."""
        version = [stat.st_size, stat.st_mtime_ns]
        if entry is not None and entry.get("version") == version:
            return 0
        copy = self.root / "tree" / (entry["copy"] if entry else self._free_copy_name(name))
        tmp = tmp_target(copy)
        try:
            shutil.copyfile(path, tmp)
        except FileNotFoundError:
            return 0
        os.replace(tmp, copy)
        if entry is None:
            self.state.order.append(copy.relative_to(self.root / "tree").as_posix())
        self.state.follows[name] = {
            "inode": stat.st_ino,
            "copy": copy.relative_to(self.root / "tree").as_posix(),
            "version": version,
        }
        return stat.st_size

    def _followed_inode(self, inode: int) -> str | None:
        for name, entry in self.state.follows.items():
            if entry["inode"] == inode:
                return name
        return None

    def _close_rotated(self, name: str, entry: dict[str, Any], folder: Path) -> int:
        """The file followed as ``name`` was renamed (a new file has the name): copy the rest of it,
        wherever it is now in ``folder``, and rename its copy as it is now named."""
        moved = next((p for p in sorted(folder.iterdir()) if _inode(p) == entry["inode"]), None)
        added = 0
        if moved is not None:
            # a rotated log is finished: its last line is complete even without a newline
            added = self._append(moved, self.root / "tree" / entry["copy"], final=True)
            rel = str(moved.relative_to(self.source)) if self.state.folder else moved.name
        else:
            rel = f"{name}.1"
        new_copy = self._free_copy_name(rel)
        self._close_copy(name, entry, new_copy)
        if self.state.folder and moved is not None:
            self.state.follows[rel] = {"inode": entry["inode"], "copy": new_copy}
        return added

    def _close_copy(self, name: str, entry: dict[str, Any], new_copy: str) -> None:
        """Rename ``name``'s copy ``new_copy``: it stays read, as the earlier part of the log."""
        old = self.root / "tree" / entry["copy"]
        if old.is_file():
            target = self.root / "tree" / new_copy
            target.parent.mkdir(parents=True, exist_ok=True)
            os.replace(old, target)
        self.state.order = [new_copy if c == entry["copy"] else c for c in self.state.order]
        del self.state.follows[name]

    def _free_copy_name(self, name: str) -> str:
        """``name``, or ``name`` with its last number raised, until no copy has it."""
        taken = set(self.state.order)
        candidate, k = name, 1
        while candidate in taken or (self.root / "tree" / candidate).exists():
            stem, dot, last = candidate.rpartition(".")
            candidate = f"{stem}.{int(last) + 1}" if dot and last.isdigit() else f"{candidate}.{k}"
            k += 1
        return candidate

    def _append(self, source: Path, copy: Path, *, final: bool) -> int:
        """Append ``source``'s bytes past ``copy``'s size, up to its last complete unit (all of them
        when ``final``); returns the bytes appended."""
        offset = copy.stat().st_size if copy.is_file() else 0
        try:
            with source.open("rb") as f:
                size = os.fstat(f.fileno()).st_size
                if size <= offset:
                    return 0
                end = size if final else complete_end(f, offset, size, tfrecords=is_event_file(source))
                if end <= offset:
                    return 0
                copy.parent.mkdir(parents=True, exist_ok=True)
                f.seek(offset)
                with copy.open("ab") as out:
                    remaining = end - offset
                    while remaining:
                        chunk = f.read(min(COPY_CHUNK_BYTES, remaining))
                        if not chunk:
                            break
                        out.write(chunk)
                        remaining -= len(chunk)
                    out.flush()
                    os.fsync(out.fileno())
                return end - offset - remaining
        except FileNotFoundError:
            return 0


def complete_end(f: BinaryIO, offset: int, size: int, *, tfrecords: bool) -> int:
    """Where the complete units of open binary file ``f`` (``size`` bytes) end, reading from ``offset``:
    past the last newline of a text file, past the last whole TFRecord of an event file."""
    if tfrecords:
        pos = offset
        while pos + _TFRECORD_HEADER <= size:
            f.seek(pos)
            (length,) = struct.unpack("<Q", f.read(8))
            end = pos + _TFRECORD_HEADER + length + 4
            if end > size:
                break
            pos = end
        return pos
    # scan back from the end for the last newline; a long partial line is read back a block at a time
    pos = size
    block = 64 * 1024
    while pos > offset:
        start = max(offset, pos - block)
        f.seek(start)
        data = f.read(pos - start)
        cut = data.rfind(b"\n")
        if cut >= 0:
            return start + cut + 1
        pos = start
    return offset


def _inode(path: Path) -> int | None:
    try:
        return path.stat().st_ino if path.is_file() else None
    except OSError:
        return None
