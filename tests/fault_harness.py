"""What the fault tests share: real child processes (the CLI, the Upload page's import, shard writers),
SIGKILL from outside, a reader process that polls the catalog throughout, inputs generated from a
seed, row-for-row comparison of stores, and small file systems to fill or make read-only.

The children themselves live in ``tests.fault_children`` (run as ``python -m tests.fault_children``).
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from ingest.store import Store
from ingest.store.shards import ShardWriter

REPO = Path(__file__).resolve().parents[1]
CHILD_ENV = {**os.environ, "PYTHONPATH": str(REPO), "STABSCOPE_NO_DEMO": "1"}
"""Children import the repository's code and never seed demo runs."""
LEFTOVER_SUFFIXES = (".tmp",)


# ----------------------------------------------------------------------------------------- processes


def cli_argv(store: Path, *args: str) -> list[str]:
    """``stabscope ARGS --store STORE`` as a child command line."""
    return [sys.executable, "-m", "ingest", *args, "--store", str(store)]


def run_cli(
    store: Path, *args: str, timeout: float = 300, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """Run ``stabscope ARGS`` on ``store`` to its end; stdout and stderr captured as text."""
    return subprocess.run(
        cli_argv(store, *args),
        env=env or CHILD_ENV,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def child_argv(*args: str) -> list[str]:
    """``python -m tests.fault_children ARGS``."""
    return [sys.executable, "-m", "tests.fault_children", *args]


def start(argv: Sequence[str], *, env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
    """Start a child with stdout piped (for markers) and stderr kept in a pipe too."""
    return subprocess.Popen(list(argv), env=env or CHILD_ENV, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE)


@dataclass
class KillLog:
    """What a series of kills did: how many landed on a live process (the others found it finished), how
    many of those left a writer's temporary or staged files behind (the kill fell mid-write), and the
    stderr of any child that exited on its own with an error."""

    attempts: int = 0
    landed: int = 0
    mid_write: int = 0
    delays_s: list[float] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "attempts": self.attempts,
            "landed": self.landed,
            "mid_write": self.mid_write,
            "delay_s": [round(min(self.delays_s, default=0), 3), round(max(self.delays_s, default=0), 3)],
            "failures": self.failures,
        }


def kill_after(proc: subprocess.Popen[bytes], delay_s: float, log: KillLog, store: Path) -> None:
    """SIGKILL ``proc`` ``delay_s`` seconds from now unless it ends first; record what happened."""
    before = set(leftovers(store))
    log.attempts += 1
    log.delays_s.append(delay_s)
    try:
        proc.wait(timeout=delay_s)
    except subprocess.TimeoutExpired:
        os.kill(proc.pid, signal.SIGKILL)
    finished(proc, log, store, before)


def kill_on_marker(
    proc: subprocess.Popen[bytes], store: Path, extra_delay_s: float, log: KillLog, *, timeout_s: float = 120
) -> None:
    """SIGKILL ``proc`` ``extra_delay_s`` after a new writer's file (see ``leftovers``) first appears in
    ``store`` (the progress marker of a write under way), or once it has ended if none appears."""
    before = set(leftovers(store))
    log.attempts += 1
    log.delays_s.append(extra_delay_s)
    deadline = time.monotonic() + timeout_s
    while proc.poll() is None and time.monotonic() < deadline:
        if set(leftovers(store)) - before:
            time.sleep(extra_delay_s)
            break
        time.sleep(0.002)
    if proc.poll() is None:
        os.kill(proc.pid, signal.SIGKILL)
    finished(proc, log, store, before)


def finished(proc: subprocess.Popen[bytes], log: KillLog, store: Path, before: set[Path]) -> bool:
    """Reap ``proc`` and count it: killed (mid-write when it left new files behind) or ended by itself
    (an error exit is recorded). Returns True when it was killed."""
    _, err = proc.communicate(timeout=300)
    if proc.returncode == -signal.SIGKILL:
        log.landed += 1
        if set(leftovers(store)) - before:
            log.mid_write += 1
        return True
    if proc.returncode != 0:
        log.failures.append(f"exit {proc.returncode}: {err.decode(errors='replace')[-2000:]}")
    return False


def wait_for_line(proc: subprocess.Popen[bytes], marker: bytes, timeout_s: float = 120) -> bool:
    """Read ``proc``'s stdout until a line starting with ``marker``; False when it ended first."""
    assert proc.stdout is not None
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            return False
        if line.startswith(marker):
            return True
    return False


def leftovers(folder: Path) -> list[Path]:
    """A killed writer's files under ``folder``: temporary files (``*.tmp``), staged batches and a one-pass
    merge's unsorted rank buckets. None remain once a writer of the run has finished its pass."""
    found: list[Path] = []
    for dirpath, _dirs, files in os.walk(folder):
        for f in files:
            path = Path(dirpath) / f
            if f.endswith(LEFTOVER_SUFFIXES) or path.parent.name == "staging" or f.endswith(".arrow"):
                found.append(path)
    return found


# ------------------------------------------------------------------------------------------ readers


class Reader:
    """A reader process (``tests.fault_children reader``) polling the catalog and reading every run's
    rows until stopped; ``expect`` per run: ``rows`` (the n_rows a visible run may have) and
    ``monotonic`` (rows and last step never go back). ``result()`` stops it and returns its findings:
    polls, runs read, violations (partial runs or generations seen) and errors (exceptions)."""

    def __init__(self, store: Path, work: Path, expect: dict[str, dict[str, Any]], *, name: str = "reader") -> None:
        self.out = work / f"{name}.json"
        self.stop_file = work / f"{name}.stop"
        spec = work / f"{name}.spec.json"
        spec.write_text(json.dumps(expect))
        self.proc = start(child_argv("reader", str(store), str(self.out), str(self.stop_file), str(spec)))

    def result(self) -> dict[str, Any]:
        self.stop_file.touch()
        _, err = self.proc.communicate(timeout=180)
        assert self.proc.returncode == 0, err.decode(errors="replace")[-3000:]
        found: dict[str, Any] = json.loads(self.out.read_text())
        return found


# ------------------------------------------------------------------------------------------- inputs

MEGATRON_VALUES = 8
"""Metric values stored from each generated Megatron iteration line: its nine values less the global batch
size, which holds one value over the run and so is stored as the run's setting, not a series."""


def write_megatron_log(path: Path, iterations: int, *, seed: int) -> int:
    """A Megatron-LM console log of ``iterations`` lines; returns the records it holds."""
    rng = np.random.default_rng(seed)
    it = np.arange(1, iterations + 1)
    loss = 2 + 8 * np.exp(-it / 4000) + 0.01 * rng.standard_normal(iterations)
    grad = 1 + 0.1 * rng.standard_normal(iterations)
    step_ms = np.round(1000 + 10 * rng.standard_normal(iterations), 1)
    lr = 3e-4 * np.minimum(1, it / 2000)
    with open(path, "w") as f:
        f.writelines(
            f" iteration {it[i]:>8d}/ {iterations:>8d} | consumed samples: {it[i] * 512} | elapsed time per "
            f"iteration (ms): {step_ms[i]:.1f} | learning rate: {lr[i]:.6E} | global batch size: 512 | "
            f"lm loss: {loss[i]:.6E} | loss scale: 1.0 | grad norm: {grad[i]:.3f} | "
            "number of skipped iterations: 0 | number of nan iterations: 0 |\n"
            for i in range(iterations)
        )
    return iterations * MEGATRON_VALUES


def write_csv_log(path: Path, steps: int, *, seed: int) -> int:
    """A wide CSV log (step, loss, lr, grad_norm, tokens) of ``steps`` rows; returns the records it holds."""
    rng = np.random.default_rng(seed)
    s = np.arange(1, steps + 1)
    columns = {
        "step": s,
        "loss": 2 + 8 * np.exp(-s / 4000) + 0.01 * rng.standard_normal(steps),
        "lr": 3e-4 * np.minimum(1, s / 2000),
        "grad_norm": 1 + 0.1 * rng.standard_normal(steps),
        "tokens": s * 65536.0,
    }
    import pyarrow.csv as pcsv

    pcsv.write_csv(pa.table(columns), path)
    return steps * (len(columns) - 1)


RANK_METRICS = ("grad_norm_local", "step_time_s", "gpu_temp_c")
RUN_METRICS = ("loss", "lr", "grad_norm")


def shard_value(metric: str, rank: int, steps: np.ndarray, version: int) -> np.ndarray:
    """The value generated for ``metric`` of ``rank`` at ``steps``; ``version`` > 0 for a re-logged step
    (so that the last write must win)."""
    index = (RANK_METRICS + RUN_METRICS).index(metric)
    return 1.0 + index + 0.01 * rank + steps * 1e-6 + 100.0 * version


def shard_scalar(metric: str, rank: int, step: int, version: int = 0) -> float:
    """``shard_value`` of one step, in plain Python (the same operations in the same order: equal bits)."""
    index = (RANK_METRICS + RUN_METRICS).index(metric)
    return 1.0 + index + 0.01 * rank + step * 1e-6 + 100.0 * version


def write_shard_round(shards: Path, first: int, n: int, *, ranks: int, version: int = 0, chunk: int = 5000) -> int:
    """Segments for steps [first, first + n): every rank's ``RANK_METRICS`` and the run-level
    ``RUN_METRICS`` (one new segment per rank). Returns the records written."""
    steps_all = np.arange(first, first + n, dtype=np.int64)
    for rank in [-1, *range(ranks)]:
        names = RUN_METRICS if rank < 0 else RANK_METRICS
        with ShardWriter(shards, rank) as writer:
            for a in range(0, n, chunk):
                steps = steps_all[a : a + chunk]
                columns = {m: shard_value(m, rank, steps, version) for m in names}
                writer.write_columns(steps, columns, rank=rank, wall_time=1.7e9 + steps * 0.5)
    return n * (ranks * len(RANK_METRICS) + len(RUN_METRICS))


# --------------------------------------------------------------------------------------- comparison


def sorted_rows(store: Store, run: str) -> pa.Table:
    """Run ``run``'s full-fidelity rows (metric as text) sorted by metric, rank, step."""
    table = store.read_long(run).select(["metric", "rank", "step", "value"])
    table = table.set_column(0, "metric", table.column("metric").cast(pa.string()))
    return table.sort_by([("metric", "ascending"), ("rank", "ascending"), ("step", "ascending")])


def assert_same_rows(got: pa.Table, want: pa.Table) -> None:
    """Row for row: the same keys in the same order and the same values (NaN equal to NaN)."""
    assert got.num_rows == want.num_rows, (got.num_rows, want.num_rows)
    for name in ("metric", "rank", "step"):
        assert got.column(name).equals(want.column(name)), name
    np.testing.assert_array_equal(got.column("value").to_numpy(), want.column("value").to_numpy())


def no_duplicate_keys(table: pa.Table) -> bool:
    """True when no (metric, rank, step) repeats in a ``sorted_rows`` table."""
    keys = table.group_by(["metric", "rank", "step"]).aggregate([])
    return bool(keys.num_rows == table.num_rows)


# -------------------------------------------------------------------------------------- file systems


@dataclass
class SmallFilesystem:
    """A folder on a file system of its own: ``kind`` says which could be made here (``tmpfs`` or
    ``loop`` as root, else ``none``: the caller limits the child's file size instead)."""

    path: Path
    kind: str

    def remount(self, *, read_only: bool) -> None:
        mode = "ro" if read_only else "rw"
        subprocess.run(["mount", "-o", f"remount,{mode}", str(self.path)], check=True, capture_output=True)


@contextlib.contextmanager
def small_filesystem(path: Path, size_mib: int) -> Iterator[SmallFilesystem]:
    """Mount a ``size_mib`` MiB tmpfs (or an ext4 loop device) at ``path`` when this process may mount,
    and unmount it after; ``kind == "none"`` when neither could be mounted (the folder is then plain)."""
    path.mkdir(parents=True, exist_ok=True)
    may_mount = not os.environ.get("STABSCOPE_FAULTS_NO_MOUNT")  # set: try the fallbacks as a non-root CI would
    mounted = (_mount_tmpfs(path, size_mib) or _mount_loop(path, size_mib)) if may_mount else None
    try:
        yield SmallFilesystem(path, mounted or "none")
    finally:
        if mounted:
            subprocess.run(["umount", "-l", str(path)], check=False, capture_output=True)


def _mount_tmpfs(path: Path, size_mib: int) -> str | None:
    if os.geteuid() != 0:
        return None
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size_mib}m", "tmpfs", str(path)], capture_output=True, check=False
    )
    return "tmpfs" if done.returncode == 0 else None


