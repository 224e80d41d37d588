"""Run overview: loss, grad norm (pre/post clip), LR, clip ratio and gradient SNR on one linked step axis."""

from __future__ import annotations

import pages  # noqa: F401  # first: a deep link's first run leaves Streamlit's pages/ mode here

# isort: split
import streamlit as st

from ingest.store import SeriesData
from pages.charts import Panel, panels_figure
from pages.common import (
    LIVE_REFRESH_S,
    auto_buckets,
    full_export,
    get_store,
    metric_label,
    pick_run,
    read_events,
    read_series,
    read_spikes,
    reset_range,
    shown_frame,
    step_range,
    to_bytes,
    zoom_to_selection,
)

# (panel title, y-axis title, candidate metrics in order, what to do when none is there)
PANELS = [
    ("loss", "loss (nats/token)", ["loss", "val_loss"], "log `loss` (nats/token)"),
    ("grad norm", "L2 norm", ["grad_norm", "grad_norm_clipped"], "log `grad_norm` (before clipping)"),
    ("learning rate", "LR", ["lr"], "log `lr`"),
    ("clip ratio", "0–1", ["clip_ratio", "clip_coef"], "log `clip_coef`, or `grad_norm` and `max_norm`"),
    ("gradient SNR", "SNR", ["snr"], "log `grad_norm` (and `grad_norm_local` per rank for the two-batch SNR)"),
]
LABELS = {
    "grad_norm": "pre-clip",
    "grad_norm_clipped": "post-clip",
    "clip_ratio": "clipped fraction (trailing window)",
    "clip_coef": "clip coefficient",
}
FALLBACK_OF = {"clip_coef": "clip_ratio"}  # drawn only when the analyses' clip ratio is missing

st.title("Run overview")
info = pick_run("overview_run")
if info is None:
    st.stop()
if info.first_step is None:
    st.info(f"Run **{info.name}** has no metric records yet. If `stabscope watch` is feeding it, wait a few seconds.")
    st.stop()

c1, c2, c3 = st.columns([1, 1, 2])
ema_weight = c1.slider(
    "EMA smoothing (per step)",
    0.0,
    0.99,
    0.0,
    0.01,
    key="ov_ema",
    help="TensorBoard-style weight; the raw series stays visible under the smoothed one",
)
log_panels = c2.multiselect("Log-scale y", [p[0] for p in PANELS], default=["gradient SNR"], key="ov_log")
others = [m for m in info.metrics if m not in {c for p in PANELS for c in p[2]}]
extra = c3.multiselect("More panels", others, default=[], key="ov_extra", help="Any other logged metric")


@st.fragment(run_every=LIVE_REFRESH_S if info.status == "live" else None)
def charts(name: str) -> None:
    run = get_store().run_info(name)  # re-read: a live run grows between refreshes
    lo, hi = step_range(run, "ov_range")
    buckets = auto_buckets(lo, hi)
    panels, shown, missing = [], {}, []
    specs = PANELS + [(m, metric_label(m), [m], "") for m in extra]
    for title, y_title, candidates, how in specs:
        curves: list[tuple[str, SeriesData]] = []
        for metric in candidates:
            if FALLBACK_OF.get(metric) in shown:
                continue
            s = read_series(run, metric, start=lo, end=hi, buckets=buckets)
            if s.steps.size:
                curves.append((LABELS.get(metric, metric), s))
                shown[metric] = s
        if curves:
            panels.append(Panel(title, y_title, curves, log_y=title in log_panels))
        elif how:
            missing.append(f"**{title}**: not in this run ({how})")
    if not panels:
        st.info("Nothing to plot in this step range.")
        return
    fig = panels_figure(panels, read_events(run), read_spikes(run), ema_weight, (lo, hi), drag_selects_steps=True)
    st.plotly_chart(
        fig,
        key="ov_chart",
        on_select=lambda: zoom_to_selection("ov_chart", "ov_range"),
        selection_mode="box",
        config={"displaylogo": False},
    )
    points = sum(s.steps.size for s in shown.values())
    detail = (
        "every step (full fidelity)" if buckets is None else f"min/max buckets of ~{(hi - lo + 1) // buckets} steps"
    )
    st.caption(
        f"Steps {lo:,}–{hi:,}: {points:,} points, {detail}. Drag across a chart to zoom every panel to those "
        f"steps, re-read from the store (every step at ≤5,000 steps). Shaded bands: detected spikes, coloured by cause."
    )
    if missing:
        st.caption("Not shown — " + "; ".join(missing))
    analysis = run.meta.get("analysis") or {}
    if "snr" in shown and analysis.get("snr_label"):
        st.caption(f"SNR: {analysis['snr_label']}.")
    if analysis.get("error"):
        st.warning(f"The analyses failed on this run: {analysis['error']}", icon=":material/warning:")
    st.button("Show the whole run", on_click=reset_range, args=("ov_range",), key="ov_reset")
    # Every export is built on click, not on each rerun: CSV of the shown points was ~0.2 s per rerun.
    e1, e2, e3, e4 = st.columns(4)
    shown_csv = lambda: to_bytes(shown_frame(shown, ema_weight), "csv")  # noqa: E731
    shown_parquet = lambda: to_bytes(shown_frame(shown, ema_weight), "parquet")  # noqa: E731
    e1.download_button("Shown data (CSV)", shown_csv, f"{name}_{lo}-{hi}.csv", "text/csv")
    e2.download_button("Shown data (Parquet)", shown_parquet, f"{name}_{lo}-{hi}.parquet")
    e3.download_button("Full series (CSV)", lambda: full_export(name, "csv"), f"{name}.csv", "text/csv")
    e4.download_button("Full series (Parquet)", lambda: full_export(name, "parquet"), f"{name}.parquet")


charts(info.name)
