"""Plotly figure builders shared by the pages: min/max envelopes, EMA overlays, event and spike markers,
linked panels on one step axis, compared runs with seed bands, and LR schedules (the Ranks page's
figures are in ``pages.parts.rank_charts``). Colours and layout are in ``pages.parts.chart_style``, default y ranges in
``pages.parts.chart_ranges``, incident bands and peak markers in ``pages.parts.chart_incidents``.

Builders take plain data (``SeriesData``, numpy arrays, events, spike dicts) and return figures; they
never read the store. Every axis is labelled with its unit.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import plotly.graph_objects as go

from ingest.store import SeriesData
from pages.parts.chart_incidents import add_spike_shading, drawn_value_at, incident_peaks, peak_markers
from pages.parts.chart_ranges import autorange_of, data_y_span, robust_y_range
from pages.parts.chart_style import DEFAULT_EVENT_STYLE, EVENT_STYLES, PALETTE, base_layout, plot_text, series_color
from pages.parts.compare_lines import Line
from pages.parts.series_display import ema
from stab_core.runview import RunEvent

TITLE_GAP_PX = 34
"""Pixels between stacked panels: room for the lower panel's title."""
UNDERLAY_WIDTHS = {"grad_norm_clipped": 4.0}
"""Series drawn under the others, wider (px): the post-clip norm, equal to the pre-clip one when unclipped."""
LEGEND_ROW_PX = 26
"""Height of one row of a horizontal legend."""


@dataclass
class Panel:
    """One row of a linked-panel figure: curves sharing a y axis."""

    title: str
    y_title: str
    curves: list[tuple[str, SeriesData]] = field(default_factory=list)
    log_y: bool = False
    min_span: float = 0.0
    """Smallest default y span in axis units (linear axes), e.g. 0.05 for a 0-1 fraction that sits at 0."""


def envelope_traces(
    s: SeriesData, label: str, color: str, ema_weight: float, *, legend: bool = True, width: float = 1.6
) -> list[go.Scatter]:
    """Mean line (``width`` px), min/max band (only where it differs from the line) and, when smoothing,
    the EMA on top with the raw line kept visible underneath."""
    traces: list[go.Scatter] = []
    if s.steps.size == 0:
        return traces
    # a band only where one exists: bucket extremes, or the cross-rank spread of a per-rank metric
    band = (s.bucketed or s.source == "ranks") and not np.array_equal(s.max, s.min, equal_nan=True)
    if band:
        band_name = "bucket min–max" if s.bucketed else "rank min–max"
        traces.append(
            go.Scatter(
                x=s.steps,
                y=s.max,
                mode="lines",
                line={"width": 0, "color": color},
                hoverinfo="skip",
                showlegend=False,
                legendgroup=label,
            )
        )
        traces.append(
            go.Scatter(
                x=s.steps,
                y=s.min,
                mode="lines",
                line={"width": 0, "color": color},
                fill="tonexty",
                opacity=0.25,
                name=f"{plot_text(label)} {band_name}",
                legendgroup=label,
                showlegend=legend,
                hoverinfo="skip",
            )
        )
    smoothing = ema_weight > 0
    traces.append(
        go.Scatter(
            x=s.steps,
            y=s.values,
            mode="lines",
            name=f"{plot_text(label)} (raw)" if smoothing else plot_text(label),
            line={"color": color, "width": 1 if smoothing else width},
            opacity=0.35 if smoothing else 1.0,
            legendgroup=label,
            showlegend=legend,
        )
    )
    if smoothing:
        traces.append(
            go.Scatter(
                x=s.steps,
                y=ema(s.steps, s.values, ema_weight),
                mode="lines",
                name=f"{plot_text(label)} EMA {ema_weight:g}",
                line={"color": color, "width": 2.2},
                legendgroup=label,
                showlegend=legend,
            )
        )
    return traces


