"""Widgets several pages share: the run picker, the visible step range, links between pages, and how a
table shows a missing value."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any, cast

import streamlit as st
from streamlit.errors import StreamlitAPIException

from ingest.store import RunInfo
from pages.parts.store_access import list_runs

MISSING = "—"
"""How every table shows a value that does not exist (no spike yet, no per-rank data)."""


def float_or_nan(value: Any) -> float:
    """``value`` as a float for a table cell; NaN (shown as ``MISSING``) when it is none."""
    try:
        return float(value)
    except (TypeError, ValueError):
        return math.nan


def page_script_path(page: str) -> str:
    """The absolute path of the page script ``pages/<name>.py``. Streamlit resolves a relative page path
    against its main script's folder, which is the source tree's root for app.py but the pages package
    itself under ``stabscope serve`` (pages.navigation); the navigation lists the pages by absolute path."""
    return str(Path(__file__).resolve().parents[1] / Path(page).name)  # pages/parts/ -> pages/


def nav_link(page: str, label: str, icon: str | None = None) -> None:
    """``st.page_link`` to another page (``pages/<name>.py``); plain text when the page runs on its own
    (no navigation)."""
    try:
        st.page_link(page_script_path(page), label=label, icon=icon)
    except StreamlitAPIException:
        st.markdown(f"{icon or ''} {label} (open the **{Path(page).stem}** page)")


def go_to(page: str) -> None:
    """``st.switch_page`` when the app's navigation knows ``page`` (``pages/<name>.py``); nothing when a
    page runs on its own."""
    try:
        st.switch_page(page_script_path(page))
    except StreamlitAPIException:
        st.caption(f"Open the **{Path(page).stem}** page to continue.")


def pick_run(key: str = "run", label: str = "Run", runs: Sequence[RunInfo] | None = None) -> RunInfo | None:
    """A run selectbox that remembers the choice across pages (``?run=NAME`` in the URL works too)."""
    runs = list(list_runs() if runs is None else runs)
    if not runs:
        st.info(
            "No runs yet. Upload a log on the **Upload** page, or run `stabscope compact SHARD_DIR --run NAME` "
            "(or `stabscope watch ...` for a live run)."
        )
        return None
    names = [r.name for r in runs]
    wanted = st.session_state.get("selected_run") or st.query_params.get("run")
    index = names.index(wanted) if wanted in names else 0
    name = st.selectbox(label, names, index=index, key=key)
    st.session_state["selected_run"] = name
    return runs[names.index(name)]


def step_range(info: RunInfo, key: str) -> tuple[int, int]:
    """The visible step range: a range slider that also follows a live run's growing last step.

    Charts may set ``st.session_state[key]`` from a box selection (see ``zoom_to_selection``).
    """
    lo, hi = int(info.first_step or 0), int(info.last_step or 0)
    if hi <= lo:
        return lo, hi
    seen_key = f"{key}__last"
    current = st.session_state.get(key)
    if current is not None:
        a, b = int(current[0]), int(current[1])
        if b == st.session_state.get(seen_key) or b > hi:  # the user was watching the end: follow it
            b = hi
        st.session_state[key] = (max(lo, min(a, hi)), max(lo, min(b, hi)))
    st.session_state[seen_key] = hi
    if key not in st.session_state:
        st.session_state[key] = (lo, hi)
    value = cast(
        tuple[int, int], st.slider("Steps shown", lo, hi, key=key, help="Drag the ends, or drag across a chart")
    )
    return int(value[0]), int(value[1])


def zoom_to_selection(chart_key: str, range_key: str) -> None:
    """``on_select`` callback: a box selected on a chart becomes the visible step range (re-queried)."""
    event = st.session_state.get(chart_key) or {}
    boxes = (event.get("selection") or {}).get("box") or []
    if not boxes:
        return
    xs = boxes[0].get("x") or []
    if len(xs) == 2:
        a, b = sorted(round(float(x)) for x in xs)
        st.session_state[range_key] = (a, max(b, a + 1))


def reset_range(range_key: str) -> None:
    """Button callback: show the whole run again."""
    st.session_state.pop(range_key, None)
