"""StabScope's benchmark suite (issue 8): each goal measured against a baseline run in the same session.

``python -m bench`` runs every goal at full size (256 ranks x 200k steps x 8 metrics where the issue
says so), ``python -m bench --quick`` a shorter pass at reduced size; ``--goals 1,3`` picks goals
(docs/performance.md says how long each takes). Every figure is the median over repeats, printed with
the baseline measured in the same run, the ratio or difference to it and the peak resident memory (RSS)
of the process that did the work: each measured step runs in a child process (``bench.child``), which
reports its own peak (``VmHWM``; ``wait4``'s ``ru_maxrss`` only for processes that cannot report, such
as the Streamlit server). Inputs are generated once per size under the work folder (``bench/results/``
by default, git-ignored); results are never reused between repeats (each repeat compacts into a fresh
store, re-reads files, opens a fresh ``Store``), but the operating system's page cache is warm, as it is
for a user re-opening a run.

Modules, one per goal: ``compaction`` (1), ``imports`` (2), ``queries`` (3), ``analyses`` (4),
``training`` (5), ``app`` (6); ``data`` writes the inputs, ``report`` the table in docs/performance.md.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
DEFAULT_WORKDIR = REPO / "bench" / "results"
RESULT_PREFIX = "BENCH_RESULT "
PEAK_KEY = "_peak_rss_mb"


class Unavailable(Exception):
    """A goal whose code has not landed yet (or whose tool is missing): reported, not failed."""


@dataclass(frozen=True)
class Sizes:
    """Problem sizes of one pass. Records = step x rank x metric values."""

    label: str
    ranks: int
    steps: int
    metrics: int
    repeats: int
    import_steps: int
    """Steps of the single-run logs of goal 2 (8 metrics each)."""
    tb_steps: int
    """Steps of the TensorBoard event file (8 tags)."""
    naive_steps: int
    """Steps of the naive pandas baseline (all ``ranks``)."""
    spike_steps: int
    """Steps of the largest run given to spike detection + classification (goal 4)."""
    snr_ranks: int
    snr_steps: int
    overhead_steps: int
    """Training steps per measurement of goal 5."""
    wide_ranks: int = 1_000
    wide_steps: int = 1_000_000
    """Goal 6's wide run (issue 6: an overview of a 1,000-rank x 1M-step run under 1 s per rerun)."""
    wide_rank_every: int = 10
    """Its per-rank metrics are logged every this many steps (the run-level ones every step)."""

    @property
    def records(self) -> int:
        return self.ranks * self.steps * self.metrics


FULL = Sizes(
    label="full",
    ranks=256,
    steps=200_000,
    metrics=8,
    repeats=3,
    import_steps=1_000_000,
    tb_steps=200_000,
    naive_steps=50_000,
    spike_steps=10_000_000,
    snr_ranks=256,
    snr_steps=200_000,
    overhead_steps=300,
)
QUICK = Sizes(
    label="quick",
    ranks=64,
    steps=25_000,
    metrics=8,
    repeats=1,  # a quick look (issue 8), not the measurement: the full suite takes medians of 3
    import_steps=100_000,
    tb_steps=20_000,
    naive_steps=5_000,
    spike_steps=1_000_000,
    snr_ranks=64,
    snr_steps=20_000,
    overhead_steps=60,
    wide_ranks=100,
    wide_steps=100_000,
)
TINY = Sizes(
    label="tiny",
    ranks=4,
    steps=2_000,
    metrics=8,
    repeats=1,
    import_steps=2_000,
    tb_steps=2_000,
    naive_steps=1_000,
    spike_steps=20_000,
    snr_ranks=8,
    snr_steps=2_000,
    overhead_steps=10,
    wide_ranks=8,
    wide_steps=4_000,
)
"""For the smoke test: every code path, at the smallest sizes that reach it."""


@dataclass
class Figure:
    """One line of the table: ``value`` in ``unit`` (median over ``repeats``), its baseline, the ratio
    (``value / baseline`` for rates, ``baseline / value`` for times: above 1 is better) and, where the
    target is a same-run difference, ``difference`` (the median ``value`` minus the median baseline, in
    ``unit``), the goal's target in words and whether it is met (None where the figure has no target)."""

    goal: str
    name: str
    value: float
    unit: str
    baseline: str = ""
    baseline_value: float | None = None
    ratio: float | None = None
    target: str = ""
    met: bool | None = None
    peak_rss_mb: float | None = None
    repeats: int = 1
    note: str = ""
    samples: list[float] = field(default_factory=list)
    difference: float | None = None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def speedup(ours_s: float, baseline_s: float) -> float:
    """How many times faster ours is than the baseline (both durations, seconds)."""
    return baseline_s / ours_s if ours_s > 0 else float("inf")


@dataclass
class ChildRun:
    """What one child process reported, its peak RSS (MiB) and its wall time (s, with start-up)."""

    result: dict[str, Any]
    peak_rss_mb: float
    wall_s: float


def run_child(entry: str, args: dict[str, Any] | None = None, *, timeout_s: float = 3600.0) -> ChildRun:
    """Run ``module:function(**args)`` in a fresh interpreter (``bench.child``) and return its
    JSON result and the child's own peak RSS (not mixed with this process's or other children's)."""
    target = entry
    cmd = [sys.executable, "-m", "bench.child", entry, json.dumps(args or {})]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        start = time.perf_counter()
        proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=out, stderr=err, text=True)
        status, rss_mb = wait_with_rusage(proc, timeout_s, target)
        wall = time.perf_counter() - start
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read(), err.read()
    if status != 0:
        raise RuntimeError(f"{target} failed (exit {status}):\n{stderr[-4000:]}")
    lines = [line for line in stdout.splitlines() if line.startswith(RESULT_PREFIX)]
    if not lines:
        raise RuntimeError(f"{target} printed no result:\n{stdout[-2000:]}\n{stderr[-2000:]}")
    result = json.loads(lines[-1][len(RESULT_PREFIX) :])
    if result.get("unavailable"):
        raise Unavailable(str(result["unavailable"]))
    return ChildRun(result, float(result.pop(PEAK_KEY, rss_mb)), wall)


def wait_with_rusage(proc: subprocess.Popen[Any], timeout_s: float, target: str) -> tuple[int, float]:
    """Reap ``proc`` with ``os.wait4``: its exit code and its peak RSS in MiB (Linux reports KiB)."""
    deadline = time.monotonic() + timeout_s
    while True:
        pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
        if pid == proc.pid:
            proc.returncode = os.waitstatus_to_exitcode(status)
            return proc.returncode, usage.ru_maxrss / 1024.0
        if time.monotonic() > deadline:
            proc.kill()
            os.wait4(proc.pid, 0)
            proc.returncode = -9
            raise RuntimeError(f"{target} ran past {timeout_s:.0f} s")
        time.sleep(0.02)


def repeat_child(entry: str, repeats: int, args: dict[str, Any] | None = None) -> list[ChildRun]:
    """``repeats`` fresh children running the same measurement."""
    return [run_child(entry, args) for _ in range(repeats)]


def median(values: Sequence[float]) -> float:
    return float(statistics.median(values)) if values else float("nan")


def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    """``(seconds, result)`` of one call (``time.perf_counter``)."""
    start = time.perf_counter()
    out = fn()
    return time.perf_counter() - start, out


def peak_rss_mb_self() -> float:
    """This process's peak RSS so far (MiB)."""
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def log(message: str) -> None:
    """Progress on stderr (the table goes to stdout)."""
    print(f"[bench {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)
