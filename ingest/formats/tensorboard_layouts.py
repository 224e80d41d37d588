"""TensorBoard event records decoded by *layout*: records whose bytes are equal except the wall time,
the step's varint payload and the value are decoded together. One record of each layout is parsed
by the protobuf decoder (:func:`~ingest.formats.tensorboard_events.decode_event`); the layout's
fields are then sliced out of all matching records at once, after their payload CRCs are checked
(:func:`decode_block`). The records come framed from :mod:`ingest.formats.tensorboard_records`.
"""

from __future__ import annotations

from typing import Final

import crc32c
import numpy as np
import numpy.typing as npt

from ingest.formats.tensorboard_events import (
    I64,
    MASK_DELTA,
    U8,
    W64,
    Data,
    Layout,
    Scalars,
    crc_byte_table,
    decode_event,
    masked_crc,
    step_bytes,
)
from ingest.formats.tensorboard_records import words_at


def _gather_rows(w64: npt.NDArray[np.uint64], starts: I64, width: int) -> U8:
    """Bytes ``[start, start + width)`` for each start, as an ``(n, width)`` uint8 matrix.

    ``w64`` must view a buffer padded with at least ``width + 8`` bytes past any row's end."""
    n_words = (width + 7) // 8
    idx = starts[:, None] + 8 * np.arange(n_words, dtype=np.int64)[None, :]
    np.minimum(idx, w64.shape[0] - 1, out=idx)
    words = np.ascontiguousarray(w64[idx])
    rows: U8 = words.view(np.uint8).reshape(starts.shape[0], n_words * 8)[:, :width]
    return rows


def decode_block(data: Data, starts: I64, lengths: I64) -> tuple[Scalars, list[tuple[int, str]]]:
    """Decode the payloads at ``starts`` (record starts) in bulk; returns scalars and bad records.

    ``data`` holds at least :data:`PAD` bytes past its last record."""
    out = Scalars()
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
    out: Scalars,
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


def _payload_crcs_ok(u8: W64, base: I64, layout: Layout, template: bytes) -> npt.NDArray[np.bool_]:
    """Exact payload CRC32C check of records that share ``template``'s layout, vectorised.

    Only the bytes that may differ from the template (wall time, step, values) are read: the CRC of
    each record is the template's CRC corrected by the table entries of those bytes (see
    :func:`crc_byte_table`), then compared with the stored, unmasked CRC.
    """
    n = base.shape[0]
    if n == 0:
        return np.zeros(0, bool)
    length = layout.length
    tmpl = np.frombuffer(template, np.uint8)
    crc = np.full(n, crc32c.crc32c(template), np.uint32)
    positions = sorted(layout.variable | step_bytes(layout))
    word_at = -8
    word = np.zeros(n, np.uint64)
    for p in positions:
        if p >= word_at + 8:  # one gather reads 8 consecutive variable bytes
            word_at = p
            word = u8[base + p]
        byte = ((word >> np.uint64(8 * (p - word_at))) & np.uint64(0xFF)).astype(np.uint8)
        crc ^= crc_byte_table(length - 1 - p)[byte ^ tmpl[p]]
    stored = (u8[base + length] & np.uint64(0xFFFFFFFF)).astype(np.uint32)
    rot = stored - np.uint32(MASK_DELTA)  # uint32 arithmetic wraps modulo 2**32
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
    for i in step_bytes(layout):
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


def _extract(u8: W64, payload: I64, rows: I64, layout: Layout, out: Scalars) -> None:
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
    data: Data, u8: W64, payload: I64, lengths: I64, rows: I64, out: Scalars, bad: list[tuple[int, str]]
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
