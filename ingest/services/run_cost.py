"""What a stored run's spikes cost: the inputs read from the run (``stab_core.cost.resolve_cost_inputs``)
and the priced spikes, one computation for the Spikes table, the Cost page and the scenarios (the
arithmetic is ``stab_core.cost``; this module reads a run's inputs for it from the store)."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np

from ingest.formats.accounting import VALUELESS_REASONS
from stab_core.cost import CostInputs, SpikeBill, price_spikes, resolve_cost_inputs, rollback_steps

if TYPE_CHECKING:
    from ingest.store import RunInfo, Store


def measured_step_time_s(store: Store, info: RunInfo) -> float | None:
    """Median of the run's logged ``step_time_s`` (s), or None when it logs none."""
    if "step_time_s" not in info.metrics:
        return None
    values = store.read_series(info.name, "step_time_s").values
    finite = values[np.isfinite(values) & (values > 0)]
    return float(np.median(finite)) if finite.size else None


CUMULATIVE_CLOCKS = ("elapsed_time_s",)
"""Metrics that are a cumulative clock (s since the run began, e.g. LLaMA-Factory's ``elapsed_time``): its
increase between two logged steps over the steps between them is the mean step time there, as exact as a
wall time per row (issue #32: a step time in any unit feeds the cost and throughput views)."""


def wall_step_time_s(store: Store, name: str) -> float | None:
    """Median wall-clock seconds per step between consecutive logged ``loss`` rows that carry a wall time
    (a log every N steps counts N steps; a run without a loss: the first of its metrics whose rows carry
    one, as an RL Monitor's episode return), else between consecutive samples of a cumulative clock
    (:data:`CUMULATIVE_CLOCKS`), or None when the log has neither."""
    metrics = store.run_info(name).metrics
    steps, wall = store.read_wall_times(name, "loss")
    for metric in metrics if steps.size < 2 and "loss" not in metrics else ():
        steps, wall = store.read_wall_times(name, metric)
        if steps.size >= 2:
            break
    if steps.size < 2:
        clock = next((m for m in CUMULATIVE_CLOCKS if m in metrics), None)
        if clock is None:
            return None
        series = store.read_series(name, clock)
        finite = np.isfinite(series.values)
        steps, wall = series.steps[finite], series.values[finite]
        if steps.size < 2:
            return None
    d_step, d_wall = np.diff(steps).astype(np.float64), np.diff(wall)
    keep = (d_step > 0) & (d_wall > 0) & np.isfinite(d_wall)
    return float(np.median(d_wall[keep] / d_step[keep])) if keep.any() else None


def run_cost_inputs(store: Store, info: RunInfo) -> CostInputs:
    """The GPUs, price and step time run ``info`` (its catalog row, as read by the caller) is priced with,
    each with its source (see ``stab_core.cost.resolve_cost_inputs``: the metadata a user set or a log
    stated, else measured)."""
    measured = measured_step_time_s(store, info)
    wall = None if measured is not None else wall_step_time_s(store, info.name)
    return resolve_cost_inputs(info.meta, info.ranks, measured_step_time_s=measured, wall_step_time_s=wall)


def price_run_spikes(
    store: Store,
    name: str,
    *,
    gpus: int,
    usd_per_gpu_hour: float,
    step_time_s: float,
    restart_overhead_s: float = 0.0,
    spikes: list[dict[str, Any]] | None = None,
) -> tuple[list[dict[str, Any]], SpikeBill]:
    """The run's detected spikes priced with ``step_time_s`` (s) and ``gpus``: recovered spikes cost
    their lost steps, diverged ones a rollback to the last ``checkpoint`` event before them (or their
    lost steps when no checkpoint was logged). ``spikes``: the run's stored spikes as the caller read
    them (read here when None). Returns ``(spikes, bill)``."""
    if spikes is None:
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


def priced_run_spikes(
    store: Store, name: str, inputs: CostInputs, spikes: list[dict[str, Any]] | None = None
) -> tuple[list[dict[str, Any]], list[tuple[float, float, float]]]:
    """The run's spikes (``spikes`` as the caller read them, else read here) and, per spike, (steps
    charged, GPU-hours, USD): recovered spikes cost their lost steps, diverged ones the rollback to the
    last checkpoint before them (``price_run_spikes``). With an unknown step time the steps are still
    counted and the GPU-hours and USD are NaN (unknown, not 0)."""
    step = inputs.step_time_s if inputs.step_time_s is not None else 1.0  # 1.0 only counts steps; costs dropped
    spikes, bill = price_run_spikes(
        store, name, gpus=inputs.gpus, usd_per_gpu_hour=inputs.usd_per_gpu_hour, step_time_s=step, spikes=spikes
    )
    costs = [
        (float(n), c.gpu_hours, c.usd) if inputs.priced else (float(n), math.nan, math.nan)
        for n, c in zip(bill.steps_charged, bill.per_spike, strict=True)
    ]
    return spikes, costs


VALUELESS_LINE_KINDS = VALUELESS_REASONS  # the import account's own kind names
"""Kinds of line an import skips that carry no per-step value (the import report's ``ignored`` kinds). Any
other kind skipped (a progress bar's ``s/it``, a line of unknown layout, values without a step) may carry
the step time the readers did not read."""


def skipped_timing_lines(info: RunInfo) -> dict[str, int]:
    """The lines of the run's import that were skipped and may carry a step time: {kind: count} of the
    import report's ``ignored`` kinds outside :data:`VALUELESS_LINE_KINDS` (empty: none, or no report)."""
    ignored = ((info.meta.get("import_report") or {}).get("ignored")) or {}
    return {
        kind: int(entry.get("count", 0))
        for kind, entry in ignored.items()
        if kind not in VALUELESS_LINE_KINDS and isinstance(entry, dict) and entry.get("count")
    }


def no_step_time_words(info: RunInfo) -> str:
    """Why run ``info`` has no step time, as a claim that holds (issue #32): "logs no step time and no
    wall-clock times" only when its import read every line that could carry one; else that none was read,
    with the skipped lines that may hold it (a claim about the log its premise cannot check is not said)."""
    skipped = skipped_timing_lines(info)
    if not skipped:
        return "logs no step time and no wall-clock times"
    kinds = ", ".join(f"{count} {kind} line(s)" for kind, count in sorted(skipped.items()))
    return f"has no step time read from its log (skipped: {kinds}, which may carry one)"
