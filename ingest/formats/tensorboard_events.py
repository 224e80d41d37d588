"""One TensorBoard event record: TFRecord's masked CRC32C and the ``tensorflow.Event`` protobuf.

Framing (TFRecord): ``uint64 length | uint32 masked_crc32c(length) | payload | uint32
masked_crc32c(payload)``; the payload is a ``tensorflow.Event`` protobuf, decoded here by a small
decoder into its :class:`Layout`: where the wall time, the step and each scalar lie in the record's
bytes, so that every record of the same layout can be sliced at once
(:mod:`ingest.formats.tensorboard_records`).

Scalars: ``Summary.Value.simple_value`` (TF1, PyTorch's SummaryWriter) and scalar tensors
(TF2/Keras: ``tensor`` with dtype DT_FLOAT/DT_DOUBLE in ``tensor_content`` or ``float_val`` /
``double_val``, plugin ``scalars``). Other summaries (histograms, images, text, graphs) are ignored.

CRC32C is linear: the CRC of a record that differs from a template in a few bytes is the template's
corrected by one table entry per differing byte (:func:`distance_tables`, :func:`crc_byte_table`).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Final

import crc32c
import numpy as np
import numpy.typing as npt

U8 = npt.NDArray[np.uint8]


W64 = npt.NDArray[np.uint64]


I64 = npt.NDArray[np.int64]


Data = bytes | memoryview
"""A block of an event file: bytes read, or a window on the memory-mapped file."""


MASK_DELTA: Final = 0xA282EAD8


_CASTAGNOLI: Final = 0x82F63B78


DT_FLOAT: Final = 1


DT_DOUBLE: Final = 2


_SCALAR_PLUGINS: Final = (b"", b"scalars")


def masked_crc(data: Data) -> int:
    """TFRecord's masked CRC32C of ``data``."""
    crc = crc32c.crc32c(data)
    return (((crc >> 15) | (crc << 17)) + MASK_DELTA) & 0xFFFFFFFF


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


@dataclass
class Scalars:
    """Scalars decoded from one block of records, per (tag, layout)."""

    parts: list[tuple[str, I64, npt.NDArray[np.float64], npt.NDArray[np.float64], I64]] = field(default_factory=list)
    """(tag, record index, value, wall time, step)."""


def step_bytes(layout: Layout) -> set[int]:
    if layout.step_offset is None:
        return set()
    return set(range(layout.step_offset, layout.step_offset + layout.step_length))


_DISTANCE_TABLES: list[npt.NDArray[np.uint32]] = []


def distance_tables(max_distance: int) -> npt.NDArray[np.uint32]:
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


_CRC_TABLES: dict[int, npt.NDArray[np.uint32]] = {}


def crc_byte_table(distance: int) -> npt.NDArray[np.uint32]:
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
