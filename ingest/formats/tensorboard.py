"""TensorBoard event files (``events.out.tfevents.*``): one file, or a folder tree of them.

Framing (TFRecord): ``uint64 length | uint32 masked_crc32c(length) | payload | uint32
masked_crc32c(payload)``; the payload is a ``tensorflow.Event`` protobuf. Both CRCs are verified with
the ``crc32c`` package. A record whose payload CRC fails is reported (file, byte offset) and skipped;
one whose length CRC fails breaks the framing, so the reader scans forward for the next position where
a length and its CRC agree, reports the bytes it jumped, and continues. A truncated last record (a
file still being written) is reported and ignored.

Scalars: ``Summary.Value.simple_value`` (TF1, PyTorch's SummaryWriter) and scalar tensors
(TF2/Keras: ``tensor`` with dtype DT_FLOAT/DT_DOUBLE in ``tensor_content`` or ``float_val`` /
``double_val``, plugin ``scalars``). Other summaries (histograms, images, text, graphs) are ignored.

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

Speed: no per-field Python objects. The file is memory-mapped (read in blocks where it cannot be).
Where payload lengths repeat with a short period (SummaryWriter logs the same tags every step), a
run of such rows is checked against its first row in one masked pass over the bytes (framing,
length CRCs and layouts at once); the payload CRCs come from the bytes that vary only (wall time,
step, value: CRC32C is linear, so per-distance byte tables correct the template's CRC), and the
same gathered bytes give the columns (:func:`_fast_run`). Other records are framed by predicting
the next ones from the period of the record lengths and verifying the predictions with numpy;
records with the same *layout* (every byte equal except the wall time, the step's varint payload
and the value) are decoded together: one record of each layout is parsed by the small protobuf
decoder below, and the layout's fields are then sliced out of all matching records at once.
"""

from __future__ import annotations

import contextlib
import mmap
import os
import re
import struct
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO, Final

import crc32c
import numpy as np
import numpy.typing as npt

from ingest.errors import StabScopeError
from ingest.formats._common import LogBuilder, open_error, read_head
from ingest.formats.base import Reader
from stab_core.metrics import RUN_RANK

U8 = npt.NDArray[np.uint8]
W64 = npt.NDArray[np.uint64]
I64 = npt.NDArray[np.int64]
Data = bytes | memoryview
"""A block of an event file: bytes read, or a window on the memory-mapped file."""

_MASK_DELTA: Final = 0xA282EAD8
_BLOCK_BYTES: Final = 64 * 1024 * 1024
_MAX_RECORD: Final = 1 << 31
_FILE_RE: Final = re.compile(r"(^|\.)tfevents(\.|$)")
_RANK_DIR: Final = re.compile(r"^rank[_\-]?(\d+)$")
_PAD: Final = 160
"""Zero bytes appended to a block so that fixed-width gathers never read past its end."""
_PAD_BYTES: Final = bytes(_PAD)
_TAIL_BYTES: Final = 1024 * 1024
_WALK: Final = 64
"""Records framed one by one before their lengths are searched for a period."""
_MAX_FAST_PAYLOAD: Final = 1024
_FIRST_CHUNK_ROWS: Final = 64
_CHUNK_BYTES: Final = 2 * 1024 * 1024
"""Rows of a periodic run are checked about this many bytes at a time (cache-sized)."""
_SHORT_RUN: Final = 256
_MAX_SHORT_RUNS: Final = 16
"""After this many periodic runs shorter than ``_SHORT_RUN`` records, a block is left to the
general decoder (periods that keep breaking)."""
_CASTAGNOLI: Final = 0x82F63B78

DT_FLOAT: Final = 1
DT_DOUBLE: Final = 2
_SCALAR_PLUGINS: Final = (b"", b"scalars")


def masked_crc(data: Data) -> int:
    """TFRecord's masked CRC32C of ``data``."""
    crc = crc32c.crc32c(data)
    return (((crc >> 15) | (crc << 17)) + _MASK_DELTA) & 0xFFFFFFFF


def _mask_array(crc: npt.NDArray[np.uint64]) -> npt.NDArray[np.uint64]:
    return (((crc >> np.uint64(15)) | (crc << np.uint64(17))) + np.uint64(_MASK_DELTA)) & np.uint64(0xFFFFFFFF)


def is_event_file(path: Path) -> bool:
    """True for a TensorBoard event file name (``events.out.tfevents.<time>.<host>...``)."""
    return bool(_FILE_RE.search(path.name))


# --------------------------------------------------------------------------- protobuf decoding


def _varint(buf: bytes, pos: int) -> tuple[int, int]:
    result = 0
    shift = 0
    while True:
        if pos >= len(buf):
            raise ValueError("truncated varint")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result, pos
        shift += 7
        if shift > 63:
            raise ValueError("varint too long")


def _fields(buf: bytes, start: int, end: int) -> Iterator[tuple[int, int, int, int, int]]:
    """``(field number, wire type, value start, value end, varint value)`` of a message span."""
    pos = start
    while pos < end:
        key, pos = _varint(buf, pos)
        number, wire = key >> 3, key & 7
        if wire == 0:
            v0 = pos
            value, pos = _varint(buf, pos)
            yield number, wire, v0, pos, value
        elif wire == 1:
            yield number, wire, pos, pos + 8, 0
            pos += 8
        elif wire == 2:
            length, pos = _varint(buf, pos)
            yield number, wire, pos, pos + length, length
            pos += length
        elif wire == 5:
            yield number, wire, pos, pos + 4, 0
            pos += 4
        else:
            raise ValueError(f"unsupported wire type {wire}")
        if pos > end:
            raise ValueError("field runs past its message")


@dataclass
class ScalarSlot:
    """Where one scalar value lies in a record: byte offset, dtype (``<f4``/``<f8``) and tag."""

    tag: str
    offset: int
    dtype: str


