"""Run overview: loss, grad norm (pre/post clip), LR, clip ratio and gradient SNR on one linked step axis."""

from __future__ import annotations

import pages  # noqa: F401  # first: a deep link's first run leaves Streamlit's pages/ mode here

# isort: split
import numpy as np
import streamlit as st

from ingest.store import RunInfo, SeriesData
from ingest.store.report_meta import suspect_lines
from ingest.store.storage_errors import DamagedRunFile, damaged_run
from pages.parts.charts import Panel, panels_figure
from pages.parts.findings_view import show_findings
from pages.parts.import_report import show_import_report
from pages.parts.incident_view import incident_metrics, shown_incidents
from pages.parts.page_errors import page_fragment, show_error
from pages.parts.series_display import metric_label, shown_frame, to_bytes
from pages.parts.store_access import (
    LIVE_REFRESH_S,
    auto_buckets,
    full_export,
    get_store,
    read_events,
    read_series,
    read_spikes,
    run_damage,
)
from pages.parts.view_url import NO_INCIDENT, incident_window, restore_from_url, write_url
from pages.parts.widgets import pick_run, reset_range, step_range, zoom_to_selection
from stab_core.analysis import statements, verdict_words
from stab_core.loss_origin import loss_axis_title
from stab_core.metrics import POLICY_LOSSES, unread_line_naming
from stab_core.runview import RunEvent

