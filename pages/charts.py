"""Plotly figure builders shared by the pages: min/max envelopes, EMA overlays, event and spike markers,
linked panels on one step axis, compared runs with seed bands, and LR schedules (the Ranks page's
figures are in ``pages.rank_charts``).

Builders take plain data (``SeriesData``, numpy arrays, events, spike dicts) and return figures; they
never read the store. Every axis is labelled with its unit.
"""

from __future__ import annotations

import html
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import plotly.graph_objects as go

from ingest.store import SeriesData
from pages.compare_lines import Line
from pages.series_display import ema
from stab_core import causes
from stab_core.runview import RunEvent

PALETTE = ("#1c7ed6", "#d9480f", "#2b8a3e", "#7048e8", "#c2255c", "#0c8599", "#e67700", "#5c940d")
CAUSE_COLORS = {
    causes.NUMERICAL: "#c92a2a",
    causes.LR_TRANSITION: "#e67700",
    causes.RANK_FAULT: "#7048e8",
    causes.ROUTER: "#1c7ed6",
    causes.DATA_OUTLIER: "#2b8a3e",
    causes.UNKNOWN: "#868e96",
}
"""A colour per cause of :data:`stab_core.causes.CAUSES` (a test checks none is missing)."""
EVENT_STYLES = {
    "schedule_transition": ("#e67700", "dash"),
    "warmup_end": ("#e67700", "dot"),
    "cycle_restart": ("#f08c00", "dash"),
    "lr_jump": ("#e03131", "dash"),
    "checkpoint": ("#adb5bd", "dot"),
    "rollback": ("#c92a2a", "dashdot"),
    "data_switch": ("#1971c2", "dash"),
    "logging_end": ("#495057", "dashdot"),
}
_DEFAULT_EVENT_STYLE = ("#868e96", "dot")
MIN_BAND_PX = 5
"""Outline width of an incident's band: a one-step incident is this many pixels wide at any zoom."""
HEAD_FRACTION = 0.05
"""Share of the shown steps (the warmup's) left out of a panel's default y range."""
RANGE_PAD = 0.1
"""Padding of a default y range, as a share of its span, on each side."""
PEAK_STRETCH = 1.0
"""An incident peak up to this many spans above the default range stretches it; further out it is marked."""
TITLE_GAP_PX = 34
"""Pixels between stacked panels: room for the lower panel's title."""
MIN_RELATIVE_SPAN = 0.05
"""A default y range spans at least this share of the series' level (linear axes)."""
MIN_LOG_SPAN = 0.05
"""A default log y range spans at least this many decades."""
UNDERLAY_WIDTHS = {"grad_norm_clipped": 4.0}
"""Series drawn under the others, wider (px): the post-clip norm, equal to the pre-clip one when unclipped."""
LEGEND_ROW_PX = 26
"""Height of one row of a horizontal legend."""
# Okabe-Ito colours (distinguishable with the common colour-vision deficiencies), one per canonical series
SERIES_COLORS = {
    "loss": "#0072B2",
    "val_loss": "#D55E00",
    "grad_norm": "#E69F00",
    "grad_norm_clipped": "#56B4E9",
    "lr": "#009E73",
    "clip_ratio": "#CC79A7",
    "clip_coef": "#CC79A7",
    "snr": "#888888",  # mid grey: readable on the light and the dark theme
}


@dataclass
class Panel:
    """One row of a linked-panel figure: curves sharing a y axis."""

    title: str
    y_title: str
    curves: list[tuple[str, SeriesData]] = field(default_factory=list)
    log_y: bool = False
    min_span: float = 0.0
    """Smallest default y span in axis units (linear axes), e.g. 0.05 for a 0-1 fraction that sits at 0."""


def plot_text(text: object) -> str:
    """Text from the data (a run name, a metric, an event label) made safe to place in a Plotly legend,
    hover label or annotation: Plotly renders those as a subset of HTML (links, styles, line breaks),
    so ``<``, ``>`` and ``&`` are written as entities and show as themselves."""
    return html.escape(str(text), quote=False)


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


def data_y_span(curves: Sequence[tuple[str, SeriesData]], *, log_y: bool) -> tuple[float, float] | None:
    lows = [s.min[np.isfinite(s.min) & ((s.min > 0) if log_y else True)] for _, s in curves]
    highs = [s.max[np.isfinite(s.max)] for _, s in curves]
    lows, highs = [a for a in lows if a.size], [a for a in highs if a.size]
    if not lows or not highs:
        return None
    return float(min(a.min() for a in lows)), float(max(a.max() for a in highs))


def event_traces(events: Sequence[RunEvent], y0: float, y1: float, *, legend: bool) -> list[go.Scatter]:
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
                name=f"spike: {cause}",
                legendgroup=f"spike:{cause}",
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


def _value_at(curves: Sequence[tuple[str, SeriesData]], metric: str, step: int) -> float | None:
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
                value = _value_at(curves, metric, step)
            finite = value is not None and math.isfinite(value)
            top = None if y_range is None else (10 ** y_range[1] if log_y else y_range[1])
            off_scale = not finite or (top is not None and value is not None and value > top)
            if off_scale and top is None:
                continue  # nothing finite to place it against
            y = _edge(y_range, log_y=log_y) if off_scale else value
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
                name=f"spike: {cause}",
                legendgroup=f"spike:{cause}",
                showlegend=False,
                cliponaxis=False,
            )
        )
        shown_legend.add(cause)
    return traces


