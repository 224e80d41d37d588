"""What a stored run's spikes cost: the inputs read from the run (``stab_core.cost.resolve_cost_inputs``)
and the priced spikes, one computation for the Spikes table, the Cost page and the scenarios."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np

from stab_core.cost import CostInputs, resolve_cost_inputs

if TYPE_CHECKING:
    from ingest.store import Store


def measured_step_time_s(store: Store, name: str) -> float | None:
    """Median of the run's logged ``step_time_s`` (s), or None when it logs none."""
    if "step_time_s" not in store.run_info(name).metrics:
        return None
    values = store.read_series(name, "step_time_s").values
    finite = values[np.isfinite(values) & (values > 0)]
    return float(np.median(finite)) if finite.size else None


def wall_step_time_s(store: Store, name: str) -> float | None:
    """Median wall-clock seconds per step between consecutive logged ``loss`` rows that carry a wall time
    (a log every N steps counts N steps), or None when the log has no wall times."""
    steps, wall = store.read_wall_times(name, "loss")
    if steps.size < 2:
        return None
    d_step, d_wall = np.diff(steps).astype(np.float64), np.diff(wall)
    keep = (d_step > 0) & (d_wall > 0) & np.isfinite(d_wall)
    return float(np.median(d_wall[keep] / d_step[keep])) if keep.any() else None


def run_cost_inputs(store: Store, name: str) -> CostInputs:
    """The GPUs, price and step time the run is priced with, each with its source (see
    ``stab_core.cost.resolve_cost_inputs``: the metadata a user set or a log stated, else measured)."""
    info = store.run_info(name)
    measured = measured_step_time_s(store, name)
    wall = None if measured is not None else wall_step_time_s(store, name)
    return resolve_cost_inputs(info.meta, info.ranks, measured_step_time_s=measured, wall_step_time_s=wall)


def priced_run_spikes(
    store: Store, name: str, inputs: CostInputs
) -> tuple[list[dict[str, Any]], list[tuple[float, float, float]]]:
    """The run's spikes and, per spike, (steps charged, GPU-hours, USD): recovered spikes cost their lost
    steps, diverged ones the rollback to the last checkpoint before them (``ingest.run_analyses``). With an
    unknown step time the steps are still counted and the GPU-hours and USD are NaN (unknown, not 0)."""
    from ingest.run_analyses import price_run_spikes

    step = inputs.step_time_s if inputs.step_time_s is not None else 1.0  # 1.0 only counts steps; costs dropped
    spikes, bill = price_run_spikes(
        store, name, gpus=inputs.gpus, usd_per_gpu_hour=inputs.usd_per_gpu_hour, step_time_s=step
    )
    costs = [
        (float(n), c.gpu_hours, c.usd) if inputs.priced else (float(n), math.nan, math.nan)
        for n, c in zip(bill.steps_charged, bill.per_spike, strict=True)
    ]
    return spikes, costs
