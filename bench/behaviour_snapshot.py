"""What a user sees of the real public logs, written to one folder so that two versions of the code can be
compared byte for byte (issue #34: "behaviour unchanged").

For each folder of ``/work/shared/data/real_logs`` (``../shared`` beside the checkout) this imports the logs
into a fresh store through the CLI (``stabscope import --json``; one of them also with ``--meta``), then keeps:
``stabscope spikes --json``, the stored alerts JSON (``meta['analysis']['alerts']``), ``stabscope export``
as CSV and the events the pages draw (``pages.parts.store_access.read_events``: logged events and LR transitions).

    python -m bench.behaviour_snapshot OUT_DIR            # write a snapshot
    python -m bench.behaviour_snapshot --compare A B      # list what differs (exit 1 when anything does)

``--compare`` ignores what may be added (Contract: fields are added, never removed): entries of
``spikes --json`` whose ``kind`` is new in B, and keys of a JSON object that only B has.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
REAL_LOGS = REPO.parent / "shared" / "data" / "real_logs"

CASES: dict[str, tuple[list[str], list[str]]] = {
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


def _cli(store: Path, *args: str) -> str:
    proc = subprocess.run(
        [sys.executable, "-m", "ingest", *args, "--store", str(store)],
        capture_output=True,
        text=True,
        cwd=REPO,
        env={**os.environ, "STABSCOPE_NO_DEMO": "1"},
        check=False,
    )
    if proc.returncode != 0:
        raise SystemExit(f"stabscope {' '.join(args)} failed ({proc.returncode}): {proc.stderr[-2000:]}")
    return proc.stdout


def _without_paths(value: Any, store: Path) -> Any:
    """``value`` with the temporary store's path replaced by a fixed word (it differs between runs)."""
    text = json.dumps(value, sort_keys=True, default=str).replace(str(store), "STORE")
    return json.loads(text)


def snapshot(out: Path) -> None:
    """Write the snapshot of every case into ``out`` (one folder per run)."""
    if not REAL_LOGS.is_dir():
        raise SystemExit(f"{REAL_LOGS}: the real logs are not beside this checkout")
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="stabscope-snapshot-") as tmp:
        store = Path(tmp) / "store"
        for run, (files, extra) in CASES.items():
            paths = [str(REAL_LOGS / f) for f in files]
            folder = out / run
            folder.mkdir(exist_ok=True)
            imported = json.loads(_cli(store, "import", *paths, "--run", run, "--json", *extra).splitlines()[0])
            for volatile in ("files", "config", "logs"):  # absolute paths of the inputs: the same inputs here
                imported.pop(volatile, None)
            (folder / "import.json").write_text(json.dumps(_without_paths(imported, store), indent=1, sort_keys=True))
            spikes = json.loads(_cli(store, "spikes", run, "--json"))
            (folder / "spikes.json").write_text(json.dumps(spikes, indent=1, sort_keys=True))
            _cli(store, "export", run, "--format", "csv", "-o", str(folder / "export.csv"))
        _page_reads(store, out)


def _page_reads(store: Path, out: Path) -> None:
    """The stored alerts, the analysis summary and the events the pages draw, read in a child process
    whose store is ``store`` (the pages read ``$STABSCOPE_STORE``)."""
    code = f"""
import json, sys
from pathlib import Path
from pages.parts.store_access import get_store, read_events
store = get_store()
for info in store.list_runs():
    folder = Path({str(out)!r}) / info.name
    if not folder.is_dir():
        continue
    analysis = dict(info.meta.get("analysis") or {{}})
    (folder / "alerts.json").write_text(json.dumps(analysis.get("alerts"), indent=1, sort_keys=True))
    meta = {{k: v for k, v in info.meta.items() if k != "analysis"}}
    (folder / "meta.json").write_text(json.dumps(meta, indent=1, sort_keys=True, default=str))
    events = [[e.step, e.kind, e.label, e.detail] for e in read_events(info)]
    (folder / "events.json").write_text(json.dumps(events, indent=1, sort_keys=True, default=str))
"""
    env = {**os.environ, "STABSCOPE_STORE": str(store), "STABSCOPE_NO_DEMO": "1"}
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise SystemExit(f"page reads failed: {proc.stderr[-2000:]}")


def _added_only(old: Any, new: Any) -> bool:
    """Whether ``new`` is ``old`` with only keys added to its objects (and new-kind entries to its lists)."""
    if isinstance(old, dict) and isinstance(new, dict):
        return all(k in new and _added_only(v, new[k]) for k, v in old.items())
    if isinstance(old, list) and isinstance(new, list):
        kinds = {e.get("kind") for e in old if isinstance(e, dict)}
        kept = [e for e in new if not (isinstance(e, dict) and "kind" in e and e["kind"] not in kinds)]
        return len(old) == len(kept) and all(_added_only(a, b) for a, b in zip(old, kept, strict=True))
    return bool(old == new)


def compare(before: Path, after: Path) -> list[str]:
    """One line per file of ``before`` that ``after`` lacks or changed beyond additions."""
    problems = []
    for old in sorted(before.rglob("*")):
        if not old.is_file():
            continue
        rel = old.relative_to(before)
        new = after / rel
        if not new.is_file():
            problems.append(f"{rel}: missing after")
        elif old.suffix == ".json":
            a, b = json.loads(old.read_text()), json.loads(new.read_text())
            if a != b and not _added_only(a, b):
                problems.append(f"{rel}: differs")
            elif a != b:
                print(f"{rel}: additions only")
        elif old.read_bytes() != new.read_bytes():
            problems.append(f"{rel}: bytes differ")
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("paths", nargs="+", type=Path)
    parser.add_argument("--compare", action="store_true", help="compare two snapshot folders")
    args = parser.parse_args(argv)
    if args.compare:
        problems = compare(*args.paths)
        for line in problems:
            print(line)
        files = sum(1 for p in args.paths[0].rglob("*") if p.is_file())
        print(f"{files} files compared, {len(problems)} differ")
        return 1 if problems else 0
    snapshot(args.paths[0])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
