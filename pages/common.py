"""What every page shares: the store handle, cached reads, the run picker, the Plotly theme.

Everything cached here is keyed by the run's generation, so a run that grows (``watch``) is re-read
and an unchanged one is not.
"""

from __future__ import annotations

from typing import Any

import streamlit as st

from ingest.errors import StabScopeError
from ingest.store import RunInfo, SeriesData, Store, default_store_path


@st.cache_resource(show_spinner=False)
def get_store(path: str | None = None) -> Store:
    """The store at ``path`` (default: ``$STABSCOPE_STORE`` or the embedded default)."""
    return Store(path or default_store_path())


def ensure_demo_runs() -> None:
    """Seed the demo runs on a store's first start, with a progress bar (once per store)."""
    from ingest.demo import DEMO_SEEDED_KEY, seed_demo_store

    store = get_store()
    if store.get_setting(DEMO_SEEDED_KEY):
        return
    bar = st.progress(0.0, text="First start: writing demo runs through the real shard -> Parquet path…")
    seed_demo_store(store, progress=lambda done, total: bar.progress(done / total, text=f"demo run {done}/{total}"))
    bar.empty()


def list_runs() -> list[RunInfo]:
    """Catalog rows (not cached: cheap, and must show live runs and deletions at once)."""
    return get_store().list_runs()


@st.cache_data(show_spinner=False, max_entries=256)
def series(
    run: str,
    gen: int,
    metric: str,
    buckets: int | None = 2000,
    start: int | None = None,
    end: int | None = None,
    rank: int | None = None,
    analysis_gen: int = 0,
) -> SeriesData:
    """A (downsampled) series; ``gen``/``analysis_gen`` are cache keys that change when the run grows."""
    return get_store().read_series(run, metric, buckets=buckets, start=start, end=end, rank=rank)


def pick_run(key: str = "run", label: str = "Run") -> RunInfo | None:
    """A run selectbox that remembers the choice across pages (``?run=NAME`` in the URL works too)."""
    runs = list_runs()
    if not runs:
        st.info(
            "No runs yet. Upload a log on the **Upload** page, or run `stabscope demo` / "
            "`stabscope compact SHARD_DIR --run NAME`."
        )
        return None
    names = [r.name for r in runs]
    wanted = st.session_state.get("selected_run") or st.query_params.get("run")
    index = names.index(wanted) if wanted in names else 0
    name = st.selectbox(label, names, index=index, key=key)
    st.session_state["selected_run"] = name
    return runs[names.index(name)]


def show_error(exc: StabScopeError) -> None:
    """A user-facing error banner (never a traceback)."""
    st.error(str(exc), icon="🚫")


def plot_layout(title: str, y_title: str, log_y: bool = False, height: int = 320) -> dict[str, Any]:
    """The shared Plotly layout: labelled axes with units, compact margins, readable in both themes."""
    return {
        "title": {"text": title, "font": {"size": 15}},
        "height": height,
        "margin": {"l": 60, "r": 20, "t": 40, "b": 40},
        "xaxis": {"title": {"text": "step"}},
        "yaxis": {"title": {"text": y_title}, "type": "log" if log_y else "linear"},
        "legend": {"orientation": "h", "y": -0.25},
        "hovermode": "x unified",
    }
