"""Does the gradient SNR fall before a spike? The early-warning table of docs/experiments.md.

``python -m ingest.training.lead_time --store DIR [--runs A,B] [--horizons 10,50,200]`` reads every
run of a store (an experiment's store, or one holding imported logs), analyses it as the app does
(:func:`stab_core.analysis.analyze_run`), and scores each predictor of
:data:`stab_core.early_warning.DEFAULT_PREDICTORS` against the run's incidents at each horizon:
precision and recall of "a spike within K steps" with 95% intervals from resampling runs, the median
lead, the alarms that came to nothing. Runs without the predictor's series are left out of its row
(the "runs" column says how many took part).
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ingest.store import Store, open_store
from stab_core.analysis import analyze_run
from stab_core.bootstrap import Interval
from stab_core.early_warning import (
    DEFAULT_PREDICTORS,
    Predictor,
    PredictorScore,
    RunWarnings,
    run_warnings,
    score_predictor,
)

DEFAULT_HORIZONS = (10, 50, 200)
"""Steps ahead: a warning one checkpoint interval away is useful at 200 steps, an automatic
LR back-off or batch skip at 10."""


@dataclass(frozen=True)
class LeadRow:
    predictor: Predictor
    horizon: int
    score: PredictorScore


def lead_rows(
    store: Store, runs: Sequence[str], horizons: Sequence[int] = DEFAULT_HORIZONS, *, resamples: int = 10_000
) -> list[LeadRow]:
    """Every (predictor, horizon) scored over ``runs`` of ``store``."""
    per_run: dict[tuple[Predictor, int], list[RunWarnings]] = {}
    for name in runs:
        view = store.run_view(name)
        analysis = analyze_run(view)
        for horizon in horizons:
            for predictor, warnings in run_warnings(view, analysis, DEFAULT_PREDICTORS, horizon).items():
                if warnings is not None:
                    per_run.setdefault((predictor, horizon), []).append(warnings)
    return [
        LeadRow(predictor, horizon, score_predictor(per_run[(predictor, horizon)], resamples=resamples))
        for horizon in horizons
        for predictor in DEFAULT_PREDICTORS
        if (predictor, horizon) in per_run
    ]


def _interval_dict(interval: Interval) -> dict[str, Any]:
    def num(value: float) -> float | None:
        return value if math.isfinite(value) else None

    return {"estimate": num(interval.estimate), "low": num(interval.low), "high": num(interval.high), "n": interval.n}


def lead_row_dict(row: LeadRow) -> dict[str, Any]:
    """One row as JSON-ready data (stored in the experiment's results, drawn by the Scenarios page)."""
    s = row.score
    return {
        "horizon": row.horizon,
        "predictor": row.predictor.name,
        "source": row.predictor.source,
        "threshold": row.predictor.threshold,
        "runs": s.runs,
        "spikes": s.spikes,
        "warned": s.warned,
        "alarms": s.alarms,
        "false_alarms": s.false_alarms,
        "precision": _interval_dict(s.precision),
        "recall": _interval_dict(s.recall),
        "median_lead": None if math.isnan(s.median_lead) else s.median_lead,
    }


def _cell(interval: Interval) -> str:
    if interval.empty:
        return "-"
    return f"{interval.estimate:.2f} [{interval.low:.2f}, {interval.high:.2f}]"


def markdown_table(rows: Sequence[LeadRow]) -> str:
    """The rows as a Markdown table (precision and recall with their 95% intervals)."""
    lines = [
        "| horizon K (steps) | predictor | runs | spikes | warned | alarms | false alarms | precision | recall"
        " | median lead |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for row in rows:
        s = row.score
        lead = "-" if math.isnan(s.median_lead) else f"{s.median_lead:.0f}"
        lines.append(
            f"| {row.horizon} | {row.predictor.name} | {s.runs} | {s.spikes} | {s.warned} | {s.alarms} | "
            f"{s.false_alarms} | {_cell(s.precision)} | {_cell(s.recall)} | {lead} |"
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ingest.training.lead_time", description=__doc__.split("\n")[0])
    parser.add_argument("--store", required=True, help="store directory or s3://bucket/prefix")
    parser.add_argument("--runs", help="comma-separated run names (default: every run)")
    parser.add_argument("--horizons", default=",".join(map(str, DEFAULT_HORIZONS)), help="steps ahead, comma-separated")
    args = parser.parse_args(argv)
    store = open_store(args.store)
    names = args.runs.split(",") if args.runs else [info.name for info in store.list_runs()]
    if not names:
        print(f"no runs in {args.store}", file=sys.stderr)
        return 1
    try:
        horizons = [int(h) for h in args.horizons.split(",")]
    except ValueError:
        print(f"--horizons takes whole numbers of steps separated by commas, got {args.horizons!r}", file=sys.stderr)
        return 2
    print(markdown_table(lead_rows(store, names, horizons)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
