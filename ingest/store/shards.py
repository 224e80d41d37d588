"""Per-rank metric shards: the append-only, crash-safe format a training job writes.

Layout: ``SHARD_DIR/rank-00003/seg-<unix_ns>-<pid>.ssf`` for rank 3 (``rank-run`` holds nothing
special: run-level rows live in any rank's segments with ``rank = -1``). Each writer opens a fresh
segment, so a restarted job never appends to a file that a crash may have torn.

The shard location may also be an object-storage URL (``s3://bucket/job42/shards``): object storage
has no append, so there each flush is one immutable segment object
``rank-00003/seg-<unix_ns>-<pid>-<flush:09d>.ssf`` (``ingest.store.shard_objects``), whole or absent, and a
writer's objects in flush order are read as one segment. Readers list segments through
:func:`find_segments` (local files and writers' objects alike, as :class:`SegmentRef`) and decode both
with :func:`read_segment`.

A segment is a sequence of frames::

    magic b"SSF1" | kind u8 | 3 reserved bytes | payload length u32 LE | crc32 u32 LE | payload

kind 1 = metrics: an Arrow IPC stream holding one record batch in *wide* form
(``rank`` int32, ``step`` int64, ``wall_time`` float64, then one float64 column per metric;
null = not logged at that row, NaN = logged as NaN).
kind 2 = events: UTF-8 JSON list of ``{"step", "kind", "label", "detail"}``.
kind 3 = metadata: UTF-8 JSON object, merged into the run's metadata.

A torn last frame (length past the end of the file, or a CRC mismatch at the very end) is an
unfinished write: readers stop before it and, when the file grows, pick up from there. A bad frame in
the middle is reported with its byte offset and skipped by scanning for the next magic.
"""

from __future__ import annotations

import json
import os
import struct
import time
import zlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from ingest.errors import StabScopeError
from ingest.long_schema import LONG_SCHEMA as LONG_SCHEMA  # re-exported: producers of long tables import it here
from ingest.long_schema import PART_SCHEMA, null_floats
from ingest.store.object_store import is_object_url
from ingest.store.shard_objects import ObjectSegmentSink, list_segment_objects, list_writer_objects, read_object_segment
from stab_core.metrics import RUN_RANK, is_valid_metric_name

MAGIC = b"SSF1"
HEADER = struct.Struct("<4sB3xII")
KIND_METRICS = 1
KIND_EVENTS = 2
KIND_META = 3
SEGMENT_SUFFIX = ".ssf"
MAX_FRAME_BYTES = 256 * 1024 * 1024


def rank_dir_name(rank: int) -> str:
    """Directory name for a rank's segments (``rank-00003``); run-level-only writers use ``rank-run``."""
    return "rank-run" if rank == RUN_RANK else f"rank-{rank:05d}"


