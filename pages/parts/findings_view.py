"""The overfitting and throughput-loss section of the overview and Spikes pages."""

from __future__ import annotations

import streamlit as st

from ingest.store import RunInfo
from pages.parts.store_access import read_findings
from stab_core.held_out import is_held_out_loss

ICONS = {"overfitting": ":material/trending_up:", "throughput_loss": ":material/speed:"}


def show_findings(info: RunInfo) -> None:
    """One warning per finding (``pages.parts.store_access.read_findings``) with what to do; a caption
    saying what was checked when there is none."""
    entries = read_findings(info)
    st.markdown("#### Overfitting and throughput")
    if not entries:
        checked = [m for m in ("val_loss", "throughput_tok_s", "step_time_s") if m in info.metrics]
        listed = ", ".join(f"`{m}`" for m in checked)
        # a YOLO results.csv logs val/box_loss, val/cls_loss ... and no total: "no val loss" would be false,
        # and overfitting is judged on the total only
        parts = [m for m in info.metrics if "val_loss" not in info.metrics and is_held_out_loss(m)]
        named = ", ".join(f"`{m}`" for m in parts[:4]) + (" ..." if len(parts) > 4 else "")
        val = f"parts of its validation loss ({named}) but no total `val_loss`" if parts else "no val loss"
        none = f"the run logs {val}, and no tokens/s or step time, to check."
        st.caption("Nothing found: " + (f"checked {listed}." if checked else none))
        if parts and checked:
            st.caption(f"Overfitting not checked: the run logs {val}.")
        return
    for entry in entries:
        st.warning(str(entry["summary"]), icon=ICONS.get(str(entry["kind"])))
        for action in entry.get("actions", []):
            st.caption(action)