def _mount_loop(path: Path, size_mib: int) -> str | None:
    if os.geteuid() != 0:
        return None
    image = path.with_name(path.name + ".img")
    with open(image, "wb") as f:
        f.truncate(size_mib * 1024 * 1024)
    made = subprocess.run(["mkfs.ext4", "-q", "-F", str(image)], capture_output=True, check=False)
    if made.returncode != 0:
        return None
    done = subprocess.run(["mount", "-o", "loop", str(image), str(path)], capture_output=True, check=False)
    return "loop" if done.returncode == 0 else None


def seeded(seed: int) -> random.Random:
    """The random source of a fault test (delays, which kill is timed how)."""
    return random.Random(seed)


# -------------------------------------------------------------------------------------- kill tests
# tests/test_faults_kill_*.py: one module per command killed, so that `--dist loadfile` runs them on
# different workers (each takes minutes)

KILLS = 20
"""Kills that must land on a live process, per command."""
KILL_SEED = 23
"""The kill tests' seed (each adds its own offset)."""


def kill_alternately(
    proc: subprocess.Popen[bytes], store: Path, rng: random.Random, kills: KillLog, window_s: tuple[float, float]
) -> None:
    """Every other kill after a random delay in ``window_s`` (seconds), the others a random moment (up
    to 0.4 s) after the child's first temporary file appears."""
    if kills.attempts % 2:
        kill_on_marker(proc, store, rng.uniform(0.0, 0.4), kills)
    else:
        kill_after(proc, rng.uniform(*window_s), kills, store)


