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
import json
import math
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ingest.store import Store
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

REFERENCE_LEAD_TIME = Path(__file__).resolve().with_name("reference_lead_time.json")
"""The lead-time tables of docs/experiments.md (mechanism S's runs, the public logs of ../shared), for
the Scenarios page when the newest experiment's results hold none."""

DEFAULT_HORIZONS = (10, 50, 200)
"""Steps ahead: a warning one checkpoint interval away is useful at 200 steps, an automatic
LR back-off or batch skip at 10."""


@dataclass(frozen=True)
class LeadRow:
    predictor: Predictor
    horizon: int
    score: PredictorScore


def lead_rows(
    store: Store,
    runs: Sequence[str],
    horizons: Sequence[int] = DEFAULT_HORIZONS,
    *,
    metric: str | None = "loss",
    resamples: int = 10_000,
) -> list[LeadRow]:
    """Every (predictor, horizon) scored over ``runs`` of ``store``, against the incidents that hold
    ``metric`` (loss spikes by default: the thesis is about the loss; None: every incident)."""
    per_run: dict[tuple[Predictor, int], list[RunWarnings]] = {}
    for name in runs:
        view = store.run_view(name)
        analysis = analyze_run(view)
        for horizon in horizons:
            for predictor, warnings in run_warnings(view, analysis, DEFAULT_PREDICTORS, horizon, metric).items():
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
    parser.add_argument("--json", action="store_true", help="the rows as JSON (as experiment results store them)")
    parser.add_argument(
        "--incidents",
        choices=["loss", "all"],
        default="loss",
        help="score against loss spikes (default) or every incident",
    )
    args = parser.parse_args(argv)
    store = Store(args.store)
    names = args.runs.split(",") if args.runs else [info.name for info in store.list_runs()]
    if not names:
        print(f"no runs in {args.store}", file=sys.stderr)
        return 1
    try:
        horizons = [int(h) for h in args.horizons.split(",")]
    except ValueError:
        print(f"--horizons takes whole numbers of steps separated by commas, got {args.horizons!r}", file=sys.stderr)
        return 2
    rows = lead_rows(store, names, horizons, metric=None if args.incidents == "all" else "loss")
    print(json.dumps([lead_row_dict(row) for row in rows], indent=1) if args.json else markdown_table(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())


MIN_USEFUL_LEAD = 10
"""Steps of warning below which an alert is no use: a person (or an automatic LR back-off) needs at
least a few logging intervals to act before the spike."""


def snr_beats_baselines(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The SNR rows that beat every baseline row of their horizon: precision and recall both at least
    the best baseline's (point estimates), recall above 0, and a median lead of at least
    ``MIN_USEFUL_LEAD`` steps. This is the bar an early-warning alert must clear before it is added."""

    def est(row: dict[str, Any], key: str) -> float:
        value = row[key]["estimate"]
        return -1.0 if value is None else float(value)

    winners = []
    for row in rows:
        if row["source"] != "snr" or est(row, "recall") <= 0 or (row["median_lead"] or 0) < MIN_USEFUL_LEAD:
            continue
        rivals = [r for r in rows if r["horizon"] == row["horizon"] and r["source"] != "snr"]
        if all(est(row, "precision") >= est(r, "precision") and est(row, "recall") >= est(r, "recall") for r in rivals):
            winners.append(row)
    return winners


def lead_verdict(rows: Sequence[dict[str, Any]]) -> str:
    """One sentence on what the table measured, worded no further than the numbers go."""
    if not rows:
        return "Not measured: these results hold no lead-time table."
    spikes = max(int(r["spikes"]) for r in rows)
    winners = snr_beats_baselines(rows)
    if not winners:
        return (
            f"On these runs ({spikes} spikes) no gradient-SNR rule warned better than the grad-norm and loss "
            "z-scores a monitor already has (precision and recall at the same horizon), so StabScope raises no "
            "early-warning alert: the thesis that the SNR falls first is not supported by this measurement."
        )
    best = max(winners, key=lambda r: (r["recall"]["estimate"], r["precision"]["estimate"]))
    return (
        f"On these runs ({spikes} spikes), '{best['predictor']}' warned of {best['warned']} spikes within "
        f"{best['horizon']} steps (median lead {best['median_lead']:.0f} steps) with precision "
        f"{best['precision']['estimate']:.2f} and recall {best['recall']['estimate']:.2f}, at least as well as "
        "every baseline at that horizon."
    )


def reference_lead_time(path: Path = REFERENCE_LEAD_TIME) -> dict[str, Any]:
    """``{"source": str, "rows": [lead_row_dict ...]}`` of the shipped measurement; raises
    StabScopeError naming the file when it is missing or not that shape."""
    from ingest.errors import StabScopeError

    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        rows = [dict(row) for row in data["rows"]]
        return {"source": str(data["source"]), "rows": rows}
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise StabScopeError(f"the reference lead-time table {path} cannot be read ({exc})") from exc
