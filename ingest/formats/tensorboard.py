"""TensorBoard event files (``events.out.tfevents.*``): one file, or a folder tree of them.

The records themselves are decoded by :mod:`ingest.formats.tensorboard_events` (one record: the
masked CRC32C, the ``Event`` protobuf) and :mod:`ingest.formats.tensorboard_records` (framing a block
and decoding its payloads in bulk; both CRCs checked, bad records reported and skipped). This module
finds the files, orders them into streams and reads each file in memory-mapped windows.

Folder trees and several files (:func:`event_sources`, one rule for a folder, files given one by one
and an upload's flat folder): every ``rank_N`` (``rankN``, ``rank-N``) folder holds rank N's data
(torchtitan writes one per rank); other sub-folders (``train/``, ``validation/``) prefix their tags
(``validation/epoch_loss``). Concurrent writers of one process in one folder (Keras's train and
validation files uploaded together) are kept apart the same way. The other files of one folder are
read in the order of their creation time (in the file name) as one stream, so a restart that
re-logs steps is detected as a rollback and the later segment wins, as in TensorBoard's own loader;
steps that repeat across streams are never a rollback.

Names: a tag, with its stream's prefix, goes through the one alias table of every reader
(``ingest/formats/aliases.py``, via ``LogBuilder.add``): Keras's ``train/epoch_loss`` is ``loss`` and
``validation/epoch_loss`` is ``val_loss``; torchtitan's ``loss_metrics/global_avg_loss`` in each
``rank_N`` folder is rank N's ``loss``; a tag the table does not know keeps its name.

Speed: the file is memory-mapped (read in blocks where it cannot be) and handed to the bulk decoder
window by window (:func:`_windows`); see :mod:`ingest.formats.tensorboard_records`.
"""

from __future__ import annotations

import contextlib
import mmap
import os
import re
import struct
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Final

from ingest.errors import StabScopeError
from ingest.formats._common import LogBuilder
from ingest.formats.base import Reader
from ingest.formats.raw_text import open_error, read_head
from ingest.formats.tensorboard_events import Data, masked_crc
from ingest.formats.tensorboard_layouts import decode_block
from ingest.formats.tensorboard_records import MAX_RECORD, PAD, PAD_BYTES, frame_records
from stab_core.metrics import RUN_RANK

_BLOCK_BYTES: Final = 64 * 1024 * 1024


_FILE_RE: Final = re.compile(r"(^|\.)tfevents(\.|$)")


_RANK_DIR: Final = re.compile(r"^rank[_\-]?(\d+)$")


_TAIL_BYTES: Final = 1024 * 1024


def is_event_file(path: Path) -> bool:
    """True for a TensorBoard event file name (``events.out.tfevents.<time>.<host>...``)."""
    return bool(_FILE_RE.search(path.name))


@dataclass
class EventSource:
    """Event files of one writer: one rank's, one sub-folder's or one concurrent writer's stream."""

    rank: int
    prefix: str
    files: list[Path]


def event_sources(paths: Sequence[Path]) -> list[EventSource]:
    """Group the event files under ``paths`` into streams, and name each stream's tags.

    The one rule for a folder import, files given one by one and an upload's flat folder:

    - a file's folder relative to the inputs' common folder gives its stream: ``rank_N`` folders
      give the rank, other folders (``train/``, ``validation/``) prefix the tags
      (``validation/epoch_loss``) when the inputs span more than one of them;
    - in one folder, files of one process (the same ``host.pid`` in their names) with different
      writer ids were open at the same time (Keras writes ``train`` and ``validation`` this way), so
      each writer is its own stream, never a restart of another; so are files whose names say
      ``train``/``val``/``eval``/``test``. Such writers are named by that word, by what they log
      (Keras logs ``evaluation_*_vs_iterations`` on its validation writer only), else ``writer-K``
      (the K-th writer of its process);
    - the other files of one folder are one stream read in creation order, so a restart that
      re-logs steps is a rollback, as in TensorBoard's own loader.

    Two streams never share a (tag, rank): rows of one file never overwrite another's.
    """
    found: list[tuple[Path, Path, Path]] = []  # (the folder it is named from, the file, the file as given)
    files_given = [Path(os.path.abspath(p)) for p in paths if not p.is_dir()]
    file_root = Path(os.path.commonpath([str(f.parent) for f in files_given])) if files_given else None
    for p in paths:
        if p.is_dir():
            found.extend((p, f, f) for f in sorted(p.rglob("*")) if f.is_file() and is_event_file(f))
        elif file_root is not None:
            found.append((file_root, Path(os.path.abspath(p)), p))
    by_dir: dict[tuple[int, str], list[Path]] = {}
    for root, f, given in found:
        rel = f.parent.relative_to(root).parts if f.parent != root else ()
        rank = RUN_RANK
        prefix_parts = []
        for part in rel:
            m = _RANK_DIR.match(part)
            if m:
                rank = int(m.group(1))
            else:
                prefix_parts.append(part)
        by_dir.setdefault((rank, "/".join(prefix_parts)), []).append(given)
    keep_dir = len({prefix for _, prefix in by_dir}) > 1
    by_writer: dict[tuple[int, str], list[Path]] = {}
    for (rank, prefix), files in by_dir.items():
        for label, members in writer_labels(files).items():
            full = "/".join(part for part in (prefix if keep_dir else "", label) if part)
            by_writer.setdefault((rank, full), []).extend(members)
    return [
        EventSource(rank, prefix, sorted(files, key=_file_order)) for (rank, prefix), files in sorted(by_writer.items())
    ]


