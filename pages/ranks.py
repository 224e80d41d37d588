"""Ranks: a rank x step heatmap, the straggler and outlier ranks with their deviation, one rank vs the median."""

from __future__ import annotations

import pages  # noqa: F401  # first: a deep link's first run leaves Streamlit's pages/ mode here

# isort: split
import streamlit as st

from pages.charts import heatmap_figure, rank_vs_median_figure
from pages.common import (
    HEATMAP_BUCKETS,
    MISSING,
    auto_buckets,
    metric_label,
    pick_run,
    rank_outliers,
    read_events,
    read_heatmap,
    read_series,
    step_range,
)
from stab_core.alerts import OUTLIER_Z, cross_rank_band

PREFERRED = ["grad_norm_local", "loss", "step_time_s", "gpu_temp_c", "gpu_power_w", "gpu_mem_gb", "gpu_util"]


def pick_rank_from(source_key: str, ranks: list[int]) -> None:
    """Selection callback: a heatmap cell or a table row picks the rank shown below."""
    selection = (st.session_state.get(source_key) or {}).get("selection") or {}
    if rows := selection.get("rows"):
        table = st.session_state.get("rk_table_ranks") or []
        if rows[0] < len(table):
            st.session_state["rk_rank"] = table[rows[0]]
    elif points := selection.get("points"):
        rank = round(float(points[0].get("y", -1)))
        if rank in ranks:
            st.session_state["rk_rank"] = rank


st.title("Ranks")
info = pick_run("ranks_run")
if info is None:
    st.stop()
if not info.rank_metrics:
    st.info(
        f"Run **{info.name}** has no per-rank data, only run-level series. Per-rank metrics "
        "(`grad_norm_local`, `step_time_s`, `gpu_temp_c`, ...) come from each rank's `ShardWriter(shard_dir, rank)`; "
        "most uploaded logs are written by rank 0 alone."
    )
    st.stop()
if info.ranks < 3:
    st.caption("Fewer than 3 ranks: there is no robust cross-rank median to compare against.")
options = sorted(info.rank_metrics, key=lambda m: (PREFERRED.index(m) if m in PREFERRED else 99, m))
c1, c2 = st.columns([2, 1], vertical_alignment="bottom")
metric = c1.selectbox("Per-rank metric", options, key="rk_metric")
relative = c2.toggle("Colour by deviation from the median", value=True, key="rk_relative")
lo, hi = step_range(info, "rk_range")
ranks, steps, matrix = read_heatmap(info, metric, HEATMAP_BUCKETS, lo, hi)
if ranks.size == 0:
    st.info(f"No per-rank `{metric}` in steps {lo}–{hi}.")
    st.stop()
rank_list = [int(r) for r in ranks]
table = rank_outliers(ranks, steps, matrix)
st.session_state["rk_table_ranks"] = [int(r) for r in table["rank"]]
if "rk_rank" not in st.session_state or st.session_state["rk_rank"] not in rank_list:
    st.session_state["rk_rank"] = int(table["rank"].iloc[0]) if len(table) else rank_list[0]

fig = heatmap_figure(ranks, steps, matrix, metric_label(metric), relative, st.session_state["rk_rank"])
st.plotly_chart(
    fig,
    key="rk_heat",
    on_select=lambda: pick_rank_from("rk_heat", rank_list),
    selection_mode="points",
    config={"displaylogo": False},
)
width = (hi - lo + 1) / max(steps.size, 1)
st.caption(
    f"{ranks.size} ranks x {steps.size} columns of ~{width:,.0f} steps (each cell: the rank's mean). "
    "Click a cell or a table row to inspect that rank."
)

flagged = table[table["kind"] != "normal"]
st.subheader(f"Outlier ranks: {len(flagged)} of {ranks.size}")
st.dataframe(
    table,
    hide_index=True,
    key="rk_table",
    on_select=lambda: pick_rank_from("rk_table", rank_list),
    selection_mode="single-row",
    column_config={
        "mean": st.column_config.NumberColumn(format="%.4g"),
        "deviation_pct": st.column_config.NumberColumn("mean dev. %", format="%+.1f"),
        "peak_deviation_pct": st.column_config.NumberColumn("peak dev. %", format="%+.1f"),
        "peak_step": st.column_config.NumberColumn("at step"),
        "max_z": st.column_config.NumberColumn("max |z|", format="%.1f"),
        "flagged_pct": st.column_config.NumberColumn("% of time outlier", format="%.1f"),
    },
    placeholder=MISSING,
)
st.caption(
    f"Outlier: modified z-score across ranks > {OUTLIER_Z} in a step column; a straggler is one in at least "
    "half of the columns, a transient one in fewer."
)

rank = st.selectbox("Rank", rank_list, key="rk_rank")
own = read_series(info, metric, rank=rank, start=lo, end=hi, buckets=auto_buckets(lo, hi))
median, lower, upper = cross_rank_band(matrix)
row = table[table["rank"] == rank]
if len(row):
    r = row.iloc[0]
    st.markdown(
        f"Rank **{rank}**: mean {r['mean']:.4g}, {r['deviation_pct']:+.1f}% vs the median on average, "
        f"peak {r['peak_deviation_pct']:+.1f}% at step {int(r['peak_step']):,} — **{r['kind']}**."
    )
fig = rank_vs_median_figure(rank, own, steps, median, lower, upper, metric_label(metric), read_events(info))
st.plotly_chart(fig, key="rk_rank_chart", config={"displaylogo": False})
