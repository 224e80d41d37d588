"""The results table: printed, saved as JSON under the work folder, and written into docs/performance.md.

The doc is written by hand except for one generated block between ``<!-- bench:begin -->`` and
``<!-- bench:end -->``: the machine, the runs (date, git commit, command, repeats) and one table of
their figures. ``write_doc`` replaces that block and nothing else (it appends one when the markers are
absent). A run of some goals (``--goals 5``) replaces those goals' rows and keeps the other goals' rows
only when they were measured on the same machine at the same size; the block lists which run gave
which goals, so no row is ever read as coming from another run than its own. Every target is judged
inside one goal's run, so goals of two runs side by side stay comparable to their targets.

The doc's table leaves out the figures' notes (input sizes, parts of a time, raw fields): they are
printed with the text table and saved in ``results.json``.
"""

from __future__ import annotations

import json
import math
import os
import platform
import re
import subprocess
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from bench import REPO, Figure, Sizes

DOC = REPO / "docs" / "performance.md"
BEGIN = "<!-- bench:begin -->"
END = "<!-- bench:end -->"
STATE = re.compile(r"<!-- bench:state (\{.*?\}) -->")
"""The block's machine-readable header (machine, size, runs): what a later partial run merges with."""

DOC_COLUMNS = (
    "goal",
    "figure",
    "median",
    "baseline (same run, median)",
    "vs baseline",
    "target",
    "met",
    "peak RSS",
    "n",
)


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


def _baseline_unit(f: Figure) -> str:
    return "MiB" if f.baseline.startswith("peak RSS") else f.unit


def baseline_cell(f: Figure) -> str:
    return f"{f.baseline}: {fmt_value(f.baseline_value, _baseline_unit(f))}" if f.baseline else ""


def versus_baseline(f: Figure) -> str:
    """The ratio and the difference to the baseline, as far as the figure gives them."""
    parts = [] if f.ratio is None else [f"{f.ratio:.2f}x"]
    if f.difference is not None:
        parts.append(("+" if f.difference >= 0 else "") + fmt_value(f.difference, f.unit))
    return ", ".join(parts)


def met_cell(f: Figure) -> str:
    return {True: "yes", False: "**no**", None: ""}[f.met]


def row(f: Figure) -> tuple[str, ...]:
    """The doc table's cells of one figure (``DOC_COLUMNS``)."""
    return (
        f.goal,
        f.name,
        fmt_value(f.value, f.unit),
        baseline_cell(f),
        versus_baseline(f),
        f.target,
        met_cell(f),
        "" if f.peak_rss_mb is None else f"{f.peak_rss_mb:,.0f} MiB",
        str(f.repeats),
    )


def _cells_line(cells: Sequence[str]) -> str:
    """One markdown table line; a ``|`` inside a cell is escaped, a line break becomes a space."""
    return "| " + " | ".join(cell.replace("|", "\\|").replace("\n", " ") for cell in cells) + " |"


def table_lines(figures: Sequence[Figure], skipped: Sequence[tuple[str, str]]) -> list[str]:
    """This run's rows of the doc table (no header), a skipped goal as one row that says why."""
    lines = [_cells_line(row(f)) for f in figures]
    # a failure's first line only: the traceback is on stderr, and a child's stderr can run to pages
    lines += [_cells_line([goal, _first_line(why), *[""] * (len(DOC_COLUMNS) - 2)]) for goal, why in skipped]
    return lines


def _first_line(text: str, limit: int = 200) -> str:
    line = (text.strip().splitlines() or [""])[0]
    return line if len(line) <= limit else line[: limit - 3] + "..."


def markdown_table(figures: Sequence[Figure], skipped: Sequence[tuple[str, str]]) -> str:
    return "\n".join(_table_head() + table_lines(figures, skipped))


def _table_head() -> list[str]:
    return [_cells_line(DOC_COLUMNS), "|" + "---|" * len(DOC_COLUMNS)]


def text_table(figures: Sequence[Figure], skipped: Sequence[tuple[str, str]]) -> str:
    """The table as printed on stdout: every figure with its notes."""
    out = []
    for f in figures:
        baseline, versus = baseline_cell(f), versus_baseline(f)
        out.append(
            f"[{f.goal}] {f.name}: {fmt_value(f.value, f.unit)}"
            + (f" | {baseline}" if baseline else "")
            + (f" | {versus}" if versus else "")
        )
        rss = "" if f.peak_rss_mb is None else f"peak RSS {f.peak_rss_mb:,.0f} MiB"
        met = met_cell(f).strip("*")
        detail = [f"target {f.target}" if f.target else "", f"met: {met}" if met else "", rss, f"n={f.repeats}", f.note]
        out.append("      " + "; ".join(x for x in detail if x))
    out += [f"[{goal}] skipped: {why}" for goal, why in skipped]
    return "\n".join(out)


def machine() -> str:
    """Cores, CPU model, memory and the versions of the libraries every goal leans on."""
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


def git_commit() -> str:
    """The short commit of the checkout, marked when tracked files differ from it."""
    try:
        head = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True, check=True
        ).stdout.strip()
        changed = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=REPO,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return f"{head} + uncommitted changes" if changed else head


@dataclass(frozen=True)
class RunRecord:
    """One run whose rows the doc's table holds: which goals, when, from which commit, how."""

    goals: list[str]
    date: str
    commit: str
    command: str
    repeats: int
    minutes: float
    goal_minutes: dict[str, float]
    load: str
    """The load average (1/5/15 min) when the run ended: how shared the machine was."""