@dataclass
class Layout:
    """A record's decoded structure: enough to slice every record of the same layout at once."""

    length: int
    wall_offset: int | None = None
    step_offset: int | None = None
    step_length: int = 0
    slots: list[ScalarSlot] = field(default_factory=list)
    variable: set[int] = field(default_factory=set)
    """Byte positions that may differ between records of this layout (values, wall time)."""


def decode_event(buf: bytes) -> Layout:
    """Decode one Event payload into its :class:`Layout` (scalar values and where they are)."""
    layout = Layout(length=len(buf))
    for number, wire, start, end, _ in _fields(buf, 0, len(buf)):
        if number == 1 and wire == 1:
            layout.wall_offset = start
            layout.variable.update(range(start, end))
        elif number == 2 and wire == 0:
            layout.step_offset, layout.step_length = start, end - start
        elif number == 5 and wire == 2:
            for vnum, vwire, vstart, vend, _ in _fields(buf, start, end):
                if vnum == 1 and vwire == 2:
                    slot = _decode_value(buf, vstart, vend)
                    if slot is not None:
                        layout.slots.append(slot)
                        width = 4 if slot.dtype == "<f4" else 8
                        layout.variable.update(range(slot.offset, slot.offset + width))
    return layout


def _decode_value(buf: bytes, start: int, end: int) -> ScalarSlot | None:
    tag = ""
    simple: int | None = None
    tensor: tuple[int, int] | None = None
    plugin = b""
    for number, wire, vs, ve, _ in _fields(buf, start, end):
        if number == 1 and wire == 2:
            tag = buf[vs:ve].decode("utf-8", "replace")
        elif number == 2 and wire == 5:
            simple = vs
        elif number == 8 and wire == 2:
            tensor = (vs, ve)
        elif number == 9 and wire == 2:
            plugin = _plugin_name(buf, vs, ve)
    if simple is not None:
        return ScalarSlot(tag, simple, "<f4")
    if tensor is not None and plugin in _SCALAR_PLUGINS:
        found = _tensor_scalar(buf, *tensor)
        if found is not None:
            return ScalarSlot(tag, found[0], found[1])
    return None


def _plugin_name(buf: bytes, start: int, end: int) -> bytes:
    for number, wire, vs, ve, _ in _fields(buf, start, end):
        if number == 1 and wire == 2:
            for pn, pw, ps, pe, _ in _fields(buf, vs, ve):
                if pn == 1 and pw == 2:
                    return buf[ps:pe]
    return b""


def _tensor_scalar(buf: bytes, start: int, end: int) -> tuple[int, str] | None:
    dtype = 0
    content: tuple[int, int] | None = None
    floats: tuple[int, int, int] | None = None  # (start, end, wire)
    doubles: tuple[int, int, int] | None = None
    for number, wire, vs, ve, value in _fields(buf, start, end):
        if number == 1 and wire == 0:
            dtype = value
        elif number == 2 and wire == 2:
            for dn, dw, ds, de, _ in _fields(buf, vs, ve):
                if dn == 2 and dw == 2:
                    for sn, sw, _, _, size in _fields(buf, ds, de):
                        if sn == 1 and sw == 0 and size != 1:
                            return None  # not a scalar
        elif number == 4 and wire == 2:
            content = (vs, ve)
        elif number == 5:
            floats = (vs, ve, wire)
        elif number == 6:
            doubles = (vs, ve, wire)
    width = {DT_FLOAT: 4, DT_DOUBLE: 8}.get(dtype)
    if width is None:
        return None
    dt = "<f4" if width == 4 else "<f8"
    if content is not None and content[1] - content[0] == width:
        return content[0], dt
    packed = floats if dtype == DT_FLOAT else doubles
    if packed is not None and packed[1] - packed[0] == width:
        return packed[0], dt
    return None


# --------------------------------------------------------------------------- framing


@dataclass
class _Frames:
    """The records of one block: those for the general decoder (``starts``, ``lengths``, ``index``:
    their record numbers in the block) and the scalars of periodic runs, already decoded (``fast``)."""

    starts: I64
    lengths: I64
    index: I64
    count: int
    """Records framed in all, both kinds."""
    end: int
    corrupt: list[tuple[int, str]] = field(default_factory=list)
    fast: _Scalars = field(default_factory=lambda: _Scalars())


def frame_records(data: Data, n: int, final: bool) -> _Frames:
    """Find the records of ``data[:n]`` (record starts and payload lengths), checking length CRCs.

    ``data`` holds at least :data:`_PAD` bytes past ``n``. Where payload lengths repeat with a short
    period, the records are checked and decoded right here, a run at a time (:func:`_fast_run`);
    the others are returned for :func:`decode_block`. Stops at an incomplete last record (``end`` =
    where the next read must resume) unless ``final``, where it is reported as truncated.
    """
    w64 = words_at(data)
    starts: list[I64] = []
    lengths: list[I64] = []
    index: list[I64] = []
    corrupt: list[tuple[int, str]] = []
    fast = _Scalars()
    count = 0
    misses = 0
    pos = 0

    def general(s: I64, ln: I64) -> None:
        nonlocal count
        starts.append(s)
        lengths.append(ln)
        index.append(np.arange(count, count + s.shape[0], dtype=np.int64))
        count += s.shape[0]

    while pos + 12 <= n:
        walk_s, walk_l, after = _walk(data, n, pos)
        period = _period(walk_l) if len(walk_s) == _WALK else None
        if period is not None and misses < _MAX_SHORT_RUNS:
            run = _fast_run(data, n, pos, walk_l[:period], count, fast)
            if run is not None:
                for s, ln, rows in run.general:
                    starts.append(s)
                    lengths.append(ln)
                    index.append(rows)
                count += run.records
                pos = run.end
                misses += run.records < _SHORT_RUN
                continue
        s, ln, pos = _frame_run(data, w64, n, walk_s, walk_l, after, period)
        if s.size:
            ok, bad_at = _check_length_crcs(data, w64, s, ln)
            general(s[:ok], ln[:ok])
            if bad_at is None:
                continue
            pos = int(s[ok])
        if pos + 12 > n:
            break
        (length,) = struct.unpack_from("<Q", data, pos)
        if masked_crc(data[pos : pos + 8]) != struct.unpack_from("<I", data, pos + 8)[0] or length > _MAX_RECORD:
            nxt = _resync(data, n, pos + 1)
            corrupt.append((pos, f"bad length CRC; skipped {nxt - pos} bytes to the next valid record"))
            pos = nxt
            continue
        break  # a valid header whose record does not fit: incomplete
    if final and pos < n:
        corrupt.append((pos, f"truncated record ({n - pos} bytes at the end of the file)"))
        pos = n
    empty = np.zeros(0, np.int64)
    return _Frames(
        np.concatenate(starts) if starts else empty,
        np.concatenate(lengths) if lengths else empty,
        np.concatenate(index) if index else empty,
        count,
        pos,
        corrupt,
        fast,
    )