def report_kills(test: str, seconds: float, kills: KillLog, reader: dict[str, Any], **figures: Any) -> None:
    """Print the test's one ``FAULTS {...}`` line (docs/reliability.md); ``seconds`` of wall time."""
    line = {
        "test": test,
        "seconds": round(seconds, 1),
        "kills": kills.to_json(),
        "reader": {k: reader[k] for k in ("polls", "reads", "gen_changed_during_read")},
        "violations": len(reader["violations"]),
        "reader_errors": len(reader["errors"]),
        **figures,
    }
    print("FAULTS " + json.dumps(line))


def check_reader(found: dict[str, Any]) -> None:
    """The reader read something, never saw a partial run or generation, and met no exception."""
    assert found["reads"] > 0, found
    assert found["violations"] == [], "\n".join(found["violations"])
    assert found["errors"] == [], "\n".join(found["errors"])


def assert_equal_to_clean(store: Path, clean: Path, run: str, rows: int) -> None:
    """After the kills and a rerun: run ``run`` of ``store`` equals that of the clean one-shot ``clean``
    row for row, the clean one holds ``rows`` rows, no key is doubled, no killed writer's file is left."""
    got, want = sorted_rows(Store(store), run), sorted_rows(Store(clean), run)
    assert want.num_rows == rows and no_duplicate_keys(got)
    assert_same_rows(got, want)
    assert leftovers(store) == []
