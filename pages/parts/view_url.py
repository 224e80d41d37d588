"""The overview's view in the URL (``?run=NAME&steps=LO-HI&incident=PEAK``): a copied link reopens the
same run, step range and selected incident."""

from __future__ import annotations

import streamlit as st

from ingest.store import RunInfo

NO_INCIDENT = -1


def parse_steps(text: str | None) -> tuple[int, int] | None:
    """``"1200-1400"`` (the ``steps`` URL parameter) as a step range; None when absent or malformed."""
    try:
        a, b = (int(v) for v in (text or "").split("-"))
    except ValueError:
        return None
    return (a, b) if b > a else None


def incident_window(run: RunInfo, spike: dict[str, object]) -> tuple[int, int]:
    """The steps shown for one incident: its span padded by 3x its length (at least 50 steps) each side."""
    start, end = int(str(spike["start"])), int(str(spike["end"]))
    pad = max(50, 3 * (end - start + 1))
    return max(int(run.first_step or 0), start - pad), min(int(run.last_step or 0), end + pad)


def restore_from_url(run: RunInfo, spikes: list[dict[str, object]]) -> None:
    """A shared link (``?run=NAME&steps=LO-HI&incident=PEAK``) reopens that view, once per session:
    afterwards the widgets own the state and the URL follows them (``write_url``). An incident without
    steps opens on that incident's steps."""
    if st.session_state.get("ov_url_read"):
        return
    st.session_state["ov_url_read"] = True
    if "ov_range" not in st.session_state and (steps := parse_steps(st.query_params.get("steps"))):
        st.session_state["ov_range"] = steps
    if "ov_incident" not in st.session_state and (peak := st.query_params.get("incident")):
        peaks = [str(s["peak"]) for s in spikes]
        st.session_state["ov_incident"] = peaks.index(peak) if peak in peaks else NO_INCIDENT
        if peak in peaks and "ov_range" not in st.session_state:
            st.session_state["ov_range"] = incident_window(run, spikes[peaks.index(peak)])


def write_url(name: str, lo: int, hi: int, run: RunInfo, spikes: list[dict[str, object]], incident: int) -> None:
    """Keep the view in the URL: a copied link opens this run, step range and incident."""
    params = {"run": name}
    if (lo, hi) != (run.first_step, run.last_step):
        params["steps"] = f"{lo}-{hi}"
    if 0 <= incident < len(spikes):
        params["incident"] = str(spikes[incident]["peak"])
    if dict(st.query_params) != params:
        st.query_params.from_dict(params)
