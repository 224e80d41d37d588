"""The Spark compaction engine against the embedded one (issue #24's differential test): the same shards
compacted by both engines, in two generations, read back identically through every read the pages use.

The shards hold what real jobs leave behind: a step logged twice in one segment and the same steps again
in a later segment (a restart that rewinds: the later write wins, and the job's ``rollback`` event is
kept; a second, plain restart across the two compactions becomes a ``rollback`` event), a torn last
frame completed before the second compaction, a corrupt frame in the middle of a segment (rejected with
its byte offset), NaN and Inf values, and a per-rank metric only some ranks log, every fifth step.
Spark runs for real, in local mode (one session for the module).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from ingest.errors import StabScopeError
from ingest.services.run_analyses import materialise, open_analysed_store
from ingest.store import Store
from ingest.store.direct_merge import DirectMerger, NotAppendOnly
from ingest.store.engines.spark_engine import parts_reader, rank_bounds, spark_session
from ingest.store.engines.spark_shipping import check_executors
from ingest.store.shards import HEADER, ShardWriter, list_segments
from tests.test_store_incremental import assert_same_series

pytest.importorskip("pyspark")

RUN = "job"
RANKS = 6
STEPS = 3000
"""Steps of the first generation; the second adds ``STEPS // 2`` more."""
REWIND = 2600
"""The restarted job resumes here, after the first had logged up to ``STEPS``."""
SPARSE_RANKS = (1, 4)
"""Only these ranks log ``gpu_util``, every fifth step."""
REPO = Path(__file__).resolve().parents[1]
MASTER = "local[2]"
SECOND_REWIND = STEPS - 100
"""The second generation's restart resumes here, logging no ``rollback`` itself."""
RESTART_SHIFT = 5.0
"""The restarted job's loss is this much higher: which write won can be seen."""


@pytest.fixture(scope="module")
def spark(s3_server: Any) -> Iterator[Any]:
    """The module's Spark session, started once the S3 server's settings are in the environment (the
    executors, Python processes of the JVM, inherit it at start)."""
    session = spark_session(MASTER)
    yield session
    session.stop()


def _rank_columns(rng: np.random.Generator, rank: int, steps: np.ndarray) -> dict[str, np.ndarray]:
    columns = {
        "grad_norm_local": 1.0 + 0.1 * rng.standard_normal(steps.size) + 0.05 * rank,
        "step_time_s": 0.5 + 0.01 * rng.standard_normal(steps.size),
    }
    columns["grad_norm_local"][steps == 1700] *= 30.0  # one rank-level spike on every rank
    if rank in SPARSE_RANKS:
        util = np.full(steps.size, np.nan)
        util[steps % 5 == 0] = 80.0 + rng.standard_normal(int((steps % 5 == 0).sum()))
        columns["gpu_util"] = util  # NaN here becomes "not logged" below
    return columns


def _run_columns(rng: np.random.Generator, steps: np.ndarray, shift: float = 0.0) -> dict[str, np.ndarray]:
    loss = 3.0 * np.exp(-steps / 4000.0) + 0.02 * rng.standard_normal(steps.size) + shift
    loss[(steps >= 1200) & (steps < 1206)] *= 4.0  # a loss spike the analyses find
    loss[steps == 900] = np.nan
    grad = 1.0 + 0.1 * rng.standard_normal(steps.size)
    grad[steps == 1198] = np.inf
    return {"loss": loss, "grad_norm": grad, "lr": np.minimum(1.0, steps / 200.0) * 3e-4}


def _write(writer: ShardWriter, rank: int, steps: np.ndarray, rng: np.random.Generator, shift: float = 0.0) -> None:
    """One rank's rows for ``steps`` in frames of 500 steps (``gpu_util`` only where logged)."""
    for lo in range(0, steps.size, 500):
        part = steps[lo : lo + 500]
        columns = _rank_columns(rng, rank, part)
        util = columns.pop("gpu_util", None)
        writer.write_columns(part, columns, wall_time=1.7e9 + part * 0.5)
        if util is not None:
            logged = ~np.isnan(util)
            writer.write_columns(part[logged], {"gpu_util": util[logged]}, wall_time=1.7e9 + part[logged] * 0.5)
        if rank == 0:
            writer.write_columns(part, _run_columns(rng, part, shift), rank=-1, wall_time=1.7e9 + part * 0.5)


