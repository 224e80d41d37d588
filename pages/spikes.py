"""Spikes: the detected spike events of a run; selecting one zooms the charts to it and shows its diagnosis."""

from __future__ import annotations

import pages  # noqa: F401  # first: a deep link's first run leaves Streamlit's pages/ mode here

# isort: split
import pandas as pd  # type: ignore[import-untyped]
import streamlit as st

from pages.charts import Panel, panels_figure
from pages.common import (
    MISSING,
    auto_buckets,
    evidence_text,
    go_to,
    money,
    nav_link,
    pick_run,
    priced_spikes,
    read_events,
    read_series,
    read_spikes,
    run_cost,
)
from pages.run_meta import run_settings

ZOOM_PANELS = [
    ("loss", "loss (nats/token)", ["loss"]),
    ("grad norm", "L2 norm", ["grad_norm", "grad_norm_clipped"]),
    ("learning rate", "LR", ["lr"]),
]

SPIKE_COLUMNS = [
    "#",
    "metric",
    "peak step",
    "steps",
    "ratio",
    "outcome",
    "cause",
    "confidence",
    "steps lost",
    "GPU-hours lost",
    "USD lost",
]


def select_row() -> None:
    """Table selection callback: the selected row becomes the spike shown below."""
    rows = ((st.session_state.get("sp_table") or {}).get("selection") or {}).get("rows") or []
    if rows:
        st.session_state["sp_idx"] = int(rows[0])


def open_overview(run: str, lo: int, hi: int) -> None:
    """Button callback: the overview opens on this run, zoomed to the spike."""
    st.session_state["ov_range"] = (lo, hi)
    st.session_state["selected_run"] = run
    st.session_state["goto_overview"] = True


st.title("Spikes")
if st.session_state.pop("goto_overview", False):
    go_to("pages/overview.py")
info = pick_run("spikes_run")
if info is None:
    st.stop()
run_settings(info, "sp")
spikes = read_spikes(info)
if not spikes:
    if info.analysis_gen != info.gen:
        st.info(f"The analyses have not run on **{info.name}**'s latest data yet; they run after each compaction.")
    else:
        st.success(
            f"No loss or grad-norm spike detected in **{info.name}** (steps {info.first_step}–{info.last_step})."
        )
    st.stop()

table = priced_spikes(info)
inputs = run_cost(info)
m1, m2, m3, m4 = st.columns(4)
m1.metric("Spike events", len(table))
m2.metric("Diverged", int((table["outcome"] == "diverged").sum()))
m3.metric("Steps lost", f"{table['steps lost'].sum():,.0f}")
m4.metric(
    "Cost",
    money(float(table["USD lost"].sum())) if inputs.priced else "unknown",
    help=inputs.describe(),
)
if not inputs.priced:
    st.caption(
        "Cost unknown: the run logs no step time and no wall-clock times. Log `step_time_s`, or set the step "
        "time under **Run settings**."
    )
# start, end and duration shown as one "steps" column: all thirteen columns overflowed 1280 px
table["steps"] = [f"{a}" if a == b else f"{a}–{b}" for a, b in zip(table["start"], table["end"], strict=True)]
st.dataframe(
    table,
    hide_index=True,
    key="sp_table",
    on_select=select_row,
    selection_mode="single-row",
    width="stretch",
    column_order=SPIKE_COLUMNS,
    # pixel widths that add up to the ~800 px a 1280 px window leaves beside the sidebar
    column_config={
        "#": st.column_config.NumberColumn(width=34),
        "metric": st.column_config.TextColumn(width=84),
        "peak step": st.column_config.NumberColumn("peak", format="%d", width=56),
        "steps": st.column_config.TextColumn(width=84, help="first–last step of the spike"),
        "ratio": st.column_config.NumberColumn("ratio (x)", format="%.2f", width=60),
        "outcome": st.column_config.TextColumn(width=74),
        "cause": st.column_config.TextColumn(width=90),
        "confidence": st.column_config.ProgressColumn(min_value=0.0, max_value=1.0, format="%.2f", width=84),
        "steps lost": st.column_config.NumberColumn(format="%d", width=64),
        "GPU-hours lost": st.column_config.NumberColumn("GPU-h lost", format="%.2f", width=66),
        "USD lost": st.column_config.NumberColumn(format="$%.2f", width=62),
    },
    placeholder=MISSING,
)
if st.session_state.get("sp_idx", 0) >= len(spikes):
    st.session_state["sp_idx"] = 0
idx = st.selectbox(
    "Spike",
    range(len(spikes)),
    key="sp_idx",
    format_func=lambda i: f"#{i}: {spikes[i]['metric']} at step {spikes[i]['peak']} ({spikes[i]['cause']})",
)
spike = spikes[idx]
st.session_state["selected_spike"] = (info.name, idx)

first, last = int(info.first_step or 0), int(info.last_step or 0)
pad = max(50, 3 * (int(spike["end"]) - int(spike["start"]) + 1))
lo, hi = max(first, int(spike["start"]) - pad), min(last, int(spike["end"]) + pad)
panels = []
for title, y_title, metrics in ZOOM_PANELS:
    curves = [(m, read_series(info, m, start=lo, end=hi, buckets=auto_buckets(lo, hi))) for m in metrics]
    curves = [(m, s) for m, s in curves if s.steps.size]
    if curves:
        panels.append(Panel(title, y_title, curves))
left, right = st.columns([3, 2])
with left:
    chart = panels_figure(panels, read_events(info), spikes, 0.0, (lo, hi), panel_height=170, selected=idx)
    st.plotly_chart(chart, key="sp_chart")
    st.caption(f"Steps {lo:,}–{hi:,} at full fidelity; the spike is shaded in its cause's colour (darker: this one).")
with right:
    outcome = "recovered" if spike["recovered"] else "**diverged**"
    st.markdown(
        f"**{spike['metric']}** x{float(spike.get('ratio') or float('nan')):.2f} over its baseline, steps "
        f"{spike['start']}–{spike['end']} (peak {spike['peak']}), {outcome}."
    )
    st.markdown(f"#### Cause: `{spike['cause']}`")
    st.progress(float(spike["confidence"]), text=f"confidence {float(spike['confidence']):.0%}")
    st.markdown("**What to do**\n" + "\n".join(f"1. {a}" for a in spike.get("actions", [])))
    if spike.get("missing"):
        st.caption("Would settle the unknown nodes: " + "; ".join(spike["missing"]))
    nav_link("pages/tree.py", "See the path in the decision tree", icon=":material/account_tree:")
    st.button("Open the run overview zoomed here", key="sp_zoom", on_click=open_overview, args=(info.name, lo, hi))
path_rows = [
    {
        "node": f"{p.get('number', '')}. {p['node']}",
        "answer": p["answer"],
        "evidence": evidence_text(p.get("evidence") or {}).replace("\n", "; "),
    }
    for p in spike.get("path", [])
]
st.dataframe(pd.DataFrame(path_rows), hide_index=True, key="sp_path", width="stretch", placeholder=MISSING)
