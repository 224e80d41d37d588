"""What the import report (``ingest.formats.accounting``, #31) costs: ``read_log`` of goal 2's
10^6-line Megatron log, and of the same log with three lines of chatter (prose, a blank line, an
argument-dump line) after every 100th, by a baseline checkout (the code before the report) and by this
one, in turn, each in a fresh process; medians of wall and CPU seconds (CPU: less moved by other work
on a shared machine).

    git worktree add /tmp/stabscope-base <commit before the report>   # plus its built _fields .so, if any
    python -m bench.report_cost /tmp/stabscope-base --repeats 7
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

from bench.data import log_inputs

REPO = Path(__file__).resolve().parents[1]
CHILD = """
import json, sys, time
from pathlib import Path
import numpy as np, pyarrow as pa
pa.array(np.zeros(1))  # library initialisation, as bench.imports does
from ingest.formats import read_log
start, cpu = time.perf_counter(), time.process_time()
log = read_log([Path(sys.argv[1])], format="megatron")
print(json.dumps({"wall": time.perf_counter() - start, "cpu": time.process_time() - cpu, "rows": log.table.num_rows}))
"""


def chatter_log(megatron: Path) -> Path:
    """The log with three non-metric lines after every 100th line (written once)."""
    target = megatron.with_name("megatron-chatter.log")
    if not target.exists():
        scratch = target.with_suffix(".tmp")
        with open(megatron) as src, open(scratch, "w") as dst:
            for i, line in enumerate(src, start=1):
                dst.write(line)
                if i % 100 == 0:
                    dst.write(f"> saving checkpoint at iteration {i} to /ckpt\n\n  lr .................. 0.0003\n")
        scratch.rename(target)
    return target


def measure(log: Path, checkouts: dict[str, Path], repeats: int) -> dict[str, dict[str, float]]:
    """Median wall and CPU seconds of each checkout reading ``log``, the checkouts in turn."""
    runs: dict[str, list[dict[str, float]]] = {name: [] for name in checkouts}
    for _ in range(repeats):
        for name, root in checkouts.items():
            env = {**os.environ, "PYTHONPATH": str(root)}
            out = subprocess.run(
                [sys.executable, "-c", CHILD, str(log)], capture_output=True, text=True, env=env, cwd="/", check=True
            )
            runs[name].append(json.loads(out.stdout))
    return {
        name: {k: statistics.median(r[k] for r in got) for k in ("wall", "cpu")} | {"rows": got[0]["rows"]}
        for name, got in runs.items()
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("baseline", type=Path, help="a checkout of the code before the import report")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--workdir", type=Path, default=REPO / "bench" / "results" / "report-cost")
    args = parser.parse_args()
    inputs = log_inputs(args.workdir, 1_000_000, 1_000)
    checkouts = {"baseline": args.baseline.resolve(), "report": REPO}
    for label, log in (("bare", inputs.megatron), ("chatter", chatter_log(inputs.megatron))):
        got = measure(log, checkouts, args.repeats)
        base, new = got["baseline"], got["report"]
        print(
            f"{label}: {new['rows']:,} rows; wall {base['wall']:.2f} s -> {new['wall']:.2f} s "
            f"({new['wall'] / base['wall'] - 1:+.1%}), CPU {base['cpu']:.2f} s -> {new['cpu']:.2f} s "
            f"({new['cpu'] / base['cpu'] - 1:+.1%}), medians of {args.repeats}"
        )


if __name__ == "__main__":
    main()
