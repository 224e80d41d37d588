"""``stabscope experiment``: train every (mechanism, arm, seed) run, in parallel processes, write each
into the store, and write the experiment's results (``<store>/experiments/<id>.json``).

Runs are independent single-process trainings (``--jobs`` of them at a time, one CPU thread each):
on a 2-core machine two runs side by side use both cores, where one run split over two gloo ranks
would spend part of them on all-reduces of a model this small. The results file is rewritten after
every finished run (``complete`` false, a note saying how many), so an experiment stopped early
leaves its largest completed subset, seed-major and so still paired across arms.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import platform
import socket
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from ingest.errors import StabScopeError
from ingest.training.experiment import ExperimentConfig, run_and_measure, run_specs
from ingest.training.experiment_data import cached_corpus
from ingest.training.experiment_results import (
    ARMS,
    MECHANISMS,
    ExperimentResults,
    Machine,
    RunResult,
    write_results,
)
from ingest.training.experiment_summary import arm_differences, claim_checks, summarise_arms
from ingest.training.toy_model import ModelShape

QUICK = {"steps": 300, "seeds": 2}
"""``--quick``: one mechanism (B unless --mechanism names one), 2 seeds, 300 steps."""
CUDA_SHAPE = ModelShape(d_model=256, n_layers=4, n_heads=8, seq_len=128)
"""``--device cuda``: a larger model (and batch 32), one run at a time."""


def _machine(device: str) -> Machine:
    import torch

    return Machine(
        hostname=socket.gethostname(),
        cpus=os.cpu_count() or 1,
        load_average_1m=round(os.getloadavg()[0], 2),
        device=device if device == "cpu" else torch.cuda.get_device_name(0),
        torch_version=str(torch.__version__),
        python_version=platform.python_version(),
    )


def build_results(
    config: ExperimentConfig,
    command: str,
    machine: Machine,
    created: str,
    runs: Sequence[RunResult],
    planned: int,
) -> ExperimentResults:
    """The results of ``runs`` (all ``planned`` of them, or the subset finished so far)."""
    ordered = sorted(runs, key=lambda r: (r.mechanism, list(ARMS).index(r.arm), r.seed))
    groups = {(s.mechanism, s.arm): s.seed_group for s in run_specs(config)}
    complete = len(ordered) == planned
    notes = () if complete else (f"subset: {len(ordered)} of {planned} runs finished (seed-major order)",)
    return ExperimentResults(
        experiment_id=config.experiment_id,
        created_utc=created,
        command=command,
        config=config.as_json(),
        machine=machine,
        runs=tuple(ordered),
        arms=summarise_arms(ordered, groups),
        differences=arm_differences(ordered),
        claim_checks=claim_checks(ordered),
        complete=complete,
        notes=notes,
    )


def recompute(results: ExperimentResults) -> ExperimentResults:
    """``results`` with its aggregates computed again from its runs by this version's statistics
    (e.g. a field added to the claim checks since the results were written); the runs are kept."""
    groups = {(a.mechanism, a.arm): a.seed_group for a in results.arms}
    return replace(
        results,
        arms=summarise_arms(results.runs, groups),
        differences=arm_differences(results.runs),
        claim_checks=claim_checks(results.runs),
    )


def _init_worker() -> None:
    import torch

    torch.set_num_threads(1)


def run_experiment(
    config: ExperimentConfig,
    store_root: Path,
    *,
    command: str,
    cache_dir: Path | None = None,
    on_run: Callable[[RunResult], None] | None = None,
) -> ExperimentResults:
    """Train and measure every run of ``config`` into ``store_root``; write and return the results."""
    from ingest.training.spawn import main_module_hidden, single_threaded_children

    config = config.resolved()
    specs = run_specs(config)
    cache = cache_dir or Path(tempfile.gettempdir()) / "stabscope-experiment-cache"
    cached_corpus(cache)  # built once here, memory-mapped by every worker
    machine = _machine(config.device)
    created = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    done: list[RunResult] = []

    with (
        single_threaded_children(),
        main_module_hidden(),
        ProcessPoolExecutor(
            max_workers=config.jobs, mp_context=multiprocessing.get_context("spawn"), initializer=_init_worker
        ) as pool,
    ):
        pending: set[Future[RunResult]] = {
            pool.submit(run_and_measure, spec, str(store_root), str(cache)) for spec in specs
        }
        try:
            while pending:
                finished, pending = wait(pending, return_when=FIRST_COMPLETED)
                for future in finished:
                    result = future.result()
                    done.append(result)
                    write_results(store_root, build_results(config, command, machine, created, done, len(specs)))
                    if on_run is not None:
                        on_run(result)
        except BaseException:
            for future in pending:
                future.cancel()
            raise
    results = build_results(config, command, machine, created, done, len(specs))
    results = replace(results, lead_time=measured_lead_time(store_root, [r.run for r in done]))
    write_results(store_root, results)
    return results


def measured_lead_time(store_root: Path, runs: Sequence[str]) -> tuple[dict[str, Any], ...]:
    """The early-warning table over the experiment's own runs (``ingest.training.lead_time``)."""
    from ingest.services.run_analyses import open_analysed_store
    from ingest.training.lead_time import lead_row_dict, lead_rows

    return tuple(lead_row_dict(row) for row in lead_rows(open_analysed_store(store_root), runs))


