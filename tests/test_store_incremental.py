"""Live folds as delta parts: every read of a run folded in many small increments equals the same
records compacted in one pass; a crash at a delta's stages, then a re-run, equals a clean run."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from ingest.live.watch import watch
from ingest.services.run_analyses import open_analysed_store
from ingest.store import Store
from ingest.store.shards import ShardWriter

REPO = Path(__file__).resolve().parents[1]
RUN = "live"

Increment = list[tuple[int, np.ndarray, dict[str, np.ndarray]]]
"""``(rank, steps, {metric: values})`` written as one shard segment each (rank -1: run level)."""


def _values(rng: np.random.Generator, steps: np.ndarray, scale: float = 1.0) -> np.ndarray:
    v = scale * (1.0 + 0.1 * rng.standard_normal(steps.size))
    v[steps % 97 == 13] = np.nan
    v[steps % 211 == 5] = np.inf
    v[steps % 389 == 7] = -np.inf
    v[steps % 500 == 250] *= 40.0  # spikes for the analyses
    return v


def _block(rng: np.random.Generator, rank: int, lo: int, hi: int, every: int = 1) -> tuple:
    steps = np.arange(lo, hi + 1, every, dtype=np.int64)
    if rank < 0:
        return (rank, steps, {"loss": _values(rng, steps, 3.0), "lr": np.full(steps.size, 1e-3)})
    return (rank, steps, {"grad_norm_local": _values(rng, steps, 1 + rank), "step_time_s": _values(rng, steps, 0.5)})


def increments() -> list[tuple[Increment, bool]]:
    """Increments of a live run and whether each should fold as a delta part. The heatmap bucket
    width is 3 throughout (span 9,000-12,288 steps), so folds share buckets with older rows."""
    rng = np.random.default_rng(7)
    b = lambda rank, lo, hi, every=1: _block(rng, rank, lo, hi, every)  # noqa: E731
    return [
        ([b(-1, 0, 8999), b(0, 0, 8999), b(1, 0, 8999), b(2, 0, 8990)], False),  # the first generation
        ([b(-1, 9000, 9100), b(0, 9000, 9100), b(1, 9000, 9060), b(2, 8991, 9020)], True),  # ranks lag
        ([b(1, 9061, 9130), b(2, 9021, 9100), b(0, 9101, 9140)], True),  # lagging ranks catch up
        ([b(3, 9050, 9200), b(0, 9141, 9200), b(-1, 9101, 9200)], True),  # a rank joins late, behind
        ([b(1, 9131, 9400, every=7), b(0, 9201, 9401), b(2, 9101, 9102)], True),  # sparse logging
        ([b(0, 9402, 9402)], True),
        ([b(-1, 9201, 9202)], True),  # run level only
        ([b(0, 9300, 9420)], False),  # re-logged steps (a restart that rewinds): full merge
        ([b(0, 9421, 9500), b(3, 9201, 9500), b(-1, 9203, 9500)], True),
        ([b(1, 9401, 9499, every=3), b(2, 9103, 9499)], True),
    ]


def write_increment(shards: Path, increment: Increment) -> None:
    for rank, steps, columns in increment:
        with ShardWriter(shards, rank if rank >= 0 else 0) as w:
            w.write_columns(steps, columns, rank=rank)
        time.sleep(0.002)  # segment names carry the time: keep them in write order


def assert_same_series(a, b, what: str) -> None:  # type: ignore[no-untyped-def]
    assert (a.metric, a.source, a.bucketed) == (b.metric, b.source, b.bucketed), what
    for field in ("steps", "values", "min", "max", "min_step", "max_step", "n_nonfinite"):
        x, y = getattr(a, field), getattr(b, field)
        if x is None or y is None:
            assert x is None and y is None, (what, field)
            continue
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y), err_msg=f"{what}: {field}")


def assert_same_run(live: Store, clean: Store) -> None:
    a, b = live.run_info(RUN), clean.run_info(RUN)
    for field in ("first_step", "last_step", "n_steps", "n_rows", "ranks", "metrics", "rank_metrics", "heat_bucket"):
        assert getattr(a, field) == getattr(b, field), field
    assert a.meta.get("analysis") == b.meta.get("analysis")
    for derived in (False, True):
        ta, tb = live.read_long(RUN, include_derived=derived), clean.read_long(RUN, include_derived=derived)
        assert ta.schema == tb.schema and ta.num_rows == tb.num_rows
        for column in tb.column_names:  # NaN equals NaN here (Table.equals says otherwise)
            np.testing.assert_array_equal(
                ta.column(column).to_numpy(zero_copy_only=False), tb.column(column).to_numpy(zero_copy_only=False)
            )
    assert live.spikes(RUN) == clean.spikes(RUN)
    assert live.events(RUN) == clean.events(RUN)
    last = int(b.last_step)
    windows = [(None, None, None), (None, None, 64), (9000, last, None), (8990, 9310, 37), (9100, 9105, 4)]
    for metric in [*b.metrics, "snr", "clip_ratio", "no_such_metric"]:
        for start, end, buckets in windows:
            kw = {"start": start, "end": end, "buckets": buckets}
            what = f"{metric} {kw}"
            assert_same_series(live.read_series(RUN, metric, **kw), clean.read_series(RUN, metric, **kw), what)
    for metric in b.rank_metrics:
        for rank in range(5):
            for start, end, buckets in windows:
                kw = {"start": start, "end": end, "buckets": buckets, "rank": rank}
                what = f"{metric} {kw}"
                assert_same_series(live.read_series(RUN, metric, **kw), clean.read_series(RUN, metric, **kw), what)
        heat_windows = (
            {"buckets": 100},
            {"buckets": 17, "start": 9000, "end": last},
            {"buckets": 5, "start": 9099, "end": 9110},
        )
        for kw in heat_windows:
            ra, sa, ma = live.read_rank_heatmap(RUN, metric, **kw)
            rb, sb, mb = clean.read_rank_heatmap(RUN, metric, **kw)
            np.testing.assert_array_equal(ra, rb)
            np.testing.assert_array_equal(sa, sb)
            # Bucket sums are added chunk by chunk, and chunks differ: equal to rounding.
            np.testing.assert_allclose(ma, mb, rtol=1e-13, atol=0, equal_nan=True, err_msg=f"heatmap {metric} {kw}")
    va, vb = live.run_view(RUN), clean.run_view(RUN)
    assert sorted(va.series) == sorted(vb.series) and sorted(va.per_rank) == sorted(vb.per_rank)
    for metric, s in vb.series.items():
        np.testing.assert_array_equal(va.series[metric].steps, s.steps)
        np.testing.assert_array_equal(va.series[metric].values, s.values)
    for metric, m in vb.per_rank.items():
        for field in ("ranks", "steps", "values", "present"):
            np.testing.assert_array_equal(getattr(va.per_rank[metric], field), getattr(m, field), err_msg=field)


def test_incremental_folds_read_as_one_pass(tmp_path: Path) -> None:
    shards = tmp_path / "shards"
    live = open_analysed_store(tmp_path / "live")
    for i, (increment, as_delta) in enumerate(increments()):
        write_increment(shards, increment)
        before = live.run_info(RUN) if live.has_run(RUN) else None
        live.compact(RUN, shards, status="live")
        info = live.run_info(RUN)
        if as_delta:
            assert before is not None and info.base_gen == before.base_gen < info.gen, f"increment {i}: not a delta"
        else:
            assert info.base_gen == info.gen, f"increment {i}: expected a full generation"
        clean = open_analysed_store(tmp_path / f"clean{i}")
        clean.compact(RUN, shards, status="live")
        assert_same_run(live, clean)
    # Files: the base and one part per delta generation, nothing else.
    info = live.run_info(RUN)
    parts = [f"g{g:06d}.parquet" for g in range(info.base_gen, info.gen + 1)]
    for kind in ("long", "runlevel", "rollup", "rankb"):
        assert sorted(p.name for p in (live.run_dir(RUN) / kind).iterdir()) == parts
    # A re-run adds nothing; a restarted store (new object) reads the same.
    assert live.compact(RUN, shards).rows == 0
    assert_same_run(open_analysed_store(tmp_path / "live"), clean)


def test_deltas_pile_up_then_consolidate(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import ingest.store.delta as delta_module

    monkeypatch.setattr(delta_module, "DELTA_PARTS_MAX", 3)
    shards = tmp_path / "shards"
    live = open_analysed_store(tmp_path / "live")
    rng = np.random.default_rng(3)
    write_increment(shards, [_block(rng, r, 0, 499) for r in (-1, 0, 1)])
    live.compact(RUN, shards)
    bases = []
    for k in range(8):
        write_increment(shards, [_block(rng, r, 500 + 10 * k, 509 + 10 * k) for r in (-1, 0, 1)])
        live.compact(RUN, shards)
        info = live.run_info(RUN)
        bases.append((info.gen, info.base_gen))
    # Up to 4 parts (the base and 3 deltas) on a base, then a fold consolidates them.
    assert bases == [(2, 1), (3, 1), (4, 1), (5, 5), (6, 5), (7, 5), (8, 5), (9, 9)]
    clean = open_analysed_store(tmp_path / "clean")
    clean.compact(RUN, shards)
    assert_same_run(live, clean)


def test_a_delta_on_a_base_without_tail_file_reads_the_long_file(tmp_path: Path) -> None:
    """Stores written before delta parts have no tail file: the older rows come from the long file."""
    shards = tmp_path / "shards"
    rng = np.random.default_rng(5)
    write_increment(shards, [_block(rng, r, 0, 8999) for r in (-1, 0, 1, 2)])
    live = open_analysed_store(tmp_path / "live")
    live.compact(RUN, shards)
    for path in (live.run_dir(RUN) / "tail").iterdir():
        path.unlink()
    write_increment(shards, [_block(rng, r, 9000, 9004) for r in (0, 1, 2)])
    live.compact(RUN, shards)
    info = live.run_info(RUN)
    assert info.base_gen == 1 and info.gen == 2
    clean = open_analysed_store(tmp_path / "clean")
    clean.compact(RUN, shards)
    assert_same_run(live, clean)


@pytest.mark.slow
@pytest.mark.parametrize("stage", ["after_delta_files", "after_delta_commit"])
def test_crash_mid_delta_then_rerun_equals_clean_run(tmp_path: Path, stage: str) -> None:
    shards = tmp_path / "shards"
    steps = increments()
    write_increment(shards, steps[0][0])
    crashed = tmp_path / "crashed"
    open_analysed_store(crashed).compact(RUN, shards)
    write_increment(shards, steps[1][0])
    cmd = [sys.executable, "-m", "ingest", "compact", str(shards), "--run", RUN, "--store", str(crashed)]
    env = {**os.environ, "STABSCOPE_CRASH_AT": stage, "PYTHONPATH": str(REPO)}
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, cwd=REPO, check=False)
    assert proc.returncode == 137, proc.stderr
    readable = open_analysed_store(crashed).run_info(RUN)
    assert readable.n_rows > 0 and readable.gen == (2 if stage == "after_delta_commit" else 1)
    env.pop("STABSCOPE_CRASH_AT")
    # The re-run is a watch pass (it finishes the interrupted fold, then folds nothing new).
    store = open_analysed_store(crashed)
    assert watch(store, RUN, shards, once=True) == 1
    info = store.run_info(RUN)
    assert (info.gen, info.base_gen) == (2, 1)
    clean = open_analysed_store(tmp_path / "clean")
    clean.compact(RUN, shards)
    assert_same_run(store, clean)
    run_dir = store.run_dir(RUN)
    for kind in ("long", "runlevel", "rollup", "rankb"):
        assert sorted(p.name for p in (run_dir / kind).iterdir()) == ["g000001.parquet", "g000002.parquet"]
    assert [p.name for p in (run_dir / "tail").iterdir()] == ["g000001.parquet"]
    assert not any((run_dir / "staging").iterdir())


def test_delta_refusal_names_the_reason_a_fold_needs_a_full_merge() -> None:
    """Whether a fold may be a delta part is a pure function of the run's row and the block indexes
    (``(metric, rank, rows, first_step, last_step)`` per block), with a reason when it may not."""
    from datetime import datetime

    from ingest.store.delta import DELTA_PARTS_MAX, delta_refusal
    from ingest.store.run_info import RunInfo

    def info(n_rows: int, *, first: int | None = 0, last: int | None = 999, width: int = 1) -> RunInfo:
        now = datetime(2026, 1, 1)
        return RunInfo(
            RUN, now, now, "test", "live", 1, first, last, 1000, n_rows, 2, ["loss"], ["loss"], {}, 0, [], width, 1, 1
        )

    base = [("loss", 0, 1000, 0, 999), ("loss", 1, 1000, 0, 999)]
    ahead = [[("loss", 0, 10, 1000, 1009), ("loss", 1, 10, 1000, 1009)]]
    assert delta_refusal(info(2000), [base], ahead) is None
    assert delta_refusal(info(0, first=None, last=None), [base], ahead) == "the run has no rows yet"
    assert "delta parts on the base" in str(delta_refusal(info(2000), [base] * (DELTA_PARTS_MAX + 1), ahead))
    assert "no block index" in str(delta_refusal(info(2000), [base, None], ahead))
    assert "of the base's rows" in str(delta_refusal(info(2000), [base], [[("loss", 0, 600, 1000, 1599)]]))
    assert delta_refusal(info(2000), [base], []) == "nothing staged"
    assert delta_refusal(info(2000), [base], [[("loss", -2, 1, 1000, 1000)]]) == "a rank below -1"
    assert "reaches back" in str(delta_refusal(info(2000), [base], [[("loss", 0, 1, 999, 999)]]))
    assert "bucket width" in str(delta_refusal(info(2000), [base], [[("loss", 0, 1, 4200, 4200)]]))
    assert "too wide" in str(delta_refusal(info(2000), [base], ahead, dense_span_max=500))