def _walk(data: Data, n: int, pos: int) -> tuple[list[int], list[int], int]:
    """Up to :data:`_WALK` consecutive records from ``pos``, by their length fields alone."""
    walk_s: list[int] = []
    walk_l: list[int] = []
    p = pos
    unpack_q = struct.Struct("<Q").unpack_from
    while len(walk_s) < _WALK and p + 12 <= n:
        (length,) = unpack_q(data, p)
        if length > _MAX_RECORD or p + 16 + length > n:
            break
        walk_s.append(p)
        walk_l.append(length)
        p += 16 + length
    return walk_s, walk_l, p


def _frame_run(
    data: Data,
    w64: npt.NDArray[np.uint64],
    n: int,
    walk_s: list[int],
    walk_l: list[int],
    p: int,
    period: int | None,
) -> tuple[I64, I64, int]:
    """Frame consecutive records after a walk: the walk's, then more predicted in bulk from its period."""
    s_arr = np.asarray(walk_s, np.int64)
    l_arr = np.asarray(walk_l, np.int64)
    if period is None:
        return s_arr, l_arr, p
    pattern = np.roll(np.asarray(walk_l[:period], np.int64), -(len(walk_l) % period))
    sizes = pattern + 16
    block = int(sizes.sum())
    offsets = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    k = (n - p) // block + 1
    pred_s = (p + np.arange(k, dtype=np.int64)[:, None] * block + offsets[None, :]).ravel()
    pred_l = np.tile(pattern, k)
    fits = pred_s + 16 + pred_l <= n
    if not fits.all():
        first_out = int(np.argmin(fits))
        pred_s, pred_l = pred_s[:first_out], pred_l[:first_out]
    if pred_s.size == 0:
        return s_arr, l_arr, p
    got = _gather_u64(w64, pred_s)
    wrong = np.flatnonzero(got != pred_l.astype(np.uint64))
    m = int(wrong[0]) if wrong.size else pred_s.size
    pred_s, pred_l = pred_s[:m], pred_l[:m]
    end = int(pred_s[-1] + 16 + pred_l[-1]) if m else p
    return np.concatenate([s_arr, pred_s]), np.concatenate([l_arr, pred_l]), end


def _period(lengths: list[int]) -> int | None:
    for q in range(1, 17):
        if all(lengths[i] == lengths[i - q] for i in range(q, len(lengths))):
            return q
    return None


def words_at(data: Data) -> npt.NDArray[np.uint64]:
    """``w[i]`` = the little-endian uint64 at byte ``i`` of ``data`` (an unaligned strided view:
    one fancy-index gather reads 8 bytes)."""
    n = max(len(data) - 7, 0)
    view: npt.NDArray[np.uint64] = np.ndarray((n,), dtype="<u8", buffer=data, offset=0, strides=(1,))
    return view


def _gather_u64(w64: npt.NDArray[np.uint64], starts: I64) -> npt.NDArray[np.uint64]:
    out: npt.NDArray[np.uint64] = w64[starts]
    return out


def _gather_u32(w64: npt.NDArray[np.uint64], starts: I64) -> npt.NDArray[np.uint64]:
    out: npt.NDArray[np.uint64] = w64[starts] & np.uint64(0xFFFFFFFF)
    return out


def _check_length_crcs(data: Data, w64: npt.NDArray[np.uint64], starts: I64, lengths: I64) -> tuple[int, int | None]:
    """``(number of leading records whose length CRC is right, index of the first wrong or None)``.

    The CRC of a length field depends on the length only, so it is computed once per distinct length.
    """
    stored = _gather_u32(w64, starts + 8)
    uniq, inverse = np.unique(lengths, return_inverse=True)
    expected_u = np.array([masked_crc(struct.pack("<Q", int(v))) for v in uniq], np.uint64)
    bad = np.flatnonzero(stored != expected_u[inverse])
    if bad.size == 0:
        return starts.shape[0], None
    return int(bad[0]), int(bad[0])


def _resync(data: Data, n: int, pos: int) -> int:
    """The next offset after ``pos`` where a length field and its CRC agree (or ``n``)."""
    unpack_q = struct.Struct("<Q").unpack_from
    unpack_i = struct.Struct("<I").unpack_from
    while pos + 12 <= n:
        (length,) = unpack_q(data, pos)
        if length <= _MAX_RECORD and masked_crc(data[pos : pos + 8]) == unpack_i(data, pos + 8)[0]:
            return pos
        pos += 1
    return n


# --------------------------------------------------------------------------- periodic runs


