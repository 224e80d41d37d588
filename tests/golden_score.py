"""StabScope's answers on a run against its golden file (tests/golden/*.json, written from the logs).

``score`` counts incidents found / missed / invented, causes right / wrong / unknown, and every
statement the golden file says must not be made (a cause in a step range, an action's text, a status).
``python -m tests.golden_score`` prints the table that docs/diagnosis.md quotes; ``--sensitivities``
the table per sensitivity setting on the real logs (issue #32).
"""

from __future__ import annotations

import json
import sys
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

GOLDEN = Path(__file__).resolve().parent / "golden"
REAL = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "real_logs"

ACTION_SYNONYMS = {
    # the golden files were written against the old wording ("it absorbed this spike"); today's clipping
    # action says "Keep gradient clipping on: it capped ...": either claims that clipping acted
    "absorbed": ("absorbed", "keep gradient clipping on", "capped the grad norm"),
}


@dataclass
class Score:
    """One run's comparison. Lists hold human-readable findings (empty is perfect)."""

    name: str
    required: int = 0
    found: int = 0
    missed: list[str] = field(default_factory=list)
    invented: list[str] = field(default_factory=list)
    causes_right: int = 0
    causes_wrong: list[str] = field(default_factory=list)
    causes_unknown: int = 0
    violations: list[str] = field(default_factory=list)
    reported: int = 0


def _span(incident: Mapping[str, Any]) -> tuple[int, int]:
    return int(incident["start"]), int(incident.get("until", incident["end"]))


def _overlaps(a: tuple[int, int], b: tuple[int, int], tolerance: int) -> bool:
    return a[0] - tolerance <= b[1] and b[0] - tolerance <= a[1]


def _in(step: int, steps: Sequence[int] | None) -> bool:
    return steps is None or int(steps[0]) <= step <= int(steps[1])


def score(golden: Mapping[str, Any], incidents: Sequence[Mapping[str, Any]], status: str) -> Score:
    """Compare a run's incidents (``store.spikes``) and status text with its golden answers."""
    result = Score(str(golden["log"]), reported=len(incidents))
    tolerance = int(golden.get("tolerance_steps", 0))
    expected = list(golden.get("incidents", []))
    matched: set[int] = set()
    for truth in expected:
        span = (int(truth["steps"][0]), int(truth["steps"][1]))
        hits = [i for i, inc in enumerate(incidents) if _overlaps(span, _span(inc), tolerance)]
        matched.update(hits)
        if truth.get("required", True):
            result.required += 1
            if hits:
                result.found += 1
            else:
                result.missed.append(f"{truth['metrics']} at {truth['peak']}")
        for i in hits:
            cause = incidents[i]["cause"]
            allowed = truth.get("cause_any_of") or ["unknown"]
            if cause in allowed:
                result.causes_right += 1
            elif cause == "unknown":
                result.causes_unknown += 1
            else:
                result.causes_wrong.append(f"{cause} at {incidents[i]['peak']} (golden: {allowed})")
    for i, inc in enumerate(incidents):
        if i not in matched:
            result.invented.append(f"{inc.get('kind', 'spike')} {inc.get('metrics', [inc['metric']])} at {inc['peak']}")
    for rule in golden.get("must_not", []):
        steps = rule.get("steps")
        if "cause" in rule:
            for inc in incidents:
                if inc["cause"] == rule["cause"] and _in(int(inc["peak"]), steps):
                    result.violations.append(f"cause {inc['cause']} at {inc['peak']}: {rule.get('why', '')}")
        elif "action_contains" in rule:
            needle = str(rule["action_contains"]).lower()
            needles = ACTION_SYNONYMS.get(needle, (needle,))
            for inc in incidents:
                if not _in(int(inc["peak"]), steps):
                    continue
                for action in inc.get("actions", []):
                    if any(n in action.lower() for n in needles):
                        result.violations.append(f"action at {inc['peak']}: {action!r}: {rule.get('why', '')}")
        elif "status" in rule and status.split(" ", 1)[0] == rule["status"]:
            result.violations.append(f"status {status!r}: {rule.get('why', '')}")
    return result


