"""Alerts of a run as the pages show them: the live runs' banners on every page and the Runs table's
column; the same alerts ``stabscope watch --on-alert`` sends (``ingest.services.run_alerts``)."""

from __future__ import annotations

from collections.abc import Sequence

import streamlit as st

from ingest.services.run_alerts import run_alerts as alerts_of_run
from ingest.store import RunInfo
from pages.parts.store_access import meta_revision, store_at, store_root


@st.cache_data(show_spinner=False, max_entries=256)
def _alerts(root: str, name: str, gen: int, analysis_gen: int, meta_rev: int, status: str) -> list[str]:
    # status is in the key: a run that stops being live keeps its generation but loses its "new spike"
    return [alert.message for alert in alerts_of_run(store_at(root), name, live=status == "live")]


def run_alerts(info: RunInfo) -> list[str]:
    """Alerts for a run (cached per generation): diverged or recent spikes, saturated clipping,
    stragglers; the same ones ``stabscope watch --on-alert`` sends (``ingest.services.run_alerts``)."""
    return _alerts(store_root(), info.name, info.gen, info.analysis_gen, meta_revision(info), info.status)


def alert_banner(runs: Sequence[RunInfo]) -> None:
    """Warning banners for the live runs' alerts (the Runs table lists every run's)."""
    for info in runs:
        if info.status == "live":
            for alert in run_alerts(info):
                st.warning(f"**{info.name}**: {alert}", icon=":material/notifications_active:")
