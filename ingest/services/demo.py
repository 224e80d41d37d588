"""Demo runs for the embedded default store, written through the real ShardWriter -> compact path.

The runs come from ``stab_core.simulate`` (documented there): a few small runs with injected spikes,
and the three playbook scenarios. A new user sees a populated dashboard on first start.

Seeding happens once per store however many processes and dashboard sessions start at once: a seeder
holds the store's seeding lock (``layout.demo_seeding_lock_file``) and writes the ``demo_seeded``
setting last; the others wait for the lock (``on_wait`` lets them say the demo runs are being prepared)
and then find the setting written. Each demo run is written holding its own run's writer lock.
"""

from __future__ import annotations

import datetime as dt
import os
import shutil
import tempfile
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from ingest.store import Store
from ingest.store.layout import demo_seeding_lock_file
from ingest.store.run_lock import LockHolder, WaitReport, WriterBusy, held
from ingest.store.shards import ShardWriter

DEMO_SEEDED_KEY = "demo_seeded"
"""The store setting written once the demo runs are all in: who wrote them and when (any value: seeded)."""

SEEDING_WAIT_S = 600.0
"""Seconds a process waits for another one seeding the same store before giving up."""


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


def demo_run_names(*, include_scenarios: bool = True) -> list[str]:
    """The names of the demo runs ``seed_demo_store`` writes, in the order it writes them."""
    from stab_core import simulate

    specs = list(simulate.demo_specs()) + (list(simulate.scenario_specs()) if include_scenarios else [])
    return [spec.name for spec in specs]


def seed_demo_store(
    store: Store,
    *,
    force: bool = False,
    progress: Callable[[int, int], None] | None = None,
    include_scenarios: bool = True,
    on_wait: WaitReport | None = None,
    wait_s: float = SEEDING_WAIT_S,
) -> list[str]:
    """Create the demo runs (once per store unless ``force``); returns their names, or ``[]`` when this
    call wrote none: the store had them, or another process or session seeded it while this one waited.

    ``force`` re-creates them, unless a seeding another caller started finished while this one waited
    for it (two ``stabscope demo`` started together write the runs once). While another seeder holds the
    store's seeding lock, ``on_wait(holder)`` is called now and then; after ``wait_s`` seconds of that,
    ``run_lock.WriterBusy``."""
    from stab_core import simulate

    seen = store.get_setting(DEMO_SEEDED_KEY)
    if seen and not force:
        return []
    lock = demo_seeding_lock_file(store.root)
    with held(
        lock, wait_s=wait_s, busy=lambda holder, waited_s: _seeding_busy(lock, holder, waited_s), on_wait=on_wait
    ):
        now = store.get_setting(DEMO_SEEDED_KEY)
        if now != seen or (now and not force):
            return []  # seeded by another process or session while this one waited
        specs = list(simulate.demo_specs())
        if include_scenarios:
            specs += list(simulate.scenario_specs())
        names = []
        for i, spec in enumerate(specs):
            sim = simulate.simulate_run(spec, seed=i)
            name = spec.name
            with store.writing(name):  # the old run's removal and the new one's writing, one hold
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
        stamp = dt.datetime.now().astimezone().isoformat(timespec="seconds")
        store.set_setting(DEMO_SEEDED_KEY, f"{stamp} pid {os.getpid()} {uuid.uuid4().hex[:8]}")  # last: all in
        return names


def _seeding_busy(lock: Path, holder: LockHolder | None, waited_s: float) -> WriterBusy:
    who = holder.describe() if holder is not None else "another process"
    why = f"the demo runs of this store are being prepared by {who}; waited {waited_s:.0f} s for them."
    return WriterBusy(
        f"{why} Try again when that process has finished, or stop it if it is stuck (the lock {lock} goes "
        "when its holder exits, even when killed).",
        short=f"the demo runs are being prepared by {who}",
        holder=holder,
        page=f"{why} Reload the page in a while.",
    )