def _goal_key(goal: str) -> tuple[int, str]:
    return (int(goal), goal) if goal.isdigit() else (1 << 30, goal)


def _goals_text(goals: Sequence[str]) -> str:
    return ("goal " if len(goals) == 1 else "goals ") + ", ".join(goals)


def block(sizes: Sizes, rows: Sequence[str], runs: Sequence[RunRecord], machine_text: str) -> str:
    """The generated block: state comment, machine, sizes, runs and the table, between the markers."""
    state = {"machine": machine_text, "size": sizes.label, "runs": [asdict(r) for r in runs]}
    quick = sizes.label == "quick"
    lines = [
        BEGIN,
        f"<!-- bench:state {json.dumps(state)} -->",
        "<!-- written by `python -m bench` (bench/report.py); edit the text around this block, not the block -->",
        "",
        f"**{sizes.label.capitalize()} size**"
        + (": a look for regressions; the full run (`python -m bench`) is the reference." if quick else ".")
        + f" Machine: {machine_text}.",
        "",
        f"Sizes: multi-rank run {sizes.ranks} ranks x {sizes.steps:,} steps x {sizes.metrics} per-rank metrics "
        f"(+4 run-level series); goal 2's logs {sizes.import_steps:,} steps x 8 metrics, event file "
        f"{sizes.tb_steps:,} steps x 8 tags; goal 4's spike run {sizes.spike_steps:,} steps; goal 5 "
        f"{sizes.overhead_steps} training steps a measurement; goal 6's wide run {sizes.wide_ranks:,} ranks x "
        f"{sizes.wide_steps:,} steps. Every figure is the median of its n repeats.",
        "",
    ]
    for run in runs:
        each = ", ".join(f"{goal}: {run.goal_minutes[goal]:.1f}" for goal in run.goals if goal in run.goal_minutes)
        lines.append(
            f"- {_goals_text(run.goals)}: `{run.command}`, {run.date}, commit {run.commit}, "
            f"{run.repeats} repeat{'s' if run.repeats != 1 else ''} a figure, took {run.minutes:.1f} min"
            + (f" (per goal {each} min)" if each else "")
            + f", load average at the end {run.load}"
        )
    return "\n".join([*lines, "", *_table_head(), *rows, END])


def _previous(text: str) -> tuple[dict[str, Any] | None, list[str]]:
    """The state and the table rows of the block in ``text`` (None and [] when there is none)."""
    start, stop = text.find(BEGIN), text.find(END)
    if start < 0 or stop < start:
        return None, []
    inner = text[start:stop]
    found = STATE.search(inner)
    state = json.loads(found.group(1)) if found else None
    body = inner.splitlines()
    head = next((i for i, line in enumerate(body) if line.startswith("|---")), len(body))
    return state, [line for line in body[head + 1 :] if line.startswith("|")]


def _row_goal(line: str) -> str:
    return line.split("|")[1].strip()


def write_doc(
    sizes: Sizes,
    figures: Sequence[Figure],
    skipped: Sequence[tuple[str, str]],
    wall_s: float,
    *,
    command: str = "python -m bench",
    goal_seconds: dict[str, float] | None = None,
    doc: Path | None = None,
) -> None:
    """Replace the generated block of ``doc`` (docs/performance.md) with this run's table, keeping the
    rows of goals this run did not measure when the block holds the same machine and size. The text
    outside the markers is not touched. ``wall_s``: the run's duration, ``goal_seconds`` each goal's
    (seconds)."""
    path = doc or DOC
    text = path.read_text() if path.exists() else "# Performance\n"
    machine_text = machine()
    goals = sorted({f.goal for f in figures} | {goal for goal, _ in skipped}, key=_goal_key)
    state, old_rows = _previous(text)
    runs: list[RunRecord] = []
    kept: list[str] = []
    if state and state.get("machine") == machine_text and state.get("size") == sizes.label:
        try:
            for old in state.get("runs", []):
                rest = [g for g in old["goals"] if g not in goals]
                if rest:
                    runs.append(RunRecord(**{**old, "goals": rest}))  # its per-goal minutes still hold
            kept = [line for line in old_rows if _row_goal(line) not in goals]
        except (TypeError, KeyError):  # a block written by another version of this module: start afresh
            runs, kept = [], []
    load = "/".join(f"{x:.1f}" for x in os.getloadavg())
    stamp = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    each = {goal: round(seconds / 60, 2) for goal, seconds in (goal_seconds or {}).items()}
    runs.append(RunRecord(goals, stamp, git_commit(), command, sizes.repeats, round(wall_s / 60, 2), each, load))
    new_rows = table_lines(figures, skipped)
    rows = sorted(kept + new_rows, key=lambda line: _goal_key(_row_goal(line)))  # stable: figure order kept
    runs.sort(key=lambda r: _goal_key(r.goals[0]))
    generated = block(sizes, rows, runs, machine_text)
    start, stop = text.find(BEGIN), text.find(END)
    if start >= 0 and stop > start:
        text = text[:start] + generated + text[stop + len(END) :]
    else:
        text = text.rstrip() + "\n\n" + generated + "\n"
    path.write_text(text)


def save_json(path: Path, sizes: Sizes, figures: Sequence[Figure], skipped: Sequence[tuple[str, str]]) -> None:
    """Every figure with its notes and samples, and the sizes, in ``path``."""
    payload = {
        "sizes": sizes.__dict__,
        "machine": machine(),
        "commit": git_commit(),
        "figures": [f.to_json() for f in figures],
        "skipped": list(skipped),
    }
    path.write_text(json.dumps(payload, indent=1, default=float))
