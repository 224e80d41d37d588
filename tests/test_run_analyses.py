"""The analyses of a stored run (``ingest.services.run_analyses.materialise``) compute their alerts from the run
in memory; those equal the alerts the store's own reads give (``ingest.services.run_alerts.alerts_from_store``),
heatmap bucketing included, whichever writer (direct, delta, full merge) laid the run out."""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from ingest.services.run_alerts import alerts_from_memory, alerts_from_store, run_alerts
from ingest.services.run_analyses import open_analysed_store
from ingest.store import Store
from ingest.store.shards import LONG_SCHEMA, ShardWriter
from stab_core.alerts import STRAGGLER_BUCKETS, Alert
from stab_core.rank_heatmap import heatmap_columns, rank_heatmap, step_buckets
from stab_core.runview import RankMatrix

LAST_STEP = 9_999
"""Steps 0..LAST_STEP: wider than the store's 4,096 heatmap buckets, so a bucket holds several steps."""
RANKS = 5
SLOW_RANK = 3
"""30 % slower in step time all run long: a straggler."""
LOUD_RANK = 1
"""Its local gradient norm is 40 % above its peers': a straggler of ``grad_norm_local``."""
SPARSE_RANK = 4
"""Logs every other step from step 501 on, with some NaN step times."""
CLIPPED_FROM = 9_000
"""Every step from here on is clipped: the clip ratio saturates."""
PASSES = (0, 9_001, 9_334, 9_700, LAST_STEP + 1)
"""The run is written (and compacted) in these step ranges, cut inside heatmap buckets: the first pass
spans enough steps to fix the bucket width, so the later ones are written as delta parts."""


def _rows(first: int, last: int) -> dict[int, dict[str, tuple[np.ndarray, np.ndarray]]]:
    """Per rank (-1: run level) the (steps, values) of each metric for steps [first, last)."""
    rng = np.random.default_rng(first)
    steps = np.arange(first, last)
    loss = 2.0 + 6.0 * np.exp(-steps / 3000.0) + 0.01 * rng.standard_normal(steps.size)
    loss[(steps >= 5000) & (steps < 5010)] *= 3.0
    grad = np.where(steps >= CLIPPED_FROM, 2.0, 0.5) + 0.01 * rng.standard_normal(steps.size)
    coef = np.where(steps >= CLIPPED_FROM, 0.5, 1.0)
    out: dict[int, dict[str, tuple[np.ndarray, np.ndarray]]] = {
        -1: {"loss": (steps, loss), "grad_norm": (steps, grad), "clip_coef": (steps, coef)}
    }
    for rank in range(RANKS):
        own = steps[(steps > 500) & (steps % 2 == 1)] if rank == SPARSE_RANK else steps
        time_s = 0.5 * (1.3 if rank == SLOW_RANK else 1.0) * (1 + 0.01 * rng.standard_normal(own.size))
        if rank == SPARSE_RANK:
            time_s[::97] = np.nan
        local = 0.3 * (1.4 if rank == LOUD_RANK else 1.0) * (1 + 0.05 * rng.standard_normal(own.size))
        out[rank] = {"step_time_s": (own, time_s), "grad_norm_local": (own, local)}
    return out


def _write_shards(shards: Path, first: int, last: int) -> None:
    for rank, metrics in _rows(first, last).items():
        with ShardWriter(shards, rank) as writer:
            if rank == -1 and first == 0:
                writer.write_meta({"max_norm": 1.0, "world_size": RANKS})
            for metric, (steps, values) in metrics.items():
                writer.write_columns(steps, {metric: values}, rank=rank)


def _long_table(first: int, last: int) -> pa.Table:
    parts = [
        pa.table(
            {
                "rank": pa.array(np.full(steps.size, rank, np.int32)),
                "step": pa.array(steps.astype(np.int64)),
                "metric": pa.array([metric] * steps.size, pa.string()),
                "value": pa.array(values),
            }
        )
        for rank, metrics in _rows(first, last).items()
        for metric, (steps, values) in metrics.items()
    ]
    table = pa.concat_tables(parts)
    return table.append_column("wall_time", pa.nulls(table.num_rows, pa.float64())).cast(LONG_SCHEMA)


def _assert_heatmaps_equal(store: Store, name: str) -> None:
    info = store.run_info(name)
    assert info.first_step == 0 and info.last_step == LAST_STEP and info.heat_bucket > 1
    view = store.run_view(name)
    for metric in ("step_time_s", "grad_norm_local"):
        for buckets in (STRAGGLER_BUCKETS, 37, 1000, 5000):
            ranks, steps, matrix = store.read_rank_heatmap(name, metric, buckets=buckets)
            mine = rank_heatmap(view.per_rank[metric], width=info.heat_bucket, lo=0, hi=LAST_STEP, buckets=buckets)
            np.testing.assert_array_equal(mine.ranks, ranks)
            np.testing.assert_array_equal(mine.steps, steps)
            # equal but for the last bits of a bucket whose rows the store summed in two pieces
            np.testing.assert_allclose(mine.matrix, matrix, rtol=1e-13, atol=0)
            assert np.array_equal(np.isnan(mine.matrix), np.isnan(matrix))