_WRITER_NAME: Final = re.compile(r"tfevents\.\d+\.(.+)\.(\d+)\.(\d+)(?:\.v2)?$")
"""``events.out.tfevents.<time>.<host>.<pid>.<writer id>[.v2]`` (TensorFlow 2, PyTorch)."""


_SPLIT_WORD: Final = re.compile(r"(?:^|[^a-z])(train|training|val|valid|validation|eval|evaluation|test)(?:[^a-z]|$)")


_KERAS_VALIDATION_TAG: Final = re.compile(r"^evaluation_.+_vs_iterations$")


def writer_labels(files: Sequence[Path]) -> dict[str, list[Path]]:
    """The files of one folder by writer: ``""`` for one stream of continuations, else a label."""
    words = {f: _split_word(f.name) for f in files}
    if len({w for w in words.values() if w}) > 1:
        out: dict[str, list[Path]] = {}
        for f, word in words.items():
            out.setdefault(word, []).append(f)
        return out
    processes: dict[tuple[str, str], dict[int, list[Path]]] = {}
    for f in files:
        m = _WRITER_NAME.search(f.name)
        if m:
            processes.setdefault((m.group(1), m.group(2)), {}).setdefault(int(m.group(3)), []).append(f)
    label_of: dict[Path, str] = {}
    for writers in processes.values():
        if len(writers) < 2:
            continue
        ids = sorted(writers)
        labels = _content_labels([writers[i] for i in ids]) or [f"writer-{k}" for k in range(1, len(ids) + 1)]
        for writer_id, label in zip(ids, labels, strict=True):
            label_of.update((f, label) for f in writers[writer_id])
    out = {}
    for f in files:
        out.setdefault(label_of.get(f, ""), []).append(f)
    return out


def _split_word(name: str) -> str:
    """``train``/``validation``/... where a file's name (before ``tfevents``) says which split it logs."""
    m = _SPLIT_WORD.search(name.lower().split("tfevents", 1)[0])
    if not m:
        return ""
    word = m.group(1)
    return {"training": "train", "val": "validation", "valid": "validation", "evaluation": "eval"}.get(word, word)


def _content_labels(writers: list[list[Path]]) -> list[str] | None:
    """``train``/``validation`` for Keras's two writers of one process (only its validation writer
    logs ``evaluation_*_vs_iterations``), else None."""
    if len(writers) != 2:
        return None
    keras_val = [any(_KERAS_VALIDATION_TAG.match(t) for f in files for t in head_tags(f)) for files in writers]
    if keras_val.count(True) != 1:
        return None
    return ["validation" if is_val else "train" for is_val in keras_val]


def head_tags(path: Path, nbytes: int = 1024 * 1024) -> set[str]:
    """The scalar tags in the first ``nbytes`` of an event file (decoded as the reader decodes them)."""
    head = read_head(path, nbytes)
    data = head + PAD_BYTES
    frames = frame_records(data, len(head), final=False)
    scalars, _ = decode_block(data, frames.starts, frames.lengths)
    return {part[0] for part in (*scalars.parts, *frames.fast.parts)}


def _file_order(path: Path) -> tuple[int, str]:
    m = re.search(r"tfevents\.(\d+)", path.name)
    return (int(m.group(1)) if m else 0, path.name)