class ShardWriter:
    """Buffered, crash-safe writer of one rank's metrics.

    ``write`` only appends to an in-memory buffer; a frame is written (one ``write`` + ``flush``
    syscall pair) when ``max_buffer_rows`` rows are buffered or ``flush_interval_s`` seconds have
    passed since the last flush, and on ``close``. Cost per ``write`` is a dict update: cheap
    enough for every step.

    ``shard_dir`` may be an ``s3://`` URL: each flush's frames then become one segment object, put
    by a background thread (``ingest.store.shard_objects.ObjectSegmentSink``) so the training step does
    not wait for the upload; :meth:`flush` and :meth:`close` return once everything is stored.
    """

    def __init__(
        self,
        shard_dir: str | os.PathLike[str],
        rank: int,
        *,
        flush_interval_s: float = 2.0,
        max_buffer_rows: int = 4096,
        fsync: bool = False,
    ) -> None:
        if rank < RUN_RANK:
            raise ValueError(f"rank must be >= -1, got {rank}")
        self.rank = rank
        self.flush_interval_s = flush_interval_s
        self.max_buffer_rows = max_buffer_rows
        self._fsync = fsync
        segment_name = f"seg-{time.time_ns():020d}-{os.getpid()}"
        self._objects: ObjectSegmentSink | None = None
        if is_object_url(shard_dir):
            self._objects = ObjectSegmentSink(str(shard_dir), f"{rank_dir_name(rank)}/{segment_name}", SEGMENT_SUFFIX)
        else:
            directory = Path(shard_dir) / rank_dir_name(rank)
            directory.mkdir(parents=True, exist_ok=True)
            self.path = directory / f"{segment_name}{SEGMENT_SUFFIX}"
            self._file = open(self.path, "ab")  # noqa: SIM115 - held open for the writer's life
        self._closed = False
        self._rows: list[tuple[int, int, float, Mapping[str, float]]] = []
        self._events: list[dict[str, Any]] = []
        self._last_flush = time.monotonic()

    def write(
        self,
        step: int,
        metrics: Mapping[str, float] | None = None,
        *,
        run_level: Mapping[str, float] | None = None,
        wall_time: float | None = None,
    ) -> None:
        """Buffer this rank's ``metrics`` and the run-level ``run_level`` ones for ``step``."""
        now = time.time() if wall_time is None else wall_time
        if metrics:
            self._rows.append((self.rank, int(step), now, dict(metrics)))
        if run_level:
            self._rows.append((RUN_RANK, int(step), now, dict(run_level)))
        if len(self._rows) >= self.max_buffer_rows or time.monotonic() - self._last_flush >= self.flush_interval_s:
            self._flush(wait=False)

    def write_columns(
        self,
        steps: Any,
        columns: Mapping[str, Any],
        *,
        rank: int | None = None,
        wall_time: Any = None,
    ) -> None:
        """Write many steps at once from arrays (generators, replays): one frame, no buffering."""
        self._flush(wait=False)
        n = len(steps)
        arrays: dict[str, pa.Array[Any]] = {
            "rank": pa.array(np.full(n, self.rank if rank is None else rank, np.int32)),
            "step": pa.array(steps, pa.int64()),
            "wall_time": pa.array(np.full(n, time.time()) if wall_time is None else wall_time, pa.float64()),
        }
        for name, values in columns.items():
            _check_metric(name)
            arrays[name] = pa.array(values, pa.float64())
        self._write_frame(KIND_METRICS, _ipc_bytes(pa.table(arrays)))
        self._end_object(wait=False)

    def event(self, step: int, kind: str, label: str = "", **detail: Any) -> None:
        """Record a run event (schedule transition, checkpoint, data switch...) at ``step``."""
        self._events.append({"step": int(step), "kind": kind, "label": label, "detail": detail})

    def write_meta(self, meta: Mapping[str, Any]) -> None:
        """Write run metadata (batch sizes, world size, scheduler settings) once, immediately."""
        self._write_frame(KIND_META, json.dumps(dict(meta), default=str).encode())
        self._end_object(wait=False)

    def flush(self) -> None:
        """Write buffered rows and events as frames; safe to call at any time. On object storage it
        returns once every segment object flushed so far is stored (a crash then loses none of it)."""
        self._flush(wait=True)

    def close(self) -> None:
        """Flush and close the segment (on object storage: wait for the last uploads)."""
        if self._closed:
            return
        self._closed = True
        self._flush(wait=False)
        if self._objects is not None:
            self._objects.close()
        else:
            self._file.close()

    def _flush(self, *, wait: bool) -> None:
        """The buffered rows and events as frames; ``wait``: until an object store has them too."""
        if self._rows:
            self._write_frame(KIND_METRICS, _ipc_bytes(_rows_to_table(self._rows)))
            self._rows = []
        if self._events:
            self._write_frame(KIND_EVENTS, json.dumps(self._events, default=str).encode())
            self._events = []
        self._last_flush = time.monotonic()
        self._end_object(wait=wait)

    def _end_object(self, *, wait: bool) -> None:
        """On object storage, the frames written since the last object become the next object."""
        if self._objects is not None:
            self._objects.seal(wait=wait)

    def __enter__(self) -> ShardWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _write_frame(self, kind: int, payload: bytes) -> None:
        header = HEADER.pack(MAGIC, kind, len(payload), zlib.crc32(payload))
        if self._objects is not None:
            self._objects.add(header + payload)
            return
        self._file.write(header + payload)
        self._file.flush()
        if self._fsync:
            os.fsync(self._file.fileno())