def _segments(shards: Path, rank: int) -> list[Path]:
    return [p for p in list_segments(shards) if p.parent.name == f"rank-{rank:05d}"]


def write_first_generation(shards: Path) -> bytes:
    """The first job (steps 0..STEPS-1) and its restart from ``REWIND``; returns the bytes held back
    from the torn last frame of rank 3's restart segment, which the second generation appends."""
    rng = np.random.default_rng(7)
    for rank in range(RANKS):
        with ShardWriter(shards, rank) as writer:
            if rank == 0:
                writer.write_meta({"world_size": RANKS, "per_rank_batch_size": 4, "max_norm": 1.0})
                writer.event(200, "warmup_end", "warmup ends")
                writer.event(2000, "checkpoint", "ckpt-2000")
            _write(writer, rank, np.arange(STEPS), rng)
            again = np.arange(1000, 1010)  # the same steps again in the same segment: the later wins
            writer.write_columns(again, {"step_time_s": np.full(again.size, 0.75)})
    time.sleep(0.002)  # segment names carry the time: the restart's segments sort after the first job's
    for rank in range(RANKS):
        with ShardWriter(shards, rank) as writer:
            if rank == 0:
                writer.event(REWIND, "rollback", "resumed from checkpoint ckpt-2600", checkpoint_step=REWIND - 1)
            _write(writer, rank, np.arange(REWIND, STEPS), rng, shift=RESTART_SHIFT)
    first_job = _segments(shards, 2)[0]
    data = bytearray(first_job.read_bytes())
    data[HEADER.size + 40] ^= 0xFF  # a corrupt first frame: rejected, the rest of the segment read on
    first_job.write_bytes(bytes(data))
    restart = _segments(shards, 3)[-1]
    with ShardWriter(shards, 3) as writer:
        writer.write_columns(np.arange(STEPS, STEPS + 50), {"step_time_s": np.full(50, 0.5)})
    last = _segments(shards, 3)[-1]
    frame = last.read_bytes()
    last.unlink()
    with open(restart, "ab") as f:
        f.write(frame[:40])  # a frame cut short: torn, kept for later
    return frame[40:]


