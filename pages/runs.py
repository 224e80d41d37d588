"""Runs: the catalog of the store and a quick look at the selected run's loss."""

from __future__ import annotations

import plotly.graph_objects as go
import streamlit as st

from pages.common import list_runs, plot_layout, series

st.title("Runs")
runs = list_runs()
if not runs:
    st.info("No runs yet. Upload a log on the **Upload** page, or run `stabscope demo`.")
    st.stop()

st.dataframe(
    [
        {
            "name": r.name,
            "status": r.status,
            "steps": f"{r.first_step}–{r.last_step}",
            "ranks": r.ranks,
            "metrics": ", ".join(r.metrics),
        }
        for r in runs
    ],
    hide_index=True,
    width="stretch",
)
names = [r.name for r in runs]
name = st.selectbox("Run", names, key="runs_select")
run = runs[names.index(name)]
st.session_state["selected_run"] = name
if "loss" not in run.metrics:
    st.info(f"Run {name} has no `loss` series (metrics: {', '.join(run.metrics) or 'none'}).")
    st.stop()
s = series(name, run.gen, "loss", 2000, analysis_gen=run.analysis_gen)
fig = go.Figure()
fig.add_scatter(x=s.steps, y=s.max, mode="lines", line={"width": 0}, showlegend=False, hoverinfo="skip")
fig.add_scatter(x=s.steps, y=s.min, mode="lines", line={"width": 0}, fill="tonexty", name="min–max")
fig.add_scatter(x=s.steps, y=s.values, mode="lines", name="loss")
fig.update_layout(**plot_layout(f"{name}: loss", "loss (nats/token)"))
st.plotly_chart(fig, width="stretch")
st.caption(f"{s.steps.size} points (min/max per bucket kept, so no single-step spike is hidden).")
