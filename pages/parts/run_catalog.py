"""The Runs page's catalog table: one row per run with its status, last loss, spikes, alerts, tags and notes."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import pandas as pd  # type: ignore[import-untyped]

from ingest.services.run_status import damaged_status
from ingest.store import RunInfo
from ingest.store.run_meta import run_format, run_tags
from ingest.store.storage_errors import DamagedRunFile
from pages.parts.alert_banners import run_alerts
from pages.parts.store_access import last_finite, run_status
from pages.parts.widgets import float_or_nan


def run_catalog(runs: Sequence[RunInfo], summary: dict[str, dict[str, Any]]) -> pd.DataFrame:
    """The Runs table: one row per run with its status (``run_status``), last finite loss and its step
    (``last_finite``, as Compare shows them), spikes, worst spike, alerts, tags and notes (what
    ``stabscope meta RUN tags=a,b notes=...`` set)."""
    rows = []
    for r in runs:
        s = summary.get(r.name, {})
        try:
            loss_step, loss = last_finite(r, "loss")
            status, alerts = run_status(r), "; ".join(run_alerts(r))
        except DamagedRunFile:  # the other runs' rows are still shown; the run's own page says more
            loss_step, loss, status, alerts = None, math.nan, damaged_status(r.name), ""
        rows.append(
            {
                "name": r.name,
                "status": status,
                "steps": r.n_steps,
                "ranks": r.ranks or None,  # None: a run-level log (no per-rank data), shown as a dash
                "last loss": loss,
                "last loss step": loss_step,
                "spikes": int(s.get("n_spikes", 0)),
                "worst spike (x)": float_or_nan(s.get("worst_ratio")),
                "alerts": alerts,
                "tags": ", ".join(run_tags(r.meta)),
                "format": run_format(r.source),
                "notes": str(r.meta.get("notes") or ""),
                "first–last": f"{r.first_step}–{r.last_step}" if r.first_step is not None else "",
                "rejected": r.rejected,
                "updated": r.updated,
            }
        )
    table = pd.DataFrame(rows)
    return table.astype({"last loss step": "Int64"}) if rows else table
