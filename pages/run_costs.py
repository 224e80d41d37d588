"""What a run's spikes cost: the cost inputs every page prices them with, the priced spike table the
Spikes, Cost and Scenarios pages show, and dollars for display."""

from __future__ import annotations

import math
from dataclasses import asdict
from typing import Any

import pandas as pd  # type: ignore[import-untyped]
import streamlit as st

from ingest.store import RunInfo
from pages.incident_view import incident_span, incident_words
from pages.store_access import meta_revision, store_at, store_root
from pages.widgets import float_or_nan
from stab_core.analysis import outcome as incident_outcome
from stab_core.cost import CostInputs


@st.cache_data(show_spinner=False, max_entries=256)
def _cost_inputs(root: str, name: str, gen: int, meta_rev: int) -> dict[str, Any]:
    from ingest.run_cost import run_cost_inputs as inputs_of_run

    return asdict(inputs_of_run(store_at(root), name))


def run_cost(info: RunInfo) -> CostInputs:
    """The GPUs, USD per GPU-hour and step time every page prices ``info``'s spikes with, each with where
    it came from (``stab_core.cost.resolve_cost_inputs``: metadata, else measured, else assumed/unknown)."""
    return CostInputs(**_cost_inputs(store_root(), info.name, info.gen, meta_revision(info)))


def run_cost_inputs(info: RunInfo) -> tuple[float, int, float]:
    """(step time in s, NaN when unknown; GPUs; USD per GPU-hour) of :func:`run_cost`."""
    inputs = run_cost(info)
    step = inputs.step_time_s if inputs.step_time_s is not None else math.nan
    return step, inputs.gpus, inputs.usd_per_gpu_hour


@st.cache_data(show_spinner=False, max_entries=256)
def _priced_spikes(
    root: str, name: str, gen: int, analysis_gen: int, inputs: dict[str, Any]
) -> tuple[list[dict[str, Any]], list[tuple[float, float, float]]]:
    """The spikes and, per spike, (steps charged, GPU-hours, USD) priced with ``inputs`` (a CostInputs)."""
    from ingest.run_cost import priced_run_spikes

    return priced_run_spikes(store_at(root), name, CostInputs(**inputs))


def priced_spikes(info: RunInfo) -> pd.DataFrame:
    """The spike table: one row per event with its outcome, cause and price, with :func:`run_cost`'s inputs
    (``ingest.run_cost.priced_run_spikes``: lost steps, or a rollback when diverged). The Spikes and Cost
    pages both show this table; GPU-hours and USD are NaN (unknown) when the step time is."""
    columns = [
        "#",
        "metric",
        "incident",
        "severity",
        "peak step",
        "start",
        "end",
        "ratio",
        "duration",
        "outcome",
        "cause",
        "confidence",
        "steps lost",
        "GPU-hours lost",
        "USD lost",
    ]
    inputs = asdict(run_cost(info))
    spikes, costs = _priced_spikes(store_root(), info.name, info.gen, info.analysis_gen, inputs)
    rows = [
        {
            "#": i,
            "metric": s["metric"],
            "incident": incident_words(s),
            "severity": str(s.get("severity") or "spike"),
            "peak step": int(s["peak"]),
            "start": incident_span(s)[0],
            "end": incident_span(s)[1],
            "ratio": float_or_nan(s.get("ratio")),
            "duration": incident_span(s)[1] - incident_span(s)[0] + 1,
            "outcome": incident_outcome(s),
            "cause": s["cause"],
            "confidence": float(s["confidence"]),
            "steps lost": costs[i][0],
            "GPU-hours lost": costs[i][1],
            "USD lost": costs[i][2],
        }
        for i, s in enumerate(spikes)
    ]
    return pd.DataFrame(rows, columns=columns)


def money(usd: float) -> str:
    """US dollars for display: cents below $100 (a short spike on a few GPUs costs cents)."""
    return f"${usd:,.2f}" if abs(usd) < 100 else f"${usd:,.0f}"
