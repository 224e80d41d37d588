"""Shard format: round trip, torn tails, corrupt frames."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from ingest.long_schema import null_floats
from ingest.store.shards import HEADER, ShardWriter, list_segments, read_segment, wide_to_long


def _long_rows(path: Path, offset: int = 0) -> list[tuple[int, int, str, float]]:
    seg = read_segment(path, offset)
    rows = []
    for t in seg.metrics:
        long = wide_to_long(t)
        rows += list(
            zip(
                long["rank"].to_pylist(),
                long["step"].to_pylist(),
                long["metric"].to_pylist(),
                long["value"].to_pylist(),
                strict=True,
            )
        )
    return rows


def test_round_trip_keeps_nan_drops_unlogged(tmp_path: Path) -> None:
    with ShardWriter(tmp_path, rank=2, max_buffer_rows=3) as w:
        w.write_meta({"world_size": 4, "global_batch_size": 128})
        w.write(0, {"grad_norm_local": 1.5}, run_level={"loss": 2.0, "lr": 1e-4})
        w.write(1, {"grad_norm_local": float("nan")})
        w.write(2, {"step_time_s": 0.25})
        w.event(1, "checkpoint", "ckpt-1", path="/ckpt/1")
    [seg_path] = list_segments(tmp_path)
    assert seg_path.parent.name == "rank-00002"
    seg = read_segment(seg_path)
    assert seg.errors == [] and not seg.torn_tail
    assert seg.meta == {"world_size": 4, "global_batch_size": 128}
    assert seg.events == [{"step": 1, "kind": "checkpoint", "label": "ckpt-1", "detail": {"path": "/ckpt/1"}}]
    rows = sorted(_long_rows(seg_path), key=lambda r: (r[2], r[0], r[1]))
    assert [(r[0], r[1], r[2]) for r in rows] == [
        (2, 0, "grad_norm_local"),
        (2, 1, "grad_norm_local"),
        (-1, 0, "loss"),
        (-1, 0, "lr"),
        (2, 2, "step_time_s"),
    ]
    assert rows[0][3] == 1.5 and math.isnan(rows[1][3]) and rows[2][3] == 2.0 and rows[4][3] == 0.25


def test_torn_final_record_keeps_earlier_and_resumes(tmp_path: Path) -> None:
    w = ShardWriter(tmp_path, rank=0, max_buffer_rows=1)
    w.write(0, {"loss": 1.0})
    w.write(1, {"loss": 2.0})
    w.close()
    path = w.path
    complete = path.read_bytes()
    # A crash mid-write: the third frame's header and half its payload reached the disk.
    w2 = ShardWriter(tmp_path / "other", rank=0, max_buffer_rows=1)
    w2.write(2, {"loss": 3.0})
    w2.close()
    third = w2.path.read_bytes()
    path.write_bytes(complete + third[: len(third) // 2])
    seg = read_segment(path)
    assert seg.torn_tail and seg.errors == []
    assert seg.end_offset == len(complete)
    assert [r[1] for r in _long_rows(path)] == [0, 1]
    # The writer finishes the frame: the next pass resumes at the torn frame and reads only it.
    path.write_bytes(complete + third)
    assert [(r[1], r[3]) for r in _long_rows(path, seg.end_offset)] == [(2, 3.0)]


def test_corrupt_middle_frame_is_reported_with_offset_and_skipped(tmp_path: Path) -> None:
    with ShardWriter(tmp_path, rank=0, max_buffer_rows=1) as w:
        for step in range(3):
            w.write(step, {"loss": float(step)})
    data = bytearray(w.path.read_bytes())
    # Find the second frame and flip a payload byte.
    first_len = HEADER.unpack_from(data, 0)[2]
    second = HEADER.size + first_len
    data[second + HEADER.size + 10] ^= 0xFF
    w.path.write_bytes(bytes(data))
    seg = read_segment(w.path)
    assert len(seg.errors) == 1
    assert seg.errors[0].offset == second and "CRC" in seg.errors[0].reason
    assert str(w.path) in str(seg.errors[0])
    assert [r[1] for r in _long_rows(w.path)] == [0, 2]


def test_invalid_metric_name_is_refused(tmp_path: Path) -> None:
    w = ShardWriter(tmp_path, rank=0)
    w.write(0, {"bad name": 1.0})
    with pytest.raises(ValueError, match="invalid metric name"):
        w.flush()


def test_restarted_writer_opens_a_new_segment(tmp_path: Path) -> None:
    with ShardWriter(tmp_path, rank=1) as a:
        a.write(0, {"loss": 1.0})
    with ShardWriter(tmp_path, rank=1) as b:
        b.write(1, {"loss": 1.0})
    assert a.path != b.path and len(list_segments(tmp_path)) == 2


@pytest.mark.parametrize("n", [0, 1, 7, 8, 9, 100_003])
def test_null_floats_is_all_null_and_survives_parquet(tmp_path: Path, n: int) -> None:
    """A wall-time column where none was logged: every row null, NaN in numpy, null after a
    Parquet round trip, and equal to ``pa.nulls`` (which it replaces for speed)."""
    col = null_floats(n)
    col.validate(full=True)
    assert (len(col), col.null_count, col.type) == (n, n, pa.float64())
    assert col.equals(pa.nulls(n, pa.float64()))
    assert np.isnan(col.to_numpy(zero_copy_only=False)).sum() == n
    pq.write_table(pa.table({"wall_time": col}), tmp_path / "w.parquet")
    assert pq.read_table(tmp_path / "w.parquet").column("wall_time").null_count == n
