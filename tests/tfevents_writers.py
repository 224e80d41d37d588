"""Test fixtures: TensorBoard event files written byte by byte (TensorBoard's own writer is far
slower for the hundreds of thousands of scalars some tests need). The files are byte-compatible with
what PyTorch's SummaryWriter writes for ``add_scalar``; the product reads them, it never writes them.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import numpy.typing as npt

from ingest.formats.tensorboard_events import I64, masked_crc


def encode_varint(value: int) -> bytes:
    out = bytearray()
    while True:
        b = value & 0x7F
        value >>= 7
        if value:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def record(payload: bytes) -> bytes:
    header = struct.pack("<Q", len(payload))
    return header + struct.pack("<I", masked_crc(header)) + payload + struct.pack("<I", masked_crc(payload))


def scalar_event(tag: str, step: int, value: float, wall_time: float, *, tensor: bool = False) -> bytes:
    """One Event payload holding one scalar: ``simple_value`` (TF1/PyTorch) or a DT_FLOAT tensor (TF2)."""
    tag_b = tag.encode()
    if tensor:
        tensor_msg = b"\x08\x01\x12\x00\x22\x04" + struct.pack("<f", value)
        plugin = b"\x0a\x07scalars"
        metadata = b"\x0a" + encode_varint(len(plugin)) + plugin
        value_msg = (
            b"\x0a"
            + encode_varint(len(tag_b))
            + tag_b
            + b"\x42"
            + encode_varint(len(tensor_msg))
            + tensor_msg
            + b"\x4a"
            + encode_varint(len(metadata))
            + metadata
        )
    else:
        value_msg = b"\x0a" + encode_varint(len(tag_b)) + tag_b + b"\x15" + struct.pack("<f", value)
    return summary_event(value_msg, step, wall_time)


def summary_event(value_msg: bytes, step: int, wall_time: float) -> bytes:
    """One Event payload (wall time in s, step) whose Summary holds the one encoded ``Summary.Value``."""
    summary = b"\x0a" + encode_varint(len(value_msg)) + value_msg
    return (
        b"\x09"
        + struct.pack("<d", wall_time)
        + b"\x10"
        + encode_varint(step)
        + b"\x2a"
        + encode_varint(len(summary))
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

    Returns the number of scalars written.
    """
    steps_list = [int(s) for s in steps]
    with open(path, "wb") as f:
        f.write(record(b"\x09" + struct.pack("<d", wall_start) + b"\x1a\x0dbrain.Event:2"))
        chunk: list[bytes] = []
        for i, step in enumerate(steps_list):
            wall = wall_start + 0.1 * i
            for j, tag in enumerate(tags):
                chunk.append(record(scalar_event(tag, step, float(values[i, j]), wall, tensor=tensor)))
            if len(chunk) > 100_000:
                f.write(b"".join(chunk))
                chunk = []
        f.write(b"".join(chunk))
    return len(steps_list) * len(tags)
