"""Goal 1: shard -> store compaction against the pyarrow ceiling for the same bytes, and flat memory.

Ceiling: ``pyarrow.csv.read_csv`` of the run's records as one wide CSV, then ``pyarrow.parquet.write_table``
with zstd (multi-threaded, no validation, no rollups). Ours: ``Store.compact`` of the per-rank shards
into a fresh store: staging, merge, rollup, rank buckets and the per-generation analyses, everything a
user waits for (the analyses' share is reported separately). Memory: peak RSS of compacting the run
with 4x fewer steps against the full run.
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path
from typing import Any

from bench import Figure, Sizes, log, median, run_child
from bench.data import RunInputs, run_inputs

RUN = "bench"


# ------------------------------------------------------------------------------- child targets


def ceiling_csv_to_parquet(csv: str, target: str) -> dict[str, Any]:
    """pyarrow reads the wide CSV and writes zstd Parquet (seconds, non-null values = records)."""
    import pyarrow.csv as pcsv
    import pyarrow.parquet as pq

    start = time.perf_counter()
    table = pcsv.read_csv(csv)
    pq.write_table(table, target, compression="zstd")
    seconds = time.perf_counter() - start
    values = sum(table.num_rows - table.column(c).null_count for c in table.column_names[3:])
    Path(target).unlink()
    return {"seconds": seconds, "records": values}


def compact_shards(shards: str, store: str) -> dict[str, Any]:
    """``Store.compact`` into a fresh store; the analyses' share timed by wrapping their hook."""
    from ingest.store import Store

    analysis_s = [0.0]
    original = Store._materialise_analysis

    def timed_analysis(self: Store, name: str) -> None:
        start = time.perf_counter()
        original(self, name)
        analysis_s[0] += time.perf_counter() - start

    Store._materialise_analysis = timed_analysis  # type: ignore[method-assign]
    start = time.perf_counter()
    report = Store(store).compact(RUN, shards)
    seconds = time.perf_counter() - start
    return {"seconds": seconds, "records": report.rows, "analysis_s": analysis_s[0]}


# ------------------------------------------------------------------------------- the goal


def store_path(workdir: Path, inputs: RunInputs) -> Path:
    """Where the last compaction of ``inputs`` is kept for goal 3."""
    return workdir / f"store-{inputs.ranks}x{inputs.steps}"


def compact_once(workdir: Path, inputs: RunInputs, keep: bool) -> tuple[dict[str, Any], float]:
    """One measured compaction into a fresh store (kept for goal 3 when ``keep``): result, peak RSS."""
    store = store_path(workdir, inputs) if keep else workdir / "store-scratch"
    shutil.rmtree(store, ignore_errors=True)
    child = run_child("bench.compaction:compact_shards", {"shards": str(inputs.shards), "store": str(store)})
    if not keep:
        shutil.rmtree(store, ignore_errors=True)
    return child.result, child.peak_rss_mb


def ensure_store(workdir: Path, sizes: Sizes) -> tuple[Path, RunInputs]:
    """The compacted full-size store (goal 3 and 6 read it), compacting once if goal 1 did not."""
    inputs = run_inputs(workdir, sizes.ranks, sizes.steps, csv=False)
    store = store_path(workdir, inputs)
    if not (store / "catalog.duckdb").exists():
        log(f"compacting {inputs.ranks} x {inputs.steps} for the read benchmarks")
        compact_once(workdir, inputs, keep=True)
    return store, inputs


def run(sizes: Sizes, workdir: Path) -> list[Figure]:
    log(f"goal 1: inputs {sizes.ranks} x {sizes.steps} x {sizes.metrics}")
    inputs = run_inputs(workdir, sizes.ranks, sizes.steps)
    quarter = run_inputs(workdir, sizes.ranks, max(sizes.steps // 4, 1), csv=False)
    ceiling, ours, ours_rss, quarter_rss = [], [], [], []
    ceiling_rss: list[float] = []
    analysis: list[float] = []
    for i in range(sizes.repeats):  # interleaved, so drifting background load hits both alike
        log(f"goal 1: repeat {i + 1}/{sizes.repeats}: pyarrow ceiling")
        child = run_child(
            "bench.compaction:ceiling_csv_to_parquet",
            {"csv": str(inputs.wide_csv), "target": str(workdir / "ceiling.parquet")},
        )
        ceiling.append(child.result["records"] / child.result["seconds"])
        ceiling_rss.append(child.peak_rss_mb)
        log(f"goal 1: repeat {i + 1}/{sizes.repeats}: Store.compact")
        result, rss = compact_once(workdir, inputs, keep=i == sizes.repeats - 1)
        ours.append(result["records"] / result["seconds"])
        analysis.append(result["analysis_s"])
        ours_rss.append(rss)
        _, rss_q = compact_once(workdir, quarter, keep=False)
        quarter_rss.append(rss_q)
    ratio = median(ours) / median(ceiling)
    growth = median(ours_rss) / median(quarter_rss)
    seconds = inputs.records / median(ours)
    return [
        Figure(
            "1",
            "pyarrow ceiling: wide CSV -> zstd Parquet",
            median(ceiling),
            "records/s",
            peak_rss_mb=median(ceiling_rss),
            repeats=sizes.repeats,
            note=f"{inputs.records:,} records, {inputs.wide_csv.stat().st_size / 1e9:.2f} GB of CSV",
            samples=ceiling,
        ),
        Figure(
            "1",
            "Store.compact: shards -> long + rollup + rank buckets + analyses",
            median(ours),
            "records/s",
            "pyarrow ceiling",
            median(ceiling),
            ratio,
            ">= 0.7x ceiling",
            ratio >= 0.7,
            median(ours_rss),
            sizes.repeats,
            f"{seconds:.1f} s, of which analyses {median(analysis):.1f} s",
            samples=ours,
        ),
        Figure(
            "1",
            "compaction peak RSS, run grown 4x (steps)",
            growth,
            "x",
            f"peak RSS at {quarter.steps:,} steps",
            median(quarter_rss),
            None,
            "<= 1.5x",
            growth <= 1.5,
            median(ours_rss),
            sizes.repeats,
            f"{median(quarter_rss):.0f} MiB -> {median(ours_rss):.0f} MiB",
        ),
    ]
