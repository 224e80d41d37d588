"""Plotly figure builders shared by the pages: min/max envelopes, EMA overlays, event and spike markers,
linked panels on one step axis, the rank heatmap, compared runs with seed bands, and LR schedules.

Builders take plain data (``SeriesData``, numpy arrays, events, spike dicts) and return figures; they
never read the store. Every axis is labelled with its unit.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from ingest.store import SeriesData
from pages.common import Line, ema
from stab_core.alerts import cross_rank_band
from stab_core.runview import RunEvent

PALETTE = ("#1c7ed6", "#d9480f", "#2b8a3e", "#7048e8", "#c2255c", "#0c8599", "#e67700", "#5c940d")
CAUSE_COLORS = {
    "numerical": "#c92a2a",
    "lr_transition": "#e67700",
    "rank_fault": "#7048e8",
    "router": "#1c7ed6",
    "data_outlier": "#2b8a3e",
    "unknown": "#868e96",
}
EVENT_STYLES = {
    "schedule_transition": ("#e67700", "dash"),
    "warmup_end": ("#e67700", "dot"),
    "cycle_restart": ("#f08c00", "dash"),
    "lr_jump": ("#e03131", "dash"),
    "checkpoint": ("#adb5bd", "dot"),
    "rollback": ("#c92a2a", "dashdot"),
    "data_switch": ("#1971c2", "dash"),
}
_DEFAULT_EVENT_STYLE = ("#868e96", "dot")
CLICK_GRID_POINTS = 20_000
HEATMAP_SATURATION = 6.0
"""The % heatmap's colours saturate at this many times the cells' median absolute deviation."""
"""Most clickable markers laid over a heatmap (columns are thinned beyond that)."""


@dataclass
class Panel:
    """One row of a linked-panel figure: curves sharing a y axis."""

    title: str
    y_title: str
    curves: list[tuple[str, SeriesData]] = field(default_factory=list)
    log_y: bool = False


def base_layout(height: int, x_title: str = "step") -> dict[str, Any]:
    """Compact margins, a horizontal legend under the x-axis title, unified hover; readable in both themes."""
    top, bottom = 30, 120
    plot_height = max(height - top - bottom, 60)
    return {
        "height": height,
        "margin": {"l": 70, "r": 20, "t": top, "b": bottom},
        "legend": {"orientation": "h", "y": -48 / plot_height, "yanchor": "top", "x": 0},
        "hovermode": "x unified",
        "xaxis": {"title": {"text": x_title}},
    }


def envelope_traces(s: SeriesData, label: str, color: str, ema_weight: float, legend: bool = True) -> list[go.Scatter]:
    """Mean line, min/max band (only where it differs from the line) and, when smoothing, the EMA on top
    with the raw line kept visible underneath."""
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
                name=f"{label} {band_name}",
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
            name=f"{label} (raw)" if smoothing else label,
            line={"color": color, "width": 1 if smoothing else 1.6},
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
                name=f"{label} EMA {ema_weight:g}",
                line={"color": color, "width": 2.2},
                legendgroup=label,
                showlegend=legend,
            )
        )
    return traces


def _y_span(curves: Sequence[tuple[str, SeriesData]], log_y: bool) -> tuple[float, float] | None:
    lows = [s.min[np.isfinite(s.min) & ((s.min > 0) if log_y else True)] for _, s in curves]
    highs = [s.max[np.isfinite(s.max)] for _, s in curves]
    lows, highs = [a for a in lows if a.size], [a for a in highs if a.size]
    if not lows or not highs:
        return None
    return float(min(a.min() for a in lows)), float(max(a.max() for a in highs))


def event_traces(events: Sequence[RunEvent], y0: float, y1: float, legend: bool) -> list[go.Scatter]:
    """One vertical-line trace per event kind (legend click hides a kind on every panel at once)."""
    by_kind: dict[str, list[RunEvent]] = {}
    for e in events:
        by_kind.setdefault(e.kind, []).append(e)
    traces = []
    for kind, items in by_kind.items():
        color, dash = EVENT_STYLES.get(kind, _DEFAULT_EVENT_STYLE)
        xs: list[float | None] = []
        ys: list[float | None] = []
        text: list[str] = []
        for e in items:
            xs += [e.step, e.step, None]
            ys += [y0, y1, None]
            text += [f"{kind}: {e.label}"] * 2 + [""]
        traces.append(
            go.Scatter(
                x=xs,
                y=ys,
                mode="lines",
                line={"color": color, "dash": dash, "width": 1.2},
                name=kind,
                legendgroup=f"event:{kind}",
                showlegend=legend,
                text=text,
                hovertemplate="%{text}<extra></extra>",
            )
        )
    return traces


def add_spike_shading(fig: go.Figure, spikes: Sequence[dict[str, Any]], x_range: tuple[int, int] | None) -> None:
    """Shade each spike's [start, end] on every panel, coloured by its diagnosed cause."""
    causes_seen: set[str] = set()
    shapes = list(fig.layout.shapes or ())
    for s in spikes:
        if x_range and (s["end"] < x_range[0] or s["start"] > x_range[1]):
            continue
        color = CAUSE_COLORS.get(s.get("cause", "unknown"), CAUSE_COLORS["unknown"])
        # One full-height shape per spike, set in one layout update: the panels share their x axis,
        # and add_vrect per spike and panel cost ~1.5 s per rerun on runs with many spikes.
        shapes.append(
            {
                "type": "rect",
                "xref": "x",
                "yref": "paper",
                "x0": s["start"] - 0.5,
                "x1": s["end"] + 0.5,
                "y0": 0,
                "y1": 1,
                "fillcolor": color,
                "opacity": 0.18,
                "line": {"width": 0},
                "layer": "below",
            }
        )
        causes_seen.add(s.get("cause", "unknown"))
    fig.update_layout(shapes=shapes)
    for cause in sorted(causes_seen):
        fig.add_trace(
            go.Scatter(
                x=[None],
                y=[None],
                mode="markers",
                name=f"spike: {cause}",
                marker={"symbol": "square", "size": 12, "color": CAUSE_COLORS.get(cause)},
            )
        )


