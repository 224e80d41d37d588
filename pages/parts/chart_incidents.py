"""Incidents drawn on the pages' charts: each incident's span shaded in its cause's colour on every
panel, and a marker at each of its peaks (at the panel's top edge, labelled, when the peak is off scale).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import plotly.graph_objects as go

from ingest.store import SeriesData
from pages.parts.chart_ranges import edge_of_range
from pages.parts.chart_style import CAUSE_COLORS, plot_text

MIN_BAND_PX = 5
"""Outline width of an incident's band: a one-step incident is this many pixels wide at any zoom."""


def _spike_color(spike: dict[str, Any]) -> str:
    return CAUSE_COLORS.get(spike.get("cause") or "unknown", CAUSE_COLORS["unknown"])


def add_spike_shading(
    fig: go.Figure, spikes: Sequence[dict[str, Any]], x_range: tuple[int, int] | None, selected: int | None = None
) -> None:
    """Shade each incident's [start, end] on every panel, coloured by its diagnosed cause.

    The band's outline is ``MIN_BAND_PX`` pixels wide, so a one-step incident stays a visible band at any
    zoom (a 1-step span is a hairline below ~1,000 px per 1,000 steps). ``selected`` (an index into
    ``spikes``) is drawn darker."""
    causes_seen: set[str] = set()
    shapes = list(fig.layout.shapes or ())
    for i, s in enumerate(spikes):
        if x_range and (s["end"] < x_range[0] or s["start"] > x_range[1]):
            continue
        color = _spike_color(s)
        # One full-height shape per spike, set in one layout update: the panels share their x axis,
        # and add_vrect per spike and panel made reruns slow on runs with many spikes.
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
                "opacity": 0.5 if i == selected else 0.22,
                "line": {"width": MIN_BAND_PX, "color": color},
                "layer": "below",
            }
        )
        causes_seen.add(s.get("cause") or "unknown")
    fig.update_layout(shapes=shapes)
    for cause in sorted(causes_seen):
        fig.add_trace(
            go.Scatter(
                x=[None],
                y=[None],
                mode="markers",
                name=f"incident: {cause}",
                legendgroup=f"incident:{cause}",
                marker={"symbol": "square", "size": 12, "color": CAUSE_COLORS.get(cause, CAUSE_COLORS["unknown"])},
            )
        )


def incident_peaks(spike: dict[str, Any]) -> list[tuple[str, int, float | None]]:
    """(metric, peak step, peak value or None) of every metric in an incident: its ``members`` when the
    analyses give them, else the entry's own metric and peak."""
    members = spike.get("members") or [spike]
    peaks = []
    for m in members:
        value = m.get("peak_value")
        peaks.append((str(m["metric"]), int(m["peak"]), float(value) if value is not None else None))
    return peaks


def drawn_value_at(curves: Sequence[tuple[str, SeriesData]], metric: str, step: int) -> float | None:
    """The largest drawn value of ``metric`` at ``step`` (or in the bucket holding it); None if not drawn."""
    for _, s in curves:
        if s.metric != metric or not s.steps.size:
            continue
        i = max(int(np.searchsorted(s.steps, step, side="right")) - 1, 0)
        return float(s.max[i])
    return None


def peak_markers(
    curves: Sequence[tuple[str, SeriesData]],
    spikes: Sequence[dict[str, Any]],
    y_range: tuple[float, float] | None,
    x_range: tuple[int, int] | None,
    shown_legend: set[str],
    *,
    log_y: bool,
) -> list[go.Scatter]:
    """A marker at every incident peak of a metric drawn in this panel, coloured by cause. A peak above
    the panel's y range (or non-finite) sits at the top edge as an up-triangle labelled with its value,
    so an off-scale spike is never silently cut off. ``customdata`` is the incident's index."""
    drawn = {s.metric for _, s in curves}
    by_cause: dict[str, dict[str, list[Any]]] = {}
    for i, spike in enumerate(spikes):
        for metric, step, value in incident_peaks(spike):
            if metric not in drawn or (x_range and not x_range[0] <= step <= x_range[1]):
                continue
            if value is None:
                value = drawn_value_at(curves, metric, step)
            finite = value is not None and math.isfinite(value)
            top = None if y_range is None else (10 ** y_range[1] if log_y else y_range[1])
            off_scale = not finite or (top is not None and value is not None and value > top)
            if off_scale and top is None:
                continue  # nothing finite to place it against
            y = edge_of_range(y_range, log_y=log_y) if off_scale else value
            label = "non-finite" if not finite else f"{value:.4g}"
            ratio = spike.get("ratio")
            times = f" x{float(ratio):.2f}" if ratio is not None else ""
            hover = (
                f"incident #{i}: {plot_text(metric)} {label}{times} at step {step:,}<br>"
                f"cause: {plot_text(spike.get('cause', 'unknown'))}" + (" (above this axis)" if off_scale else "")
            )
            cause = spike.get("cause") or "unknown"
            m = by_cause.setdefault(cause, {"x": [], "y": [], "symbol": [], "text": [], "hover": [], "index": []})
            m["x"].append(step)
            m["y"].append(y)
            m["symbol"].append("triangle-up" if off_scale else "diamond")
            m["text"].append(f"↑ {label}" if off_scale else "")
            m["hover"].append(hover)
            m["index"].append(i)
    traces = []
    for cause, m in sorted(by_cause.items()):
        traces.append(
            go.Scatter(
                x=m["x"],
                y=m["y"],
                mode="markers+text",
                text=m["text"],
                textposition="bottom center",
                textfont={"size": 11, "color": CAUSE_COLORS.get(cause, CAUSE_COLORS["unknown"])},
                marker={
                    "symbol": m["symbol"],
                    "size": 11,
                    "color": CAUSE_COLORS.get(cause, CAUSE_COLORS["unknown"]),
                    "line": {"width": 1, "color": "#ffffff"},
                },
                customdata=m["index"],
                hovertext=m["hover"],
                hovertemplate="%{hovertext}<extra></extra>",
                name=f"incident: {cause}",
                legendgroup=f"incident:{cause}",
                showlegend=False,
                cliponaxis=False,
            )
        )
        shown_legend.add(cause)
    return traces
