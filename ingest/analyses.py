"""Materialise each run's analyses (SNR, clipping statistics, spikes with their diagnosis) per generation.

Called by the store after every merge, so a run that grows is re-analysed; pages and the CLI read
the stored results instead of recomputing them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ingest.store import Store


def materialise(store: Store, name: str) -> None:
    """Recompute the analyses of run ``name`` if its data generation moved on."""
    info = store.run_info(name)
    if info.analysis_gen == info.gen:
        return
    try:
        from stab_core.analysis import analyze_run  # noqa: F401
    except ImportError:
        return


def run_step_time_s(store: Store, name: str) -> float | None:
    """The run's typical step time (s): median of ``step_time_s`` if logged, else ``meta['step_time_s']``,
    else the median spacing of wall-clock times between steps."""
    import numpy as np

    info = store.run_info(name)
    if "step_time_s" in info.metrics:
        values = store.read_series(name, "step_time_s").values
        finite = values[np.isfinite(values)]
        if finite.size:
            return float(np.median(finite))
    meta_value = info.meta.get("step_time_s")
    if isinstance(meta_value, int | float) and meta_value > 0:
        return float(meta_value)
    return None


def price_run_spikes(
    store: Store, name: str, *, gpus: int, usd_per_gpu_hour: float, step_time_s: float, restart_overhead_s: float = 0.0
) -> tuple[list[dict[str, Any]], Any]:
    """The run's detected spikes priced with its own step time (s) and ``gpus``: recovered spikes cost
    their lost steps, diverged ones a rollback to the last ``checkpoint`` event before them (or their
    lost steps when no checkpoint was logged). Returns ``(spikes, stab_core.cost.SpikeBill)``."""
    from stab_core.cost import price_spikes, rollback_steps

    spikes = store.spikes(name)
    checkpoints = [e.step for e in store.events(name) if e.kind == "checkpoint"]
    redo: list[float] = []
    for s in spikes:
        try:
            redo.append(float(rollback_steps(int(s["start"]), int(s["end"]), checkpoints)))
        except ValueError:
            redo.append(float(s.get("steps_lost", 0)))
    bill = price_spikes(
        [float(s.get("steps_lost", 0)) for s in spikes],
        [not bool(s["recovered"]) for s in spikes],
        step_time_s=step_time_s,
        gpus=gpus,
        usd_per_gpu_hour=usd_per_gpu_hour,
        rollback_steps_diverged=redo,
        restart_overhead_s=restart_overhead_s,
    )
    return spikes, bill