def _edge(y_range: tuple[float, float] | None, *, log_y: bool) -> float | None:
    """A y value just inside the top of the range (data units; the range is log10 units on a log axis)."""
    if y_range is None:
        return None
    y = y_range[1] - 0.04 * (y_range[1] - y_range[0])
    return float(10**y if log_y else y)


def robust_y_range(
    curves: Sequence[tuple[np.ndarray, np.ndarray]],
    peaks: Sequence[float] = (),
    *,
    log_y: bool = False,
    head_fraction: float = HEAD_FRACTION,
    min_span: float = 0.0,
) -> tuple[float, float] | None:
    """A y range for a panel that warmup and far outliers do not set.

    ``curves``: (steps, values) pairs drawn in the panel. The values from the first ``head_fraction`` of
    the shown steps are left out (the warmup's loss of 11 or grad norm of 15 would flatten a run that sits
    at 3.3 and 0.3), and the range spans the 0.5-99.5 % quantiles of the rest (at least
    ``MIN_RELATIVE_SPAN`` of their level), stretched to every value and incident peak (``peaks``, same
    units) within ``PEAK_STRETCH`` spans of it, padded by ``RANGE_PAD`` of the span. A value or peak
    further out stays off scale (``peak_markers`` marks an incident's at the edge). On a log axis
    (``log_y``) the range is in log10 units, as Plotly takes it, and only positive values count. None
    when no finite value is shown (let Plotly autorange). ``min_span``: the least span on a linear axis.
    """
    finite = [(np.asarray(s), np.asarray(v, dtype=np.float64)) for s, v in curves if np.size(s)]
    if not finite:
        return None
    first = min(float(s.min()) for s, _ in finite)
    last = max(float(s.max()) for s, _ in finite)
    cut = first + head_fraction * (last - first)

    def usable(v: np.ndarray) -> np.ndarray:
        keep = np.isfinite(v) & (v > 0) if log_y else np.isfinite(v)
        return np.log10(v[keep]) if log_y else v[keep]

    tail = np.concatenate([usable(v[s >= cut]) for s, v in finite])
    if not tail.size:  # everything shown is in the head (a zoom into the warmup): use it all
        tail = np.concatenate([usable(v) for _, v in finite])
    if not tail.size:
        return None
    low, high = (float(q) for q in np.quantile(tail, [0.005, 0.995]))
    span = high - low
    # never narrower than MIN_RELATIVE_SPAN of the level: a flat LR logged to 6 decimals would
    # otherwise fill the panel with its rounding steps
    least = MIN_LOG_SPAN if log_y else max(MIN_RELATIVE_SPAN * max(abs(low), abs(high)), min_span, 1e-12)
    if span < least:
        middle = (low + high) / 2
        low, high, span = middle - least / 2, middle + least / 2, least
    # near outliers and incident peaks (within PEAK_STRETCH spans) stay on the chart; far ones do not
    reach_low, reach_high = low - PEAK_STRETCH * span, high + PEAK_STRETCH * span
    usable_peaks = [math.log10(p) if log_y else p for p in peaks if math.isfinite(p) and (p > 0 or not log_y)]
    near = np.concatenate([tail, np.asarray(usable_peaks, dtype=np.float64)])
    near = near[(near >= reach_low) & (near <= reach_high)]
    low, high = min(low, float(near.min(initial=low))), max(high, float(near.max(initial=high)))
    lowest = float(tail.min())
    pad_low, pad_high = low - RANGE_PAD * span, high + RANGE_PAD * span
    if not log_y and lowest >= 0 > pad_low:  # a non-negative series (LR, norms) never needs a negative axis
        pad_low = 0.0
    return pad_low, pad_high


def _panel_peaks(panel: Panel, spikes: Sequence[dict[str, Any]], x_range: tuple[int, int] | None) -> list[float]:
    drawn = {s.metric for _, s in panel.curves}
    peaks = []
    for spike in spikes:
        for metric, step, value in incident_peaks(spike):
            if metric in drawn and (not x_range or x_range[0] <= step <= x_range[1]):
                v = _value_at(panel.curves, metric, step) if value is None else value
                if v is not None:
                    peaks.append(v)
    return peaks


def series_color(metric: str, fallback_index: int) -> str:
    """The colour of a series: fixed per canonical metric (so pre-clip and post-clip grad norm, LR and the
    clip ratio never share one), else the palette in order."""
    return SERIES_COLORS.get(metric, PALETTE[fallback_index % len(PALETTE)])


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
        shown_range = y_range if y_range is not None else _autorange_of(span, log_y=panel.log_y)
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


def _autorange_of(span: tuple[float, float] | None, *, log_y: bool) -> tuple[float, float] | None:
    """The range Plotly's autorange will show (data extremes), in axis units, for placing edge markers."""
    if span is None:
        return None
    if log_y:
        if span[0] <= 0 or span[1] <= 0:
            return None
        return math.log10(span[0]), math.log10(span[1])
    return span


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
