"""The results table: printed, saved as JSON under the work folder, and written into docs/performance.md
between the markers of its size label (the rest of that file is written by hand and kept)."""

from __future__ import annotations

import json
import math
import os
import platform
import re
import time
from collections.abc import Sequence
from pathlib import Path

from bench import REPO, Figure, Sizes

DOC = REPO / "docs" / "performance.md"
COLUMNS = ("goal", "figure", "median", "baseline (same run)", "ratio", "target", "met", "peak RSS", "n", "notes")


def fmt_value(value: float | None, unit: str) -> str:
    """``value`` in ``unit`` with the precision a reader needs."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if unit in ("records/s", "scalars/s"):
        return f"{value / 1e6:.2f} M {unit}"
    if unit == "ms":
        return f"{value:.1f} ms"
    if unit == "s":
        return f"{value:.2f} s"
    if unit in ("x", "%"):
        return f"{value:.2f}{unit if unit == '%' else 'x'}"
    if unit == "MiB":
        return f"{value:,.0f} MiB"
    if unit == "recall":
        return f"{value:.2f} recall"
    return f"{value:g} {unit}"


def row(f: Figure) -> tuple[str, ...]:
    met = {True: "yes", False: "**no**", None: ""}[f.met]
    baseline = f"{f.baseline}: {fmt_value(f.baseline_value, _baseline_unit(f))}" if f.baseline else ""
    return (
        f.goal,
        f.name,
        fmt_value(f.value, f.unit),
        baseline,
        "" if f.ratio is None else f"{f.ratio:.2f}x",
        f.target,
        met,
        "" if f.peak_rss_mb is None else f"{f.peak_rss_mb:,.0f} MiB",
        str(f.repeats),
        f.note,
    )


def _baseline_unit(f: Figure) -> str:
    return "MiB" if f.baseline.startswith("peak RSS") else f.unit


def markdown_table(figures: Sequence[Figure], skipped: Sequence[tuple[str, str]]) -> str:
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    lines += ["| " + " | ".join(cell.replace("|", "/") for cell in row(f)) + " |" for f in figures]
    lines += [f"| {goal} | {why} |" + " |" * (len(COLUMNS) - 2) for goal, why in skipped]
    return "\n".join(lines)


def text_table(figures: Sequence[Figure], skipped: Sequence[tuple[str, str]]) -> str:
    out = []
    for f in figures:
        g, name, value, baseline, ratio, target, met, rss, n, note = row(f)
        out.append(
            f"[{g}] {name}: {value}" + (f" | {baseline}" if baseline else "") + (f" | ratio {ratio}" if ratio else "")
        )
        detail = "; ".join(
            x
            for x in (
                f"target {target}" if target else "",
                f"met: {met.strip('*')}" if met else "",
                rss,
                f"n={n}",
                note,
            )
            if x
        )
        out.append(f"      {detail}")
    out += [f"[{goal}] skipped: {why}" for goal, why in skipped]
    return "\n".join(out)


def machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
        mem_kb = next(
            int(x.split()[1]) for x in Path("/proc/meminfo").read_text().splitlines() if x.startswith("MemTotal")
        )
        memory = f"{mem_kb / 2**20:.0f} GiB"
    except (OSError, StopIteration, ValueError):
        memory = "?"
    import duckdb
    import numpy
    import pyarrow

    return (
        f"{os.cpu_count()} cores ({cpu}), {memory} RAM; Python {platform.python_version()}, "
        f"numpy {numpy.__version__}, pyarrow {pyarrow.__version__}, duckdb {duckdb.__version__}"
    )


def section(sizes: Sizes, figures: Sequence[Figure], skipped: Sequence[tuple[str, str]], wall_s: float) -> str:
    stamp = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    return "\n".join(
        [
            f"### `python -m bench{' --quick' if sizes.label == 'quick' else ''}` ({sizes.label} size), {stamp}",
            "",
            f"Machine: {machine()}. Multi-rank run: {sizes.ranks} ranks x {sizes.steps:,} steps x {sizes.metrics} "
            f"per-rank metrics (+4 run-level series); logs of goal 2: {sizes.import_steps:,} steps x 8 metrics, "
            f"event file {sizes.tb_steps:,} steps x 8 tags. Medians of the repeats (n); the suite took "
            f"{wall_s / 60:.1f} min.",
            "",
            markdown_table(figures, skipped),
        ]
    )


def write_doc(sizes: Sizes, figures: Sequence[Figure], skipped: Sequence[tuple[str, str]], wall_s: float) -> None:
    """Replace this size's generated section of docs/performance.md (appended when absent)."""
    begin, end = f"<!-- bench:{sizes.label}:begin -->", f"<!-- bench:{sizes.label}:end -->"
    block = f"{begin}\n{section(sizes, figures, skipped, wall_s)}\n{end}"
    text = DOC.read_text() if DOC.exists() else "# Performance\n"
    pattern = re.compile(re.escape(begin) + r".*?" + re.escape(end), re.S)
    text = pattern.sub(lambda _: block, text) if pattern.search(text) else text.rstrip() + "\n\n" + block + "\n"
    DOC.write_text(text)


def save_json(path: Path, sizes: Sizes, figures: Sequence[Figure], skipped: Sequence[tuple[str, str]]) -> None:
    payload = {"sizes": sizes.__dict__, "figures": [f.to_json() for f in figures], "skipped": list(skipped)}
    path.write_text(json.dumps(payload, indent=1, default=float))
