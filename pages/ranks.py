"""Ranks: a rank x step heatmap, the straggler and outlier ranks with their deviation, one rank vs the median.

Each rank is compared with its peers: the ranks of its own pipeline stage when the run's metadata gives
the layout, else all ranks. Ranks that logged nothing are named."""

from __future__ import annotations

import pages  # noqa: F401  # first: a deep link's first run leaves Streamlit's pages/ mode here

# isort: split
import streamlit as st

from pages.parts.rank_charts import heatmap_figure, rank_vs_median_figure
from pages.parts.rank_table import rank_outliers
from pages.parts.series_display import metric_label
from pages.parts.store_access import HEATMAP_BUCKETS, auto_buckets, logged_ranks, read_events, read_heatmap, read_series
from pages.parts.widgets import MISSING, pick_run, step_range
from stab_core.alerts import OUTLIER_MIN_DEVIATION, OUTLIER_Z, STRAGGLER_METRICS, cross_rank_band, peer_deviation_pct
from stab_core.ranklayout import (
    MIN_PEERS,
    StageLayout,
    comparison_groups,
    compress_ranks,
    expected_world_size,
    meta_int,
    missing_ranks,
    stage_layout,
)

MARKED_RANKS = 16  # transient ranks ringed on the heatmap at their peak (the most deviant first)
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


def is_memory(metric: str) -> bool:
    """GPU memory metrics: they differ between pipeline stages by design."""
    return metric.startswith("gpu_mem") or "memory" in metric


def ranks_text(ranks: list[int]) -> str:
    """``rank 47`` / ``ranks 17, 40`` / ``ranks 3–9``."""
    return ("rank " if len(ranks) == 1 else "ranks ") + compress_ranks(ranks)


def missing_sentence(meta: dict[str, object], logged: list[int]) -> str | None:
    """The sentence naming the ranks that logged nothing (``Rank 47 logged nothing: 63 of 64 ...``), or None."""
    missing = missing_ranks(meta, logged)
    if not missing:
        return None
    world = expected_world_size(meta, logged)
    source = (
        f"world size {world} in the run's metadata"
        if meta_int(meta, ("world_size",)) == world
        else f"ranks 0–{world - 1}, up to the highest rank that logged"
    )
    text = ranks_text(missing)
    return f"{text[0].upper()}{text[1:]} logged nothing: {len(logged)} of {world} ranks have data ({source})."


def comparison_sentence(metric: str, layout: StageLayout | None, *, grouped: bool) -> str:
    """Who each rank is compared with, and why memory flags no straggler when that cannot be by stage."""
    stage_memory = "the first stage holds the embedding, the last the output layer and the loss"
    if grouped and layout is not None:
        text = (
            f"Each rank is compared with the ranks of its own pipeline stage ({layout.stages} stages of "
            f"{layout.ranks_per_stage} ranks, from the run's metadata)"
        )
        return text + (f": memory differs between stages by design ({stage_memory})." if is_memory(metric) else ".")
    if layout is not None and layout.stages > 1:
        where = (
            f"Some of its {layout.stages} pipeline stages have fewer than {MIN_PEERS} ranks that logged, "
            "so each rank is compared with all ranks"
        )
    elif layout is not None:
        where = "One pipeline stage: each rank is compared with all ranks"
        return where + (
            ": memory flags no straggler, step time and local gradient norm do." if is_memory(metric) else "."
        )
    else:
        where = (
            "The pipeline layout is unknown (add `pipeline_parallel_size` and `world_size` to the run's "
            "metadata to compare each rank with its own stage), so each rank is compared with all ranks"
        )
    if is_memory(metric):
        return (
            f"{where}. Memory differences between pipeline stages are expected ({stage_memory}): "
            "memory flags no straggler."
        )
    return where + "."


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
everyone = [int(r) for r in logged_ranks(info)]
if (absent := missing_sentence(info.meta, everyone)) is not None:
    st.warning(absent, icon=":material/person_off:")
if info.ranks < 3:
    st.caption("Fewer than 3 ranks: there is no robust cross-rank median to compare against.")
