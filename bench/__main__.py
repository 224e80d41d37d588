"""``python -m bench [--quick] [--goals 1,2,...] [--workdir DIR] [--no-doc]``: run the benchmark suite."""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import sys
import time
import traceback
from pathlib import Path

from bench import DEFAULT_WORKDIR, FULL, QUICK, TINY, Figure, Unavailable, log
from bench.report import save_json, text_table, write_doc

GOALS = {
    "1": "bench.compaction",
    "2": "bench.imports",
    "3": "bench.queries",
    "4": "bench.analyses",
    "5": "bench.training",
    "6": "bench.app",
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    size = parser.add_mutually_exclusive_group()
    size.add_argument("--quick", action="store_true", help="reduced sizes, one repeat each: a look for regressions")
    size.add_argument("--tiny", action="store_true", help=argparse.SUPPRESS)  # the smoke test's sizes
    parser.add_argument("--goals", default=",".join(GOALS), help="comma-separated goals to run (default: all)")
    parser.add_argument("--repeats", type=int, help="repeats per figure (default: 3; 1 with --quick)")
    parser.add_argument("--workdir", type=Path, default=DEFAULT_WORKDIR, help="generated inputs and stores")
    parser.add_argument("--no-doc", action="store_true", help="do not write the table in docs/performance.md")
    args = parser.parse_args(argv)
    sizes = TINY if args.tiny else QUICK if args.quick else FULL
    if args.repeats:
        sizes = dataclasses.replace(sizes, repeats=args.repeats)
    wanted = [g.strip() for g in args.goals.split(",") if g.strip()]
    unknown = [g for g in wanted if g not in GOALS]
    if unknown:
        parser.error(f"unknown goals {unknown}; choose from {', '.join(GOALS)}")
    workdir = args.workdir.resolve() / sizes.label
    workdir.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    figures: list[Figure] = []
    skipped: list[tuple[str, str]] = []
    goal_seconds: dict[str, float] = {}
    failed = False
    for goal in wanted:
        goal_start = time.perf_counter()
        try:
            figures += importlib.import_module(GOALS[goal]).run(sizes, workdir)
        except Unavailable as exc:
            skipped.append((goal, f"not available yet: {exc}"))
        except Exception as exc:  # one goal's failure must not hide the others' figures
            failed = True
            traceback.print_exc()
            skipped.append((goal, f"FAILED: {type(exc).__name__}: {exc}"))
        goal_seconds[goal] = time.perf_counter() - goal_start
        log(f"goal {goal} done in {goal_seconds[goal]:.0f} s")
    wall = time.perf_counter() - start
    print(text_table(figures, skipped))
    save_json(workdir / "results.json", sizes, figures, skipped)
    if not args.no_doc and not args.tiny:
        command = " ".join(["python -m bench", *(sys.argv[1:] if argv is None else argv)])
        write_doc(sizes, figures, skipped, wall, command=command, goal_seconds=goal_seconds)
        log("docs/performance.md updated")
    missed = [f.name for f in figures if f.met is False]
    if missed:
        log(f"goals missed: {'; '.join(missed)}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