class TensorBoardReader(Reader):
    name = "tensorboard"
    description = "TensorBoard event files (events.out.tfevents.*), a file or a folder tree; rank_N/ folders"
    accepts_directories = True

    def sniff(self, head: bytes, path: Path) -> float:
        if path.is_dir():
            return 0.95 if any(is_event_file(f) for f in path.rglob("*") if f.is_file()) else 0.0
        if len(head) >= 12:
            (length,) = struct.unpack_from("<Q", head, 0)
            if masked_crc(head[:8]) == struct.unpack_from("<I", head, 8)[0] and length < MAX_RECORD:
                return 0.97
        return 0.4 if is_event_file(path) else 0.0

    def fill(self, paths: Sequence[Path], builder: LogBuilder) -> None:
        sources = event_sources(paths)
        if not sources:
            raise StabScopeError("no TensorBoard event files (events.out.tfevents.*) found", path=str(paths[0]))
        for stream, source in enumerate(sources):
            for path in source.files:
                builder.source(path)
                self._read_file(path, source, stream, builder)
        if any(s.rank != RUN_RANK for s in sources):
            builder.meta.setdefault("world_size", len({s.rank for s in sources if s.rank != RUN_RANK}))

    def _read_file(self, path: Path, source: EventSource, stream: int, builder: LogBuilder) -> None:
        try:
            f = open(path, "rb")  # noqa: SIM115 - closed below
        except OSError as exc:
            raise open_error(path, exc) from exc
        consumed = [0]
        records = 0
        try:
            for data, n, final, fresh in _windows(f, consumed):
                builder.advance(fresh)
                file_offset = consumed[0]
                frames = frame_records(data, n, final=final)
                for offset, reason in frames.corrupt:
                    builder.skip(path, file_offset + offset, f"byte offset {file_offset + offset}: {reason}")
                scalars, bad = decode_block(data, frames.starts, frames.lengths)
                for offset, reason in sorted(bad):
                    builder.skip(path, file_offset + offset, f"byte offset {file_offset + offset}: {reason}")
                records += frames.count - len(bad)
                base = builder.reserve(frames.count)
                parts = [(tag, frames.index[rows], v, w, s) for tag, rows, v, w, s in scalars.parts]
                parts.extend(frames.fast.parts)
                parts.sort(key=lambda part: int(part[1][0]) if part[1].size else -1)  # file order per tag
                for tag, rows, values, wall, steps in parts:
                    name = f"{source.prefix}/{tag}" if source.prefix else tag
                    builder.add(
                        name,
                        steps,
                        values,
                        rank=source.rank,
                        wall_time=wall,
                        stream=stream,
                        seq=base + rows,
                    )
                consumed[0] = file_offset + frames.end
                del data, frames
        finally:
            f.close()
        if records == 0 and consumed[0] > 0 and builder.row_count == 0:
            raise StabScopeError(
                "not a TensorBoard event file: expected TFRecord framing (length, masked CRC32C)",
                path=str(path),
                line=0,
            )


def _windows(f: BinaryIO, consumed: list[int]) -> Iterator[tuple[Data, int, bool, int]]:
    """A file in blocks: ``(data, n, final, fresh)``. ``data[:n]`` starts at file offset
    ``consumed[0]`` (the caller advances it past the records it framed) and ``data`` holds at least
    :data:`PAD` more bytes (file bytes or zeros); ``final`` on the last block, ``fresh``: bytes not
    seen in earlier blocks.

    The file is memory-mapped where possible (no copy; the last :data:`_TAIL_BYTES` are copied to be
    zero-padded), else read a block at a time."""
    try:
        mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    except (OSError, ValueError):  # empty file, or a file system without mmap
        yield from _read_windows(f, consumed)
        return
    try:
        view = memoryview(mm)
        size = len(view)
        covered = 0
        want = _BLOCK_BYTES
        last_n = -1
        while consumed[0] < size:
            start = consumed[0]
            remaining = size - start
            n = min(want, remaining - _TAIL_BYTES)
            if n <= 0 or n == last_n:  # the rest, zero-padded (a record longer than the window grows it)
                yield b"".join((view[start:], PAD_BYTES)), remaining, True, size - covered
                return
            yield view[start : start + n + PAD], n, False, max(start + n - covered, 0)
            covered = max(covered, start + n)
            stuck = consumed[0] == start
            want = want * 2 if stuck else _BLOCK_BYTES
            last_n = n if stuck else -1
    finally:
        del view
        with contextlib.suppress(BufferError):  # arrays still view it: it closes when they go
            mm.close()


def _read_windows(f: BinaryIO, consumed: list[int]) -> Iterator[tuple[Data, int, bool, int]]:
    carry = b""
    while True:
        block = f.read(_BLOCK_BYTES)
        final = not block
        n = len(carry) + len(block)
        if not n:
            return
        data = b"".join((carry, block, PAD_BYTES))
        start = consumed[0]
        yield data, n, final, len(block)
        if final:
            return
        carry = data[consumed[0] - start : n]
