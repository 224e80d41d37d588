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


def compact_shards(shards: str, store: str, analyses: bool = True) -> dict[str, Any]:
    """``Store.compact`` into a fresh store; the analyses' share timed by a generation hook that runs
    them (or nothing, ``analyses=False``, to see the compaction's own memory)."""
    from ingest.services.run_analyses import materialise
    from ingest.store import Store

    analysis_s = [0.0]

    def timed_analysis(opened: Store, name: str) -> None:
        start = time.perf_counter()
        if analyses:
            materialise(opened, name)
        analysis_s[0] += time.perf_counter() - start

    start = time.perf_counter()
    report = Store(store, on_generation=timed_analysis).compact(RUN, shards)
    seconds = time.perf_counter() - start
    return {"seconds": seconds, "records": report.rows, "analysis_s": analysis_s[0]}


# ------------------------------------------------------------------------------- the goal


def store_path(workdir: Path, inputs: RunInputs) -> Path:
    """Where the last compaction of ``inputs`` is kept for goal 3."""
    return workdir / f"store-{inputs.ranks}x{inputs.steps}"


def compact_once(workdir: Path, inputs: RunInputs, keep: bool, analyses: bool = True) -> tuple[dict[str, Any], float]:
    """One measured compaction into a fresh store (kept for goal 3 when ``keep``): result, peak RSS."""
    store = store_path(workdir, inputs) if keep else workdir / "store-scratch"
    shutil.rmtree(store, ignore_errors=True)
    args = {"shards": str(inputs.shards), "store": str(store), "analyses": analyses}
    child = run_child("bench.compaction:compact_shards", args)
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
    m: dict[str, list[float]] = {}

    def note(key: str, value: float) -> None:
        m.setdefault(key, []).append(value)

    for i in range(sizes.repeats):  # interleaved, so drifting background load hits all alike
        log(f"goal 1: repeat {i + 1}/{sizes.repeats}")
        args = {"csv": str(inputs.wide_csv), "target": str(workdir / "ceiling.parquet")}
        child = run_child("bench.compaction:ceiling_csv_to_parquet", args)
        note("ceiling", child.result["records"] / child.result["seconds"])
        note("ceiling_rss", child.peak_rss_mb)
        result, rss = compact_once(workdir, inputs, keep=i == sizes.repeats - 1)
        note("all", result["records"] / result["seconds"])
        note("all_rss", rss)
        note("analysis_s", result["analysis_s"])
        result, rss = compact_once(workdir, inputs, keep=False, analyses=False)
        note("own", result["records"] / result["seconds"])
        note("own_rss", rss)
        note("own_q_rss", compact_once(workdir, quarter, keep=False, analyses=False)[1])
        note("all_q_rss", compact_once(workdir, quarter, keep=False)[1])
    med = {k: median(v) for k, v in m.items()}
    growth, growth_all = med["own_rss"] / med["own_q_rss"], med["all_rss"] / med["all_q_rss"]
    return [
        Figure(
            "1",
            "pyarrow ceiling: wide CSV -> zstd Parquet",
            med["ceiling"],
            "records/s",
            peak_rss_mb=med["ceiling_rss"],
            repeats=sizes.repeats,
            note=f"{inputs.records:,} records, {inputs.wide_csv.stat().st_size / 1e9:.2f} GB of CSV",
            samples=m["ceiling"],
        ),
        Figure(
            "1",
            "Store.compact: shards -> long, run-level, rollup, rank buckets",
            med["own"],
            "records/s",
            "pyarrow ceiling",
            med["ceiling"],
            med["own"] / med["ceiling"],
            ">= 0.7x ceiling",
            med["own"] / med["ceiling"] >= 0.7,
            med["own_rss"],
            sizes.repeats,
            f"{inputs.records / med['own']:.1f} s; analyses hook off",
            samples=m["own"],
        ),
        Figure(
            "1",
            "Store.compact as `stabscope compact` runs it (+ analyses)",
            med["all"],
            "records/s",
            "pyarrow ceiling",
            med["ceiling"],
            med["all"] / med["ceiling"],
            ">= 0.7x ceiling",
            med["all"] / med["ceiling"] >= 0.7,
            med["all_rss"],
            sizes.repeats,
            f"{inputs.records / med['all']:.1f} s, of which analyses {med['analysis_s']:.1f} s",
            samples=m["all"],
        ),
        Figure(
            "1",
            "compaction peak RSS, run grown 4x (steps)",
            growth,
            "x",
            f"peak RSS at {quarter.steps:,} steps",
            med["own_q_rss"],
            None,
            "<= 1.5x",
            growth <= 1.5,
            med["own_rss"],
            sizes.repeats,
            f"{med['own_q_rss']:.0f} -> {med['own_rss']:.0f} MiB; with the analyses hook {med['all_q_rss']:.0f} -> "
            f"{med['all_rss']:.0f} MiB ({growth_all:.2f}x: the analyses hold ranks x steps matrices)",
        ),
    ]
