"""The pages' chart style: the palette, a colour per cause and per canonical series, a line style per
event kind, the base layout every figure starts from, and the one escape for data text placed in a
figure (``plot_text``)."""

from __future__ import annotations

import html
from typing import Any

from stab_core import causes

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
DEFAULT_EVENT_STYLE = ("#868e96", "dot")
"""The line of an event kind not in ``EVENT_STYLES``."""
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


def series_color(metric: str, fallback_index: int) -> str:
    """The colour of a series: fixed per canonical metric (so pre-clip and post-clip grad norm, LR and the
    clip ratio never share one), else the palette in order."""
    return SERIES_COLORS.get(metric, PALETTE[fallback_index % len(PALETTE)])
