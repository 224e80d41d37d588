"""Child-process entry: ``python -m bench.child module:function JSON_KWARGS``.

Imports the function's module first (so import time is not measured by the function), calls it and
prints its JSON-ready dict result on a line starting with ``BENCH_RESULT``. A goal whose code is not
there yet returns ``{"unavailable": why}``.
"""

from __future__ import annotations

import importlib
import json
import sys

from bench import RESULT_PREFIX, Unavailable


def main(argv: list[str]) -> int:
    target, raw = argv
    module_name, func_name = target.split(":")
    func = getattr(importlib.import_module(module_name), func_name)
    try:
        result = func(**json.loads(raw))
    except Unavailable as exc:
        result = {"unavailable": str(exc)}
    print(RESULT_PREFIX + json.dumps(result, default=float), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