def golden_files() -> list[Path]:
    return sorted(GOLDEN.glob("*.json"))


def load(path: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(path.read_text())
    return data


def run_name(golden: Mapping[str, Any]) -> str:
    log = str(golden["log"])
    if log.startswith("demo:"):
        return log.split(":", 1)[1]
    return "g-" + log.replace("/", "-").replace(".", "-")[:100]


def build_store(root: Path, goldens: Sequence[Mapping[str, Any]]) -> Any:
    """A store holding every run the golden files name: the demo runs seeded as `stabscope serve`
    seeds them, each real log imported as `stabscope import` imports it."""
    from ingest.importing.importer import import_logs
    from ingest.services.demo import seed_demo_store
    from ingest.services.run_analyses import open_analysed_store

    store = open_analysed_store(root)
    if any(str(g["log"]).startswith("demo:") for g in goldens):
        seed_demo_store(store)
    for golden in goldens:
        log = str(golden["log"])
        if not log.startswith("demo:"):
            import_logs(store, [REAL / log], run=run_name(golden))
    return store


def score_all(store: Any, goldens: Sequence[Mapping[str, Any]]) -> list[Score]:
    from ingest.services.run_status import run_status

    return [score(g, store.spikes(run_name(g)), run_status(store, run_name(g))) for g in goldens]


def sensitivity_rows(store: Any, goldens: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Per sensitivity setting, on the real logs only (not the demo runs): required incidents found,
    invented, incidents shown by default (spikes and divergences) and blips (issue #32: the default
    setting is chosen on these, docs/diagnosis.md)."""
    from stab_core.analysis import analyze_run, params_for
    from stab_core.severity import SENSITIVITIES, shown_by_default

    real = [g for g in goldens if not str(g["log"]).startswith("demo:")]
    views = [store.run_view(run_name(g)) for g in real]
    rows = []
    for name in SENSITIVITIES:
        row = {"setting": name, "required": 0, "found": 0, "invented": 0, "shown": 0, "blips": 0}
        for golden, view in zip(real, views, strict=True):
            items = analyze_run(view, params_for(name)).spike_dicts()
            result = score(golden, items, "")
            shown = sum(1 for item in items if shown_by_default(item.get("severity")))
            row["required"] += result.required
            row["found"] += result.found
            row["invented"] += len(result.invented)
            row["shown"] += shown
            row["blips"] += len(items) - shown
        rows.append(row)
    return rows


def main() -> int:
    goldens = [load(p) for p in golden_files()]
    if "--sensitivities" in sys.argv[1:]:
        with tempfile.TemporaryDirectory() as root:
            rows = sensitivity_rows(build_store(Path(root), goldens), goldens)
        print("| setting | required incidents found | invented | shown by default | blips |")
        print("| --- | --- | --- | --- | --- |")
        for r in rows:
            found = f"{r['found']} of {r['required']}"
            print(f"| {r['setting']} | {found} | {r['invented']} | {r['shown']} | {r['blips']} |")
        return 0
    with tempfile.TemporaryDirectory() as root:
        scores = score_all(build_store(Path(root), goldens), goldens)
    print(
        "| log | incidents reported | required found | missed | invented | causes right / wrong / unknown "
        "| must-not broken |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for s in scores:
        print(
            f"| `{s.name}` | {s.reported} | {s.found}/{s.required} | {len(s.missed)} | {len(s.invented)} | "
            f"{s.causes_right} / {len(s.causes_wrong)} / {s.causes_unknown} | {len(s.violations)} |"
        )
    for s in scores:
        for label, items in (("missed", s.missed), ("invented", s.invented), ("wrong cause", s.causes_wrong)):
            for item in items:
                print(f"- {s.name}: {label}: {item}")
        for item in s.violations:
            print(f"- {s.name}: MUST-NOT: {item}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
