"""The overfitting and throughput-loss section of the overview and Spikes pages."""

from __future__ import annotations

from collections.abc import Iterable

import streamlit as st

from ingest.store import RunInfo
from pages.parts.store_access import read_findings
from stab_core.findings import held_out_parts

ICONS = {"overfitting": ":material/trending_up:", "throughput_loss": ":material/speed:"}


def show_findings(info: RunInfo) -> None:
    """One warning per finding (``pages.parts.store_access.read_findings``) with what to do; a caption
    saying what was checked when there is none."""
    entries = read_findings(info)
    st.markdown("#### Overfitting and throughput")
    if not entries:
        st.caption(nothing_found(info.metrics))
        return
    for entry in entries:
        st.warning(str(entry["summary"]), icon=ICONS.get(str(entry["kind"])))
        for action in entry.get("actions", []):
            st.caption(action)


def nothing_found(metrics: Iterable[str]) -> str:
    """What the findings checked, said when they found nothing: the total ``val_loss``, else the parts of the
    validation loss a run logs without a total (a YOLO ``results.csv``: ``stab_core.findings`` judges
    overfitting on each part), and the speed series."""
    names = list(metrics)
    parts = held_out_parts(names)
    speed = [f"`{m}`" for m in ("throughput_tok_s", "step_time_s") if m in names]
    held = ["`val_loss`"] if "val_loss" in names else []
    if parts:
        held = ["the parts of its validation loss (" + ", ".join(f"`{m}`" for m in parts) + ")"]
    if not held + speed:
        return "Nothing found: the run logs no val loss, and no tokens/s or step time, to check."
    return "Nothing found: checked " + ", ".join(held + speed) + "."
