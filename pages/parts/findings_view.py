"""The overfitting and throughput-loss section of the overview and Spikes pages."""

from __future__ import annotations

import streamlit as st

from ingest.store import RunInfo
from pages.parts.store_access import read_findings

ICONS = {"overfitting": ":material/trending_up:", "throughput_loss": ":material/speed:"}


def show_findings(info: RunInfo) -> None:
    """One warning per finding (``pages.parts.store_access.read_findings``) with what to do; a caption
    saying what was checked when there is none."""
    entries = read_findings(info)
    st.markdown("#### Overfitting and throughput")
    if not entries:
        checked = [m for m in ("val_loss", "throughput_tok_s", "step_time_s") if m in info.metrics]
        listed = ", ".join(f"`{m}`" for m in checked)
        none = "the run logs no val loss, tokens/s or step time to check."
        st.caption("Nothing found: " + (f"checked {listed}." if checked else none))
        return
    for entry in entries:
        st.warning(str(entry["summary"]), icon=ICONS.get(str(entry["kind"])))
        for action in entry.get("actions", []):
            st.caption(action)