def panels_figure(
    panels: Sequence[Panel],
    events: Sequence[RunEvent] = (),
    spikes: Sequence[dict[str, Any]] = (),
    ema_weight: float = 0.0,
    x_range: tuple[int, int] | None = None,
    panel_height: int = 210,
    drag_selects_steps: bool = False,
) -> go.Figure:
    """Panels stacked on one shared step axis: zooming one zooms all (linked zoom, in the browser).

    ``drag_selects_steps``: a drag selects a span of steps (full height) instead of zooming in the
    browser, so that a page can re-read that span from the store (``zoom_to_selection``) at full
    fidelity; a browser-side zoom would only magnify the downsampled buckets.
    """
    fig = make_subplots(
        rows=len(panels), cols=1, shared_xaxes=True, vertical_spacing=0.06, subplot_titles=[p.title for p in panels]
    )
    for row, panel in enumerate(panels, start=1):
        for i, (label, s) in enumerate(panel.curves):
            color = PALETTE[(row - 1 + i) % len(PALETTE)]
            for trace in envelope_traces(s, label, color, ema_weight):
                fig.add_trace(trace, row=row, col=1)
        span = _y_span(panel.curves, panel.log_y)
        if span and events:
            for trace in event_traces(events, *span, legend=row == 1):
                fig.add_trace(trace, row=row, col=1)
        fig.update_yaxes(title_text=panel.y_title, type="log" if panel.log_y else "linear", row=row, col=1)
    add_spike_shading(fig, spikes, x_range)
    fig.update_layout(**base_layout(panel_height * len(panels) + 150))
    fig.update_layout(xaxis={"title": None}, dragmode="select" if drag_selects_steps else "zoom", selectdirection="h")
    fig.update_xaxes(title_text="step", row=len(panels), col=1)
    if x_range:
        fig.update_xaxes(range=[x_range[0], x_range[1]])
    return fig


def heatmap_colour_range(z: np.ndarray, relative: bool) -> tuple[float | None, float | None]:
    """Colour limits that show ordinary rank-to-rank spread, so that one 100x spike saturates its own
    cells instead of washing every other cell out to the middle colour. For % deviations: symmetric,
    at ``HEATMAP_SATURATION`` times the median absolute deviation of the cells (at least +-1 %), which
    outliers covering many cells (a straggler all run long) cannot move; otherwise the 1st-99th
    percentile. None, None when nothing is finite."""
    finite = z[np.isfinite(z)]
    if not finite.size:
        return None, None
    if relative:
        limit = max(HEATMAP_SATURATION * float(np.median(np.abs(finite))), 1.0)
        return -limit, limit
    low, high = (float(v) for v in np.percentile(finite, [1, 99]))
    return (low, high) if high > low else (None, None)


