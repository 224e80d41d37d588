"""Compare: several runs overlaid, aligned by step or tokens, with seeds grouped into a mean and a band."""

from __future__ import annotations

import pages  # noqa: F401  # first: a deep link's first run leaves Streamlit's pages/ mode here

# isort: split
import numpy as np
import pandas as pd  # type: ignore[import-untyped]
import streamlit as st

from ingest.errors import StabScopeError
from ingest.store import RunInfo, SeriesData
from pages.parts.charts import compare_figure
from pages.parts.compare_lines import BEST_WINDOW, Line, best_smoothed, group_lines, seed_group, to_x
from pages.parts.series_display import ema, metric_label
from pages.parts.store_access import auto_buckets, last_finite, list_runs, read_series
from pages.parts.widgets import MISSING

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
    compare_figure(shown, x_title, metric_label(metric), log_y=log_y), key="cmp_chart", config={"displaylogo": False}
)


def group_final(line: Line) -> tuple[float, float]:
    """(x, value) of a seed group's last finite mean point."""
    finite = np.flatnonzero(np.isfinite(line.y))
    if not finite.size:
        return float("nan"), float("nan")
    return float(line.x[finite[-1]]), float(line.y[finite[-1]])


def band_width(line: Line) -> float | None:
    if line.upper is None or line.lower is None:
        return None
    return float(line.upper[-1] - line.lower[-1])


def tokens_at(info: RunInfo, step: int | None) -> float:
    """The cumulative ``tokens`` logged at ``step`` (interpolated between logged steps)."""
    if step is None:
        return float("nan")
    logged = read_series(info, "tokens", start=step, end=step, buckets=None)
    if logged.steps.size:
        return float(logged.values[-1])
    one = SeriesData("tokens", np.array([step]), np.zeros(1), np.zeros(1), np.zeros(1), "run", False)
    return float(to_x(info, one, "tokens")[0])


def run_figures(info: RunInfo) -> dict[str, float | int | None]:
    """One run's row: its last finite value and step (``last_finite``: the Runs table's figures), its
    best smoothed value, and its best validation loss when the metric is the loss."""
    step, value = last_finite(info, metric)
    whole = read_series(info, metric, buckets=None)
    row: dict[str, float | int | None] = {STEP_COL: step, FINAL_COL: value, BEST_COL: best_smoothed(whole.values)}
    if axis == "tokens":
        row[X_COL] = tokens_at(info, step)
    if VAL_COL:
        val = read_series(info, "val_loss", buckets=None).values if "val_loss" in info.metrics else np.zeros(0)
        row[VAL_COL] = float(np.min(val[np.isfinite(val)])) if np.isfinite(val).any() else float("nan")
    return row


def mean_of(rows: list[dict[str, float | int | None]], column: str) -> float:
    """The mean of a column over a group's runs, leaving out runs without a value (NaN when none has)."""
    values = [float(v) for r in rows if (v := r.get(column)) is not None]
    return float(np.nanmean(values)) if np.isfinite(values).any() else float("nan")


def line_row(line: Line) -> dict[str, object]:
    """A table row: a run's own figures, or a seed group's (final: the mean line's last point; best:
    the mean of its runs' best)."""
    head: dict[str, object] = {"line": line.label, "runs": ", ".join(line.members or (line.label,))}
    if not line.members:
        return {**head, **run_figures(runs[line.label]), "band width at end": band_width(line)}
    members = [run_figures(runs[name]) for name in line.members]
    x, value = group_final(line)
    row: dict[str, object] = {
        **head,
        STEP_COL: int(x) if axis == "step" and np.isfinite(x) else None,
        FINAL_COL: value,
        BEST_COL: mean_of(members, BEST_COL),
    }
    if axis == "tokens":
        row[X_COL] = x
    if VAL_COL:
        row[VAL_COL] = mean_of(members, VAL_COL)
    return {**row, "band width at end": band_width(line)}


lower_is_better = "loss" in metric or "ppl" in metric or "perplexity" in metric
STEP_COL, FINAL_COL, X_COL = f"last {metric} step", f"final {metric}", "last tokens"
BEST_COL = f"{'best' if lower_is_better else 'lowest'} {metric} (rolling median of {BEST_WINDOW})"
VAL_COL = "best val_loss" if metric == "loss" and any("val_loss" in runs[n].metrics for n in chosen) else None
table = pd.DataFrame([line_row(line) for line in shown])
order = ["line", "runs", STEP_COL, *([X_COL] if axis == "tokens" else []), FINAL_COL, BEST_COL]
table = table[order + [VAL_COL] * bool(VAL_COL) + ["band width at end"]].astype({STEP_COL: "Int64"})
number = "%.4f" if lower_is_better else None
columns = {
    STEP_COL: st.column_config.NumberColumn(format="%d", help=f"The step of each run's last finite {metric}"),
    FINAL_COL: st.column_config.NumberColumn(
        format=number,
        help=f"The last finite {metric} each run logged, at '{STEP_COL}' (the Runs table's figure); "
        "a seed group's is its mean line's last point",
    ),
    BEST_COL: st.column_config.NumberColumn(
        format=number,
        help=f"The lowest point of a rolling median of {BEST_WINDOW} consecutive logged values: one noisy "
        "batch does not make it (a run with fewer values: their median; a seed group: the mean of its runs')",
    ),
    "best val_loss": st.column_config.NumberColumn(format="%.4f", help="The lowest logged validation loss"),
}
st.dataframe(table, hide_index=True, key="cmp_table", placeholder=MISSING, column_config=columns)
st.caption(
    "Seed groups average their runs on a shared grid (where at least one run has data); the band is the "
    "spread across seeds. Align by tokens uses each run's logged cumulative `tokens`. The final value and "
    f"its step are each run's last finite `{metric}`, as on the Runs page; the best is the lowest point of a "
    f"rolling median of {BEST_WINDOW} logged values, not the luckiest single batch."
)
