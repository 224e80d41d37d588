"""Live lag of ``stabscope watch`` on a text log (#35): from a metric line written to the log to its step
being what ``stabscope show`` reports, against the watch interval; the baseline, in the same run, is
the shard directory a ``ShardWriter`` flushes (the live path that existed before).

``python -m bench.watch_lag [--samples N] [--intervals 0.5,2]`` starts a real ``stabscope watch``
process per (source, interval), writes one step at a time at a random phase of the interval (an
llm.c ``main.log`` line, or one shard row flushed at once), and polls the store as ``show`` reads it
(``Store.run_info(run).last_step``) every 5 ms. It prints, per source and interval, the median and
90th percentile lag in seconds and the median as a ratio to the interval: a watcher that passes
every ``I`` seconds shows a line after ``I/2`` on average plus the pass's own cost.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from ingest.store import Store
from ingest.store.shards import ShardWriter

POLL_S = 0.005
WARMUP_STEPS = 20
"""Steps written before the first timed one: the watcher has detected the format and made the run."""


def _start(store: Path, source: Path, interval_s: float) -> subprocess.Popen[bytes]:
    argv = [sys.executable, "-m", "ingest", "watch", str(source), "--run", "lag", "--store", str(store)]
    return subprocess.Popen(
        [*argv, "--interval", str(interval_s)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )


def _llmc_line(step: int) -> str:
    """One llm.c ``main.log`` training line (as in ../shared/data/real_logs/mng_llmc_gpt2_124m)."""
    return f"s:{step} trl:{9.0 - step * 1e-3:.4f} lr:0.000021 norm:2.05\n"


def _visible(store: Path, step: int, timeout_s: float) -> float | None:
    """Seconds until run ``lag``'s last step is ``step`` (None at the timeout)."""
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < timeout_s:
        s = Store(store)
        if s.has_run("lag") and (s.run_info("lag").last_step or -1) >= step:
            return time.perf_counter() - t0
        time.sleep(POLL_S)
    return None


def measure(kind: str, interval_s: float, samples: int, work: Path, seed: int = 35) -> dict[str, Any]:
    """Lag samples for ``kind`` ("text log" or "shards") at ``interval_s``; median, p90 and ratio."""
    rng = random.Random(seed)
    folder = Path(tempfile.mkdtemp(dir=work))
    store = folder / "store"
    if kind == "text log":
        source = folder / "main.log"
        source.write_text("".join(_llmc_line(k) for k in range(WARMUP_STEPS)))

        def write(k: int) -> None:
            with source.open("a") as f:
                f.write(_llmc_line(k))

        writer = None
    else:
        source = folder / "shards"
        writer = ShardWriter(source, 0, flush_interval_s=3600)
        for k in range(WARMUP_STEPS):
            writer.write(k, {"grad_norm_local": 1.0}, run_level={"loss": 9.0})
        writer.flush()

        def write(k: int) -> None:
            assert writer is not None
            writer.write(k, {"grad_norm_local": 1.0}, run_level={"loss": 9.0 - k * 1e-3})
            writer.flush()

    proc = _start(store, source, interval_s)
    lags: list[float] = []
    try:
        if _visible(store, WARMUP_STEPS - 1, 120) is None:
            raise RuntimeError(f"watch never showed the {kind}'s first steps")
        for i in range(samples):
            time.sleep(rng.uniform(0, interval_s))  # a random phase of the watcher's cycle
            step = WARMUP_STEPS + i
            write(step)
            lag = _visible(store, step, 30 + 4 * interval_s)
            if lag is None:
                raise RuntimeError(f"step {step} of the {kind} never became visible")
            lags.append(lag)
    finally:
        proc.terminate()
        proc.wait(timeout=60)
        if writer is not None:
            writer.close()
    lags.sort()
    median = statistics.median(lags)
    return {
        "source": kind,
        "interval_s": interval_s,
        "samples": len(lags),
        "median_lag_s": round(median, 3),
        "p90_lag_s": round(lags[min(len(lags) - 1, int(0.9 * len(lags)))], 3),
        "median_over_interval": round(median / interval_s, 2),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.watch_lag", description=__doc__)
    parser.add_argument("--samples", type=int, default=15, help="steps timed per source and interval (default 15)")
    parser.add_argument("--intervals", default="0.5,2", help="watch intervals in seconds (default 0.5,2)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as work:
        for interval in (float(x) for x in args.intervals.split(",")):
            for kind in ("shards", "text log"):  # the baseline first, in the same run
                print(json.dumps(measure(kind, interval, args.samples, Path(work))), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
