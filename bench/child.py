"""Child-process entry: ``python -m bench.child module:function JSON_KWARGS``.

Imports the function's module first (so import time is not measured by the function), calls it and
prints its JSON-ready dict result, with its own peak RSS, on a line starting with ``BENCH_RESULT``.
A goal whose code is not there yet returns ``{"unavailable": why}``.
"""

from __future__ import annotations

import importlib
import json
import sys
from pathlib import Path

from bench import PEAK_KEY, RESULT_PREFIX, Unavailable


def peak_rss_mb() -> float:
    """This process's peak resident memory (MiB) since its ``exec``: ``VmHWM`` belongs to the address
    space, which ``exec`` replaces (``ru_maxrss`` would still count the forking parent's pages)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024.0
    return float("nan")


def main(argv: list[str]) -> int:
    target, raw = argv
    module_name, func_name = target.split(":")
    func = getattr(importlib.import_module(module_name), func_name)
    try:
        result = func(**json.loads(raw))
    except Unavailable as exc:
        result = {"unavailable": str(exc)}
    result[PEAK_KEY] = peak_rss_mb()
    print(RESULT_PREFIX + json.dumps(result, default=float), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
