"""Spikes: the incidents of a run (a loss spike and its grad-norm twin are one); selecting one zooms the
charts to it and shows its diagnosis, the actions its data supports and those it does not."""

from __future__ import annotations

import pages  # noqa: F401  # first: a deep link's first run leaves Streamlit's pages/ mode here

# isort: split
import math
from collections.abc import Collection, Mapping
from typing import Any

import pandas as pd  # type: ignore[import-untyped]
import streamlit as st

from ingest.errors import StabScopeError
from ingest.services.run_cost import no_step_time_words
from ingest.store import RunInfo
from ingest.store.run_meta import SENSITIVITY_NAMES
from pages.parts.charts import Panel, panels_figure
from pages.parts.findings_view import show_findings
from pages.parts.incident_view import evidence_text, incident_span, incident_words, shown_incidents
from pages.parts.page_errors import show_error
from pages.parts.run_costs import money, priced_spikes, run_cost
from pages.parts.run_meta import run_settings
from pages.parts.store_access import auto_buckets, get_store, read_events, read_series, read_spikes
from pages.parts.widgets import MISSING, go_to, nav_link, pick_run
from stab_core.analysis import INCIDENT_VERDICT, analysis_notes, statements
from stab_core.analysis import outcome as incident_outcome
from stab_core.incident_headline import incident_headline, span_text
from stab_core.loss_origin import loss_axis_title
from stab_core.severity import DEFAULT_SENSITIVITY, blips_line, severity_words
from stab_core.spikes import times

ZOOM_PANELS = [
    ("loss", "loss", ["loss"]),
    ("grad norm", "L2 norm", ["grad_norm", "grad_norm_clipped"]),
    ("learning rate", "LR", ["lr"]),
]

SPIKE_COLUMNS = [
    "#",
    "incident",
    "severity",
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


def zoom_panels(spike: Mapping[str, Any], logged: Collection[str]) -> list[tuple[str, str, list[str]]]:
    """The zoom's panels for ``spike``: :data:`ZOOM_PANELS`, with a panel of its own, after the loss, for each
    metric of the incident that none of them draws (a validation loss's blow-up is drawn where it happened,
    not only shaded over the training loss)."""
    drawn = {m for _, _, metrics in ZOOM_PANELS for m in metrics}
    own = spike.get("metrics") or [spike["metric"]]
    extra = [(str(m), str(m), [str(m)]) for m in own if m not in drawn and m in logged]
    return ZOOM_PANELS[:1] + extra + ZOOM_PANELS[1:]


def ratio_text(ratio: object) -> str | None:
    """The ratio column's words, by the one ratio formatter: "5.1e+13x" for a loss explosion, which a
    number column's "%.2f" clipped; "non-finite" for a NaN/inf peak; None (shown as missing) when unknown."""
    if not isinstance(ratio, int | float) or math.isnan(ratio):
        return None
    return times(float(ratio)) if math.isfinite(ratio) else "non-finite"


def select_row() -> None:
    """Table selection callback: the selected row (of the incidents shown) becomes the spike shown below."""
    rows = ((st.session_state.get("sp_table") or {}).get("selection") or {}).get("rows") or []
    shown = st.session_state.get("sp_shown") or []
    if rows and int(rows[0]) < len(shown):
        st.session_state["sp_idx"] = int(shown[int(rows[0])])


def sensitivity_control(info: RunInfo) -> None:
    """The run's sensitivity (stored with its metadata): changing it stores it, re-runs the analyses and
    reloads the page, as the CLI's `stabscope meta RUN sensitivity=...` does."""
    current = str(info.meta.get("sensitivity") or DEFAULT_SENSITIVITY)
    names = list(SENSITIVITY_NAMES)
    chosen = st.selectbox(
        "Sensitivity",
        names,
        index=names.index(current) if current in names else names.index(DEFAULT_SENSITIVITY),
        key=f"sp_sensitivity_{info.name}",
        help="How small an incident is detected and how short a blip is: low (fewer, larger incidents), default "
        "(set from real logs: docs/diagnosis.md), high (more). Stored with the run; the alerts use it too.",
    )
    if chosen != current:
        try:
            with st.spinner("Saving and re-running the analyses…"):
                get_store().update_meta(info.name, {"sensitivity": chosen}, [])
            st.rerun()
        except StabScopeError as exc:
            show_error(exc)


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
notes = analysis_notes(info.meta.get("analysis") or {}) if info.analysis_gen == info.gen else []
show_findings(info)
c_sensitivity, c_blips = st.columns([1, 2])
with c_sensitivity:
    sensitivity_control(info)
show_blips = c_blips.toggle(
    "Show blips",
    key="sp_blips",
    help="Blips: incidents the run absorbed within a few logged steps, the loss back on its trend (hidden by default)",
)
shown = shown_incidents(spikes, show_blips)
st.session_state["sp_shown"] = shown
blips = blips_line(spikes)
if spikes and not shown:
    st.success(
        f"No spike or divergence in **{info.name}** (steps {info.first_step}–{info.last_step}); "
        f"{(blips or '').lstrip('+ ')}. **Show blips** lists them."
    )
    for note in notes:
        st.caption(note)
    st.stop()
if not spikes:
    if info.analysis_gen != info.gen:
        st.info(f"The analyses have not run on **{info.name}**'s latest data yet; they run after each compaction.")
    else:
        st.success(
            f"No loss or grad-norm spike detected in **{info.name}** (steps {info.first_step}–{info.last_step})."
        )
    for note in notes:
        st.caption(note)
    st.stop()

inputs = run_cost(info)
table = priced_spikes(info, spikes, inputs).iloc[shown].reset_index(drop=True)  # the spikes read above
m1, m2, m3, m4 = st.columns(4)
m1.metric("Incidents", len(table), help="A loss spike and the grad-norm spike with it count once.")
m2.metric("Diverged", int((table["outcome"] == "diverged").sum()))
m3.metric("Steps lost", f"{table['steps lost'].sum():,.0f}")
m4.metric(
    "Cost",
    money(float(table["USD lost"].sum())) if inputs.priced else "unknown",
    help=inputs.describe(),
)
if not inputs.priced:
    st.caption(
        f"Cost unknown: the run {no_step_time_words(info)}. Log `step_time_s`, or set the step "
        "time under **Run settings**."
    )
# start, end and duration shown as one "steps" column: all thirteen columns overflowed 1280 px
table["ratio"] = [ratio_text(r) for r in table["ratio"]]
table["steps"] = [span_text(spikes[i]) for i in shown]  # the CLI's words for the same incident
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
        "#": st.column_config.NumberColumn(width=30),
        "incident": st.column_config.TextColumn(width=150, help="its kind and the metrics that spiked in it"),
        "severity": st.column_config.TextColumn(
            width=64, help="what it cost: blip (absorbed at once), spike (steps lost), divergence (no return)"
        ),
        "peak step": st.column_config.NumberColumn("peak", format="%d", width=56),
        "steps": st.column_config.TextColumn(
            width=76, help="first step of the incident to its last, its return included"
        ),
        "ratio": st.column_config.TextColumn("ratio", width=60, help="peak over the level before it"),
        "outcome": st.column_config.TextColumn(width=74),
        "cause": st.column_config.TextColumn(width=84),
        "confidence": st.column_config.ProgressColumn("conf.", min_value=0.0, max_value=1.0, format="%.2f", width=64),
        "steps lost": st.column_config.NumberColumn(format="%d", width=64),
        "GPU-hours lost": st.column_config.NumberColumn("GPU-h lost", format="%.2f", width=66),
        "USD lost": st.column_config.NumberColumn(format="$%.2f", width=62),
    },
    placeholder=MISSING,
)
if blips is not None and not show_blips:
    st.caption(f"{blips}: **Show blips** lists them.")