def event_traces(events: Sequence[RunEvent], y0: float, y1: float, *, legend: bool) -> list[go.Scatter]:
    """One vertical-line trace per event kind (legend click hides a kind on every panel at once)."""
    by_kind: dict[str, list[RunEvent]] = {}
    for e in events:
        by_kind.setdefault(e.kind, []).append(e)
    traces = []
    for kind, items in by_kind.items():
        color, dash = EVENT_STYLES.get(kind, DEFAULT_EVENT_STYLE)
        xs: list[float | None] = []
        ys: list[float | None] = []
        text: list[str] = []
        for e in items:
            xs += [e.step, e.step, None]
            ys += [y0, y1, None]
            text += [plot_text(f"{kind}: {e.label}")] * 2 + [""]
        traces.append(
            go.Scatter(
                x=xs,
                y=ys,
                mode="lines",
                line={"color": color, "dash": dash, "width": 1.2},
                name=plot_text(kind),
                legendgroup=f"event:{kind}",
                showlegend=legend,
                text=text,
                hovertemplate="%{text}<extra></extra>",
            )
        )
    return traces


ABANDONED_COLOR = "#868e96"
"""Grey: the values of an attempt a resume replaced are history, drawn under the run's own line."""


def abandoned_traces(events: Sequence[RunEvent], metric: str, *, legend: bool) -> list[go.Scatter]:
    """One dotted grey line per attempt a resume replaced (a ``rollback`` event's ``detail['abandoned']``,
    see ``ingest.formats.log_rows.rollback_detail``): the stored series holds the replay, so without these an
    incident found inside an abandoned attempt would be shaded over a line that shows nothing."""
    traces: list[go.Scatter] = []
    for e in events:
        if e.kind != "rollback":
            continue
        for steps, values in (e.detail or {}).get("abandoned", {}).get(metric, []):
            first = not traces
            traces.append(
                go.Scatter(
                    x=steps,
                    y=[np.nan if v is None else v for v in values],
                    mode="lines",
                    line={"color": ABANDONED_COLOR, "dash": "dot", "width": 1.2},
                    name=plot_text(f"{metric}: abandoned attempts"),
                    legendgroup=f"abandoned:{metric}",
                    showlegend=legend and first,
                    hovertemplate=plot_text(f"abandoned attempt (resumed at {e.step})") + ": %{y:.4g}<extra></extra>",
                )
            )
    return traces


def _panel_peaks(panel: Panel, spikes: Sequence[dict[str, Any]], x_range: tuple[int, int] | None) -> list[float]:
    drawn = {s.metric for _, s in panel.curves}
    peaks = []
    for spike in spikes:
        for metric, step, value in incident_peaks(spike):
            if metric in drawn and (not x_range or x_range[0] <= step <= x_range[1]):
                v = drawn_value_at(panel.curves, metric, step) if value is None else value
                if v is not None:
                    peaks.append(v)
    return peaks


def _panel_domains(n: int, height: int, top: int, bottom: int) -> list[tuple[float, float]]:
    """Paper-fraction y domains of ``n`` stacked panels, top first, with room for each title above."""
    plot = max(height - top - bottom, 60)
    gap = min(TITLE_GAP_PX / plot, 0.3 / max(n, 1))
    each = (1 - gap * (n - 1)) / n
    return [(max(0.0, 1 - (r + 1) * each - r * gap), min(1.0, 1 - r * (each + gap))) for r in range(n)]


