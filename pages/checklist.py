"""Pre-flight checklist: the eight P0/P1 items graded from an uploaded config and/or a stored run.

What neither answers stays a box for the reviewer to tick; the verdict and a Markdown launch review
follow from the graded and ticked items (``stab_core.checklist``).
"""

from __future__ import annotations

import pages  # noqa: F401  # first: a deep link's first run leaves Streamlit's pages/ mode here

# isort: split
import hashlib
from dataclasses import replace
from typing import Any

import streamlit as st

from ingest.errors import StabScopeError
from ingest.importing.configs import FORMATS, ConfigFormat, config_from_run_meta, read_run_config
from pages.parts.store_access import get_store, list_runs, store_root
from stab_core.checklist import ItemResult, checklist_markdown, evaluate_checklist, failing_p0
from stab_core.checklist_facts import run_facts

NO_RUN = "(none)"
STATUS_LABEL = {"pass": "✅ PASS", "fail": "❌ FAIL", "unknown": "❔ TO CHECK"}
TICKED_EVIDENCE = "ticked by hand in the launch review"
FORMAT_CHOICES: dict[str, ConfigFormat | None] = {"auto-detect": None, **{f: f for f in FORMATS}}


def stored_config(meta: dict[str, Any]) -> dict[str, Any] | None:
    """A run's normalised config: ``meta['config']`` (simulated runs), else what its metadata states
    (``ingest.importing.configs.config_from_run_meta``: the settings a user set, the config kept by the Upload page,
    the argument dump parsed at import, the settings a log reader found); None when it states nothing."""
    if isinstance(meta.get("config"), dict):
        return dict(meta["config"])
    return config_from_run_meta(meta) or None


@st.cache_data(show_spinner="Reading the run…", max_entries=64)
def run_inputs(root: str, name: str, gen: int) -> tuple[dict[str, Any] | None, dict[str, Any]]:
    """(stored config, ``run_facts``) of run ``name`` at generation ``gen`` (one per-rank metric is enough
    for the per-rank fact, and reading one keeps this fast)."""
    store = get_store()
    info = store.run_info(name)
    view = store.run_view(name, rank_metrics=tuple(info.rank_metrics[:1]))
    return stored_config(info.meta), run_facts(view)


def merged_config(stored: dict[str, Any] | None, uploaded: dict[str, Any] | None) -> dict[str, Any] | None:
    """The stored run's config with the uploaded file's keys on top (the upload is the newer plan)."""
    if stored is None or uploaded is None:
        return uploaded if stored is None else stored
    sources = {**stored.get("key_sources", {}), **uploaded.get("key_sources", {})}
    return {**stored, **uploaded, "key_sources": sources}


st.title("Pre-flight checklist")
st.caption(
    "Eight things to settle before a long pre-training run: P0 must pass before launch, P1 should. "
    "Upload the run's config and/or pick a stored run; what neither answers is left for you to tick."
)
left, right = st.columns(2)
upload = left.file_uploader(
    "Run config: YAML, JSON, TOML (Megatron-LM, HF Trainer, torchtitan) or a Megatron arguments dump",
    type=["yaml", "yml", "json", "toml", "txt", "log", "out", "args"],
    key="ck_upload",
)
fmt = left.selectbox("Format", list(FORMAT_CHOICES), key="ck_format")
names = [r.name for r in list_runs()]
wanted = st.session_state.get("selected_run") or st.query_params.get("run")  # as pages.parts.widgets.pick_run
if wanted in names and wanted != st.session_state.get("ck_followed"):
    st.session_state["ck_run"] = wanted  # a run picked on another page since this page last followed one
    st.session_state["ck_followed"] = wanted
run_name = right.selectbox("Stored run (its config and its own metrics)", [NO_RUN, *names], key="ck_run")

