"""Runs: the catalog of the store; search, filter, select one run to open or several to compare; delete."""

from __future__ import annotations

import pages  # noqa: F401  # first: a deep link's first run leaves Streamlit's pages/ mode here

# isort: split
import pandas as pd  # type: ignore[import-untyped]
import streamlit as st

from ingest.errors import StabScopeError
from ingest.store import WriterBusy
from ingest.store.run_meta import coerce_meta_value, run_format, run_tags
from pages.parts.charts import Panel, panels_figure
from pages.parts.page_errors import page_fragment, show_error
from pages.parts.run_catalog import run_catalog
from pages.parts.store_access import LIVE_REFRESH_S, get_store, list_runs, read_events, read_series, read_spikes
from pages.parts.widgets import MISSING, nav_link

COLUMNS = {
    "status": st.column_config.TextColumn(
        width="medium",
        help="live: still being written · finished: reached its planned steps · stopped at N of M: the last "
        "training step (the last loss the trainer logged) is N of M planned · ended at step N: the log states "
        "no planned steps (set them under Run settings on the Cost or Spikes page); in brackets, what N rests "
        "on where it is not plain (an evaluation logged after it, a loss never finite)",
    ),
    "last loss": st.column_config.NumberColumn(
        format="%.4f", help="Last finite logged loss (nats/token), at the step in 'last loss step'"
    ),
    "last loss step": st.column_config.NumberColumn(format="%d", help="The step of the last finite logged loss"),
    "worst spike (x)": st.column_config.NumberColumn(format="%.1f×", help="Largest spike: peak over baseline"),
    "spikes": st.column_config.NumberColumn(help="Spike events the analyses detected"),
    "alerts": st.column_config.TextColumn(width="large"),
    "notes": st.column_config.TextColumn(width="large", help='The run\'s notes: `stabscope meta RUN notes="..."`'),
    "updated": st.column_config.DatetimeColumn(format="YYYY-MM-DD HH:mm"),
}

# status filter label -> the first word of the statuses it keeps (ingest.services.run_status.STATUS_WORDS)
STATUS_FILTERS = {
    "live": "live",
    "finished": "finished",
    "stopped early": "stopped",
    "ended": "ended",
    "damaged": "damaged",
}

st.title("Runs")
if deleted := st.session_state.pop("runs_deleted", None):
    st.success(f"Deleted {', '.join(deleted)}.")
runs = list_runs()
if not runs:
    st.info(
        "No runs in this store yet. Upload a training log (Megatron, HF Trainer, TensorBoard, CSV, JSONL...) or "
        "point `stabscope watch SHARD_DIR --run NAME` at a training job's shards."
    )
    nav_link("pages/upload.py", "Upload logs", icon=":material/upload_file:")
    st.stop()

c1, c2, c_tags, c3, c4 = st.columns([3, 2, 2, 1.4, 1.2], vertical_alignment="bottom")
query = c1.text_input("Search", key="runs_search", placeholder="name, tag or notes")
all_tags = sorted({tag for r in runs for tag in run_tags(r.meta)})
chosen_tags = c_tags.multiselect(
    "Tags", all_tags, default=[], key="runs_tags", placeholder="any", help="Only runs with all these tags"
)
statuses = c2.multiselect(
    "Status",
    list(STATUS_FILTERS),
    default=[],
    key="runs_status",
    placeholder="any",
    help="stopped: ended before its planned steps; ended: the log states no planned steps",
)
only_alerts = c3.checkbox("With alerts", key="runs_alerts", help="Only runs with an alert")
with c4:
    nav_link("pages/upload.py", "Upload logs", icon=":material/upload_file:")
c_format, c_since, _ = st.columns([2, 2, 4.6], vertical_alignment="bottom")
formats = c_format.multiselect(
    "Format",
    sorted({run_format(r.source) for r in runs}),
    default=[],
    key="runs_format",
    placeholder="any",
    help="The trainer's log format the run was imported from, or shards for a monitored job",
)
since = c_since.date_input("Updated since", value=None, key="runs_since", help="Only runs written to on or after")


def filtered(table: pd.DataFrame) -> pd.DataFrame:
    keep = pd.Series(True, index=table.index)
    if query:
        text = table["name"] + " " + table["tags"] + " " + table["notes"]
        keep &= text.str.contains(query, case=False, regex=False)
    if chosen_tags:
        keep &= table["tags"].map(lambda tags: set(chosen_tags) <= set(tags.split(", ")))
    if statuses:
        first_word = table["status"].str.split().str[0]
        keep &= first_word.isin([STATUS_FILTERS[s] for s in statuses])
    if only_alerts:
        keep &= table["alerts"] != ""
    if formats:
        keep &= table["format"].isin(formats)
    if since is not None:
        keep &= pd.to_datetime(table["updated"]).dt.date >= since
    return table[keep].reset_index(drop=True)


