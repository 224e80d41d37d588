"""StabScope's incident detector against the spike rules of llm.c, OLMo-core and Megatron-LM
(``stab_core.baselines``) on every real log in ``../shared/data/real_logs``, scored the same way
against the golden answers (``tests/golden``, ``tests.golden_score.score``).

``python -m bench.baseline_eval [--json]`` imports each log as ``stabscope import`` does (the
analyses run, so StabScope's incidents are the stored ones), runs each baseline on the same stored
loss and grad-norm series, and prints per detector: recall (required golden incidents found /
required), incidents found / missed / invented (matching no golden incident, required or optional),
and the incidents shown on healthy runs (runs whose golden file has no required incident), with how
many of those match no optional golden incident either.
docs/diagnosis.md quotes the table.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from stab_core.baselines import BASELINES, baseline_incidents
from tests.golden_score import REAL, build_store, golden_files, load, run_name, score

STABSCOPE = "StabScope (stored incidents)"
STABSCOPE_DEFAULT_VIEW = "StabScope, default view (spikes and divergences, no blips)"
"""What the CLI text, the pages and the alerts show by default (issue #32): the stored incidents less
the blips (absorbed within a few logged samples), which are counted and listed on demand."""


def detector_incidents(store: Any, name: str) -> dict[str, list[dict[str, Any]]]:
    """Each detector's incidents on the stored run ``name``: StabScope's from the catalog, each
    baseline's from the run's loss and grad-norm series."""
    view = store.run_view(name)
    series = {m: (s.steps, s.values) for m, s in view.series.items() if m in ("loss", "grad_norm")}
    from stab_core.severity import shown_by_default

    stored = list(store.spikes(name))
    out = {STABSCOPE: stored, STABSCOPE_DEFAULT_VIEW: [s for s in stored if shown_by_default(s.get("severity"))]}
    for label, (rule, metrics) in BASELINES.items():
        out[label] = baseline_incidents(rule, metrics, series)
    return out


def evaluate(goldens: Sequence[Mapping[str, Any]], store: Any) -> dict[str, dict[str, Any]]:
    """Per detector: ``required``, ``found``, ``missed``, ``invented``, ``recall``, ``healthy_shown``
    (incidents reported on healthy runs), ``healthy_invented`` (those matching no optional golden
    incident either) and ``per_run`` {log: found, required, reported, invented, healthy}."""
    totals: dict[str, dict[str, Any]] = {}
    for golden in goldens:
        name = run_name(golden)
        healthy = not any(i.get("required", True) for i in golden.get("incidents", []))
        for label, incidents in detector_incidents(store, name).items():
            result = score(golden, incidents, "")
            counts = ("required", "found", "missed", "invented", "healthy_shown", "healthy_invented")
            row = totals.setdefault(label, {**dict.fromkeys(counts, 0), "per_run": {}})
            row["required"] += result.required
            row["found"] += result.found
            row["missed"] += len(result.missed)
            row["invented"] += len(result.invented)
            row["healthy_shown"] += result.reported if healthy else 0
            row["healthy_invented"] += len(result.invented) if healthy else 0
            row["per_run"][str(golden["log"])] = {
                "found": result.found,
                "required": result.required,
                "reported": result.reported,
                "invented": len(result.invented),
                "healthy": healthy,
            }
    for row in totals.values():
        row["recall"] = row["found"] / row["required"] if row["required"] else None
    return totals


def table(totals: Mapping[str, Mapping[str, Any]]) -> str:
    """The markdown table docs/diagnosis.md quotes."""
    lines = [
        "| detector | recall | found / missed | invented | shown on healthy runs (invented there) |",
        "| --- | --- | --- | --- | --- |",
    ]
    for label, row in totals.items():
        lines.append(
            f"| {label} | {row['recall']:.2f} | {row['found']} / {row['missed']} | {row['invented']} "
            f"| {row['healthy_shown']} ({row['healthy_invented']}) |"
        )
    return "\n".join(lines)


def per_run_table(totals: Mapping[str, Mapping[str, Any]]) -> str:
    """Per log: each detector's found/required and incidents reported (invented in brackets)."""
    labels = list(totals)
    logs = list(next(iter(totals.values()))["per_run"]) if totals else []
    lines = ["| log | " + " | ".join(labels) + " |", "| --- |" + " --- |" * len(labels)]
    for log in logs:
        cells = []
        for label in labels:
            r = totals[label]["per_run"][log]
            cells.append(f"{r['found']}/{r['required']}, {r['reported']} ({r['invented']})")
        lines.append(f"| `{log}`{' (healthy)' if totals[labels[0]]['per_run'][log]['healthy'] else ''} | "
                     + " | ".join(cells) + " |")  # fmt: skip
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.baseline_eval", description=__doc__)
    parser.add_argument("--json", action="store_true", help="the figures as JSON")
    args = parser.parse_args(argv)
    if not REAL.is_dir():
        print(f"no real logs at {REAL}: the evaluation needs ../shared/data/real_logs", file=sys.stderr)
        return 2
    goldens = [g for g in (load(p) for p in golden_files()) if not str(g["log"]).startswith("demo:")]
    with tempfile.TemporaryDirectory() as root:
        totals = evaluate(goldens, build_store(Path(root), goldens))
    if args.json:
        print(json.dumps(totals, indent=2))
    else:
        print(table(totals))
        print()
        print(per_run_table(totals))
    return 0


if __name__ == "__main__":
    sys.exit(main())
