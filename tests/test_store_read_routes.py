"""Every read route of the store over the same data gives the same answers, and the answers the data
was built to give.

The routes: a first generation written in one pass from in-order shards (``direct_merge``), one staged
and merged in full (``full_merge``), a base with delta parts (``delta``), and files of an older version
without a block index in their footer (the index computed from the rows). Each is read at full
fidelity and downsampled (min/max buckets), as series, rank heatmaps, per-rank matrices and exports.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from ingest.store import Store
from ingest.store.blocks import INDEX_KEY
from ingest.store.layout import DERIVED, GENERATION_KINDS
from ingest.store.shards import ShardWriter

RUN = "routes"
RANKS = 4
STEPS = 240
NULL_STEP = 21
"""The run-level ``loss`` has a value-less record (NULL) here, in the imported routes only (shards have no NULL)."""


def loss(steps: np.ndarray) -> np.ndarray:
    """The run-level loss: falling, with a NaN at step 13 and +inf at step 17."""
    v = 10.0 - steps / 100.0
    v[steps == 13] = np.nan
    v[steps == 17] = np.inf
    return v


def grad_norm(rank: int, steps: np.ndarray) -> np.ndarray:
    """Each rank's gradient norm: ``1 + rank + step / 1000``, rank 2 spikes 50x at step 150 and logs a
    NaN at step 77. Rank 3 logs every other step only."""
    v = 1.0 + rank + steps / 1000.0
    if rank == 2:
        v[steps == 150] *= 50.0
        v[steps == 77] = np.nan
    return v


def wall(steps: np.ndarray) -> np.ndarray:
    """Wall-clock seconds of a step: fixed, so that every route stores the same rows."""
    return 1.7e9 + steps * 0.5


def rank_steps(rank: int) -> np.ndarray:
    all_steps = np.arange(STEPS, dtype=np.int64)
    return all_steps[all_steps % 2 == 0] if rank == 3 else all_steps


def write_shards(folder: Path, lo: int, hi: int) -> None:
    """Steps [lo, hi) of every rank, in order: one segment per rank, ranks ascending."""
    for rank in range(RANKS):
        steps = rank_steps(rank)
        steps = steps[(steps >= lo) & (steps < hi)]
        with ShardWriter(folder, rank) as writer:
            writer.write_columns(steps, {"grad_norm_local": grad_norm(rank, steps)}, rank=rank, wall_time=wall(steps))
            if rank == 0:
                writer.write_columns(steps, {"loss": loss(steps)}, rank=-1, wall_time=wall(steps))
        time.sleep(0.002)  # segment names carry the time: keep them in write order


def long_table(*, with_null: bool) -> pa.Table:
    """The same rows as the shards, as one long table in no particular order."""
    parts = []
    for rank in range(RANKS):
        steps = rank_steps(rank)
        parts.append((rank, steps, "grad_norm_local", grad_norm(rank, steps)))
    steps = np.arange(STEPS, dtype=np.int64)
    parts.append((-1, steps, "loss", loss(steps)))
    ranks = np.concatenate([np.full(s.size, r, np.int32) for r, s, _, _ in parts])
    table = pa.table(
        {
            "rank": pa.array(ranks),
            "step": pa.array(np.concatenate([s for _, s, _, _ in parts])),
            "metric": pa.array([m for _, s, m, _ in parts for _ in range(s.size)]),
            "value": pa.array(
                np.concatenate([v for _, _, _, v in parts]),
                mask=np.concatenate(
                    [(s == NULL_STEP) & with_null if m == "loss" else np.zeros(s.size, bool) for _, s, m, _ in parts]
                ),
            ),
            "wall_time": pa.array(np.concatenate([wall(s) for _, s, _, _ in parts])),
        }
    )
    return table.take(np.random.default_rng(0).permutation(table.num_rows))


def derived_table() -> pa.Table:
    steps = np.arange(0, STEPS, 3, dtype=np.int64)
    return pa.table(
        {
            "rank": pa.array(np.full(steps.size, -1, np.int32)),
            "step": pa.array(steps),
            "metric": pa.array(["snr"] * steps.size),
            "value": pa.array(steps * 0.25),
        }
    )


def direct(tmp_path: Path) -> Store:
    store = Store(tmp_path / "direct")
    write_shards(tmp_path / "direct-shards", 0, STEPS)
    store.compact(RUN, tmp_path / "direct-shards")
    index = json.loads(pq.read_metadata(_current(store, "long")[0]).metadata[INDEX_KEY.encode()])
    assert [m for m, *_ in index] != sorted(m for m, *_ in index), "not the one-pass (rank-major) file"
    return store


def full(tmp_path: Path, *, with_null: bool = False) -> Store:
    store = Store(tmp_path / f"full-{with_null}")
    store.import_table(RUN, long_table(with_null=with_null), source="test")
    index = json.loads(pq.read_metadata(_current(store, "long")[0]).metadata[INDEX_KEY.encode()])
    assert [m for m, *_ in index] == sorted(m for m, *_ in index), "not a merged (metric-major) file"
    return store


def deltas(tmp_path: Path) -> Store:
    store = Store(tmp_path / "deltas")
    shards = tmp_path / "delta-shards"
    for lo, hi in ((0, 200), (200, 215), (215, 230), (230, STEPS)):
        write_shards(shards, lo, hi)
        store.compact(RUN, shards)
    info = store.run_info(RUN)
    assert info.base_gen == 1 and info.gen == 4, "the later folds were not delta parts"
    return store


def legacy(tmp_path: Path, *, with_null: bool = False) -> Store:
    """A merged store whose files carry no block index, as older versions wrote them."""
    store = full(tmp_path, with_null=with_null)
    store.write_analysis(RUN, store.run_info(RUN).gen, derived_table(), [])
    for kind in (*GENERATION_KINDS, DERIVED):
        for path in (store.run_dir(RUN) / kind).glob("*.parquet"):
            table = pq.read_table(path)
            pq.write_table(table.replace_schema_metadata(None), path)
            assert INDEX_KEY.encode() not in (pq.read_metadata(path).metadata or {})
    return Store(store.root)  # nothing learnt of the old files is kept


def _current(store: Store, kind: str) -> list[str]:
    info = store.run_info(RUN)
    return [str(store.run_dir(RUN) / kind / f"g{g:06d}.parquet") for g in range(info.base_gen, info.gen + 1)]


ROUTES = {"direct": direct, "full": full, "deltas": deltas, "legacy": legacy}


@pytest.fixture(scope="module")
def stores(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Store]:
    tmp = tmp_path_factory.mktemp("routes")
    return {name: make(tmp / name) for name, make in ROUTES.items()}


def test_full_fidelity_series_are_the_data(stores: dict[str, Store]) -> None:
    steps = np.arange(STEPS, dtype=np.int64)
    for route, store in stores.items():
        run = store.read_series(RUN, "loss")
        assert run.source == "run", route
        np.testing.assert_array_equal(run.steps, steps, err_msg=route)
        np.testing.assert_array_equal(run.values, loss(steps), err_msg=route)
        for rank in range(RANKS):
            one = store.read_series(RUN, "grad_norm_local", rank=rank, start=100, end=180)
            want = rank_steps(rank)
            want = want[(want >= 100) & (want <= 180)]
            np.testing.assert_array_equal(one.steps, want, err_msg=f"{route} rank {rank}")
            np.testing.assert_array_equal(one.values, grad_norm(rank, want), err_msg=f"{route} rank {rank}")
        band = store.read_series(RUN, "grad_norm_local")  # per-rank only: the cross-rank rollup
        assert band.source == "ranks", route
        matrix = np.full((RANKS, STEPS), np.nan)
        for rank in range(RANKS):
            matrix[rank, rank_steps(rank)] = grad_norm(rank, rank_steps(rank))
        with np.errstate(all="ignore"):
            np.testing.assert_array_equal(band.steps, steps, err_msg=route)
            np.testing.assert_allclose(band.values, np.nanmean(matrix, axis=0), rtol=1e-12, err_msg=route)
            np.testing.assert_array_equal(band.min, np.nanmin(matrix, axis=0), err_msg=route)
            np.testing.assert_array_equal(band.max, np.nanmax(matrix, axis=0), err_msg=route)
            np.testing.assert_array_equal(band.n_nonfinite, (steps == 77).astype(np.int64), err_msg=route)


def _buckets_by_hand(steps: np.ndarray, values: np.ndarray, valid: np.ndarray, width: int) -> dict[str, list]:
    """Buckets of ``width`` steps from step 0 (what ``buckets = STEPS / width`` gives), computed row by row:
    mean of the finite values, min and max of the values (NaN above every number, value-less rows left
    out) with the first step of each, and the count of the non-finite values."""
    out: dict[str, list] = {
        "step": [],
        "mean": [],
        "min": [],
        "max": [],
        "min_step": [],
        "max_step": [],
        "nonfinite": [],
    }
    for k in range(0, STEPS, width):
        rows = [(int(s), float(v)) for s, v, ok in zip(steps, values, valid, strict=True) if k <= s < k + width and ok]
        first = int(steps[(steps >= k) & (steps < k + width)][0])
        finite = [v for _, v in rows if np.isfinite(v)]
        numbers = [v for _, v in rows if not np.isnan(v)]
        low = min(numbers) if numbers else np.nan
        high = np.nan if any(np.isnan(v) for _, v in rows) else max(numbers)
        out["step"].append(first)
        out["mean"].append(sum(finite) / len(finite) if finite else np.nan)
        out["min"].append(low)
        out["max"].append(high)
        out["min_step"].append(next(s for s, v in rows if v == low or (np.isnan(low) and np.isnan(v))))
        out["max_step"].append(next(s for s, v in rows if v == high or (np.isnan(high) and np.isnan(v))))
        out["nonfinite"].append(sum(1 for _, v in rows if not np.isfinite(v)))
    return out


@pytest.mark.parametrize("with_null", [False, True])
def test_downsampled_series_keep_every_extreme(stores: dict[str, Store], tmp_path: Path, with_null: bool) -> None:
    routes = dict(stores)
    if with_null:  # value-less records come from imports only: the merged and the index-less routes
        routes = {"full": full(tmp_path, with_null=True), "legacy": legacy(tmp_path / "old", with_null=True)}
    steps = np.arange(STEPS, dtype=np.int64)
    want = _buckets_by_hand(steps, loss(steps), ~((steps == NULL_STEP) & with_null), 10)
    for route, store in routes.items():
        got = store.read_series(RUN, "loss", buckets=STEPS // 10)
        assert got.bucketed and got.source == "run", route
        np.testing.assert_array_equal(got.steps, want["step"], err_msg=route)
        np.testing.assert_allclose(got.values, want["mean"], rtol=1e-12, err_msg=route)
        np.testing.assert_array_equal(got.min, want["min"], err_msg=route)
        np.testing.assert_array_equal(got.max, want["max"], err_msg=route)
        np.testing.assert_array_equal(got.min_step, want["min_step"], err_msg=route)
        np.testing.assert_array_equal(got.max_step, want["max_step"], err_msg=route)
        np.testing.assert_array_equal(got.n_nonfinite, want["nonfinite"], err_msg=route)


def test_one_step_buckets_equal_the_full_series(stores: dict[str, Store]) -> None:
    for route, store in stores.items():
        for rank in range(RANKS):
            whole = store.read_series(RUN, "grad_norm_local", rank=rank)
            bucketed = store.read_series(RUN, "grad_norm_local", rank=rank, buckets=STEPS)
            np.testing.assert_array_equal(bucketed.steps, whole.steps, err_msg=route)
            np.testing.assert_array_equal(bucketed.min, whole.values, err_msg=route)
            np.testing.assert_array_equal(bucketed.max, whole.values, err_msg=route)
            np.testing.assert_array_equal(bucketed.max_step, whole.steps, err_msg=route)


def test_rank_heatmaps_and_matrices_are_the_data(stores: dict[str, Store]) -> None:
    for route, store in stores.items():
        ranks, steps, heat = store.read_rank_heatmap(RUN, "grad_norm_local", buckets=STEPS)
        np.testing.assert_array_equal(ranks, np.arange(RANKS), err_msg=route)
        np.testing.assert_array_equal(steps, np.arange(STEPS), err_msg=route)
        view = store.run_view(RUN, rank_metrics=["grad_norm_local"])
        matrix = view.per_rank["grad_norm_local"]
        np.testing.assert_array_equal(matrix.ranks, np.arange(RANKS), err_msg=route)
        np.testing.assert_array_equal(matrix.steps, np.arange(STEPS), err_msg=route)
        for rank in range(RANKS):
            logged = rank_steps(rank)
            want = np.full(STEPS, np.nan)
            want[logged] = grad_norm(rank, logged)
            np.testing.assert_array_equal(matrix.values[rank], want, err_msg=f"{route} rank {rank}")
            np.testing.assert_array_equal(matrix.present[rank], np.isin(np.arange(STEPS), logged), err_msg=route)
            # a heatmap cell is the mean of the finite values of its one step: NaN where the rank logged
            # nothing or only a NaN
            np.testing.assert_array_equal(heat[rank], want, err_msg=f"{route} heatmap rank {rank}")
        np.testing.assert_array_equal(view.series["loss"].values, loss(np.arange(STEPS)), err_msg=route)


def test_exports_and_long_tables_are_the_same_rows(stores: dict[str, Store], tmp_path: Path) -> None:
    exported = {}
    for route, store in stores.items():
        target = tmp_path / f"{route}.csv"
        assert store.export(RUN, "csv", target) == RANKS * STEPS - STEPS // 2 + STEPS
        exported[route] = target.read_text()
        table = store.read_long(RUN)
        assert table.num_rows == RANKS * STEPS - STEPS // 2 + STEPS, route
    assert len(set(exported.values())) == 1, "the routes export different rows"


def test_derived_series_read_with_and_without_their_index(tmp_path: Path) -> None:
    with_index = full(tmp_path / "a")
    with_index.write_analysis(RUN, with_index.run_info(RUN).gen, derived_table(), [])
    without = legacy(tmp_path / "b")
    want = derived_table()
    for route, store in (("indexed", with_index), ("index-less", without)):
        got = store.read_series(RUN, "snr", start=30, end=90)
        assert got.source == "derived", route
        steps = want.column("step").to_numpy()
        keep = (steps >= 30) & (steps <= 90)
        np.testing.assert_array_equal(got.steps, steps[keep], err_msg=route)
        np.testing.assert_array_equal(got.values, want.column("value").to_numpy()[keep], err_msg=route)
        bucketed = store.read_series(RUN, "snr", buckets=8)
        np.testing.assert_array_equal(bucketed.max, [s * 0.25 for s in (27, 57, 87, 117, 147, 177, 207, 237)])