@page_fragment(run_every=LIVE_REFRESH_S if any(r.status == "live" for r in runs) else None)
def catalog() -> None:
    runs_now = {r.name: r for r in list_runs()}
    table = filtered(run_catalog(list(runs_now.values()), get_store().spike_summary()))
    st.caption(f"{len(table)} of {len(runs_now)} runs. Select rows to open one run or compare several.")
    event = st.dataframe(
        table,
        hide_index=True,
        width="stretch",
        column_config=COLUMNS,
        on_select="rerun",
        selection_mode="multi-row",
        key="runs_table",
        placeholder=MISSING,
    )
    chosen = [str(table.iloc[i]["name"]) for i in event.selection.rows if i < len(table)]
    if not chosen:
        return
    st.session_state["selected_run"] = chosen[0]
    st.session_state["compare_runs"] = chosen
    links = st.columns(4)
    with links[0]:
        nav_link("pages/overview.py", f"Open {chosen[0]}", icon=":material/show_chart:")
    with links[1]:
        nav_link("pages/spikes.py", "Its spikes", icon=":material/bolt:")
    with links[2]:
        nav_link("pages/ranks.py", "Its ranks", icon=":material/grid_on:")
    if len(chosen) > 1:
        with links[3]:
            nav_link("pages/compare.py", f"Compare {len(chosen)} runs", icon=":material/compare_arrows:")
    preview(chosen[0])
    with st.expander(f"Delete {len(chosen)} selected run(s)"):
        st.write("Removes " + ", ".join(f"**{n}**" for n in chosen) + " and their Parquet files from the store.")
        sure = st.checkbox("Yes, delete them", key="runs_delete_confirm")
        if st.button("Delete", type="primary", disabled=not sure, key="runs_delete"):
            deleted, refused = delete_runs(chosen)
            if deleted:
                st.session_state.pop("selected_run", None)
            if not refused:
                st.session_state["runs_deleted"] = deleted
                st.rerun()
            if deleted:
                st.success(f"Deleted {', '.join(deleted)}.")
            for busy in refused:
                show_error(busy)


def delete_runs(names: list[str]) -> tuple[list[str], list[WriterBusy]]:
    """Delete each run of ``names`` that nothing writes now; a run being written (a live ``watch``, an
    import) is refused at once, with who writes it and since when, and the others are deleted."""
    deleted: list[str] = []
    refused: list[WriterBusy] = []
    store = get_store()
    for name in names:
        try:
            with store.writing(name, wait_s=0):
                store.delete_run(name)
            deleted.append(name)
        except WriterBusy as busy:
            refused.append(busy)
    return deleted, refused


def notes_editor() -> None:
    """Add or change a run's notes (the same ``notes`` that ``stabscope meta RUN notes=...`` sets)."""
    names = [r.name for r in list_runs()]
    with st.expander("Notes of a run", icon=":material/edit_note:"):
        picked = st.selectbox("Run", names, key="runs_note_run")
        if picked is None:
            return
        store = get_store()
        current = str(store.run_info(picked).meta.get("notes") or "")
        text = st.text_area("Notes", value=current, key=f"runs_note_text_{picked}", max_chars=2000)
        if st.button("Save notes", key="runs_note_save", disabled=text == current):
            try:
                with store.writing(picked, wait_s=0):
                    if text.strip():
                        store.update_meta(picked, {"notes": coerce_meta_value("notes", text.strip())})
                    else:
                        store.update_meta(picked, {}, ["notes"])
            except (WriterBusy, StabScopeError) as exc:
                show_error(exc)
                return
            st.toast(f"Saved the notes of {picked}.")
            st.rerun()


def preview(name: str) -> None:
    info = get_store().run_info(name)
    loss = read_series(info, "loss")
    if loss.steps.size == 0:
        st.info(f"Run **{name}** has no `loss` series (metrics: {', '.join(info.metrics) or 'none'}).")
        return
    fig = panels_figure(
        [Panel(f"{name}: loss", "loss (nats/token)", [("loss", loss)])],
        read_events(info),
        read_spikes(info),
        panel_height=260,
    )
    st.plotly_chart(fig, key="runs_preview", config={"displaylogo": False})


catalog()
notes_editor()