def _check_metric(name: str) -> None:
    if name in ("rank", "step", "wall_time") or not is_valid_metric_name(name):
        raise ValueError(f"invalid metric name {name!r}: use canonical names such as 'loss'")


def _rows_to_table(rows: list[tuple[int, int, float, Mapping[str, float]]]) -> pa.Table:
    """The buffered rows as one wide table. Built from numpy buffers, not ``pa.array`` of lists:
    ``pa.array`` imports pandas on first use, inside a training step (the monitor's first flush
    showed up as a step-time spike of its own)."""
    names: dict[str, None] = {}
    for _, _, _, metrics in rows:
        for name in metrics:
            names.setdefault(name, None)
    columns: dict[str, pa.Array[Any]] = {
        "rank": _numpy_column(np.array([r[0] for r in rows], np.int32), pa.int32()),
        "step": _numpy_column(np.array([r[1] for r in rows], np.int64), pa.int64()),
        "wall_time": _numpy_column(np.array([r[2] for r in rows], np.float64), pa.float64()),
    }
    for name in names:
        _check_metric(name)
        logged = [r[3].get(name) for r in rows]
        present = None if None not in logged else np.array([v is not None for v in logged])
        values = np.array([0.0 if v is None else v for v in logged], np.float64)  # 0.0: read as null
        columns[name] = _numpy_column(values, pa.float64(), present)
    return pa.Table.from_arrays(list(columns.values()), names=list(columns))


def _numpy_column(values: Any, kind: pa.DataType, present: Any = None) -> Any:
    """An Arrow array over a 1-D numpy array (no copy); ``present`` False marks a null (a metric
    not logged in that row, which is not the same as a NaN one)."""
    n = values.shape[0]
    missing = 0 if present is None else n - int(np.count_nonzero(present))
    bits: Any = None if not missing else np.packbits(present, bitorder="little")  # numpy arrays are buffers
    bitmap = None if bits is None else pa.py_buffer(bits)
    return pa.Array.from_buffers(kind, n, [bitmap, pa.py_buffer(values)], null_count=missing)


