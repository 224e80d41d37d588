"""The "Run settings" form: the run metadata a user can set (``ingest.store.run_meta.META_KEYS``), shown on the
Cost and Spikes pages and written through ``Store.update_meta``, as ``stabscope meta`` does."""

from __future__ import annotations

from typing import Any

import streamlit as st

from ingest.errors import StabScopeError
from ingest.store import RunInfo
from ingest.store.run_meta import META_KEYS, coerce_meta_value, user_keys
from pages.parts.page_errors import show_error
from pages.parts.store_access import get_store

NOT_SET = "(not set)"


def settings_changes(meta: dict[str, Any], entered: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """(updates, removals) from the form's values: a changed value is validated and set, an emptied one
    removed; raises ``StabScopeError`` with one sentence for a value out of range."""
    updates: dict[str, Any] = {}
    removals: list[str] = []
    for key, value in entered.items():
        current = meta.get(key)
        if value is None or value == NOT_SET:
            if current is not None:
                removals.append(key)
        elif value != current:
            updates[key] = coerce_meta_value(key, value)
    return updates, removals


def _source(key: str, meta: dict[str, Any]) -> str:
    if meta.get(key) is None:
        return "not set"
    return "set by you" if key in user_keys(meta) else "from the log"


def run_settings(info: RunInfo, key: str) -> None:
    """An expander "Run settings" with a form of the run's metadata; saving stores it and re-runs the
    analyses (spikes and diagnosis read max_norm, precision and num_experts), then reloads the page."""
    with st.expander("Run settings", icon=":material/tune:"):
        st.caption(
            f"What **{info.name}**'s log does not say: GPUs, price, step time, clipping threshold, precision… "
            "Values the log stated are filled in; yours are kept when the log is imported again. Saving re-runs "
            "the analyses."
        )
        entered: dict[str, Any] = {}
        with st.form(f"{key}_meta_form", border=False):
            columns = st.columns(3)
            for i, (name, spec) in enumerate(META_KEYS.items()):
                column, current = columns[i % 3], info.meta.get(name)
                help_text = f"{spec.label}: {spec.expected} ({_source(name, info.meta)})"
                widget_key = f"{key}_meta_{info.name}_{name}"
                if spec.kind == "choice":
                    options = [NOT_SET, *spec.choices]
                    index = options.index(current) if current in options else 0
                    entered[name] = column.selectbox(name, options, index=index, key=widget_key, help=help_text)
                elif spec.kind == "int":
                    value = int(current) if isinstance(current, int | float) else None
                    entered[name] = column.number_input(name, value=value, step=1, key=widget_key, help=help_text)
                else:
                    value_f = float(current) if isinstance(current, int | float) else None
                    entered[name] = column.number_input(
                        name, value=value_f, step=0.1, format="%g", key=widget_key, help=help_text
                    )
            saved = st.form_submit_button("Save run settings", type="primary")
        if saved:
            try:
                updates, removals = settings_changes(info.meta, entered)
                if updates or removals:
                    with st.spinner("Saving and re-running the analyses…"):
                        get_store().update_meta(info.name, updates, removals)
                    st.rerun()
                st.caption("Nothing changed.")
            except StabScopeError as exc:
                show_error(exc)