def _assert_same_alerts(memory: list[Alert], stored: list[Alert]) -> None:
    assert [(a.kind, a.run, a.step, a.metric, a.message) for a in memory] == [
        (a.kind, a.run, a.step, a.metric, a.message) for a in stored
    ]
    for mine, theirs in zip(memory, stored, strict=True):
        assert set(mine.detail) == set(theirs.detail)
        for key, value in mine.detail.items():
            if isinstance(value, float):
                assert value == pytest.approx(theirs.detail[key], rel=1e-12), key
            else:
                assert value == theirs.detail[key], key


def _check_run(store: Store, name: str) -> None:
    info = store.run_info(name)
    assert info.analysis_gen == info.gen
    _assert_heatmaps_equal(store, name)
    stored = [Alert.from_json(a) for a in info.meta["analysis"]["alerts"]]
    from_store = alerts_from_store(store, info)
    view = store.run_view(name)
    clip = store.read_series(name, "clip_ratio")
    from_memory = alerts_from_memory(info, spikes=store.spikes(name), clip_ratio=(clip.steps, clip.values),
                                     per_rank=view.per_rank)  # fmt: skip
    assert from_memory == stored  # what materialise stored is what it computes from memory
    _assert_same_alerts(from_memory, from_store)
    kinds = {(a.kind, a.metric, a.detail.get("rank")) for a in stored}
    assert ("straggler", "step_time_s", SLOW_RANK) in kinds and ("straggler", "grad_norm_local", LOUD_RANK) in kinds
    assert ("clipping_saturated", "clip_ratio", None) in kinds
    assert run_alerts(store, name, live=True) == stored


def test_alerts_from_memory_equal_the_stored_reads_direct_then_delta(tmp_path: Path) -> None:
    store = open_analysed_store(tmp_path / "store")
    shards = tmp_path / "shards"
    for first, last in itertools.pairwise(PASSES):
        _write_shards(shards, first, last)
        store.compact("job", shards, status="live")
    info = store.run_info("job")
    assert info.gen == len(PASSES) - 1 and info.base_gen == 1  # one base, written directly, and its deltas
    _check_run(store, "job")


def test_alerts_from_memory_equal_the_stored_reads_full_merge(tmp_path: Path) -> None:
    store = open_analysed_store(tmp_path / "store")
    store.import_table("job", _long_table(0, LAST_STEP + 1), source="test", meta={"max_norm": 1.0})
    _check_run(store, "job")


def test_step_buckets_by_hand() -> None:
    steps = np.array([0, 1, 2, 4, 5, 9, 10])
    values = np.array([1.0, 3.0, np.nan, 5.0, np.inf, np.nan, 7.0])
    first, means = step_buckets(steps, values, width=3)  # buckets 0-2, 3-5, 9-11
    np.testing.assert_array_equal(first, [0, 4, 9])
    np.testing.assert_array_equal(means, [2.0, 5.0, 7.0])
    first, means = step_buckets(np.array([3, 4]), np.array([np.nan, np.nan]), width=10)
    assert first.tolist() == [3] and np.isnan(means).all()  # logged, but no finite value


def test_heatmap_columns_by_hand() -> None:
    # rank 0: buckets at steps 0, 10, 20 (means 1, NaN, 3); rank 2: at 10, 30 (means 4, 6)
    ranks = np.array([0, 0, 0, 2, 2])
    first = np.array([0, 10, 20, 10, 30])
    means = np.array([1.0, np.nan, 3.0, 4.0, 6.0])
    heatmap = heatmap_columns(ranks, first, means, lo=0, hi=39, buckets=2)  # columns 0-19, 20-39
    assert heatmap.ranks.tolist() == [0, 2] and heatmap.steps.tolist() == [10, 30]  # the last rank's first step
    np.testing.assert_array_equal(heatmap.matrix, [[1.0, 3.0], [4.0, 6.0]])
    empty = heatmap_columns(ranks, first, means, lo=100, hi=200, buckets=4)
    assert empty.ranks.size == 0 and empty.matrix.shape == (0, 0)


def test_rank_heatmap_of_a_matrix_with_gaps() -> None:
    values = np.array([[1.0, 2.0, np.nan, 4.0], [np.nan, np.nan, np.nan, np.nan], [5.0, np.nan, 7.0, 8.0]])
    present = np.array([[True, True, True, True], [False, False, False, False], [True, False, True, True]])
    matrix = RankMatrix(np.array([2, 0, 1]), np.array([0, 1, 2, 3]), values, present)
    heatmap = rank_heatmap(matrix, width=2, lo=0, hi=3, buckets=2)
    assert heatmap.ranks.tolist() == [1, 2]  # rank 0 logged nothing: no row
    np.testing.assert_array_equal(heatmap.matrix, [[5.0, 7.5], [1.5, 4.0]])
    assert heatmap.steps.tolist() == [0, 2]