def panels_figure(
    panels: Sequence[Panel],
    events: Sequence[RunEvent] = (),
    spikes: Sequence[dict[str, Any]] = (),
    ema_weight: float = 0.0,
    x_range: tuple[int, int] | None = None,
    panel_height: int = 210,
    *,
    drag_selects_steps: bool = False,
    full_y_range: bool = False,
    selected: int | None = None,
) -> go.Figure:
    """Panels stacked on one step axis: every trace is on the one x axis, so zooming one zooms all and a
    hover shows every panel's values at that step (``hoversubplots="axis"``, one spike line through all).

    Each panel's y range is ``robust_y_range`` (warmup and far outliers left out, detected incident peaks
    kept or marked at the edge) unless ``full_y_range``. ``selected``: index of the incident drawn darker.
    ``drag_selects_steps``: a drag selects a span of steps (full height) instead of zooming in the
    browser, so that a page can re-read that span from the store (``zoom_to_selection``) at full
    fidelity; a browser-side zoom would only magnify the downsampled buckets.
    """
    height = panel_height * len(panels) + 150
    layout = base_layout(height)
    domains = _panel_domains(len(panels), height, layout["margin"]["t"], layout["margin"]["b"])
    fig = go.Figure()
    n = len(panels)
    titles = []
    legend_causes: set[str] = set()
    axis_layout: dict[str, Any] = {}
    for row, (panel, domain) in enumerate(zip(panels, domains, strict=True), start=1):
        yref = "y" if row == 1 else f"y{row}"
        # an underlay (post-clip norm) first and wider: where it equals the pre-clip norm (no clipping)
        # it shows as a halo round it instead of hiding it
        order = sorted(range(len(panel.curves)), key=lambda i: panel.curves[i][1].metric not in UNDERLAY_WIDTHS)
        for metric in dict.fromkeys(s.metric for _, s in panel.curves):
            for trace in abandoned_traces(events, metric, legend=True):
                fig.add_trace(trace.update(xaxis="x", yaxis=yref))
        for i in order:
            label, s = panel.curves[i]
            color = series_color(s.metric, row - 1 + i)
            width = UNDERLAY_WIDTHS.get(s.metric, 1.6)
            for trace in envelope_traces(s, label, color, ema_weight, width=width):
                fig.add_trace(trace.update(xaxis="x", yaxis=yref))
        span = data_y_span(panel.curves, log_y=panel.log_y)
        y_range = (
            None
            if full_y_range
            else robust_y_range(
                [(s.steps, v) for _, s in panel.curves for v in (s.min, s.max)],
                _panel_peaks(panel, spikes, x_range),
                log_y=panel.log_y,
                min_span=panel.min_span,
            )
        )
        if span and events:
            for trace in event_traces(events, *span, legend=row == 1):
                fig.add_trace(trace.update(xaxis="x", yaxis=yref))
        shown_range = y_range if y_range is not None else autorange_of(span, log_y=panel.log_y)
        for trace in peak_markers(panel.curves, spikes, shown_range, x_range, legend_causes, log_y=panel.log_y):
            fig.add_trace(trace.update(xaxis="x", yaxis=yref))
        axis: dict[str, Any] = {
            "domain": list(domain),
            "anchor": "x",
            "title": {"text": plot_text(panel.y_title)},
            "type": "log" if panel.log_y else "linear",
        }
        if y_range is not None:
            axis["range"] = list(y_range)
        axis_layout["yaxis" if row == 1 else f"yaxis{row}"] = axis
        # titles as annotations at the panel's top left: the modebar (top right) never covers them
        titles.append(
            {
                "text": plot_text(panel.title),
                "xref": "paper",
                "yref": "paper",
                "x": 0,
                "xanchor": "left",
                "y": domain[1],
                "yanchor": "bottom",
                "showarrow": False,
                "font": {"size": 14},
            }
        )
    fig.update_layout(**layout)
    fig.update_layout(
        **axis_layout,
        annotations=titles,
        hoversubplots="axis",
        hoverdistance=8,  # the unified hover lists an incident marker only near the cursor, not 20 px away
        dragmode="select" if drag_selects_steps else "zoom",
        selectdirection="h",
        xaxis={
            "anchor": "y" if n == 1 else f"y{n}",
            "domain": [0, 1],
            "title": {"text": "step"},
            "showspikes": True,
            "spikemode": "across",
            "spikesnap": "cursor",
            "spikethickness": 1,
            "spikedash": "solid",
            "spikecolor": "#868e96",
        },
    )
    add_spike_shading(fig, spikes, x_range, selected)
    if x_range:
        fig.update_xaxes(range=[x_range[0], x_range[1]])
    # room under the plots for every legend row (entries of a group stack: ~3 a row at 1280 px), none cut off
    entries = sum(1 for t in fig.data if t.showlegend is not False and t.name)
    extra = max(0, LEGEND_ROW_PX * math.ceil(entries / 3) - (layout["margin"]["b"] - 60))
    fig.update_layout(height=height + extra, margin={"b": layout["margin"]["b"] + extra})
    return fig


