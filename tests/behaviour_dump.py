"""Everything a refactoring must leave unchanged, as one JSON file (issue #34): run it before and after,
then compare the two files byte for byte.

    python -m tests.behaviour_dump before.json   # on the old tree
    python -m tests.behaviour_dump after.json    # on the new one
    cmp before.json after.json

The store is the golden comparison's (``tests/golden_score.py``: every demo run and every real log
under ``../shared/data/real_logs``). Per run: ``stabscope spikes --json`` at the stored, low and high
sensitivity, ``spikes --all``, ``diagnose --json`` at its first three incidents, the metadata, the
checklist (facts, grades, Markdown), the CSV export's SHA-256 and the overview and compare figures'
JSON. Then the golden scores and sensitivity rows, ``evaluate_detection``, the tree's DOT text and
each demo and scenario simulation (its arrays' SHA-256, truth, events and metadata). Floats are
written with ``repr``: a change in the last digit shows.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import io
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np


def jsonable(x: Any) -> Any:
    """``x`` as JSON-ready data, floats as their ``repr`` (exact), dataclasses as dicts."""
    if dataclasses.is_dataclass(x) and not isinstance(x, type):
        return {f.name: jsonable(getattr(x, f.name)) for f in dataclasses.fields(x)}
    if isinstance(x, dict):
        return {str(k): jsonable(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [jsonable(v) for v in x]
    if isinstance(x, np.ndarray):
        return jsonable(x.tolist())
    if isinstance(x, np.floating | float):
        return repr(float(x))
    if isinstance(x, np.integer):
        return int(x)
    return x if x is None or isinstance(x, str | int | bool) else repr(x)


def _cli(args: list[str]) -> tuple[int, str]:
    from ingest.cli import main

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        rc = main(args)
    return rc, out.getvalue()


def _run_entry(store: Any, root: str, name: str) -> dict[str, Any]:
    from pages.checklist import stored_config
    from pages.parts.charts import Panel, compare_figure, panels_figure
    from pages.parts.compare_lines import Line
    from stab_core.checklist import checklist_markdown, evaluate_checklist
    from stab_core.checklist_facts import run_facts

    entry: dict[str, Any] = {}
    for extra in ([], ["--sensitivity", "high"], ["--sensitivity", "low"]):
        rc, text = _cli(["spikes", name, "--json", "--store", root, *extra])
        entry["spikes" + "".join(extra)] = [rc, json.loads(text)]
    entry["spikes_text"] = list(_cli(["spikes", name, "--all", "--store", root]))
    spikes = store.spikes(name)
    entry["diagnose"] = [
        list(_cli(["diagnose", name, "--step", str(s["peak"]), "--json", "--store", root])) for s in spikes[:3]
    ]
    info = store.run_info(name)
    entry["meta"] = jsonable(info.meta)
    facts = run_facts(store.run_view(name))
    results = evaluate_checklist(stored_config(info.meta), facts)
    entry["facts"] = jsonable(facts)
    entry["checklist"] = jsonable(results)
    entry["checklist_md"] = checklist_markdown(results)
    export = Path(root) / f"{name}.csv"
    store.export(name, "csv", export)
    entry["export_sha"] = hashlib.sha256(export.read_bytes()).hexdigest()
    curves = [
        (m, store.read_series(name, m, buckets=400))
        for m in ("loss", "grad_norm", "lr", "grad_norm_clipped")
        if m in info.metrics
    ]
    if curves:
        panels = [Panel(m, m, [(m, s)], log_y=m == "lr") for m, s in curves]
        entry["fig"] = [
            panels_figure(panels, store.events(name), spikes, 0.3, None, selected=selected).to_json()
            for selected in (None, 0 if spikes else None)
        ]
        lines = [Line(m, s.steps.astype(float), s.values, smooth=s.values * 0.9) for m, s in curves]
        entry["cmp"] = compare_figure(lines, "step", "v", log_y=False).to_json()
    return entry


def _simulations() -> dict[str, Any]:
    from stab_core.simulate import demo_specs, scenario_specs, simulate_run

    sims = {}
    for spec in [*demo_specs(), *scenario_specs()]:
        run = simulate_run(spec, seed=3)
        digest = hashlib.sha256()
        for table in (run.run_level, run.per_rank):
            for key in sorted(table):
                digest.update(key.encode())
                digest.update(np.ascontiguousarray(table[key]).tobytes())
        sims[spec.name] = [digest.hexdigest(), jsonable(run.truth), jsonable(run.events), jsonable(run.meta)]
    return sims


def dump() -> dict[str, Any]:
    """Every output named in the module docstring, by name."""
    from pages.parts.charts import schedule_figure
    from stab_core.decision_tree import DECISION_TREE
    from stab_core.evaluation import evaluate_detection
    from stab_core.tree_walk import tree_to_dot
    from tests.golden_score import build_store, golden_files, load, score_all, sensitivity_rows

    out: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as root:
        goldens = [load(p) for p in golden_files()]
        store = build_store(Path(root), goldens)
        out["scores"] = jsonable(score_all(store, goldens))
        out["sensitivities"] = sensitivity_rows(store, goldens)
        out["runs"] = {name: _run_entry(store, root, name) for name in sorted(i.name for i in store.list_runs())}
    steps = np.arange(200)
    lr = np.minimum(steps / 20, 1.0) * 3e-4
    figure = schedule_figure(steps, {"cos": lr, "lin": lr * 0.5}, [(20, "warmup_end", 3e-4)], (steps, lr, "logged"))
    out["schedule_fig"] = figure.to_json()
    out["dot"] = tree_to_dot()
    out["tree"] = jsonable(DECISION_TREE)
    out["evaluate_detection"] = jsonable(evaluate_detection(12, 0))
    out["evaluate_detection_7"] = jsonable(evaluate_detection(6, 7))
    out["sims"] = _simulations()
    return out


def main() -> int:
    if len(sys.argv) != 2:
        print("usage: python -m tests.behaviour_dump OUT.json", file=sys.stderr)
        return 2
    Path(sys.argv[1]).write_text(json.dumps(dump(), indent=1, sort_keys=True, default=repr))
    return 0


if __name__ == "__main__":
    sys.exit(main())