def _ipc_bytes(table: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return bytes(sink.getvalue().to_pybytes())


# --------------------------------------------------------------------------- reading


@dataclass
class FrameError:
    """A frame that could not be read: where it is and why."""

    path: str
    offset: int
    reason: str

    def __str__(self) -> str:
        return f"{self.path}: byte {self.offset}: {self.reason}"


@dataclass
class SegmentRead:
    """What one pass over a segment produced.

    ``end_offset`` is where the next pass must resume (the start of a torn/unfinished last frame,
    or the end of the file). ``torn_tail`` tells whether such an unfinished frame exists.
    """

    path: str
    metrics: list[pa.Table] = field(default_factory=list)
    events: list[dict[str, Any]] = field(default_factory=list)
    meta: dict[str, Any] = field(default_factory=dict)
    errors: list[FrameError] = field(default_factory=list)
    end_offset: int = 0
    torn_tail: bool = False
    frames: int = 0


@dataclass(frozen=True)
class SegmentRef:
    """One segment as a listing found it: ``location`` is what :func:`read_segment` reads, ``key``
    names it in the catalog's byte offsets, ``size`` its length in bytes when listed.

    A local segment is a file (``location`` its path, ``key`` the resolved path). On object storage a
    segment is one writer's objects ``<stem>-<flush>.ssf`` in flush order, read as if they were one
    file: ``location`` and ``key`` are the stem's URL, ``size`` the sum of the objects' sizes and
    ``objects`` their ``(URL, size)``. So the catalog keeps one offset per writer, as for local files,
    not one per flush (which would grow every catalog and manifest by one entry per rank per flush)."""

    location: str
    key: str
    size: int
    objects: tuple[tuple[str, int], ...] = ()

    def __str__(self) -> str:
        return self.location


def shard_location_name(location: str | os.PathLike[str]) -> str:
    """A shard location as a run's source records it: the resolved directory, or the URL."""
    if is_object_url(location):
        return str(location).rstrip("/")
    return str(Path(location).resolve())


def list_segments(shard_dir: str | os.PathLike[str]) -> list[Path]:
    """All segment files under a local ``shard_dir`` in a stable order (rank directory, then name);
    :func:`find_segments` lists object storage too."""
    root = Path(shard_dir)
    if not root.is_dir():
        return []
    return sorted(p for p in root.glob(f"rank-*/*{SEGMENT_SUFFIX}") if p.is_file())


def find_segments(location: str | os.PathLike[str]) -> list[SegmentRef]:
    """Every segment under a shard location (a directory or an ``s3://`` URL), ordered by rank
    directory, then name. A local directory that does not exist is a ``StabScopeError``; an object
    prefix with nothing under it lists no segments."""
    if is_object_url(location):
        return _writer_segments(list_segment_objects(str(location), SEGMENT_SUFFIX))
    root = Path(location)
    if not root.is_dir():
        raise StabScopeError(f"shard directory {root} does not exist or is not a directory")
    refs = []
    for path in list_segments(root):
        try:
            refs.append(SegmentRef(str(path), str(path.resolve()), path.stat().st_size))
        except FileNotFoundError:
            continue  # removed between the listing and the stat: nothing of it to read
    return refs


def _writer_segments(objects: list[tuple[str, int]]) -> list[SegmentRef]:
    """Segment objects ``(URL, size)``, ordered by URL, as one :class:`SegmentRef` per writer (the
    URL up to ``-<flush>.ssf``)."""
    by_writer: dict[str, list[tuple[str, int]]] = {}
    for url, size in objects:
        by_writer.setdefault(url[: url.rindex("-")], []).append((url, size))
    return [SegmentRef(stem, stem, sum(size for _, size in parts), tuple(parts)) for stem, parts in by_writer.items()]


def read_segment(path: str | os.PathLike[str] | SegmentRef, offset: int = 0) -> SegmentRead:
    """Read every complete frame of a segment from byte ``offset`` on: a file path, a
    :class:`SegmentRef`, or on object storage a writer's stem URL (its objects are listed) or one
    object's URL. Errors name the file or object URL and the byte offset in it."""
    location = str(path.location if isinstance(path, SegmentRef) else path)
    if not is_object_url(location):
        with open(location, "rb") as f:
            f.seek(offset)
            data = f.read()
        out = SegmentRead(path=location, end_offset=offset)
        _decode_frames(data, location, offset, out, grows=True)
        return out
    if isinstance(path, SegmentRef) and path.objects:
        objects = list(path.objects)
    elif location.endswith(SEGMENT_SUFFIX):
        objects = [(location, -1)]  # one object: its size is what a read returns
    else:
        objects = list_writer_objects(location, SEGMENT_SUFFIX)
    out = SegmentRead(path=location, end_offset=offset)
    start = 0  # where the object begins in the writer's segment
    for url, size in objects:
        if size < 0 or start + size > offset:
            skip = max(offset - start, 0)
            data = read_object_segment(url, skip)
            _decode_frames(data, url, skip, out, grows=False)
            size = skip + len(data)
        start += size
    out.end_offset = max(start, offset)
    return out


def _decode_frames(data: bytes, label: str, offset: int, out: SegmentRead, *, grows: bool) -> None:
    """Decode the frames in ``data`` (read from byte ``offset`` of ``label``) into ``out``; its
    ``end_offset`` becomes where the next read of a file that ``grows`` resumes."""
    for frame_offset, kind, payload, error in _iter_frames(data):
        at = offset + frame_offset
        if error == "torn" and not grows:
            # An object never grows: a frame it ends inside is damaged, not unfinished.
            out.errors.append(FrameError(label, at, "truncated frame (the object ends inside it)"))
            break
        if error == "torn":
            out.torn_tail = True
            out.end_offset = at
            return
        if error is not None:
            out.errors.append(FrameError(label, at, error))
            continue
        try:
            _decode_frame(kind, payload, out)
            out.frames += 1
        except (pa.ArrowInvalid, ValueError, UnicodeDecodeError, KeyError) as exc:
            out.errors.append(FrameError(label, at, f"undecodable frame of kind {kind}: {exc}"))
    out.end_offset = offset + len(data)


def _iter_frames(data: bytes) -> Iterator[tuple[int, int, bytes, str | None]]:
    """Yield ``(offset, kind, payload, error)``; error ``"torn"`` ends the iteration."""
    pos, size = 0, len(data)
    while pos < size:
        if size - pos < HEADER.size:
            yield pos, 0, b"", "torn"
            return
        magic, kind, length, crc = HEADER.unpack_from(data, pos)
        if magic != MAGIC or length > MAX_FRAME_BYTES:
            nxt = data.find(MAGIC, pos + 1)
            yield pos, 0, b"", f"bad frame header (expected magic {MAGIC!r})"
            if nxt < 0:
                return
            pos = nxt
            continue
        end = pos + HEADER.size + length
        if end > size:
            yield pos, kind, b"", "torn"
            return
        payload = data[pos + HEADER.size : end]
        if zlib.crc32(payload) != crc:
            # A CRC failure on the very last frame is a write in progress, not corruption.
            if end == size:
                yield pos, kind, b"", "torn"
                return
            yield pos, kind, b"", "CRC mismatch (corrupt frame skipped)"
        elif kind not in (KIND_METRICS, KIND_EVENTS, KIND_META):
            yield pos, kind, b"", f"unknown frame kind {kind}"
        else:
            yield pos, kind, payload, None
        pos = end


def _decode_frame(kind: int, payload: bytes, out: SegmentRead) -> None:
    if kind == KIND_METRICS:
        table = pa.ipc.open_stream(payload).read_all()
        for required in ("rank", "step"):
            if required not in table.column_names:
                raise ValueError(f"metrics frame lacks column {required!r}")
        out.metrics.append(table)
    elif kind == KIND_EVENTS:
        events = json.loads(payload.decode())
        if not isinstance(events, list):
            raise ValueError("events frame is not a JSON list")
        for e in events:
            out.events.append(
                {
                    "step": int(e["step"]),
                    "kind": str(e["kind"]),
                    "label": str(e.get("label", "")),
                    "detail": e.get("detail", {}),
                }
            )
    else:
        meta = json.loads(payload.decode())
        if not isinstance(meta, dict):
            raise ValueError("metadata frame is not a JSON object")
        out.meta.update(meta)


def wide_to_long_parts(table: pa.Table) -> list[tuple[str, pa.Table]]:
    """Unpivot a wide metrics batch into one ``PART_SCHEMA`` table per metric column (in column
    order), dropping nulls (not logged) only. Columns without nulls are passed on without a copy."""
    ranks = table.column("rank").cast(pa.int32())
    steps = table.column("step").cast(pa.int64())
    wall = (
        table.column("wall_time").cast(pa.float64())
        if "wall_time" in table.column_names
        else null_floats(table.num_rows)
    )
    parts: list[tuple[str, pa.Table]] = []
    for name in table.column_names:
        if name in ("rank", "step", "wall_time"):
            continue
        values = table.column(name).cast(pa.float64())
        columns: list[Any] = [ranks, steps, values, wall]
        if values.null_count == len(values):
            continue
        if values.null_count:
            mask = values.is_valid()
            columns = [c.filter(mask) for c in columns]
        parts.append((name, pa.Table.from_arrays(columns, schema=PART_SCHEMA)))
    return parts


def wide_to_long(table: pa.Table) -> pa.Table:
    """Unpivot a wide metrics batch into ``LONG_SCHEMA`` rows, dropping nulls (not-logged) only."""
    parts = wide_to_long_parts(table)
    if not parts:
        return LONG_SCHEMA.empty_table()
    return pa.concat_tables(
        [
            pa.Table.from_arrays(
                [*part.columns[:2], pa.repeat(pa.scalar(name), part.num_rows), *part.columns[2:]], schema=LONG_SCHEMA
            )
            for name, part in parts
        ]
    )