def heatmap_figure(
    ranks: np.ndarray, steps: np.ndarray, matrix: np.ndarray, z_title: str, relative: bool, selected: int | None
) -> go.Figure:
    """Rank x step heatmap of bucket means; ``relative`` colours by % deviation from each bucket's median."""
    z = matrix
    if relative and matrix.size:
        median = cross_rank_band(matrix)[0]
        with np.errstate(all="ignore"):
            z = 100 * (matrix - median) / np.abs(median)
        z_title = "% vs cross-rank median"
    zmin, zmax = heatmap_colour_range(z, relative)
    fig = go.Figure(
        go.Heatmap(
            z=z,
            x=steps,
            y=ranks,
            colorscale="RdBu_r" if relative else "Viridis",
            zmin=zmin,
            zmax=zmax,
            colorbar={"title": {"text": z_title, "side": "right"}},
            hovertemplate="rank %{y}<br>step %{x}<br>%{z:.4g}<extra></extra>",
        )
    )
    # Plotly reports no clicks on heatmap cells: near-invisible markers on a grid over it make a click pick a rank
    stride = max(1, (len(ranks) * len(steps)) // CLICK_GRID_POINTS)
    grid_x, grid_y = np.meshgrid(steps[::stride], ranks)
    fig.add_trace(
        go.Scatter(
            x=grid_x.ravel(),
            y=grid_y.ravel(),
            mode="markers",
            showlegend=False,
            marker={"size": 6, "color": "rgba(0,0,0,0)"},  # fully transparent: clickable, not drawn
            hovertemplate="rank %{y}: click to inspect<extra></extra>",
        )
    )
    if selected is not None:
        fig.add_hrect(
            y0=selected - 0.5, y1=selected + 0.5, line={"color": "#fab005", "width": 2}, fillcolor="rgba(0,0,0,0)"
        )
    fig.update_layout(**base_layout(min(700, max(220, 18 * len(ranks) + 90))))
    fig.update_layout(hovermode="closest", margin={"b": 45})
    fig.update_yaxes(title_text="rank", autorange="reversed" if len(ranks) > 1 else True)
    return fig


def rank_vs_median_figure(
    rank: int,
    own: SeriesData,
    steps: np.ndarray,
    median: np.ndarray,
    lower: np.ndarray,
    upper: np.ndarray,
    y_title: str,
    events: Sequence[RunEvent] = (),
) -> go.Figure:
    """One rank's series against the cross-rank median with the other ranks' min–max band."""
    fig = go.Figure()
    fig.add_trace(go.Scatter(x=steps, y=upper, mode="lines", line={"width": 0}, hoverinfo="skip", showlegend=False))
    fig.add_trace(
        go.Scatter(
            x=steps,
            y=lower,
            mode="lines",
            line={"width": 0},
            fill="tonexty",
            opacity=0.2,
            name="all ranks min–max",
            fillcolor="rgba(134,142,150,0.25)",
        )
    )
    fig.add_trace(
        go.Scatter(
            x=steps,
            y=median,
            mode="lines",
            name="cross-rank median",
            line={"color": "#495057", "width": 1.5, "dash": "dash"},
        )
    )
    for trace in envelope_traces(own, f"rank {rank}", PALETTE[1], 0.0):
        fig.add_trace(trace)
    span = _y_span([("", own)], False)
    if span and events:
        for trace in event_traces(events, *span, legend=True):
            fig.add_trace(trace)
    fig.update_layout(**base_layout(340))
    fig.update_yaxes(title_text=y_title)
    return fig


def compare_figure(lines: Sequence[Line], x_title: str, y_title: str, log_y: bool) -> go.Figure:
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
                    name=f"{line.label} band",
                    legendgroup=line.label,
                )
            )
        smoothing = line.smooth is not None
        fig.add_trace(
            go.Scatter(
                x=line.x,
                y=line.y,
                mode="lines",
                name=f"{line.label}{' (raw)' if smoothing else ''}",
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
                    name=f"{line.label} EMA",
                    line={"color": color, "width": 2.2},
                    legendgroup=line.label,
                )
            )
    fig.update_layout(**base_layout(460, x_title))
    fig.update_yaxes(title_text=y_title, type="log" if log_y else "linear")
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
                name=name,
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
                text=[t[1] for t in transitions],
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
                name=overlay[2],
                line={"color": "#212529", "width": 1.4, "dash": "dot"},
            )
        )
    fig.update_layout(**base_layout(430))
    fig.update_yaxes(title_text="learning rate", exponentformat="e")
    return fig