uploaded: dict[str, Any] | None = None
stored: dict[str, Any] | None = None
facts: dict[str, Any] = {}
try:
    if upload is not None:  # read_run_config bounds the size (MAX_CONFIG_BYTES) and names the file in errors
        uploaded = read_run_config(upload.getvalue(), upload.name, FORMAT_CHOICES[fmt])
        mapped = sorted(set(uploaded) - {"source_format", "key_sources", "skipped_lines"})
        left.caption(f"{upload.name}: read as `{uploaded['source_format']}`, {len(mapped)} checklist keys mapped.")
        for line in uploaded.get("skipped_lines", []):
            left.caption(f"Passed over a log line in the argument dump, {line}")
        if not mapped:
            left.warning(f"No checklist setting recognised in {upload.name}: is it a trainer config?")
    if run_name != NO_RUN:
        st.session_state["selected_run"] = st.session_state["ck_followed"] = run_name
        stored, facts = run_inputs(store_root(), run_name, get_store().run_info(run_name).gen)
        if stored is None:
            right.caption(
                f"{run_name}'s log states no settings and none were set: only its metrics answer items "
                "(set them with `Run settings` on the Cost or Spikes page, or upload the config here)."
            )
        else:
            stated = sorted(set(stored) - {"source_format", "key_sources", "skipped_lines"})
            right.caption(f"{run_name}: {len(stated)} settings from its log and metadata ({', '.join(stated[:8])}…).")
    results = evaluate_checklist(merged_config(stored, uploaded), facts)
except ValueError as exc:  # the core's check of a config value: the user's to fix, drawn by app.py
    raise StabScopeError(str(exc)) from exc
if uploaded is None and run_name == NO_RUN:
    st.info("Nothing to grade yet: upload a config or pick a stored run. Meanwhile every item is a box to tick.")

sources = [s for s in (upload.name if upload else "", run_name if run_name != NO_RUN else "") if s]
signature = hashlib.sha1("|".join(sources).encode()).hexdigest()[:8]  # new sources, fresh ticks
verdict_box = st.container()
final: list[ItemResult] = []
for priority, heading in (("P0", "P0: must pass before launch"), ("P1", "P1: should pass")):
    st.subheader(heading)
    for r in (r for r in results if r.priority == priority):
        with st.container(border=True):
            note = "" if r.applicable else " (not applicable)"
            st.markdown(f"{STATUS_LABEL[r.status]} · **{r.item.title}** (`{r.id}`){note}")
            st.markdown("\n".join(f"- {e}" for e in r.evidence))
            ticked = r.status == "unknown" and st.checkbox("Checked by hand", key=f"ck_tick_{signature}_{r.id}")
            with st.expander("Why, and how to check"):
                st.markdown(f"**Why.** {r.item.why}\n\n**How to check.** {r.item.how_to_check}")
        final.append(replace(r, status="pass", evidence=(*r.evidence, TICKED_EVIDENCE)) if ticked else r)

blockers = failing_p0(final)
open_p0 = [r for r in final if r.priority == "P0" and r.status == "unknown"]
with verdict_box:
    if blockers:
        st.error(
            f"**Fix P0 first**: {len(blockers)} P0 item(s) fail: " + ", ".join(f"`{r.id}`" for r in blockers),
            icon=":material/block:",
        )
    elif open_p0:
        st.warning(
            f"**Not yet**: tick {len(open_p0)} P0 item(s) once checked: " + ", ".join(f"`{r.id}`" for r in open_p0),
            icon=":material/pending:",
        )
    else:
        p1_open = sum(r.status != "pass" for r in final if r.priority == "P1")
        st.success(f"**Launch**: every P0 item passes ({p1_open} P1 item(s) open).", icon=":material/rocket_launch:")
    m1, m2, m3, m4 = st.columns(4)
    p0 = [r for r in final if r.priority == "P0"]
    p1 = [r for r in final if r.priority == "P1"]
    m1.metric("P0 passing", f"{sum(r.status == 'pass' for r in p0)} / {len(p0)}")
    m2.metric("P0 failing", len(blockers))
    m3.metric("P1 passing", f"{sum(r.status == 'pass' for r in p1)} / {len(p1)}")
    m4.metric("To tick by hand", sum(r.status == "unknown" for r in final))
    title = "Pre-flight checklist" + (f": {' + '.join(sources)}" if sources else "")
    review = checklist_markdown(final, title=title)
    st.download_button(
        "Download the launch review (Markdown)",
        review,
        file_name=f"preflight-{signature if sources else 'blank'}.md",
        mime="text/markdown",
        key="ck_download",
        icon=":material/download:",
    )
    with st.expander("Preview the launch review"):
        st.code(review, language="markdown")
