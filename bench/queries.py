"""Goal 3: opening a run. Every query behind the overview page (run list and catalog row, every panel's
series min/max-downsampled to 2,000 buckets, events, spikes), the rank x step heatmap (256 x 1,000), a
full-fidelity window of 5,000 steps of one rank; against what a user would otherwise run: DuckDB over
the raw long table (a cross-rank rollup per step, then a 2,000-bucket downsample of it; a heatmap
straight from the raw rows; the same window with DuckDB's row-group pruning) and the naive pandas path
(read everything, group by) at 4x fewer steps.

Each target is a speed-up over the DuckDB baseline of the same run (``SPEEDUP_TARGETS``), measured in
rounds that alternate our child and the baseline's, so both see the same machine load; the absolute
times are printed beside them as information. Each timed repeat opens a fresh ``Store`` (new DuckDB
connections: no metadata or result cache) after one discarded warm-up in the same process (library
initialisation, which a running app has done).
The spike-survival check asserts that every spike of the full-fidelity series (the 5 injected 100x
spikes of ``loss`` and the one-rank spike in ``grad_norm_local``'s max band) is in the downsampled one,
and counts how many TensorBoard's default reservoir kept of the same 5 spikes.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from bench import ChildRun, Figure, Sizes, log, median, run_child, speedup
from bench.compaction import RUN, compact_once, ensure_store
from bench.data import log_inputs, rank_spike, run_inputs, spike_steps

if TYPE_CHECKING:
    from ingest.store import Store

OVERVIEW_METRICS = ("loss", "val_loss", "grad_norm", "grad_norm_clipped", "lr", "clip_ratio", "clip_coef", "snr")
"""The metrics the overview page reads (``pages/overview.py``: PANELS candidates), present or not."""
OVERVIEW_BUCKETS = 2000
HEATMAP_METRIC = "grad_norm_local"
HEATMAP_BUCKETS = 1000
WINDOW_STEPS = 5000
ROUNDS_MIN = 3
"""Rounds of (our child, the baseline's child) at least, whatever ``Sizes.repeats``: the speed-ups are
medians of interleaved runs, not one pair."""


@dataclass(frozen=True)
class SpeedupTargets:
    """The least speed-up (the baseline's median time / ours) each figure must reach over DuckDB on the
    raw long table of the same run. Why these numbers: see docs/performance.md, "Targets"."""

    overview: float
    """Every overview query against the raw cross-rank rollup + downsample."""
    heatmap: float
    """The rank x 1,000-bucket heatmap against DuckDB's from the raw rows."""
    window: float
    """A 5,000-step window of one rank against DuckDB's read of it with row-group pruning (below 1:
    the long file is sorted in blocks, so DuckDB reads the window as directly as the store does; the
    target bounds how much slower the store may be)."""


SPEEDUP_TARGETS = {
    "full": SpeedupTargets(overview=300.0, heatmap=8.0, window=0.5),
    "quick": SpeedupTargets(overview=20.0, heatmap=3.0, window=0.5),
}
"""Per size. Full size holds the user's need: issue 8's budgets (the overview within 50 ms, the heatmap
within 100 ms, on a 256 x 200k run) divided by the raw-table baselines' times on the machine where those
budgets were set; a slower machine slows both sides, so the ratio keeps the budget's meaning there.
The raw table's cost grows with the run while the overview's reads stay near constant, so the quick
size's smaller run cannot reach those ratios: its targets are its own lowest ratios with room for the
noise of a shared machine, a look for regressions."""


def speedup_targets(label: str) -> SpeedupTargets:
    """The targets of a size (``Sizes.label``); a size without its own (the smoke test's) uses quick's."""
    return SPEEDUP_TARGETS.get(label, SPEEDUP_TARGETS["quick"])


def _long_file(store: str, run: str) -> str:
    from ingest.store import Store
    from ingest.store.layout import LONG, RunLayout

    s = Store(store)
    gen = s.run_info(run).gen
    return str(RunLayout(s.run_dir(run)).file(LONG, gen))


# ------------------------------------------------------------------------------- child targets


def open_overview(store: str, run: str, repeats: int) -> dict[str, Any]:
    """Seconds per repeat of the overview's queries, each repeat on a fresh ``Store``."""
    from ingest.store import Store

    samples: list[float] = []
    parts: dict[str, list[float]] = {}
    for i in range(repeats + 1):
        s = Store(store)
        t: dict[str, float] = {}
        start = time.perf_counter()
        s.list_runs()
        t["list_runs"] = time.perf_counter() - start
        info = s.run_info(run)
        t["run_info"] = time.perf_counter() - start - sum(t.values())
        for metric in OVERVIEW_METRICS:
            s.read_series(run, metric, start=info.first_step, end=info.last_step, buckets=OVERVIEW_BUCKETS)
            t[f"series {metric}"] = time.perf_counter() - start - sum(t.values())
        s.events(run)
        s.spikes(run)
        t["events + spikes"] = time.perf_counter() - start - sum(t.values())
        if i:  # the first pass warms the process (imports, DuckDB initialisation)
            samples.append(time.perf_counter() - start)
            for k, v in t.items():
                parts.setdefault(k, []).append(v)
    return {"samples": samples, "parts": {k: float(np.median(v)) for k, v in parts.items()}}


def heatmap(store: str, run: str, repeats: int) -> dict[str, Any]:
    from ingest.store import Store

    samples, shape = [], (0, 0)
    for i in range(repeats + 1):
        s = Store(store)
        start = time.perf_counter()
        _, _, matrix = s.read_rank_heatmap(run, HEATMAP_METRIC, buckets=HEATMAP_BUCKETS)
        if i:
            samples.append(time.perf_counter() - start)
        shape = matrix.shape
    return {"samples": samples, "shape": list(shape)}


def _window_start(store: Store, run: str, repeat: int) -> int:
    """First step of repeat ``repeat``'s window: a full window, never the same rows twice in a row."""
    info = store.run_info(run)
    assert info.first_step is not None and info.last_step is not None
    room = max(0, info.last_step - info.first_step + 1 - WINDOW_STEPS)
    return int(info.first_step + (room // 3 + 17 * repeat) % (room + 1))


def window(store: str, run: str, rank: int, repeats: int) -> dict[str, Any]:
    from ingest.store import Store

    samples, n = [], 0
    for i in range(repeats + 1):
        s = Store(store)
        lo = _window_start(s, run, i)
        start = time.perf_counter()
        series = s.read_series(run, HEATMAP_METRIC, rank=rank, start=lo, end=lo + WINDOW_STEPS - 1)
        if i:
            samples.append(time.perf_counter() - start)
        n = int(series.steps.size)
    return {"samples": samples, "points": n}


def raw_rollup(long_file: str, metric: str) -> dict[str, Any]:
    """DuckDB (default settings) over the raw long table: the cross-rank rollup per step of every
    metric, then a 2,000-bucket min/max downsample of ``metric`` from that rollup."""
    import duckdb

    con = duckdb.connect()
    start = time.perf_counter()
    rollup = con.sql(
        """SELECT metric, step, count(*) AS n, avg(value) AS mean, min(value) AS min, max(value) AS max,
                  stddev_pop(value) AS std, arg_min(rank, value) AS argmin_rank, arg_max(rank, value) AS argmax_rank
           FROM read_parquet($f) WHERE rank >= 0 GROUP BY metric, step""",
        params={"f": long_file},
    ).to_arrow_table()
    rollup_s = time.perf_counter() - start
    con.register("rollup", rollup)
    start = time.perf_counter()
    con.sql(
        """SELECT min(step), min(min), max(max), avg(mean) FROM rollup WHERE metric = $m
           GROUP BY floor((step - (SELECT min(step) FROM rollup)) * 2000 /
                          ((SELECT max(step) FROM rollup) - (SELECT min(step) FROM rollup) + 1))""",
        params={"m": metric},
    ).fetchall()
    return {"rollup_s": rollup_s, "downsample_s": time.perf_counter() - start, "rows": rollup.num_rows}


def raw_heatmap(long_file: str) -> dict[str, Any]:
    """The rank x 1,000-bucket heatmap straight from the raw long table (DuckDB default settings)."""
    import duckdb

    con = duckdb.connect()
    start = time.perf_counter()
    rows = con.sql(
        """WITH r AS (SELECT min(step) AS lo, max(step) AS hi FROM read_parquet($f) WHERE metric = $m)
           SELECT rank, floor((step - r.lo) * $b / (r.hi - r.lo + 1)) AS col, avg(value), max(value)
           FROM read_parquet($f), r WHERE metric = $m AND rank >= 0 GROUP BY rank, col""",
        params={"f": long_file, "m": HEATMAP_METRIC, "b": HEATMAP_BUCKETS},
    ).fetchall()
    return {"seconds": time.perf_counter() - start, "cells": len(rows)}


def raw_window(store: str, run: str, rank: int, repeats: int) -> dict[str, Any]:
    """The windows of ``window`` (same rank, same steps) read by DuckDB (default settings, a fresh
    connection each repeat) from the run's long file, pruning row groups by their statistics."""
    import duckdb

    from ingest.store import Store

    long_file = _long_file(store, run)
    samples, n = [], 0
    for i in range(repeats + 1):
        lo = _window_start(Store(store), run, i)
        con = duckdb.connect()
        start = time.perf_counter()
        rows = con.sql(
            """SELECT step, value FROM read_parquet($f)
               WHERE metric = $m AND rank = $r AND step BETWEEN $lo AND $hi ORDER BY step""",
            params={"f": long_file, "m": HEATMAP_METRIC, "r": rank, "lo": lo, "hi": lo + WINDOW_STEPS - 1},
        ).fetchnumpy()
        if i:
            samples.append(time.perf_counter() - start)
        n = int(rows["step"].size)
        con.close()
    return {"samples": samples, "points": n}


def naive_pandas(long_file: str) -> dict[str, Any]:
    """What a notebook does: read the whole long table with pandas, group by metric and step."""
    import pandas as pd  # type: ignore[import-untyped]

    start = time.perf_counter()
    frame = pd.read_parquet(long_file, columns=["rank", "step", "metric", "value"])
    frame[frame["rank"] >= 0].groupby(["metric", "step"])["value"].agg(["mean", "min", "max"])
    return {"seconds": time.perf_counter() - start, "rows": len(frame)}


def spike_survival(store: str, run: str, loss_spikes: list[int], rank_spike_step: int) -> dict[str, Any]:
    """Every spike of the full-fidelity series must be a bucket extreme of the downsampled one."""
    from ingest.store import Store

    s = Store(store)
    out: dict[str, Any] = {}
    for metric, band in (("loss", "values"), (HEATMAP_METRIC, "max")):
        full = s.read_series(run, metric)
        down = s.read_series(run, metric, buckets=OVERVIEW_BUCKETS)
        values = getattr(full, band)
        found = full.steps[values > 10.0 * np.median(values)]
        assert down.max_step is not None
        kept = [
            int(step) for step in found if np.any((down.max_step == step) & (down.max == values[full.steps == step][0]))
        ]
        out[metric] = {"found": [int(x) for x in found], "kept": kept, "points": int(down.steps.size)}
    out["expected"] = {"loss": loss_spikes, HEATMAP_METRIC: [rank_spike_step]}
    return out


def check_spikes(result: dict[str, Any]) -> None:
    """Raise ``AssertionError`` unless the full-fidelity series hold exactly the injected spikes and
    the downsampled ones keep every one of them (``spike_survival``'s result)."""
    for metric, expected in result["expected"].items():
        found, kept = result[metric]["found"], result[metric]["kept"]
        if sorted(found) != sorted(expected):
            raise AssertionError(f"{metric}: the full series has spikes at {found}, expected {expected}")
        if sorted(kept) != sorted(found):
            missing = sorted(set(found) - set(kept))
            raise AssertionError(f"{metric}: downsampling to {OVERVIEW_BUCKETS} buckets hid the spikes at {missing}")


# ------------------------------------------------------------------------------- the goal


def _samples(child_result: dict[str, Any]) -> list[float]:
    return [float(x) for x in child_result["samples"]]


def _all_samples(children: list[ChildRun]) -> list[float]:
    """Every timed repeat of every round's child, in the order they ran (seconds)."""
    return [x for child in children for x in _samples(child.result)]


def against_raw(
    name: str,
    ours: list[float],
    baseline: str,
    raw: list[float],
    least: float,
    **extra: Any,
) -> Figure:
    """A query's figure (ms): the medians of our samples and the baseline's (seconds), the speed-up of
    one over the other and whether it reaches ``least``."""
    ours_s, raw_s = median(ours), median(raw)
    ratio = speedup(ours_s, raw_s)
    return Figure(
        "3",
        name,
        ours_s * 1000,
        "ms",
        baseline,
        raw_s * 1000,
        ratio,
        target=f">= {least:g}x the raw table",
        met=ratio >= least,
        samples=ours,
        **extra,
    )


def run(sizes: Sizes, workdir: Path) -> list[Figure]:
    store, inputs = ensure_store(workdir, sizes)
    store_s, reps = str(store), max(sizes.repeats, 5)
    long_file = _long_file(store_s, RUN)
    targets = speedup_targets(sizes.label)
    rank = inputs.ranks // 2
    rounds = max(sizes.repeats, ROUNDS_MIN)
    log(f"goal 3: overview, heatmap, window and their raw-table baselines, {rounds} interleaved rounds")
    overview, heat, win, raw, raw_heat, raw_win = [], [], [], [], [], []
    for _ in range(rounds):
        overview.append(run_child("bench.queries:open_overview", {"store": store_s, "run": RUN, "repeats": reps}))
        raw.append(run_child("bench.queries:raw_rollup", {"long_file": long_file, "metric": HEATMAP_METRIC}))
        heat.append(run_child("bench.queries:heatmap", {"store": store_s, "run": RUN, "repeats": reps}))
        raw_heat.append(run_child("bench.queries:raw_heatmap", {"long_file": long_file}))
        window_args = {"store": store_s, "run": RUN, "rank": rank, "repeats": reps}
        win.append(run_child("bench.queries:window", window_args))
        raw_win.append(run_child("bench.queries:raw_window", window_args))
    parts = {k: median([c.result["parts"][k] for c in overview]) for k in overview[0].result["parts"]}
    parts_text = ", ".join(f"{k} {v * 1000:.1f}" for k, v in parts.items())
    figures = [
        against_raw(
            "open a run: every overview query (2,000 min/max buckets)",
            _all_samples(overview),
            "DuckDB raw table: cross-rank rollup + downsample",
            [r.result["rollup_s"] + r.result["downsample_s"] for r in raw],
            targets.overview,
            peak_rss_mb=median([c.peak_rss_mb for c in overview]),
            repeats=reps * rounds,
            note=f"ms per query: {parts_text}; raw rollup {median([r.result['rollup_s'] for r in raw]):.2f} s + "
            f"downsample {median([r.result['downsample_s'] for r in raw]) * 1000:.0f} ms",
        ),
        against_raw(
            f"rank x step heatmap ({heat[0].result['shape'][0]} x {HEATMAP_BUCKETS})",
            _all_samples(heat),
            "DuckDB straight from the raw table",
            [r.result["seconds"] for r in raw_heat],
            targets.heatmap,
            peak_rss_mb=median([c.peak_rss_mb for c in heat]),
            repeats=reps * rounds,
        ),
    ]
    points, raw_points = win[0].result["points"], raw_win[0].result["points"]
    window_figure = against_raw(
        f"full-fidelity window: {WINDOW_STEPS:,} steps of one rank",
        _all_samples(win),
        "DuckDB over the raw table (row groups pruned)",
        _all_samples(raw_win),
        targets.window,
        peak_rss_mb=median([c.peak_rss_mb for c in win]),
        repeats=reps * rounds,
        note=f"{points:,} points (DuckDB: {raw_points:,})",
    )
    window_figure.met = window_figure.met and points == raw_points == min(WINDOW_STEPS, inputs.steps)
    figures.append(window_figure)
    figures += spike_figures(sizes, workdir, store_s, inputs.ranks, inputs.steps)
    figures += naive_figures(sizes, workdir)
    return figures


def spike_figures(sizes: Sizes, workdir: Path, store: str, ranks: int, steps: int) -> list[Figure]:
    log("goal 3: spike survival")
    expected = spike_steps(steps)
    result = run_child(
        "bench.queries:spike_survival",
        {"store": store, "run": RUN, "loss_spikes": expected, "rank_spike_step": rank_spike(ranks, steps)[1]},
    ).result
    check_spikes(result)
    loss, band = result["loss"], result[HEATMAP_METRIC]
    inputs = log_inputs(workdir, sizes.import_steps, sizes.tb_steps)
    tb = run_child(
        "bench.imports:event_accumulator",
        {"path": str(inputs.tfevents), "keep_all": False, "spike_at": spike_steps(sizes.tb_steps)},
    ).result
    return [
        Figure(
            "3",
            f"spikes kept by {OVERVIEW_BUCKETS:,}-bucket downsampling (asserted: all)",
            len(loss["kept"]) + len(band["kept"]),
            "spikes",
            "TensorBoard default reservoir (10,000/tag)",
            tb["spikes_kept"],
            None,
            "every spike of the full series",
            True,
            note=f"ours: {len(loss['kept'])}/5 loss spikes + the one-rank grad_norm_local spike in the max band; "
            f"TensorBoard kept {tb['spikes_kept']} of the same 5 loss spikes ({sizes.tb_steps:,} steps)",
        )
    ]


def naive_figures(sizes: Sizes, workdir: Path) -> list[Figure]:
    log(f"goal 3: naive pandas at {sizes.ranks} x {sizes.naive_steps}")
    inputs = run_inputs(workdir, sizes.ranks, sizes.naive_steps, csv=False)
    store = workdir / f"store-{inputs.ranks}x{inputs.steps}"
    if not (store / "catalog.duckdb").exists():
        compact_once(workdir, inputs, keep=True)
    long_file = _long_file(str(store), RUN)
    naive = [run_child("bench.queries:naive_pandas", {"long_file": long_file}) for _ in range(sizes.repeats)]
    ours = run_child("bench.queries:open_overview", {"store": str(store), "run": RUN, "repeats": max(sizes.repeats, 5)})
    naive_s = median([r.result["seconds"] for r in naive])
    ours_s = median(_samples(ours.result))
    return [
        Figure(
            "3",
            f"open a run at {inputs.ranks} x {inputs.steps:,}: overview queries",
            ours_s * 1000,
            "ms",
            "pandas: read the whole table + groupby",
            naive_s * 1000,
            speedup(ours_s, naive_s),
            "",
            None,
            ours.peak_rss_mb,
            max(sizes.repeats, 5),
            f"pandas peak RSS {median([r.peak_rss_mb for r in naive]):.0f} MiB for {naive[0].result['rows']:,} rows",
            samples=_samples(ours.result),
        )
    ]
