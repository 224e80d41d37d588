"""Compare: several runs overlaid, aligned by step or tokens, with seeds grouped into a mean and a band."""

from __future__ import annotations

import pages  # noqa: F401  # first: a deep link's first run leaves Streamlit's pages/ mode here

# isort: split
import numpy as np
import pandas as pd  # type: ignore[import-untyped]
import streamlit as st

from ingest.errors import StabScopeError
from pages.charts import compare_figure
from pages.common import (
    MISSING,
    Line,
    auto_buckets,
    ema,
    group_lines,
    list_runs,
    metric_label,
    read_series,
    seed_group,
    to_x,
)

st.title("Compare runs")
runs = {r.name: r for r in list_runs() if r.first_step is not None}
if not runs:
    st.info("No runs with data yet. Upload logs on the **Upload** page, then pick two or more here.")
    st.stop()
wanted = [n for n in st.session_state.get("compare_runs", []) if n in runs] or list(runs)[:4]
chosen = st.multiselect("Runs", list(runs), default=wanted, key="cmp_runs")
if not chosen:
    st.info("Pick at least one run (select several on the **Runs** page to preselect them).")
    st.stop()
st.session_state["compare_runs"] = chosen

metrics = sorted({m for name in chosen for m in runs[name].metrics})
c1, c2, c3, c4 = st.columns([2, 1.2, 1.6, 1.6])
metric = c1.selectbox("Metric", metrics, index=metrics.index("loss") if "loss" in metrics else 0, key="cmp_metric")
axis = c2.radio("Align by", ["step", "tokens"], horizontal=True, key="cmp_axis")
ema_weight = c3.slider("EMA smoothing (per step)", 0.0, 0.99, 0.0, 0.01, key="cmp_ema")
log_y = c4.toggle("Log-scale y", key="cmp_log")
g1, g2 = st.columns([1, 3])
group = g1.toggle(
    "Group seeds",
    value=True,
    key="cmp_group",
    help="Runs named NAME-seedN / NAME_sN (or with meta seed_group) become one mean with a band",
)
band = g2.radio("Band", ["min/max", "std"], horizontal=True, key="cmp_band", disabled=not group)

lines, notes = [], []
for name in chosen:
    info = runs[name]
    s = read_series(info, metric, buckets=auto_buckets(int(info.first_step or 0), int(info.last_step or 0)))
    if s.steps.size == 0:
        notes.append(f"**{name}** has no `{metric}`")
        continue
    try:
        x = to_x(info, s, axis)
    except StabScopeError as exc:
        notes.append(str(exc))
        continue
    lines.append(Line(name, x, s.values, ema(s.steps, s.values, ema_weight) if ema_weight > 0 else None))
if notes:
    st.warning("Left out: " + "; ".join(notes), icon=":material/info:")
if not lines:
    st.stop()
groups = {name: seed_group(runs[name]) for name in chosen}
shown = group_lines(lines, groups, "minmax" if band == "min/max" else "std") if group else lines
x_title = "step" if axis == "step" else "tokens"
st.plotly_chart(
    compare_figure(shown, x_title, metric_label(metric), log_y), key="cmp_chart", config={"displaylogo": False}
)


def final(line: Line) -> tuple[float, float]:
    finite = np.isfinite(line.y)
    if not finite.any():
        return float("nan"), float("nan")
    i = int(np.flatnonzero(finite)[-1])
    return float(line.x[i]), float(line.y[i])


def band_width(line: Line) -> float | None:
    if line.upper is None or line.lower is None:
        return None
    return float(line.upper[-1] - line.lower[-1])


table = pd.DataFrame(
    [
        {
            "line": line.label,
            "runs": ", ".join(line.members or (line.label,)),
            f"last {x_title}": final(line)[0],
            f"final {metric}": final(line)[1],
            f"best {metric}": float(np.nanmin(line.y)),
            "band width at end": band_width(line),
        }
        for line in shown
    ]
)
st.dataframe(table, hide_index=True, key="cmp_table", placeholder=MISSING)
st.caption(
    "Seed groups average their runs on a shared grid (where at least one run has data); the band is the "
    "spread across seeds. Align by tokens uses each run's logged cumulative `tokens`."
)
