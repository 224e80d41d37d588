"""Demo runs for the embedded default store, written through the real ShardWriter -> compact path.

The runs come from ``stab_core.simulate`` (documented there): a few small runs with injected spikes,
and the three playbook scenarios. A new user sees a populated dashboard on first start.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from ingest.shards import ShardWriter
from ingest.store import Store

DEMO_SEEDED_KEY = "demo_seeded"


def write_simulated_shards(sim: Any, shard_dir: Path, wall_start: float = 1.7e9) -> None:
    """Write a ``stab_core.simulate.SimulatedRun`` as per-rank shards (rank 0 also writes run-level)."""
    steps = np.asarray(sim.steps, dtype=np.int64)
    step_time = float(sim.meta.get("step_time_s", 1.0))
    wall = wall_start + (steps - steps[0]) * step_time
    n_ranks = next(iter(sim.per_rank.values())).shape[0] if sim.per_rank else 1
    for rank in range(n_ranks):
        with ShardWriter(shard_dir, rank) as writer:
            if rank == 0:
                writer.write_meta(sim.meta)
                for e in sim.events:
                    writer.event(e.step, e.kind, e.label, **e.detail)
                writer.write_columns(steps, sim.run_level, rank=-1, wall_time=wall)
            present = None if sim.present_rank is None else sim.present_rank[rank]
            # A rank that logged nothing at a step is a gap (null), not a logged NaN.
            columns = {
                name: matrix[rank] if present is None else np.ma.masked_array(matrix[rank], mask=~present)
                for name, matrix in sim.per_rank.items()
            }
            if columns:
                writer.write_columns(steps, columns, wall_time=wall)


def seed_demo_store(
    store: Store,
    *,
    force: bool = False,
    progress: Callable[[int, int], None] | None = None,
    include_scenarios: bool = True,
) -> list[str]:
    """Create the demo runs (once per store unless ``force``); returns their names."""
    from stab_core import simulate

    if not force and store.get_setting(DEMO_SEEDED_KEY):
        return []
    specs = list(simulate.demo_specs())
    if include_scenarios:
        specs += list(simulate.scenario_specs())
    names = []
    for i, spec in enumerate(specs):
        sim = simulate.simulate_run(spec, seed=i)
        name = spec.name
        if store.has_run(name):
            store.delete_run(name)
        shard_dir = Path(tempfile.mkdtemp(prefix="stabscope-demo-"))
        try:
            write_simulated_shards(sim, shard_dir)
            store.compact(name, shard_dir)
        finally:
            shutil.rmtree(shard_dir, ignore_errors=True)
        names.append(name)
        if progress:
            progress(i + 1, len(specs))
    store.set_setting(DEMO_SEEDED_KEY, "1")
    return names
