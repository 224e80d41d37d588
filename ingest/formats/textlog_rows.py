"""How the text-log engine's converted columns become builder rows: a value column added under a
mask (sharing a block's step, wall-time and sequence arrays where every line has the value), split
per printing rank where the launcher prefix names ranks; values printed but not numbers counted for
the import report; the ``(NN%)`` companion's name."""

from __future__ import annotations

import re
from typing import Any, Final

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as _pc

from ingest.formats._common import LogBuilder

pc: Any = _pc  # pyarrow-stubs overloads reject valid calls on generic arrays


_EPOCH_BATCH: Final = re.compile(rb"^([0-9]+)\][ \t]*\[[ \t]*([0-9]+)/([0-9]+)$")


def epoch_batch_steps(texts: list[bytes | None]) -> npt.NDArray[np.int64]:
    """Steps of ``E][ i/N`` captures (epoch ``E``, batch ``i`` of ``N``): ``E * N + i``, -1 where a
    line prints none."""
    out = np.full(len(texts), -1, dtype=np.int64)
    for row, text in enumerate(texts):
        m = _EPOCH_BATCH.match(text.strip()) if text else None
        if m:
            out[row] = int(m[1]) * int(m[3]) + int(m[2])
    return out


def note_unread(
    builder: LogBuilder, key: str, raw: Any, ok: npt.NDArray[np.bool_], lines: npt.NDArray[np.int64]
) -> None:
    """Count the values of ``key`` that were printed but are not numbers (``lm loss: x6.9``): their
    lines gave their other values, and the report names them (a value absent from a line is not
    counted)."""
    printed = np.asarray(pc.fill_null(pc.greater(pc.binary_length(raw), 0), False).to_numpy(zero_copy_only=False), bool)
    unread = printed & ~ok
    if unread.any():
        builder.account.unread(key, lines[unread])


def out_pct_name(name: str) -> str:
    """Name of a ``(NN%)`` companion value: ``gpu_mem_gb`` -> ``gpu_mem_pct``."""
    return (name[:-3] if name.endswith("_gb") else name) + "_pct"


def add_masked(
    builder: LogBuilder,
    name: str,
    steps: npt.NDArray[np.int64],
    values: npt.NDArray[np.float64],
    mask: npt.NDArray[np.bool_],
    rank: Any,
    wall: npt.NDArray[np.float64] | None,
    stream: Any,
    seq: npt.NDArray[np.int64],
) -> None:
    if mask.all():  # share the block's arrays between its metrics: no copies
        if isinstance(stream, np.ndarray):
            mask = np.ones(steps.shape[0], dtype=bool)
        else:
            builder.add(name, steps, values, rank=rank, wall_time=wall, stream=int(stream), seq=seq, canonical=True)
            return
    r = rank[mask] if isinstance(rank, np.ndarray) else rank
    st = stream[mask] if isinstance(stream, np.ndarray) else stream
    if isinstance(st, np.ndarray):
        # one stream per printing rank: split so each keeps its own step sequence
        for s in np.unique(st):
            sel = st == s
            builder.add(
                name,
                steps[mask][sel],
                values[sel],
                rank=r[sel] if isinstance(r, np.ndarray) else r,
                wall_time=None if wall is None else wall[mask][sel],
                stream=int(s),
                seq=seq[mask][sel],
                canonical=True,
            )
        return
    builder.add(
        name,
        steps[mask],
        values,
        rank=r,
        wall_time=None if wall is None else wall[mask],
        stream=int(st),
        seq=seq[mask],
        canonical=True,
    )


def launcher_ranks(col: Any) -> npt.NDArray[np.int32] | None:
    """The rank each line's launcher prefix names (-1: none), or None when no line names one."""
    if len(col) == 0:
        return None
    if isinstance(col, pa.Array):
        lengths = pc.binary_length(col).fill_null(0)
        if (pc.max(lengths).as_py() or 0) == 0:
            return None
        text = pc.if_else(pc.equal(lengths, 0), pa.scalar(b"-1", pa.binary()), col.fill_null(b"-1"))
        return np.asarray(text.cast(pa.string()).cast(pa.int32()).to_numpy(zero_copy_only=False), np.int32)
    if not any(col):
        return None
    return np.array([int(r) if r else -1 for r in col], dtype=np.int32)