def compare_figure(lines: Sequence[Line], x_title: str, y_title: str, *, log_y: bool) -> go.Figure:
    """Runs overlaid; a seed group is its mean with a shaded band; a smoothed line on top keeps the raw
    one visible underneath."""
    fig = go.Figure()
    for i, line in enumerate(lines):
        color = PALETTE[i % len(PALETTE)]
        if line.lower is not None and line.upper is not None:
            fig.add_trace(
                go.Scatter(
                    x=line.x,
                    y=line.upper,
                    mode="lines",
                    line={"width": 0, "color": color},
                    hoverinfo="skip",
                    showlegend=False,
                    legendgroup=line.label,
                )
            )
            fig.add_trace(
                go.Scatter(
                    x=line.x,
                    y=line.lower,
                    mode="lines",
                    line={"width": 0, "color": color},
                    fill="tonexty",
                    opacity=0.25,
                    name=f"{plot_text(line.label)} band",
                    legendgroup=line.label,
                )
            )
        smoothing = line.smooth is not None
        fig.add_trace(
            go.Scatter(
                x=line.x,
                y=line.y,
                mode="lines",
                name=f"{plot_text(line.label)}{' (raw)' if smoothing else ''}",
                line={"color": color, "width": 1 if smoothing else 1.8},
                opacity=0.35 if smoothing else 1.0,
                legendgroup=line.label,
            )
        )
        if smoothing:
            fig.add_trace(
                go.Scatter(
                    x=line.x,
                    y=line.smooth,
                    mode="lines",
                    name=f"{plot_text(line.label)} EMA",
                    line={"color": color, "width": 2.2},
                    legendgroup=line.label,
                )
            )
    fig.update_layout(**base_layout(460, x_title))
    fig.update_yaxes(title_text=plot_text(y_title), type="log" if log_y else "linear")
    return fig


def schedule_figure(
    steps: np.ndarray,
    curves: dict[str, np.ndarray],
    transitions: Sequence[tuple[int, str, float]],
    overlay: tuple[np.ndarray, np.ndarray, str] | None = None,
) -> go.Figure:
    """LR curves (the first is the chosen schedule) with its transition points and a logged-LR overlay."""
    fig = go.Figure()
    for i, (name, lr) in enumerate(curves.items()):
        fig.add_trace(
            go.Scatter(
                x=steps,
                y=lr,
                mode="lines",
                name=plot_text(name),
                line={
                    "color": PALETTE[i % len(PALETTE)],
                    "width": 2.6 if i == 0 else 1.4,
                    "dash": "solid" if i == 0 else "dash",
                },
            )
        )
    if transitions:
        fig.add_trace(
            go.Scatter(
                x=[t[0] for t in transitions],
                y=[t[2] for t in transitions],
                mode="markers",
                name="transitions",
                text=[plot_text(t[1]) for t in transitions],
                marker={"size": 10, "symbol": "diamond", "color": "#e67700"},
                hovertemplate="%{text} at step %{x}<br>LR %{y:.3g}<extra></extra>",
            )
        )
        for step, _, _ in transitions:
            fig.add_vline(x=step, line={"color": "#e67700", "dash": "dot", "width": 1})
    if overlay is not None:
        fig.add_trace(
            go.Scatter(
                x=overlay[0],
                y=overlay[1],
                mode="lines",
                name=plot_text(overlay[2]),
                line={"color": "#212529", "width": 1.4, "dash": "dot"},
            )
        )
    fig.update_layout(**base_layout(430))
    fig.update_yaxes(title_text="learning rate", exponentformat="e")
    return fig