def config_from_args(args: argparse.Namespace) -> ExperimentConfig:
    experiment_id = args.id or datetime.now(UTC).strftime("%Y%m%dt%H%M")
    mechanisms = tuple(MECHANISMS) if args.mechanism == "all" else (args.mechanism,)
    if args.quick:
        mechanisms = ("B",) if args.mechanism == "all" else mechanisms
    arms = tuple(a.strip() for a in args.arms.split(",")) if args.arms else tuple(ARMS)
    config = ExperimentConfig(experiment_id=experiment_id, mechanisms=mechanisms, arms=arms, jobs=args.jobs)
    if args.quick:
        config = replace(config, **QUICK)  # type: ignore[arg-type]
    if args.device == "cuda":
        config = replace(config, device="cuda", shape=CUDA_SHAPE, batch=32, jobs=1)
    if args.steps is not None:
        config = replace(config, steps=args.steps)
    if args.seeds is not None:
        config = replace(config, seeds=args.seeds)
    return config.resolved()


def command_line(args: argparse.Namespace) -> str:
    """The command as the user gave it (the options that were set), for the results."""
    words = ["stabscope", "experiment"]
    for flag in ("mechanism", "arms", "seeds", "steps", "device", "jobs", "id"):
        value = getattr(args, flag)
        default = {"mechanism": "all", "device": "cpu", "jobs": 2}.get(flag)
        if value is not None and value != default:
            words += [f"--{flag}", str(value)]
    if args.quick:
        words.append("--quick")
    if args.store:
        words += ["--store", str(args.store)]
    return " ".join(words)


def cmd_experiment(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    from ingest.store.paths import default_store_location

    config = config_from_args(args)
    if config.device == "cuda":
        import torch

        if not torch.cuda.is_available():
            raise StabScopeError("--device cuda: torch sees no CUDA device on this machine; use --device cpu")
    location = args.store or default_store_location()
    if str(location).startswith("s3://"):
        raise StabScopeError(
            f"stabscope experiment writes its runs and results into a local store; {location} is object "
            "storage: pass --store PATH (a folder), then copy the runs over if needed"
        )
    store_root = Path(location).expanduser()
    command = command_line(args)
    runs = len(run_specs(config))
    print(
        f"experiment {config.experiment_id}: {runs} runs ({', '.join(config.mechanisms)} x {len(config.arms)} arms x "
        f"{config.seeds} seeds, {config.steps} steps each), {config.jobs} at a time, into {store_root}",
        file=sys.stderr,
        flush=True,
    )
    started = time.monotonic()
    with tqdm(total=runs, desc="experiment runs", unit="run", file=sys.stderr) as bar:

        def advance(result: RunResult) -> None:
            bar.set_postfix_str(f"{result.run}: {'spike' if result.spiked else 'no spike'}")
            bar.update()

        results = run_experiment(config, store_root, command=command, on_run=advance)
    print(
        f"done in {time.monotonic() - started:.0f} s; results in "
        f"{store_root / 'experiments' / (config.experiment_id + '.json')}",
        file=sys.stderr,
    )
    if args.json:
        from ingest.training.experiment_results import results_to_json

        print(results_to_json(results))
    return 0


def add_cli(add: Callable[..., argparse.ArgumentParser]) -> None:
    """Register ``experiment`` through ingest.cli's ``add(name, fn, help)``."""
    p = add(
        "experiment",
        cmd_experiment,
        "measure clipping vs warmup restarts on real CPU training runs (spikes, recovery, divergence, val loss)",
    )
    p.add_argument("--mechanism", choices=[*MECHANISMS, "all"], default="all", help="instability to provoke")
    p.add_argument("--arms", default=None, help=f"comma-separated subset of {', '.join(ARMS)} (default all)")
    p.add_argument("--seeds", type=int, default=None, help="seeds per arm (default 8; --quick 2)")
    p.add_argument("--steps", type=int, default=None, help="optimizer steps per run (default 800; --quick 300)")
    p.add_argument("--quick", action="store_true", help="one mechanism (B by default), 2 seeds, 300 steps")
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu", help="cuda: a larger model, one run at a time")
    p.add_argument("--jobs", type=int, default=2, help="runs trained at the same time (default 2)")
    p.add_argument("--id", default=None, help="experiment id (default: the UTC time, e.g. 20261202t1335)")
