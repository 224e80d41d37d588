"""Many TensorBoard event records at once: framing a block of an event file and decoding its
payloads in bulk, with no per-field Python objects.

Both CRCs of every record are verified. A record whose payload CRC fails is reported (byte offset)
and skipped; one whose length CRC fails breaks the framing, so the framer scans forward for the next
position where a length and its CRC agree, reports the bytes it jumped, and continues. So does a
length whose CRC holds but which claims more bytes than the file has left, when a valid record
follows it. A truncated last record (a file still being written) is reported and ignored.

Where payload lengths repeat with a short period (SummaryWriter logs the same tags every step), a
run of such rows is checked against its first row in one masked pass over the bytes (framing,
length CRCs and layouts at once); the payload CRCs come from the bytes that vary only (wall time,
step, value: CRC32C is linear, so per-distance byte tables correct the template's CRC), and the
same gathered bytes give the columns (:func:`_fast_run`). Other records are framed by predicting
the next ones from the period of the record lengths and verifying the predictions with numpy;
those are decoded by layout in :mod:`ingest.formats.tensorboard_layouts` (:func:`decode_block`).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from typing import Final

import crc32c
import numpy as np
import numpy.typing as npt

from ingest.formats.tensorboard_events import (
    I64,
    MASK_DELTA,
    U8,
    Data,
    Layout,
    Scalars,
    decode_event,
    distance_tables,
    masked_crc,
    step_bytes,
)

MAX_RECORD: Final = 1 << 31


PAD: Final = 160
"""Zero bytes appended to a block so that fixed-width gathers never read past its end."""


PAD_BYTES: Final = bytes(PAD)


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


@dataclass
class Frames:
    """The records of one block: those for the general decoder (``starts``, ``lengths``, ``index``:
    their record numbers in the block) and the scalars of periodic runs, already decoded (``fast``)."""

    starts: I64
    lengths: I64
    index: I64
    count: int
    """Records framed in all, both kinds."""
    end: int
    corrupt: list[tuple[int, str]] = field(default_factory=list)
    fast: Scalars = field(default_factory=lambda: Scalars())


def frame_records(data: Data, n: int, *, final: bool) -> Frames:
    """Find the records of ``data[:n]`` (record starts and payload lengths), checking length CRCs.

    ``data`` holds at least :data:`PAD` bytes past ``n``. Where payload lengths repeat with a short
    period, the records are checked and decoded right here, a run at a time (:func:`_fast_run`);
    the others are returned for :func:`decode_block`. Stops at an incomplete last record (``end`` =
    where the next read must resume) unless ``final``, where it is reported as truncated.
    """
    w64 = words_at(data)
    starts: list[I64] = []
    lengths: list[I64] = []
    index: list[I64] = []
    corrupt: list[tuple[int, str]] = []
    fast = Scalars()
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
        if masked_crc(data[pos : pos + 8]) != struct.unpack_from("<I", data, pos + 8)[0] or length > MAX_RECORD:
            nxt = _resync(data, n, pos + 1)
            corrupt.append((pos, f"bad length CRC; skipped {nxt - pos} bytes to the next valid record"))
            pos = nxt
            continue
        if final:
            # a valid header claiming more than the rest of the file: a crafted or damaged length
            # (its CRC covers the length only) when a record follows, a cut last record when none does
            nxt = _resync(data, n, pos + 1)
            if nxt < n:
                corrupt.append(
                    (
                        pos,
                        f"record length {length:,} exceeds the {n - pos - 16:,} bytes left in the file; "
                        f"skipped {nxt - pos} bytes to the next valid record",
                    )
                )
                pos = nxt
                continue
        break  # a valid header whose record does not fit: incomplete
    if final and pos < n:
        corrupt.append((pos, f"truncated record ({n - pos} bytes at the end of the file)"))
        pos = n
    empty = np.zeros(0, np.int64)
    return Frames(
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
        if length > MAX_RECORD or p + 16 + length > n:
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
        if length <= MAX_RECORD and masked_crc(data[pos : pos + 8]) == unpack_i(data, pos + 8)[0]:
            return pos
        pos += 1
    return n


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


def _fast_run(data: Data, n: int, pos: int, lengths: list[int], first: int, out: Scalars) -> _RunResult | None:
    """Check and decode the records from ``pos`` whose payload lengths repeat ``lengths``, a period
    (a *row* of ``len(lengths)`` records) at a time; None where this does not apply.

    The first row is the template, decoded by :func:`decode_event`. Every row is then compared with
    it in one pass over the bytes, all bytes but those that may vary (wall time, value, the step
    varint's payload bits, payload CRC): the length fields (framing), their CRCs and each record's
    layout are checked at once. The first row whose length field or length CRC differs ends the
    run. The payload CRCs are checked from the template's (see :func:`crc_byte_table`), gathering
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
        for p in step_bytes(layout):
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
    if len(set(positions)) != len(positions) or set(positions) != layout.variable | step_bytes(layout):
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
        tables = distance_tables(max(r for r in table_rows))
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
        masked = ((crc >> np.uint32(15)) | (crc << np.uint32(17))) + np.uint32(MASK_DELTA)
        self.ok.append(masked == stored)
        self.gathered.append(g)
        self.rows_seen += m
        return m, stop

    def finish(self, pos: int, first: int, rows: int, out: Scalars) -> list[tuple[I64, I64, I64]]:
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


def _emit(seg: U8, layout: Layout, rows: I64, out: Scalars) -> None:
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
