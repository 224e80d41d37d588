"""Everything a refactoring must leave unchanged, as one JSON file (issue #34): run it before and after,
then compare the two files.

    python -m tests.behaviour_dump before.json   # on the old tree
    python -m tests.behaviour_dump after.json    # on the new one
    cmp before.json after.json                   # byte for byte, or:
    python -m tests.behaviour_dump --compare before.json after.json   # exit 1 on a change

``--compare`` lists each JSON path that changed and ignores what may be added (Contract: fields are
added, never removed): keys of an object that only the second file has, and list entries whose
``kind`` is new in it (a new kind of incident in ``spikes --json``).

The store is the golden comparison's (``tests/golden_score.py``: every demo run and every real log
under ``../shared/data/real_logs``). Per run: ``stabscope spikes --json`` at the stored, low and high
sensitivity, ``spikes --all``, ``diagnose --json`` at its first three incidents, the metadata, the
checklist (facts, grades, Markdown), the stored alerts (``meta['analysis']['alerts']``), the events
the pages draw (``pages.parts.store_access.read_events``), the CSV export's SHA-256 and the overview and
compare figures' JSON. Then ``stabscope import --json`` of one log of each real format into a fresh
store (one of them also with ``--meta``), with that run's stored alerts and metadata. Then the golden scores and
sensitivity rows, ``evaluate_detection``, the tree's DOT text and
each demo and scenario simulation (its arrays' SHA-256, truth, events and metadata). Floats are
written with ``repr``: a change in the last digit shows.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import hashlib
import io
import json
import os
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
    entry["alerts"] = jsonable((info.meta.get("analysis") or {}).get("alerts"))
    entry["events"] = _page_events(root, info)
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


def _page_events(root: str, info: Any) -> list[Any]:
    """The events the pages draw for ``info`` (they read the store named by ``$STABSCOPE_STORE``)."""
    from pages.parts.store_access import read_events

    os.environ["STABSCOPE_STORE"] = root
    return jsonable([[e.step, e.kind, e.label, e.detail] for e in read_events(info)])


REAL_LOGS = Path(__file__).resolve().parents[2] / "shared" / "data" / "real_logs"

IMPORTS: dict[str, tuple[list[str], list[str]]] = {
    # run name: (files under REAL_LOGS, extra import arguments)
    "megds": (["bigscience_megds_perf_log/meg_ds_3d_gpt2_perf_n16-ds-off.out"], []),
    "tinyllama": (["hf_trainer_state_tinyllama_sft/trainer_state.json"], []),
    "lightning": (["lightning_csv_slm_124m"], []),
    "luojiu": (["llamafactory_luojiu7b_cpt/trainer_log.jsonl"], []),
    "mixtral": (["megatron_mixtral8x7b_h100/golden_values_dev_dgx_h100.json"], []),
    "llmc": (["mng_llmc_gpt2_124m/main.log"], []),
    "llmc-meta": (["mng_llmc_gpt2_124m/main.log"], ["--meta", "gpus=8", "--meta", "usd_per_gpu_hour=2.5"]),
    "fp4": (["mng_quantizedfp4/433c1732-0c3d-4099-a4a8-ec31eae49b16.txt"], []),
    "tfevents": (["tfevents_keras_mnist_toy"], []),
    "qwen3": (["torchtitan_qwen3_14b_run217/run.log"], []),
}


def _imports(root: Path) -> dict[str, Any]:
    """``stabscope import --json`` of each of ``IMPORTS`` into a fresh store at ``root``, without the
    inputs' and the store's absolute paths (they differ between checkouts), and the run's stored alerts
    and metadata (without the analyses)."""
    from ingest.store import Store

    if not REAL_LOGS.is_dir():
        raise SystemExit(f"{REAL_LOGS}: the real logs are not beside this checkout")
    os.environ["STABSCOPE_NO_DEMO"] = "1"
    out: dict[str, Any] = {}
    for run, (files, extra) in IMPORTS.items():
        paths = [str(REAL_LOGS / f) for f in files]
        rc, text = _cli(["import", *paths, "--run", run, "--json", *extra, "--store", str(root)])
        imported = json.loads(text.splitlines()[0])
        for volatile in ("files", "config", "logs"):
            imported.pop(volatile, None)
        imported = json.loads(json.dumps(imported, sort_keys=True, default=str).replace(str(root), "STORE"))
        meta = Store(root).run_info(run).meta
        user_meta = {k: v for k, v in meta.items() if k != "analysis"}  # what --meta wrote shows here
        out[run] = {
            "rc": rc,
            "import": jsonable(imported),
            "alerts": jsonable((meta.get("analysis") or {}).get("alerts")),
            "meta": jsonable(user_meta),
        }
    return out


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
        out["imports"] = _imports(Path(root) / "imports")
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


def changes(old: Any, new: Any, where: str = "") -> list[str]:
    """The JSON paths at which ``new`` is not ``old`` with only additions (see the module docstring)."""
    if isinstance(old, dict) and isinstance(new, dict):
        missing = [f"{where}/{k}: missing after" for k in old if k not in new]
        return missing + [line for k, v in old.items() if k in new for line in changes(v, new[k], f"{where}/{k}")]
    if isinstance(old, list) and isinstance(new, list):
        kinds = {e.get("kind") for e in old if isinstance(e, dict)}
        kept = [e for e in new if not (isinstance(e, dict) and "kind" in e and e["kind"] not in kinds)]
        if len(kept) != len(old):
            return [f"{where}: {len(old)} entries before, {len(kept)} after"]
        return [line for i, (a, b) in enumerate(zip(old, kept, strict=True)) for line in changes(a, b, f"{where}[{i}]")]
    return [] if old == new else [f"{where}: differs"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("paths", nargs="+", type=Path, help="OUT.json, or with --compare BEFORE.json AFTER.json")
    parser.add_argument("--compare", action="store_true", help="list what changed between two dumps")
    args = parser.parse_args(argv)
    if args.compare:
        if len(args.paths) != 2:
            parser.error("--compare takes two files: BEFORE.json AFTER.json")
        before, after = (json.loads(p.read_text()) for p in args.paths)
        problems = changes(before, after)
        for line in problems:
            print(line)
        print(f"{len(problems)} changes" + ("" if problems or before == after else " (additions only)"))
        return 1 if problems else 0
    if len(args.paths) != 1:
        parser.error("give one OUT.json")
    args.paths[0].write_text(json.dumps(dump(), indent=1, sort_keys=True, default=repr))
    return 0


if __name__ == "__main__":
    sys.exit(main())
