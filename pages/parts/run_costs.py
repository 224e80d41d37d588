"""What a run's spikes cost: the cost inputs every page prices them with, the priced spike table the
Spikes, Cost and Scenarios pages show, and dollars for display."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

import pandas as pd  # type: ignore[import-untyped]
import streamlit as st

from ingest.store import RunInfo
from pages.parts.incident_view import incident_span, incident_words
from pages.parts.store_access import meta_revision, read_spikes, store_at, store_root
from pages.parts.widgets import float_or_nan
from stab_core.analysis import outcome as incident_outcome
from stab_core.cost import CostInputs


@st.cache_data(show_spinner=False, max_entries=256)
def _cost_inputs(root: str, name: str, gen: int, meta_rev: int, _info: RunInfo) -> dict[str, Any]:
    # keyed by the run's generation and metadata revision; the catalog row is the caller's (not hashed)
    from ingest.services.run_cost import run_cost_inputs

    return asdict(run_cost_inputs(store_at(root), _info))


def run_cost(info: RunInfo) -> CostInputs:
    """The GPUs, USD per GPU-hour and step time every page prices ``info``'s spikes with, each with where
    it came from (``stab_core.cost.resolve_cost_inputs``: metadata, else measured, else assumed/unknown)."""
    return CostInputs(**_cost_inputs(store_root(), info.name, info.gen, meta_revision(info), info))


@st.cache_data(show_spinner=False, max_entries=256)
def _priced_spikes(
    root: str, name: str, gen: int, analysis_gen: int, meta_rev: int, inputs: dict[str, Any], _spikes: list[Any]
) -> tuple[list[dict[str, Any]], list[tuple[float, float, float]]]:
    """The spikes ``_spikes`` (the run's, as read for this key; not hashed) and, per spike, (steps
    charged, GPU-hours, USD) priced with ``inputs`` (a CostInputs)."""
    from ingest.services.run_cost import priced_run_spikes

    return priced_run_spikes(store_at(root), name, CostInputs(**inputs), _spikes)


def priced_spikes(
    info: RunInfo, spikes: list[dict[str, Any]] | None = None, inputs: CostInputs | None = None
) -> pd.DataFrame:
    """The spike table: one row per event with its outcome, cause and price, with :func:`run_cost`'s inputs
    (``ingest.services.run_cost.priced_run_spikes``: lost steps, or a rollback when diverged). The Spikes and Cost
    pages both show this table; GPU-hours and USD are NaN (unknown) when the step time is. ``spikes``
    and ``inputs``: what the page already read this rerun (``read_spikes``, :func:`run_cost`), else
    read here."""
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
    if spikes is None:
        spikes = read_spikes(info)
    priced_with = asdict(inputs if inputs is not None else run_cost(info))
    key = (store_root(), info.name, info.gen, info.analysis_gen, meta_revision(info))
    spikes, costs = _priced_spikes(*key, priced_with, spikes)
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
