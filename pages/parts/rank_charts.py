"""Plotly figures of the Ranks page: the rank x step heatmap (clickable, flagged ranks marked) and one
rank against its peers' median and band. Like ``pages.parts.charts``, they take plain data and never read
the store."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import plotly.graph_objects as go

from ingest.store import SeriesData
from pages.parts.chart_ranges import data_y_span
from pages.parts.chart_style import PALETTE, base_layout
from pages.parts.charts import envelope_traces, event_traces
from stab_core.alerts import OUTLIER_MIN_DEVIATION, cross_rank_band
from stab_core.runview import RunEvent

CLICK_GRID_POINTS = 20_000
"""Most clickable markers laid over a heatmap (columns are thinned beyond that)."""
FLAGGED_RANK_COLOUR = "#2b8a3e"
"""Rings and rank labels of the ranks the outlier table flags (green: apart from the red-blue % scale)."""
HEATMAP_SATURATION = 6.0
"""The % heatmap's colours saturate at this many times the cells' median absolute deviation."""


def heatmap_colour_range(z: np.ndarray, *, relative: bool) -> tuple[float | None, float | None]:
    """Colour limits that show ordinary rank-to-rank spread, so that one 100x spike saturates its own
    cells instead of washing every other cell out to the middle colour. For % deviations: symmetric,
    at ``HEATMAP_SATURATION`` times the median |deviation| of the cells (a robust quantile: outliers
    covering up to half the cells cannot move it), and never inside the outlier threshold
    (``OUTLIER_MIN_DEVIATION``, 10 %): a rank steadily 2.5 % off stays pale, and a rank the outlier
    table flags (at least 10 % off) is the one in full colour. Otherwise the 1st-99th percentile.
    None, None when nothing is finite."""
    finite = z[np.isfinite(z)]
    if not finite.size:
        return None, None
    if relative:
        limit = max(HEATMAP_SATURATION * float(np.median(np.abs(finite))), 100 * OUTLIER_MIN_DEVIATION)
        return -limit, limit
    low, high = (float(v) for v in np.percentile(finite, [1, 99]))
    return (low, high) if high > low else (None, None)


def heatmap_figure(
    ranks: np.ndarray,
    steps: np.ndarray,
    matrix: np.ndarray,
    z_title: str,
    *,
    relative: bool,
    selected: int | None,
    deviation_pct: np.ndarray | None = None,
    deviation_title: str = "% vs cross-rank median",
    last_step: int | None = None,
    flagged: Sequence[int] = (),
    rings: Sequence[tuple[int, int]] = (),
) -> go.Figure:
    """Rank x step heatmap of bucket means (``steps``: each column's first step; the last column ends
    at ``last_step``); ``relative`` colours by % deviation from each column's median, or by
    ``deviation_pct`` (e.g. from each rank's pipeline stage, ``stab_core.alerts.peer_deviation_pct``).
    ``flagged``: the ranks the outlier table flags, their rank labels in colour; ``rings``: (rank, step)
    cells to ring (a transient's largest deviation: one column wide, it could hide among 400)."""
    z = matrix
    if relative and matrix.size:
        if deviation_pct is None:
            median = cross_rank_band(matrix)[0]
            with np.errstate(all="ignore"):
                deviation_pct = 100 * (matrix - median) / np.abs(median)
        z, z_title = deviation_pct, deviation_title
    zmin, zmax = heatmap_colour_range(z, relative=relative)
    # each column's whole steps, for the hover: "step 7" or "steps 10–12"
    ends = np.r_[steps[1:] - 1, steps[-1:]]
    if last_step is not None and ends.size:
        ends[-1] = max(int(ends[-1]), int(last_step))
    column_steps = zip(steps.tolist(), ends.tolist(), strict=True)
    spans = [f"step {a:,}" if b <= a else f"steps {a:,}–{b:,}" for a, b in column_steps]
    fig = go.Figure(
        go.Heatmap(
            z=z,
            x=steps,
            y=ranks,
            colorscale="RdBu_r" if relative else "Viridis",
            zmin=zmin,
            zmax=zmax,
            colorbar={"title": {"text": z_title, "side": "right"}},
            customdata=np.broadcast_to(np.array(spans, dtype=object), np.shape(z)),
            hovertemplate="rank %{y}<br>%{customdata}<br>%{z:.4g}<extra></extra>",
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
    if rings:
        fig.add_trace(
            go.Scatter(
                x=[step for _, step in rings],
                y=[rank for rank, _ in rings],
                mode="markers",
                showlegend=False,
                marker={"symbol": "circle-open", "size": 14, "color": FLAGGED_RANK_COLOUR, "line": {"width": 2.5}},
                hovertemplate="rank %{y}: flagged, most deviant at step %{x}<extra></extra>",
            )
        )
    if flagged:
        fig.update_yaxes(**_rank_ticks(ranks, flagged))
    # steps are whole numbers: a few columns get one tick each (Plotly would put ticks at 0.5 steps)
    fig.update_xaxes(title_text="step", tickformat=",d")
    if 0 < steps.size <= 20:
        fig.update_xaxes(tickmode="array", tickvals=steps.tolist())
    if steps.size == 1:
        fig.update_xaxes(range=[float(steps[0]) - 0.5, float(steps[0]) + 0.5])
    return fig


def _rank_ticks(ranks: np.ndarray, flagged: Sequence[int]) -> dict[str, Any]:
    """Y ticks of a rank heatmap: every 1, 2, 5, 10 ... ranks (about a dozen), the flagged ranks' own
    labels in colour (of flagged neighbours, the first: their rows are coloured anyway), and no regular
    label close enough to a flagged one to overlap it."""
    every = next(k for k in (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 10**9) if len(ranks) / k <= 12)
    near = max(0, math.ceil(len(ranks) / 40) - 1)  # rows closer than ~14 px (a 700-px heatmap) would overlap
    marked: set[int] = set()
    for rank in sorted(flagged):
        if all(abs(rank - m) > near for m in marked):
            marked.add(rank)
    regular = [r for r in ranks.tolist() if r % every == 0 and all(abs(r - f) > near for f in marked)]
    values = sorted(set(regular) | marked)
    text = [f"<span style='color:{FLAGGED_RANK_COLOUR}'><b>{r} ▸</b></span>" if r in marked else str(r) for r in values]
    return {"tickmode": "array", "tickvals": values, "ticktext": text}


def rank_vs_median_figure(
    rank: int,
    own: SeriesData,
    steps: np.ndarray,
    median: np.ndarray,
    lower: np.ndarray,
    upper: np.ndarray,
    y_title: str,
    events: Sequence[RunEvent] = (),
    peers: str = "all ranks",
) -> go.Figure:
    """One rank's series against its peers' median with their min–max band (``peers``: who they are,
    e.g. "all ranks" or "stage 3's ranks")."""
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
            name=f"{peers} min–max",
            fillcolor="rgba(134,142,150,0.25)",
        )
    )
    fig.add_trace(
        go.Scatter(
            x=steps,
            y=median,
            mode="lines",
            name="cross-rank median" if peers == "all ranks" else f"{peers} median",
            line={"color": "#495057", "width": 1.5, "dash": "dash"},
        )
    )
    for trace in envelope_traces(own, f"rank {rank}", PALETTE[1], 0.0):
        fig.add_trace(trace)
    span = data_y_span([("", own)], log_y=False)
    if span and events:
        for trace in event_traces(events, *span, legend=True):
            fig.add_trace(trace)
    fig.update_layout(**base_layout(340))
    fig.update_yaxes(title_text=y_title)
    return fig