@dataclass
class _FastRecord:
    """One record of a run's period, decoded from its first occurrence (the template)."""

    j: int
    offset: int
    """Byte offset of the record in a period."""
    layout: Layout
    positions: list[int]
    """Payload bytes that vary: wall time, values, step varint (in that order)."""
    constant: int
    """CRC32C of the template with those bytes zeroed."""


@dataclass
class _RunResult:
    records: int
    end: int
    general: list[tuple[I64, I64, I64]]
    """Records of the run left to the general decoder: (starts, lengths, record numbers)."""


def _fast_run(data: Data, n: int, pos: int, lengths: list[int], first: int, out: _Scalars) -> _RunResult | None:
    """Check and decode the records from ``pos`` whose payload lengths repeat ``lengths``, a period
    (a *row* of ``len(lengths)`` records) at a time; None where this does not apply.

    The first row is the template, decoded by :func:`decode_event`. Every row is then compared with
    it in one pass over the bytes, all bytes but those that may vary (wall time, value, the step
    varint's payload bits, payload CRC): the length fields (framing), their CRCs and each record's
    layout are checked at once. The first row whose length field or length CRC differs ends the
    run. The payload CRCs are checked from the template's (see :func:`_crc_byte_table`), gathering
    only the bytes that vary, and the same gathered bytes give the wall times, steps and values.
    Records whose fixed payload bytes differ, whose CRC fails, or whose template holds no scalar are
    left to :func:`decode_block`, which reports errors as before.
    """
    q = len(lengths)
    sizes = [16 + ln for ln in lengths]
    offs = [0]
    for s in sizes[:-1]:
        offs.append(offs[-1] + s)
    row_bytes = sum(sizes)
    rows_avail = (n - pos) // row_bytes
    if rows_avail < 2:
        return None
    row = bytes(data[pos : pos + row_bytes])
    mask = bytearray(b"\xff" * row_bytes)
    fast: list[_FastRecord] = []
    for j, (o, length) in enumerate(zip(offs, lengths, strict=True)):
        if masked_crc(row[o : o + 8]) != struct.unpack_from("<I", row, o + 8)[0]:
            return None  # the general framing reports it
        mask[o + 12 + length : o + 16 + length] = bytes(4)
        payload = row[o + 12 : o + 12 + length]
        try:
            layout = decode_event(payload) if length <= _MAX_FAST_PAYLOAD else None
        except ValueError:
            layout = None
        if layout is None or not layout.slots:
            mask[o + 12 : o + 12 + length] = bytes(length)  # checked by the general decoder
            continue
        positions = _varying_bytes(layout)
        if positions is None:
            mask[o + 12 : o + 12 + length] = bytes(length)
            continue
        zeroed = bytearray(payload)
        for p in positions:
            zeroed[p] = 0
            mask[o + 12 + p] = 0
        for p in _step_bytes(layout):
            mask[o + 12 + p] = 0x80
        fast.append(_FastRecord(j, o, layout, positions, crc32c.crc32c(bytes(zeroed))))
    if not fast:
        return None
    plan = _RunPlan(fast, lengths, offs, row_bytes, row, bytes(mask))
    rows_done = 0
    chunk = _FIRST_CHUNK_ROWS
    stop = False
    while rows_done < rows_avail and not stop:
        m = min(chunk, rows_avail - rows_done)
        m, stop = plan.chunk(data, pos + rows_done * row_bytes, m)
        rows_done += m
        chunk = min(chunk * 8, max(_FIRST_CHUNK_ROWS, _CHUNK_BYTES // row_bytes // 8 * 8))  # keeps rows' phase
    if rows_done == 0:
        return None
    return _RunResult(rows_done * q, pos + rows_done * row_bytes, plan.finish(pos, first, rows_done, out))


def _varying_bytes(layout: Layout) -> list[int] | None:
    """Wall time, value and step bytes of a layout, in that order (None if they overlap)."""
    positions: list[int] = []
    if layout.wall_offset is not None:
        positions.extend(range(layout.wall_offset, layout.wall_offset + 8))
    for slot in layout.slots:
        positions.extend(range(slot.offset, slot.offset + (4 if slot.dtype == "<f4" else 8)))
    if layout.step_offset is not None:
        positions.extend(range(layout.step_offset, layout.step_offset + layout.step_length))
    if len(set(positions)) != len(positions) or set(positions) != layout.variable | _step_bytes(layout):
        return None
    return positions


class _RunPlan:
    """The per-run constants of :func:`_fast_run` and what its chunks found."""

    def __init__(
        self, fast: list[_FastRecord], lengths: list[int], offs: list[int], row_bytes: int, row: bytes, mask: bytes
    ) -> None:
        self.fast = fast
        self.lengths = lengths
        self.offs = np.asarray(offs, np.int64)
        self.row_bytes = row_bytes
        width = max(len(f.positions) for f in fast)
        self.width = width
        gather: list[int] = []
        table_rows: list[int] = []
        crc_at: list[int] = []
        for f in fast:
            length = lengths[f.j]
            start = f.offset + 12
            gather.extend(start + p for p in f.positions)
            table_rows.extend(length - 1 - p for p in f.positions)
            pad = width - len(f.positions)
            gather.extend([0] * pad)  # any byte: its table is zero
            table_rows.extend([-1] * pad)
            crc_at.extend(range(start + length, start + length + 4))
        tables = _distance_tables(max(r for r in table_rows))
        zero_row = tables.shape[0]
        self.table = np.concatenate([tables.ravel(), np.zeros(256, np.uint32)])
        self.table_at = (np.asarray([zero_row if r < 0 else r for r in table_rows], np.intp) * 256)[:, None]
        self.gather = np.asarray(gather, np.intp)
        self.crc_at = np.asarray(crc_at, np.intp)
        self.constant = np.asarray([f.constant for f in fast], np.uint32)[:, None]
        self.row = np.frombuffer(row, np.uint8)
        self.mask = np.frombuffer(mask, np.uint8)
        self.tiled_rows = 0
        self.tiled_phase = 0
        self.tmpl_words = np.zeros(0, np.uint64)
        self.mask_words = np.zeros(0, np.uint64)
        self.gathered: list[U8] = []
        self.ok: list[npt.NDArray[np.bool_]] = []
        self.payload_bad: list[tuple[int, int]] = []  # (row, record in the period)
        self.rows_seen = 0

    def _tile(self, rows: int, phase: int) -> None:
        """The template and mask of ``rows`` rows as words, after ``phase`` masked bytes."""
        if rows <= self.tiled_rows and phase == self.tiled_phase:
            return
        nbytes = phase + rows * self.row_bytes
        nw = (nbytes + 7) // 8
        t = np.zeros(nw * 8, np.uint8)
        t[phase:nbytes] = np.tile(self.row, rows)
        mk = np.zeros(nw * 8, np.uint8)
        mk[phase:nbytes] = np.tile(self.mask, rows)
        self.tmpl_words = t.view("<u8") & mk.view("<u8")
        self.mask_words = mk.view("<u8")
        self.tiled_rows, self.tiled_phase = rows, phase

    def chunk(self, data: Data, base: int, m: int) -> tuple[int, bool]:
        """Check ``m`` rows from byte ``base``; returns (rows accepted, whether the run ends here)."""
        row_bytes = self.row_bytes
        # compare aligned words: start up to 7 bytes early (masked out)
        phase = np.ndarray((1,), np.uint8, buffer=data, offset=base).ctypes.data % 8
        phase = phase if phase <= base else 0
        self._tile(m, phase)
        nbytes = phase + m * row_bytes
        nw = (nbytes + 7) // 8
        words = np.ndarray((nw,), "<u8", buffer=data, offset=base - phase)
        diff = words & self.mask_words[:nw]
        diff ^= self.tmpl_words[:nw]
        if nbytes % 8:
            diff[-1] &= np.uint64((1 << (8 * (nbytes % 8))) - 1)
        stop = False
        if np.count_nonzero(diff):
            bad_words = np.flatnonzero(diff)
            d8 = diff.view(np.uint8)
            at = (bad_words[:, None] * 8 + np.arange(8)).ravel()
            at = at[d8[at] != 0] - phase
            r = at // row_bytes
            rec = np.searchsorted(self.offs, at % row_bytes, side="right") - 1
            header = (at % row_bytes - self.offs[rec]) < 12
            if header.any():
                m = int(r[header].min())
                stop = True
            keep = r < m
            self.payload_bad.extend(
                (self.rows_seen + int(a), int(b))
                for a, b in set(zip(r[keep].tolist(), rec[keep].tolist(), strict=True))
            )
        if m == 0:
            return 0, stop
        rows = np.ndarray((m, row_bytes), np.uint8, buffer=data, offset=base)
        g = np.take(rows, self.gather, axis=1)  # (m, records * width)
        idx = np.empty((self.gather.shape[0], m), np.intp)
        np.add(np.ascontiguousarray(g.T), self.table_at, out=idx, casting="unsafe")
        parts = np.take(self.table, idx)
        crc = np.bitwise_xor.reduce(parts.reshape(len(self.fast), self.width, m), axis=1)
        crc ^= self.constant
        stored = np.take(rows, self.crc_at, axis=1).view("<u4").T
        masked = ((crc >> np.uint32(15)) | (crc << np.uint32(17))) + np.uint32(_MASK_DELTA)
        self.ok.append(masked == stored)
        self.gathered.append(g)
        self.rows_seen += m
        return m, stop

    def finish(self, pos: int, first: int, rows: int, out: _Scalars) -> list[tuple[I64, I64, I64]]:
        """Emit the scalars of ``rows`` checked rows; return the records left to the general decoder."""
        q = len(self.lengths)
        g = np.concatenate(self.gathered) if len(self.gathered) > 1 else self.gathered[0]
        ok = np.concatenate(self.ok, axis=1) if len(self.ok) > 1 else self.ok[0]
        for r, j in self.payload_bad:
            fi = next((k for k, f in enumerate(self.fast) if f.j == j), None)
            if fi is not None:
                ok[fi, r] = False
        general: list[tuple[I64, I64, I64]] = []
        fast_js = {f.j for f in self.fast}
        for j in range(q):
            if j not in fast_js:
                at = np.arange(rows, dtype=np.int64)
                self._leave(general, pos, first, j, at)
        for fi, f in enumerate(self.fast):
            good = ok[fi]
            all_good = bool(good.all())
            if not all_good:
                self._leave(general, pos, first, f.j, np.flatnonzero(~good))
            seg = g[:, fi * self.width : (fi + 1) * self.width]
            if not all_good:
                seg = seg[good]
            record_rows = first + f.j + q * (np.arange(rows, dtype=np.int64) if all_good else np.flatnonzero(good))
            _emit(seg, f.layout, record_rows, out)
        return general

    def _leave(self, general: list[tuple[I64, I64, I64]], pos: int, first: int, j: int, at: I64) -> None:
        q = len(self.lengths)
        starts = pos + at * self.row_bytes + int(self.offs[j])
        general.append((starts, np.full(at.shape[0], self.lengths[j], np.int64), first + j + q * at))


def _emit(seg: U8, layout: Layout, rows: I64, out: _Scalars) -> None:
    """Wall times, steps and values of one record of a run from its gathered varying bytes."""
    n = rows.shape[0]
    if n == 0:
        return
    at = 0
    if layout.wall_offset is not None:
        wall = seg[:, 0:8].view("<f8")[:, 0].astype(np.float64)
        at = 8
    else:
        wall = np.full(n, np.nan)
    values: list[tuple[str, npt.NDArray[np.float64]]] = []
    for slot in layout.slots:
        width = 4 if slot.dtype == "<f4" else 8
        values.append((slot.tag, seg[:, at : at + width].view(slot.dtype)[:, 0].astype(np.float64)))
        at += width
    steps = np.zeros(n, np.int64)
    for k in range(layout.step_length if layout.step_offset is not None else 0):
        steps |= (seg[:, at + k].astype(np.int64) & 0x7F) << (7 * k)
    for tag, v in values:
        out.parts.append((tag, rows, v, wall, steps))


_DISTANCE_TABLES: list[npt.NDArray[np.uint32]] = []


def _distance_tables(max_distance: int) -> npt.NDArray[np.uint32]:
    """``D[d, b]`` for ``d <= max_distance``: what byte ``b`` followed by ``d`` bytes contributes
    (by xor) to a CRC32C. ``D[0]`` is the byte-at-a-time table of the Castagnoli polynomial and
    ``D[d + 1]`` is ``D[d]`` shifted through one more zero byte (CRCs are linear)."""
    if not _DISTANCE_TABLES:
        t = np.arange(256, dtype=np.uint32)
        for _ in range(8):
            t = (t >> np.uint32(1)) ^ (np.uint32(_CASTAGNOLI) * (t & np.uint32(1)))
        _DISTANCE_TABLES.append(t)
    base = _DISTANCE_TABLES[0]
    while len(_DISTANCE_TABLES) <= max_distance:
        prev = _DISTANCE_TABLES[-1]
        _DISTANCE_TABLES.append((prev >> np.uint32(8)) ^ base[prev & np.uint32(0xFF)])
    return np.stack(_DISTANCE_TABLES[: max_distance + 1])


# --------------------------------------------------------------------------- decoding in bulk


@dataclass
class _Scalars:
    """Scalars decoded from one block of records, per (tag, layout)."""

    parts: list[tuple[str, I64, npt.NDArray[np.float64], npt.NDArray[np.float64], I64]] = field(default_factory=list)
    """(tag, record index, value, wall time, step)."""


def _gather_rows(w64: npt.NDArray[np.uint64], starts: I64, width: int) -> U8:
    """Bytes ``[start, start + width)`` for each start, as an ``(n, width)`` uint8 matrix.

    ``w64`` must view a buffer padded with at least ``width + 8`` bytes past any row's end."""
    n_words = (width + 7) // 8
    idx = starts[:, None] + 8 * np.arange(n_words, dtype=np.int64)[None, :]
    np.minimum(idx, w64.shape[0] - 1, out=idx)
    words = np.ascontiguousarray(w64[idx])
    rows: U8 = words.view(np.uint8).reshape(starts.shape[0], n_words * 8)[:, :width]
    return rows


def decode_block(data: Data, starts: I64, lengths: I64) -> tuple[_Scalars, list[tuple[int, str]]]:
    """Decode the payloads at ``starts`` (record starts) in bulk; returns scalars and bad records.

    ``data`` holds at least :data:`_PAD` bytes past its last record."""
    out = _Scalars()
    bad: list[tuple[int, str]] = []
    if starts.size == 0:
        return out, bad
    u8 = words_at(data)
    payload = starts + 12
    keys = _layout_keys(u8, payload, lengths)
    order = np.argsort(keys, kind="stable")
    sorted_keys = keys[order]
    bounds = np.flatnonzero(np.diff(sorted_keys)) + 1
    for group in np.split(order, bounds):
        _decode_group(data, u8, payload, lengths, group, out, bad)
    return out, bad


_BYTE_MASKS: Final = np.array([(1 << (8 * k)) - 1 for k in range(9)], dtype=np.uint64)
"""``_BYTE_MASKS[k]`` keeps the low ``k`` bytes of a word."""


def _layout_keys(u8: W64, payload: I64, lengths: I64) -> npt.NDArray[np.uint64]:
    """A hash of what tells layouts apart in the common record shape (one scalar per Event, short
    tag): record length, length of the step varint and the tag bytes (first and last 16). Records of
    another shape are keyed by their length only; the exact check happens per group afterwards."""
    last = u8.shape[0] - 1
    prime = np.uint64(0x100000001B3)
    h = lengths.astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15)
    w0 = u8[np.minimum(payload, last)]
    w9 = u8[np.minimum(payload + 9, last)]  # 0x10, then the step varint
    std = ((w0 & np.uint64(0xFF)) == 0x09) & ((w9 & np.uint64(0xFF)) == 0x10) & (lengths >= 24)
    if not std.any():
        return h
    # the step varint starts at byte 1 of w9; its length is the index of the first byte whose
    # high bit is clear: the lowest set bit of the inverted high bits
    clear = ~w9 & np.uint64(0x8080808080808000)
    std &= clear != 0
    lowest = clear & (~clear + np.uint64(1))
    vlen = ((np.log2(np.maximum(lowest, np.uint64(1)).astype(np.float64)).astype(np.int64) - 7) // 8).astype(np.int64)
    # Event.summary 0x2a <len> | Summary.value 0x0a <len> | Value.tag 0x0a <len> | tag bytes
    w = u8[np.minimum(payload + 10 + vlen, last)]
    std &= (w & np.uint64(0x80FF80FF80FF)) == np.uint64(0x0A000A002A)
    tag_len = ((w >> np.uint64(40)) & np.uint64(0xFF)).astype(np.int64)
    tag_start = payload + 16 + vlen
    std &= tag_start + tag_len <= payload + lengths
    key = h ^ (vlen.astype(np.uint64) << np.uint64(56)) ^ tag_len.astype(np.uint64)
    last_start = tag_start + np.maximum(tag_len - 16, 0)
    for at, valid in (
        (tag_start, tag_len),
        (tag_start + 8, tag_len - 8),
        (last_start, np.minimum(tag_len, 8)),
        (last_start + 8, np.minimum(tag_len, 16) - 8),
    ):
        word = u8[np.minimum(at, last)]
        key = (key ^ (word & _BYTE_MASKS[np.clip(valid, 0, 8)])) * prime
    result: npt.NDArray[np.uint64] = np.where(std, key, h)
    return result


def _decode_group(
    data: Data,
    u8: W64,
    payload: I64,
    lengths: I64,
    group: I64,
    out: _Scalars,
    bad: list[tuple[int, str]],
) -> None:
    remaining = group
    misses = 0
    while remaining.size:
        first = int(remaining[0])
        start, length = int(payload[first]), int(lengths[first])
        template = bytes(data[start : start + length])
        try:
            layout = decode_event(template)
        except ValueError as exc:
            bad.append((start - 12, _crc_or(u8, data, start, length, f"undecodable Event protobuf ({exc})")))
            remaining = remaining[1:]
            continue
        matched, remaining = _match_layout(u8, payload, lengths, remaining, layout, template)
        misses = misses + 1 if matched.size == 1 else 0
        ok = _payload_crcs_ok(u8, payload[matched], layout, template)
        for r in matched[~ok].tolist():
            bad.append((int(payload[r]) - 12, "bad payload CRC; record skipped"))
        _extract(u8, payload, matched[ok], layout, out)
        if misses > 64 and remaining.size:
            _decode_one_by_one(data, u8, payload, lengths, remaining, out, bad)
            return


_CRC_TABLES: dict[int, npt.NDArray[np.uint32]] = {}


def _crc_byte_table(distance: int) -> npt.NDArray[np.uint32]:
    """``T[b]``: what byte ``b`` followed by ``distance`` bytes contributes to a CRC32C.

    CRC32C is affine in the message bits, so for messages of one length
    ``crc(m) = crc(t) ^ XOR_p T_{d(p)}[m[p] ^ t[p]]`` over the positions where ``m`` and ``t``
    differ, ``d(p)`` being the distance to the end. The tables come from the ``crc32c`` package.
    """
    table = _CRC_TABLES.get(distance)
    if table is None:
        tail = bytes(distance)
        zero = crc32c.crc32c(b"\x00" + tail)
        table = np.array([crc32c.crc32c(bytes([b]) + tail) ^ zero for b in range(256)], np.uint32)
        _CRC_TABLES[distance] = table
    return table


def _payload_crcs_ok(u8: W64, base: I64, layout: Layout, template: bytes) -> npt.NDArray[np.bool_]:
    """Exact payload CRC32C check of records that share ``template``'s layout, vectorised.

    Only the bytes that may differ from the template (wall time, step, values) are read: the CRC of
    each record is the template's CRC corrected by the table entries of those bytes (see
    :func:`_crc_byte_table`), then compared with the stored, unmasked CRC.
    """
    n = base.shape[0]
    if n == 0:
        return np.zeros(0, bool)
    length = layout.length
    tmpl = np.frombuffer(template, np.uint8)
    crc = np.full(n, crc32c.crc32c(template), np.uint32)
    positions = sorted(layout.variable | _step_bytes(layout))
    word_at = -8
    word = np.zeros(n, np.uint64)
    for p in positions:
        if p >= word_at + 8:  # one gather reads 8 consecutive variable bytes
            word_at = p
            word = u8[base + p]
        byte = ((word >> np.uint64(8 * (p - word_at))) & np.uint64(0xFF)).astype(np.uint8)
        crc ^= _crc_byte_table(length - 1 - p)[byte ^ tmpl[p]]
    stored = (u8[base + length] & np.uint64(0xFFFFFFFF)).astype(np.uint32)
    rot = stored - np.uint32(_MASK_DELTA)  # uint32 arithmetic wraps modulo 2**32
    unmasked = (rot << np.uint32(15)) | (rot >> np.uint32(17))
    ok: npt.NDArray[np.bool_] = crc == unmasked
    return ok


def _crc_or(u8: W64, data: Data, start: int, length: int, reason: str) -> str:
    """``reason``, unless the record's payload CRC is wrong (then that is the reason)."""
    stored = int(u8[start + length] & np.uint64(0xFFFFFFFF))
    if masked_crc(data[start : start + length]) != stored:
        return "bad payload CRC; record skipped"
    return reason


def _match_layout(u8: W64, payload: I64, lengths: I64, rows: I64, layout: Layout, template: bytes) -> tuple[I64, I64]:
    """Split ``rows`` into those with ``layout`` (every fixed byte equal to the template's, the step
    varint's continuation bits too) and the rest. Compares 8 bytes per gather."""
    same_len = lengths[rows] == layout.length
    candidates = rows[same_len]
    others = rows[~same_len]
    if candidates.size <= 1:
        return candidates, others
    mask = np.full(layout.length, 0xFF, np.uint8)
    for i in layout.variable:
        mask[i] = 0
    for i in _step_bytes(layout):
        mask[i] = 0x80
    n_words = (layout.length + 7) // 8
    padded_mask = np.zeros(n_words * 8, np.uint8)
    padded_mask[: layout.length] = mask
    padded_tmpl = np.zeros(n_words * 8, np.uint8)
    padded_tmpl[: layout.length] = np.frombuffer(template, np.uint8)
    word_mask = padded_mask.view("<u8")
    word_tmpl = padded_tmpl.view("<u8") & word_mask
    base = payload[candidates]
    ok = np.ones(candidates.size, bool)
    for j in range(n_words):
        if word_mask[j]:
            ok &= (u8[base + 8 * j] & word_mask[j]) == word_tmpl[j]
    return candidates[ok], np.concatenate([candidates[~ok], others])


def _step_bytes(layout: Layout) -> set[int]:
    if layout.step_offset is None:
        return set()
    return set(range(layout.step_offset, layout.step_offset + layout.step_length))


def _extract(u8: W64, payload: I64, rows: I64, layout: Layout, out: _Scalars) -> None:
    if rows.size == 0 or not layout.slots:
        return
    base = payload[rows]
    if layout.wall_offset is not None:
        wall = u8[base + layout.wall_offset].view("<f8").astype(np.float64)
    else:
        wall = np.full(rows.size, np.nan)
    if layout.step_offset is not None:
        raw = _gather_rows(u8, base + layout.step_offset, layout.step_length).astype(np.int64)
        steps = np.zeros(rows.size, np.int64)
        for k in range(layout.step_length):
            steps |= (raw[:, k] & 0x7F) << (7 * k)
    else:
        steps = np.zeros(rows.size, np.int64)
    for slot in layout.slots:
        width = 4 if slot.dtype == "<f4" else 8
        word = u8[base + slot.offset]
        if width == 4:
            values = (word & np.uint64(0xFFFFFFFF)).astype(np.uint32).view("<f4").astype(np.float64)
        else:
            values = word.view("<f8").astype(np.float64)
        out.parts.append((slot.tag, rows, values, wall, steps))


def _decode_one_by_one(
    data: Data, u8: W64, payload: I64, lengths: I64, rows: I64, out: _Scalars, bad: list[tuple[int, str]]
) -> None:
    for r in rows.tolist():
        start, length = int(payload[r]), int(lengths[r])
        record = bytes(data[start : start + length])
        if masked_crc(record) != int(u8[start + length] & np.uint64(0xFFFFFFFF)):
            bad.append((start - 12, "bad payload CRC; record skipped"))
            continue
        try:
            layout = decode_event(record)
        except ValueError as exc:
            bad.append((start - 12, f"undecodable Event protobuf ({exc})"))
            continue
        _extract(u8, payload, np.array([r], np.int64), layout, out)


# --------------------------------------------------------------------------- files and folders


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
    data = head + _PAD_BYTES
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
            if masked_crc(head[:8]) == struct.unpack_from("<I", head, 8)[0] and length < _MAX_RECORD:
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
                frames = frame_records(data, n, final)
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
    :data:`_PAD` more bytes (file bytes or zeros); ``final`` on the last block, ``fresh``: bytes not
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
                yield b"".join((view[start:], _PAD_BYTES)), remaining, True, size - covered
                return
            yield view[start : start + n + _PAD], n, False, max(start + n - covered, 0)
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
        data = b"".join((carry, block, _PAD_BYTES))
        start = consumed[0]
        yield data, n, final, len(block)
        if final:
            return
        carry = data[consumed[0] - start : n]


# --------------------------------------------------------------------------- writing (tests, benchmarks)


def _encode_varint(value: int) -> bytes:
    out = bytearray()
    while True:
        b = value & 0x7F
        value >>= 7
        if value:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def _record(payload: bytes) -> bytes:
    header = struct.pack("<Q", len(payload))
    return header + struct.pack("<I", masked_crc(header)) + payload + struct.pack("<I", masked_crc(payload))


def scalar_event(tag: str, step: int, value: float, wall_time: float, *, tensor: bool = False) -> bytes:
    """One Event payload holding one scalar: ``simple_value`` (TF1/PyTorch) or a DT_FLOAT tensor (TF2)."""
    tag_b = tag.encode()
    if tensor:
        tensor_msg = b"\x08\x01\x12\x00\x22\x04" + struct.pack("<f", value)
        plugin = b"\x0a\x07scalars"
        metadata = b"\x0a" + _encode_varint(len(plugin)) + plugin
        value_msg = (
            b"\x0a"
            + _encode_varint(len(tag_b))
            + tag_b
            + b"\x42"
            + _encode_varint(len(tensor_msg))
            + tensor_msg
            + b"\x4a"
            + _encode_varint(len(metadata))
            + metadata
        )
    else:
        value_msg = b"\x0a" + _encode_varint(len(tag_b)) + tag_b + b"\x15" + struct.pack("<f", value)
    return summary_event(value_msg, step, wall_time)


def summary_event(value_msg: bytes, step: int, wall_time: float) -> bytes:
    """One Event payload (wall time in s, step) whose Summary holds the one encoded ``Summary.Value``."""
    summary = b"\x0a" + _encode_varint(len(value_msg)) + value_msg
    return (
        b"\x09"
        + struct.pack("<d", wall_time)
        + b"\x10"
        + _encode_varint(step)
        + b"\x2a"
        + _encode_varint(len(summary))
        + summary
    )


def write_scalar_events(
    path: Path,
    tags: Sequence[str],
    steps: Sequence[int] | I64,
    values: npt.NDArray[np.float64],
    *,
    wall_start: float = 1.7e9,
    tensor: bool = False,
) -> int:
    """Write a TensorBoard event file: for each step, one record per tag (``values[step_i, tag_j]``).

    A test and benchmark helper (TensorBoard's own writer needs seconds per 100k scalars); the
    files are byte-compatible with what PyTorch's SummaryWriter writes for ``add_scalar``.
    Returns the number of scalars written.
    """
    steps_list = [int(s) for s in steps]
    with open(path, "wb") as f:
        f.write(_record(b"\x09" + struct.pack("<d", wall_start) + b"\x1a\x0dbrain.Event:2"))
        chunk: list[bytes] = []
        for i, step in enumerate(steps_list):
            wall = wall_start + 0.1 * i
            for j, tag in enumerate(tags):
                chunk.append(_record(scalar_event(tag, step, float(values[i, j]), wall, tensor=tensor)))
            if len(chunk) > 100_000:
                f.write(b"".join(chunk))
                chunk = []
        f.write(b"".join(chunk))
    return len(steps_list) * len(tags)