# (panel title, y-axis title, candidate metrics in order, what to do when none is there)
PANELS = [
    # an RL run's loss is its policy loss (stab_core.metrics.POLICY_LOSSES), drawn where no LM loss is
    ("loss", "loss", ["loss", "val_loss", *POLICY_LOSSES], "log `loss` (nats/token)"),
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
FALLBACK_OF.update(dict.fromkeys(POLICY_LOSSES, "loss"))  # a policy loss only when no LM loss is
LABELS.update({name: f"policy loss ({name})" for name in POLICY_LOSSES})
MIN_SPANS = {"clip ratio": 0.05}  # a fraction that sits at 0 is not magnified into its float noise


def zoom_to_incident(name: str) -> None:
    """Incident picker callback: show that incident's steps."""
    idx = st.session_state.get("ov_incident", NO_INCIDENT)
    run = get_store().run_info(name)
    spikes = read_spikes(run)
    if 0 <= idx < len(spikes):
        st.session_state["ov_range"] = incident_window(run, spikes[idx])


def incident_label(spikes: list[dict[str, object]], i: int) -> str:
    """The incident picker's text for option ``i``."""
    if i == NO_INCIDENT:
        return f"none of {len(spikes)} detected"
    spike = spikes[i]
    return f"#{i}: {spike['metric']} at step {int(str(spike['peak'])):,} ({spike['cause']})"


def snr_explanation(run: RunInfo) -> str:
    """Why the run has no SNR series: the analyses' own reason (``snr_reason``) when they give one, else
    what the run lacks."""
    reason = (run.meta.get("analysis") or {}).get("snr_reason")
    if reason:
        return str(reason)
    if "grad_norm" not in run.metrics:
        return (
            "not computed, no `grad_norm` was logged; log `grad_norm` (and `grad_norm_local` per rank for the "
            "two-batch SNR)"
        )
    return "not computed by the analyses for this run (too few finite `grad_norm` steps?)"


def with_logging_end(events: list[RunEvent], run: RunInfo) -> list[RunEvent]:
    """The run's events and, when the analyses found one, the step from which logging stopped: it
    explains panels that are empty from there on."""
    end = (run.meta.get("analysis") or {}).get("logging_end")
    if not end:
        return events
    label = f"logging stopped: {end.get('reason') or 'no metric is finite from here on'}"
    return sorted([*events, RunEvent(int(end["step"]), "logging_end", label, {})], key=lambda e: e.step)


st.title("Run overview")
info = pick_run("overview_run")
if info is None:
    st.stop()
if info.first_step is None:
    st.info(f"Run **{info.name}** has no metric records yet. If `stabscope watch` is feeding it, wait a few seconds.")
    st.stop()

spikes_of_run = read_spikes(info)
restore_from_url(info, spikes_of_run)
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
incident_panels = [m for m in incident_metrics(spikes_of_run) if m in others]  # no default panel holds them
extra = c3.multiselect("More panels", others, default=incident_panels, key="ov_extra", help="Any other logged metric")
c4, c5, c6 = st.columns([3, 1, 1])
show_blips = c6.toggle(
    "Show blips",
    key="ov_blips",
    help="Blips: incidents the run absorbed within a few logged steps, the loss back on its trend (hidden by default)",
)
listed = shown_incidents(spikes_of_run, show_blips)
if st.session_state.get("ov_incident", NO_INCIDENT) not in (NO_INCIDENT, *listed):
    st.session_state["ov_incident"] = NO_INCIDENT
incident = c4.selectbox(
    "Incident",
    [NO_INCIDENT, *listed],
    key="ov_incident",
    format_func=lambda i: incident_label(spikes_of_run, i),
    on_change=zoom_to_incident,
    args=(info.name,),
    help="Shows that incident's steps and marks it darker",
)
full_y = c5.toggle(
    "Show full y range",
    key="ov_full_y",
    help="By default each panel's y axis leaves out the first 5% of the steps (warmup) and far outliers; "
    "a detected incident's peak beyond it is marked at the panel's top edge",
)


def explain_missing(run: RunInfo, shown: dict[str, SeriesData], missing: list[str]) -> None:
    """What the chart cannot show and why: panels not drawn, where logging stopped, gaps, detectors not run."""
    if missing:
        st.caption("Not shown — " + "; ".join(missing))
    analysis = run.meta.get("analysis") or {}
    if "snr" in shown and analysis.get("snr_label"):
        st.caption(f"SNR: {analysis['snr_label']}.")
    if analysis.get("logging_end"):
        end = analysis["logging_end"]
        st.caption(
            f"Logging stopped at step {int(end['step']):,}: {end.get('reason') or 'no metric is finite after it'}."
        )
    if analysis.get("gaps"):
        spans = ", ".join(f"{int(a):,}–{int(b):,}" for a, b in analysis["gaps"][:8])
        st.caption(f"No finite value of any metric in steps {spans}.")
    for item in analysis.get("not_run") or []:
        if item.get("detector") != "snr":  # the SNR's reason is given with the panels not shown
            st.caption(f"Not run — {item.get('detector')}: {item.get('reason')}")
    if analysis.get("error"):
        st.warning(f"The analyses failed on this run: {analysis['error']}", icon=":material/warning:")


@page_fragment(run_every=LIVE_REFRESH_S if info.status == "live" else None)
def charts(name: str, damage_shown: bool) -> None:
    """The panels, or with ``damage_shown`` (the run's damage said above), a line where they cannot be drawn."""
    try:
        draw_charts(name)
    except DamagedRunFile:
        if not damage_shown:
            raise
        st.caption("The charts need the damaged files named above: repair the run to draw them.")


def draw_charts(name: str) -> None:
    run = get_store().run_info(name)  # re-read: a live run grows between refreshes
    lo, hi = step_range(run, "ov_range")
    spikes = read_spikes(run)
    write_url(name, lo, hi, run, spikes, incident)
    buckets = auto_buckets(lo, hi)
    panels, shown, missing = [], {}, []
    # the loss axis says what the run's loss is (nats/token only for a language model's token CE)
    titled = [(t, loss_axis_title(run.meta, run.metrics) if t == "loss" else y, c, h) for t, y, c, h in PANELS]
    specs = titled + [(m, metric_label(m), [m], "") for m in extra]
    for title, y_title, candidates, how in specs:
        curves: list[tuple[str, SeriesData]] = []
        unplottable = []  # logged here, but not one finite value: an empty panel would say nothing
        for metric in candidates:
            if FALLBACK_OF.get(metric) in shown:
                continue
            s = read_series(run, metric, start=lo, end=hi, buckets=buckets)
            if s.steps.size and np.isfinite(s.values).any():
                curves.append((LABELS.get(metric, metric), s))
                shown[metric] = s
            elif s.steps.size:
                unplottable.append(metric)
        if curves:
            panels.append(Panel(title, y_title, curves, log_y=title in log_panels, min_span=MIN_SPANS.get(title, 0.0)))
        elif unplottable:
            names = ", ".join(f"`{m}`" for m in unplottable)
            missing.append(f"**{title}**: {names} logged, but no finite value in steps {lo:,}–{hi:,}")
        elif title == "gradient SNR":
            missing.append(f"**{title}**: {snr_explanation(run)}")
        elif (unread := unread_line_naming(candidates[0], suspect_lines(run.meta))) is not None:
            # a line names it where no reader read it: unread, not absent (issue #32)
            missing.append(f"**{title}**: no series read; line {unread[0]} of the log names one (`{unread[1][:80]}`)")
        elif how:
            missing.append(f"**{title}**: not in this run ({how})")
    if not panels:
        st.info(f"Nothing to plot in steps {lo:,}–{hi:,}.")
        explain_missing(run, shown, missing)
        st.button("Show the whole run", on_click=reset_range, args=("ov_range",), key="ov_reset")
        return
    drawn_index = shown_incidents(spikes, show_blips)
    fig = panels_figure(
        panels,
        with_logging_end(read_events(run), run),
        [spikes[i] for i in drawn_index],
        ema_weight,
        (lo, hi),
        drag_selects_steps=True,
        full_y_range=full_y,
        selected=drawn_index.index(incident) if incident in drawn_index else None,
    )
    st.plotly_chart(
        fig,
        key="ov_chart",
        on_select=lambda: zoom_to_selection("ov_chart", "ov_range"),
        # a click cannot pick an incident: Plotly reports no click while a drag selects steps
        selection_mode="box",
        config={"displaylogo": False},
    )
    points = sum(s.steps.size for s in shown.values())
    detail = (
        "every step (full fidelity)" if buckets is None else f"min/max buckets of ~{(hi - lo + 1) // buckets} steps"
    )
    st.caption(
        f"Steps {lo:,}–{hi:,}: {points:,} points, {detail}. Drag across a chart to zoom every panel to those "
        f"steps, re-read from the store (every step at ≤5,000 steps). Shaded bands and diamonds: detected incidents "
        f"({len(drawn_index)} shown of {len(spikes)} in the run"
        + ("" if show_blips else f"; {len(spikes) - len(drawn_index)} blips hidden")
        + "), coloured by cause (an up-triangle at a panel's top: a peak above its y axis)."
        + ("" if full_y else " Y axes leave out the warmup (first 5% of the steps) and far outliers.")
    )
    if 0 <= incident < len(spikes):
        spike = spikes[incident]
        # what happened, how it ended and why: only the claims whose check held (stab_core.claims)
        said = " ".join(statements(spike, ("status", "recovery", "cause")))
        st.markdown(
            f"**Incident #{incident}**, steps {int(spike['start']):,}–{int(spike['end']):,}: {verdict_words(spike)}. "
            f"{said} The Spikes page has its diagnosis and what to do."
        )
    explain_missing(run, shown, missing)
    show_import_report(run.meta.get("import_report"), key="ov_import")
    st.button("Show the whole run", on_click=reset_range, args=("ov_range",), key="ov_reset")
    # Every export is built on click, not on each rerun: CSV of the shown points slowed every rerun.
    e1, e2, e3, e4 = st.columns(4)
    shown_csv = lambda: to_bytes(shown_frame(shown, ema_weight), "csv")  # noqa: E731
    shown_parquet = lambda: to_bytes(shown_frame(shown, ema_weight), "parquet")  # noqa: E731
    e1.download_button("Shown data (CSV)", shown_csv, f"{name}_{lo}-{hi}.csv", "text/csv")
    e2.download_button("Shown data (Parquet)", shown_parquet, f"{name}_{lo}-{hi}.parquet")
    e3.download_button("Full series (CSV)", lambda: full_export(name, "csv"), f"{name}.csv", "text/csv")
    e4.download_button("Full series (Parquet)", lambda: full_export(name, "parquet"), f"{name}.parquet")


damage = run_damage(info)
if damage is not None:  # said once, above the charts, which draw when the files they read are whole
    show_error(damaged_run(info.name, damage))
charts(info.name, damage is not None)
show_findings(info)