for note in notes:
    st.caption(note)
if st.session_state.get("sp_idx", shown[0]) not in shown:
    st.session_state["sp_idx"] = shown[0]
idx = st.selectbox(
    "Incident",
    shown,
    key="sp_idx",
    format_func=lambda i: f"#{i}: {incident_words(spikes[i])} at step {spikes[i]['peak']} ({spikes[i]['cause']})",
)
spike = spikes[idx]
st.session_state["selected_spike"] = (info.name, idx)

first, last = int(info.first_step or 0), int(info.last_step or 0)
span = incident_span(spike)
pad = max(50, 3 * (span[1] - span[0] + 1))
lo, hi = max(first, span[0] - pad), min(last, span[1] + pad)
panels = []
for title, y_title, metrics in zoom_panels(spike, info.metrics):
    y_title = loss_axis_title(info.meta, info.metrics) if title == "loss" else y_title
    curves = [(m, read_series(info, m, start=lo, end=hi, buckets=auto_buckets(lo, hi))) for m in metrics]
    curves = [(m, s) for m, s in curves if s.steps.size]
    if curves:
        panels.append(Panel(title, y_title, curves))
left, right = st.columns([3, 2])
with left:
    drawn = [spikes[i] for i in shown]
    chart = panels_figure(panels, read_events(info), drawn, 0.0, (lo, hi), panel_height=170, selected=shown.index(idx))
    st.plotly_chart(chart, key="sp_chart")
    st.caption(f"Steps {lo:,}–{hi:,} at full fidelity; the spike is shaded in its cause's colour (darker: this one).")
with right:
    outcome = "recovered" if spike["recovered"] else f"**{incident_outcome(spike)}**"
    st.markdown(f"{incident_headline(spike).capitalize()}; {outcome}.")
    if (cost := severity_words(spike)) is not None:
        st.caption(cost)
    # every sentence is a claim whose check held on the run (stab_core.claims); unknowns say what to log
    for line in statements(spike, INCIDENT_VERDICT):
        st.markdown(line)
    st.markdown(f"#### Cause: `{spike['cause']}`")
    if spike["cause"] != "unknown":
        st.progress(float(spike["confidence"]), text=f"confidence {float(spike['confidence']):.0%}")
    st.markdown("**What to do**\n" + "\n".join(f"1. {a}" for a in statements(spike, ("action",))))
    withheld = [c for c in spike.get("action_evidence", []) if c.get("holds") is False]
    if withheld:
        with st.expander(f"Not advised for this incident ({len(withheld)})"):
            st.markdown(
                "\n".join(
                    f"- ~~{c['action']}~~ — not so here: {c.get('premise', '').replace('_', ' ')} "
                    f"({evidence_text(c.get('evidence') or {}).replace(chr(10), '; ') or 'no data'})"
                    for c in withheld
                )
            )
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
