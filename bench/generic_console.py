"""Goal 2, the generic reader: a training console in a layout no trainer-specific reader owns, read
with the format detected (detection falls through every reader to the generic one, as it does for
most logs users bring), against pyarrow reading the same values written as a wide CSV.

The console is the bench log's run (``bench.data.log_table``) printed as ``[train] it N/M loss=...
lr=... grad_norm=... step_time=...ms tok/s=...`` with a checkpoint line every 500 steps, so every
line goes through the generic path: the proposal of a mapping from the file's head, then each line's
pairs. It is capped at ``CONSOLE_STEPS`` lines: the generic reader is two to three
orders of magnitude slower than pyarrow, and the figure is a rate.

Target: at least 1/50 of pyarrow's rate on the same values. At pyarrow's few million records/s on
these machines that is a 200,000-step console of 5 metrics read in about ten seconds, the wait a
user accepts for a file they upload once.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.csv as pcsv

from bench import Figure, Sizes, log, median, run_child
from bench.data import log_table

CONSOLE_STEPS = 20_000
"""Lines of the console (one step a line) at most: the size's goal-2 steps where fewer (the smoke test)."""

CHECKPOINT_EVERY = 500
"""A ``saving checkpoint`` line after every this many steps: text the reader must account for."""

TARGET_RATIO = 1 / 50
"""The generic reader's rate over pyarrow's on the same values (see the module docstring)."""

METRICS = ("loss", "lr", "grad_norm", "step_time_s", "throughput_tok_s")


def write_console(steps: int, console: Path, same_as_csv: Path) -> None:
    """The console of ``steps`` steps and the same values as a wide CSV (the ceiling's input)."""
    table = log_table(steps)
    cols = {c: table.column(c).to_numpy() for c in ("step", *METRICS)}
    step = cols["step"] + 1
    step_ms = np.round(cols["step_time_s"] * 1000.0, 1)
    tokens = np.round(cols["throughput_tok_s"])
    with open(console, "w") as f:
        f.write(f"starting run bench-generic: {steps} steps\n")
        for i in range(steps):
            f.write(
                f"[train] it {step[i]}/{steps} loss={cols['loss'][i]:.5f} lr={cols['lr'][i]:.4e} "
                f"grad_norm={cols['grad_norm'][i]:.4f} step_time={step_ms[i]:.1f}ms tok/s={tokens[i]:.0f}\n"
            )
            if step[i] % CHECKPOINT_EVERY == 0:
                f.write(f"saving checkpoint to ckpt/step_{step[i]} ... done\n")
    same = {
        "step": step,
        "loss": np.round(cols["loss"], 5),
        "lr": cols["lr"],
        "grad_norm": cols["grad_norm"],
        "step_time_s": step_ms / 1000.0,
        "throughput_tok_s": tokens,
    }
    pcsv.write_csv(pa.table(same), same_as_csv)


def ours_detected(path: str) -> dict[str, Any]:
    """``read_log`` with no format given: detection, then the reader it picks."""
    from ingest.formats import read_log

    pa.array(np.zeros(1))  # pyarrow's first numpy conversion imports pandas: a running app has done it
    start = time.perf_counter()
    parsed = read_log([Path(path)])
    seconds = time.perf_counter() - start
    return {"seconds": seconds, "records": parsed.table.num_rows, "skipped": parsed.skipped, "format": parsed.format}


def figure(sizes: Sizes, workdir: Path) -> Figure:
    steps = min(CONSOLE_STEPS, sizes.import_steps)
    folder = workdir / f"generic-console-{steps}"
    console, same_csv = folder / "console.log", folder / "console.csv"
    if not same_csv.exists():
        folder.mkdir(parents=True, exist_ok=True)
        write_console(steps, console, folder / "console.part.csv")
        (folder / "console.part.csv").rename(same_csv)
    log(f"goal 2: a console no trainer reader owns ({steps:,} lines, generic reader)")
    scratch = str(workdir / "ceiling.parquet")
    ceiling: list[float] = []
    ours: list[float] = []
    rss: list[float] = []
    last: dict[str, Any] = {}
    for _ in range(sizes.repeats):
        child = run_child("bench.imports:pyarrow_ceiling", {"path": str(same_csv), "kind": "csv", "target": scratch})
        ceiling.append(child.result["records"] / child.result["seconds"])
        child = run_child("bench.generic_console:ours_detected", {"path": str(console)})
        last = child.result
        ours.append(last["records"] / last["seconds"])
        rss.append(child.peak_rss_mb)
    ratio = median(ours) / median(ceiling)
    per_100k = 100_000 / (median(ours) / len(METRICS))
    return Figure(
        "2",
        "read_log a console no trainer reader owns (format detected: generic)",
        median(ours),
        "records/s",
        "pyarrow csv -> zstd Parquet (the same values as CSV)",
        median(ceiling),
        ratio,
        f">= {TARGET_RATIO:.2f}x ceiling (a 200k-step console in ~10 s)",
        ratio >= TARGET_RATIO,
        median(rss),
        sizes.repeats,
        f"{steps:,} lines x {len(METRICS)} metrics, {console.stat().st_size / 1e6:.1f} MB; read as "
        f"'{last.get('format')}', {last.get('records', 0):,} records, {last.get('skipped', 0)} lines skipped; "
        f"about {per_100k:.0f} s per 100,000 lines at this rate",
        samples=ours,
    )