def write_second_generation(shards: Path, held_back: bytes) -> None:
    """Rank 3's torn frame is completed; then a plain restart (no ``rollback`` logged) rewinds every
    rank to ``SECOND_REWIND``, below what the first generation stored, and logs to ``STEPS * 3 // 2``."""
    rng = np.random.default_rng(8)
    with open(_segments(shards, 3)[-1], "ab") as f:
        f.write(held_back)
    time.sleep(0.002)
    for rank in range(RANKS):
        with ShardWriter(shards, rank) as writer:
            _write(writer, rank, np.arange(SECOND_REWIND, STEPS + STEPS // 2), rng)


def compact(store: Store, shards: Path, engine: str) -> dict[str, Any]:
    report = store.compact(RUN, shards, read_parts=parts_reader(engine, MASTER if engine == "spark" else None))
    return {k: v for k, v in report.to_json().items() if k != "rows"}  # rows: counted before or after dedupe


def assert_identical_runs(a: Store, b: Store) -> None:
    """Every read the pages and the CLI make of ``RUN`` is the same in stores ``a`` and ``b``."""
    ia, ib = a.run_info(RUN), b.run_info(RUN)
    for field in ("gen", "first_step", "last_step", "n_steps", "n_rows", "ranks", "metrics", "rank_metrics"):
        assert getattr(ia, field) == getattr(ib, field), field
    assert (ia.rejected, ia.rejected_examples, ia.heat_bucket) == (ib.rejected, ib.rejected_examples, ib.heat_bucket)
    assert {k: v for k, v in ia.meta.items()} == {k: v for k, v in ib.meta.items()}
    ea, eb = a.read_long(RUN), b.read_long(RUN)
    assert ea.schema == eb.schema and ea.num_rows == eb.num_rows
    for column in eb.column_names:  # NaN equals NaN here
        np.testing.assert_array_equal(ea.column(column).to_numpy(False), eb.column(column).to_numpy(False), column)
    assert a.spikes(RUN) == b.spikes(RUN)
    assert a.events(RUN) == b.events(RUN)
    windows = [{}, {"buckets": 64}, {"start": 2500, "end": 2700}, {"start": 1000, "end": 4000, "buckets": 37}]
    for metric in ib.metrics:
        for kw in windows:
            assert_same_series(a.read_series(RUN, metric, **kw), b.read_series(RUN, metric, **kw), f"{metric} {kw}")
    for metric in ib.rank_metrics:
        for rank in (0, 1, 3):
            kw = {"rank": rank, "buckets": 50}
            assert_same_series(a.read_series(RUN, metric, **kw), b.read_series(RUN, metric, **kw), f"{metric} {kw}")
        for kw in ({"buckets": 100}, {"buckets": 7, "start": 2500, "end": 2800}):
            for x, y in zip(
                a.read_rank_heatmap(RUN, metric, **kw), b.read_rank_heatmap(RUN, metric, **kw), strict=True
            ):
                np.testing.assert_array_equal(x, y, f"heatmap {metric} {kw}")


@pytest.mark.slow  # a Spark session (the JVM's start) or a fresh process
def test_spark_engine_compacts_like_the_embedded_one(spark: Any, tmp_path: Path) -> None:
    shards = tmp_path / "shards"
    held_back = write_first_generation(shards)
    embedded, sparked = open_analysed_store(tmp_path / "embedded"), open_analysed_store(tmp_path / "spark")
    first = compact(embedded, shards, "embedded")
    assert compact(sparked, shards, "spark") == first
    assert first["rejected"] == 1 and "CRC" in first["rejected_examples"][0] and len(first["torn"]) == 1
    assert_identical_runs(embedded, sparked)
    assert embedded.spikes(RUN)  # the loss spike (and the restart's jump) were found, and found alike
    rows = embedded.read_long(RUN).to_pandas()
    loss = rows[rows.metric == "loss"].set_index("step").value
    assert loss[2599] < 3.0 < RESTART_SHIFT < loss[2600] and loss[STEPS - 1] > RESTART_SHIFT  # the restart won
    step_time = rows[(rows.metric == "step_time_s") & (rows.step == 1005)]
    assert len(step_time) == RANKS and (step_time.value == 0.75).all()  # logged twice: the later write
    assert not rows.duplicated(["rank", "step", "metric"]).any()
    assert "rollback" in [e.kind for e in embedded.events(RUN)]

    write_second_generation(shards, held_back)
    second = compact(embedded, shards, "embedded")
    assert compact(sparked, shards, "spark") == second
    assert second["torn"] == [] and second["rejected"] == 0 and embedded.run_info(RUN).gen == 2
    assert_identical_runs(embedded, sparked)  # events included
    rollbacks = [(e.step, e.detail) for e in embedded.events(RUN) if e.kind == "rollback"]
    replayed = {"replayed_from": SECOND_REWIND, "replayed_to": STEPS + 49}  # rank 3's completed frame
    assert rollbacks == [(REWIND, {"checkpoint_step": REWIND - 1}), (SECOND_REWIND, replayed)]
    loss = embedded.read_long(RUN).to_pandas().query("metric == 'loss'").set_index("step").value
    assert loss[SECOND_REWIND - 1] > RESTART_SHIFT > loss[SECOND_REWIND]  # the plain restart's rows won
    for fmt in ("csv", "parquet"):  # every exported row, byte for byte
        a, b = tmp_path / f"a.{fmt}", tmp_path / f"b.{fmt}"
        assert embedded.export(RUN, fmt, a) == sparked.export(RUN, fmt, b) == embedded.run_info(RUN).n_rows
        assert a.read_bytes() == b.read_bytes()
    # Nothing new: both engines add nothing, start no Spark job and keep the generation.
    assert compact(sparked, shards, "spark")["gen"] == 2


def write_object_job(shards: str, steps: range, *, seed: int, restart_at: int | None = None) -> None:
    """A job writing to an ``s3://`` shard location (one object per flush), and its restart."""
    rng = np.random.default_rng(seed)
    for rank in range(3):
        with ShardWriter(shards, rank) as writer:
            _write(writer, rank, np.arange(steps.start, steps.stop), rng)
    if restart_at is not None:
        time.sleep(0.002)
        for rank in range(3):
            with ShardWriter(shards, rank) as writer:
                if rank == 0:
                    writer.event(restart_at, "rollback", "resumed", checkpoint_step=restart_at - 1)
                _write(writer, rank, np.arange(restart_at, steps.stop), rng, shift=RESTART_SHIFT)


@pytest.mark.slow  # a Spark session (the JVM's start) or a fresh process
def test_spark_engine_reads_s3_shards_into_an_s3_store_like_the_embedded_one(
    spark: Any, s3_url: str, tmp_path: Path
) -> None:
    shards = s3_url.replace("/store", "/job/shards")
    stores = {
        engine: Store(s3_url + f"-{engine}", on_generation=materialise, cache_dir=tmp_path / engine)
        for engine in ("embedded", "spark")
    }
    write_object_job(shards, range(0, 1500), seed=1, restart_at=1300)
    assert compact(stores["spark"], shards, "spark") == compact(stores["embedded"], shards, "embedded")
    write_object_job(shards, range(1500, 2200), seed=2)
    assert compact(stores["spark"], shards, "spark") == compact(stores["embedded"], shards, "embedded")
    assert stores["spark"].run_info(RUN).gen == 2
    assert_identical_runs(stores["embedded"], stores["spark"])
    # A fresh cache of the Spark-written store reads the published generation: the same run again.
    again = Store(s3_url + "-spark", on_generation=materialise, cache_dir=tmp_path / "fresh")
    assert_identical_runs(stores["embedded"], again)


@pytest.mark.slow  # a Spark session (the JVM's start) or a fresh process
def test_a_first_generation_the_one_pass_writer_gives_up_on_streams_again_to_the_staged_merge(
    spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Run-level rows over the first 100 of 9,000 steps: the one-pass writer sizes the heatmap from them,
    finds the run longer and gives up; the Spark rows stream a second time into the staged merge."""
    shards = tmp_path / "shards"
    rng = np.random.default_rng(5)
    for rank in range(3):
        with ShardWriter(shards, rank) as writer:
            if rank == 0:
                writer.write_columns(np.arange(100), _run_columns(rng, np.arange(100)), rank=-1)
            writer.write_columns(np.arange(9000), _rank_columns(rng, rank, np.arange(9000)))
    embedded, sparked = open_analysed_store(tmp_path / "embedded"), open_analysed_store(tmp_path / "spark")
    gave_up: list[str] = []
    finish = DirectMerger.finish

    def noted_finish(merger: DirectMerger) -> Any:
        try:
            return finish(merger)
        except NotAppendOnly as exc:
            gave_up.append(str(exc))
            raise

    monkeypatch.setattr(DirectMerger, "finish", noted_finish)
    first = compact(embedded, shards, "embedded")
    assert gave_up == []  # its first segment (rank 0's) spans the run
    assert compact(sparked, shards, "spark") == first
    assert gave_up == ["the first segment did not span the run"]
    assert sparked.run_info(RUN).base_gen == 1 and sparked.run_info(RUN).n_steps == 9000
    assert_identical_runs(embedded, sparked)


@pytest.mark.slow  # a Spark session (the JVM's start) or a fresh process
def test_the_local_executors_run_this_interpreter(spark: Any) -> None:
    """The check job finds this interpreter and its packages on the local executors. (They import StabScope
    from their working directory, the driver's: the repository here; from elsewhere, the shipped zip.)"""
    (found, *_) = check_executors(spark.sparkContext, MASTER)
    assert found["python"] == sys.executable and "missing" not in found
    assert found["pyarrow"] == pa.__version__ and found["ingest.store.engines.spark_engine"].endswith("spark_engine.py")


def test_rank_bounds_cut_ranks_into_ranges_of_about_the_target_bytes() -> None:
    assert rank_bounds([0, 1, 2, 3], [10, 10, 10, 10], 20) == [2]
    assert rank_bounds([0, 0, 1, 2, None], [15, 15, 10, 10, 99], 20) == [1]  # unnamed: no weight
    assert rank_bounds([0, 1, 2, 3], [30, 5, 30, 5], 20) == [1, 3]
    assert rank_bounds([5], [100], 1) == []


def test_an_unknown_engine_or_a_master_without_spark_is_one_clear_error() -> None:
    with pytest.raises(StabScopeError, match="unknown compaction engine"):
        parts_reader("duckdb")
    with pytest.raises(StabScopeError, match="--engine spark"):
        parts_reader("embedded", "local[2]")


def stabscope(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """The ``stabscope`` command line in a fresh process."""
    return subprocess.run(
        [sys.executable, "-m", "ingest", *args], capture_output=True, text=True, env=env, cwd=REPO, timeout=300
    )


def small_shards(shards: Path) -> int:
    """Two ranks' shards; returns their record count."""
    rng = np.random.default_rng(3)
    for rank in range(2):
        with ShardWriter(shards, rank) as writer:
            _write(writer, rank, np.arange(600), rng)
    return 2 * 600 * 2 + 600 // 5 + 600 * 3  # rank 1 logs gpu_util every fifth step


@pytest.mark.slow  # a Spark session (the JVM's start) or a fresh process
def test_cli_compacts_with_the_spark_engine_end_to_end(tmp_path: Path) -> None:
    """Run as cron, systemd or pipx run it: the virtualenv's ``stabscope`` by its path, the virtualenv not
    on ``PATH`` (whose ``python3`` lacks pyarrow), from outside the repository; the local executors run
    the same interpreter (issue #30 item 3: they started ``python3`` and could not import ``ingest``)."""
    records = small_shards(tmp_path / "shards")
    venv_bin = Path(sys.executable).parent
    path = [p for p in os.environ["PATH"].split(os.pathsep) if p and Path(p).resolve() != venv_bin.resolve()]
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYSPARK_PYTHON")}
    done = subprocess.run(
        [str(venv_bin / "stabscope"), "compact", str(tmp_path / "shards"), "--run", RUN, "--engine", "spark",
         "--master", "local[1]", "--store", str(tmp_path / "spark"), "--json"],
        capture_output=True, text=True, cwd=tmp_path, env={**env, "PATH": os.pathsep.join(path)}, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["rows"] == records
    embedded = open_analysed_store(tmp_path / "embedded")
    embedded.compact(RUN, tmp_path / "shards")
    assert_identical_runs(embedded, open_analysed_store(tmp_path / "spark"))


@pytest.mark.slow  # a Spark session (the JVM's start) or a fresh process
def test_without_pyspark_or_java_the_spark_engine_is_one_clear_paragraph(tmp_path: Path) -> None:
    small_shards(tmp_path / "shards")
    command = ("compact", str(tmp_path / "shards"), "--run", RUN, "--engine", "spark", "--store", str(tmp_path / "s"))
    hidden = tmp_path / "no-pyspark" / "pyspark"
    hidden.mkdir(parents=True)
    (hidden / "__init__.py").write_text("raise ImportError(\"No module named 'pyspark' (hidden by the test)\")\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(hidden.parent), str(REPO)])}
    done = stabscope(*command, env=env)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert "pip install -e '.[spark]'" in done.stderr and "--engine embedded" in done.stderr
    no_java = {k: v for k, v in os.environ.items() if k != "JAVA_HOME"}
    no_java["PATH"] = str(Path(sys.executable).parent)
    assert not (Path(sys.executable).parent / "java").exists()
    done = stabscope(*command, env=no_java)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert "needs Java 17" in done.stderr and "--engine embedded" in done.stderr