layout = stage_layout(info.meta, everyone)
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
groups = comparison_groups(layout, ranks)
table = rank_outliers(ranks, steps, matrix, groups=groups, straggles=metric in STRAGGLER_METRICS)
st.session_state["rk_table_ranks"] = [int(r) for r in table["rank"]]
if "rk_rank" not in st.session_state or st.session_state["rk_rank"] not in rank_list:
    st.session_state["rk_rank"] = int(table["rank"].iloc[0]) if len(table) else rank_list[0]
flagged = table[~table["kind"].isin(["normal", "unknown"])]
if is_memory(metric) and groups is None:
    # said before the picture: without the stage layout, whole stages stand apart in memory
    st.info(comparison_sentence(metric, layout, grouped=False), icon=":material/info:")

fig = heatmap_figure(
    ranks,
    steps,
    matrix,
    metric_label(metric),
    relative=relative,
    selected=st.session_state["rk_rank"],
    deviation_pct=peer_deviation_pct(matrix, groups) if relative else None,
    deviation_title="% vs its stage's median" if groups is not None else "% vs cross-rank median",
    last_step=hi,
    flagged=[int(r) for r in flagged["rank"]],
    rings=[
        (int(r), int(s))
        for r, s, k in flagged[["rank", "peak_step", "kind"]].itertuples(index=False)
        if k == "transient"
    ][:MARKED_RANKS],
)
st.plotly_chart(
    fig,
    key="rk_heat",
    on_select=lambda: pick_rank_from("rk_heat", rank_list),
    selection_mode="points",
    config={"displaylogo": False},
)
span = hi - lo + 1
if steps.size == 1:
    columns = f"1 column: step {int(steps[0]):,}, the only step with per-rank `{metric}` in steps {lo:,}–{hi:,}"
elif span <= HEATMAP_BUCKETS:
    columns = f"{steps.size} columns, one per step with per-rank `{metric}`"
else:
    narrow, wide = span // HEATMAP_BUCKETS, -(-span // HEATMAP_BUCKETS)
    width = f"{narrow}" if narrow == wide else f"{narrow}–{wide}"
    columns = f"{steps.size} columns of {width} steps (each cell: the rank's mean)"
silent = sorted(set(everyone) - set(rank_list))
silent_note = f" {ranks_text(silent).capitalize()} logged no `{metric}` here." if silent else ""
st.caption(f"{ranks.size} ranks x {columns}.{silent_note} Click a cell or a table row to inspect that rank.")

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
kinds = (
    "a straggler (step time and local gradient norm make one) is one in at least half of the columns"
    if metric in STRAGGLER_METRICS
    else "a persistent one (not a straggler: step time is what makes one) is one in at least half of the columns"
)
transients = int((flagged["kind"] == "transient").sum())
ringed = f"the {MARKED_RANKS} most deviant transient ones are" if transients > MARKED_RANKS else "transient ones are"
grouped = groups is not None
compared = "" if is_memory(metric) and not grouped else f" {comparison_sentence(metric, layout, grouped=grouped)}"
st.caption(
    f"Outlier: modified z-score among its peers > {OUTLIER_Z} and at least {OUTLIER_MIN_DEVIATION:.0%} from "
    f"their median in a step column; {kinds}, a transient one in fewer; unknown: fewer than {MIN_PEERS} "
    f"peers logged with it. Flagged ranks have their label in green; {ringed} ringed at their largest "
    f"deviation.{compared}"
)

rank = st.selectbox("Rank", rank_list, key="rk_rank")
own = read_series(info, metric, rank=rank, start=lo, end=hi, buckets=auto_buckets(lo, hi))
peers_rows = slice(None) if groups is None else groups == groups[rank_list.index(rank)]
median, lower, upper = cross_rank_band(matrix[peers_rows])
peers = "all ranks" if groups is None else f"stage {int(groups[rank_list.index(rank)])}'s ranks"
row = table[table["rank"] == rank]
if len(row):
    r = row.iloc[0]
    versus = "the median" if groups is None else "its stage's median"
    st.markdown(
        f"Rank **{rank}**: mean {r['mean']:.4g}, {r['deviation_pct']:+.1f}% vs {versus} on average, "
        f"peak {r['peak_deviation_pct']:+.1f}% at step {int(r['peak_step']):,} — **{r['kind']}**."
    )
fig = rank_vs_median_figure(
    rank, own, steps, median, lower, upper, metric_label(metric), read_events(info), peers=peers
)
st.plotly_chart(fig, key="rk_rank_chart", config={"displaylogo": False})
