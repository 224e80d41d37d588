"""Upload: drop logs, see what will be imported (format, metrics, steps, rejected lines), then commit."""

from __future__ import annotations

import pages  # noqa: F401  # first: a deep link's first run leaves Streamlit's pages/ mode here

# isort: split
import shutil
from pathlib import Path

import pandas as pd  # type: ignore[import-untyped]
import streamlit as st

from ingest.errors import StabScopeError
from ingest.formats import FORMATS, detect
from ingest.formats.accounting import import_report
from ingest.importing.import_inputs import ImportRead, read_inputs, sort_inputs
from ingest.importing.importer import (
    import_segments,
    remembered_map_applied,
    segment_run_name,
    store_parsed,
    with_line_report,
)
from ingest.importing.metric_map import all_metrics, resolve_map, stored_map, with_proposal
from ingest.store import DEFAULT_WRITER_WAIT_S, LockHolder, validate_run_name
from pages.parts.import_report import show_import_report
from pages.parts.page_errors import show_error
from pages.parts.store_access import get_store
from pages.parts.uploads import MAX_UPLOAD_BYTES, parsed_summary, stage_uploads, upload_run_name
from pages.parts.widgets import MISSING, nav_link
from stab_core.metrics import CANONICAL_METRICS

AUTO = "auto-detect"
KEEP_NAMES = "(keep every name)"
IMPORT_WAIT_S = DEFAULT_WRITER_WAIT_S
"""Seconds an import waits for another process writing the same run (as the CLI's default ``--wait``)."""


def without_staging(exc: StabScopeError, folder: Path) -> StabScopeError:
    """``exc`` with the private staging folder left out of its file names (the user's are shown)."""
    out = StabScopeError(str(exc).replace(f"{folder}/", ""))
    if exc.page_message is not None:
        out.page_message = exc.page_message.replace(f"{folder}/", "")
    return out


st.title("Upload logs")
files = st.file_uploader(
    "Training logs of one run (a log and its continuations, or the files of its folder)",
    accept_multiple_files=True,
    key="up_files",
    help=f"Up to {MAX_UPLOAD_BYTES // 1024**2} MiB in all. The format is detected from the contents; "
    "files that are not logs (a README, a config) are listed as skipped, a config is kept as the run's.",
)
with st.expander(f"The {len(FORMATS)} formats read"):
    st.dataframe(pd.DataFrame([{"format": n, "what": r.description} for n, r in FORMATS.items()]), hide_index=True)
if not files:
    st.info(
        "Drop one or more log files here: Megatron-LM / DeepSpeed console logs, HF `trainer_state.json`, "
        "TensorBoard event files, W&B / TensorBoard CSV exports, JSONL, llm.c, nanoGPT, torchtitan... "
        "You will see a preview before anything is stored."
    )
    st.stop()

signature = tuple((f.file_id, f.name, f.size) for f in files)
staged = st.session_state.get("up_stage")
if not staged or staged[0] != signature:
    if staged:
        shutil.rmtree(staged[1][0].parent, ignore_errors=True)
    staged = (signature, stage_uploads([(f.name, f.getvalue()) for f in files]))
    st.session_state["up_stage"] = staged
    st.session_state.pop("up_parsed", None)
paths = staged[1]
store = get_store()
candidates = detect(paths, custom_dir=store.root / "formats")
if not candidates and len(paths) > 1:  # a README or a config among the logs: rate the logs alone
    logs = sort_inputs(paths, custom_dir=store.root / "formats").logs
    candidates = detect(logs, custom_dir=store.root / "formats") if logs else []
c1, c2 = st.columns(2)
best = f"{AUTO} ({candidates[0][0]}, {candidates[0][1]:.0%})" if candidates else f"{AUTO} (no match)"
choice = c1.selectbox("Format", [best, *FORMATS], key="up_format", help="Override when the detection is wrong")
fmt = None if choice == best else choice
name = c2.text_input("Run name", upload_run_name(files[0].name), key="up_name")

parsed = st.session_state.get("up_parsed")
if parsed is None or parsed[0] != (signature, fmt):
    bar = st.progress(0.0, text="Reading…")

    def advance(done: int, total: int) -> None:
        bar.progress(min(done / max(total, 1), 1.0), text=f"Reading… {done / 1024**2:.1f} MiB")

    try:
        # the same reading as `stabscope import`: logs picked among the files, writers kept apart
        read = read_inputs(paths, fmt=fmt, progress=advance, custom_dir=store.root / "formats")
    except StabScopeError as exc:
        bar.empty()
        show_error(without_staging(exc, paths[0].parent))
        if candidates:
            st.caption("Candidates: " + ", ".join(f"{n} ({c:.0%})" for n, c in candidates))
        st.stop()
    bar.empty()
    parsed = ((signature, fmt), read)
    st.session_state["up_parsed"] = parsed
read_result: ImportRead = parsed[1]
log = read_result.parsed
span = log.step_range
st.subheader("Preview")
m1, m2, m3, m4 = st.columns(4)
m1.metric("Format", log.format)
m2.metric("Rows", f"{log.table.num_rows:,}")
m3.metric("Steps", f"{span[0]:,}–{span[1]:,}" if span else "none")
m4.metric("Rejected lines", f"{log.skipped:,}")
st.dataframe(parsed_summary(log), hide_index=True, key="up_summary", placeholder=MISSING)
show_import_report(import_report(log), key="up_import_report")  # every line: parsed, ignored (why) or suspect
if log.skipped_examples:
    st.caption("Rejected lines (first few), with the reason:")
    rejected = pd.DataFrame(log.skipped_examples, columns=["file", "line", "reason"])
    st.dataframe(rejected.assign(file=rejected["file"].map(lambda f: Path(f).name)), hide_index=True)
if log.events:
    st.caption(f"{len(log.events)} events: " + ", ".join(sorted({e.kind for e in log.events})))
found = read_result.summary()
if found["config"] or found["skipped_files"]:
    used = f"Read {', '.join(found['logs'])}" + (f"; run config: {found['config']}" if found["config"] else "")
    st.caption(used + ".")
if found["skipped_files"]:
    st.caption("Skipped (not logs):")
    skipped = pd.DataFrame(found["skipped_files"])
    skipped["why"] = skipped["why"].str.replace(f"{paths[0].parent}/", "", regex=False)  # no staging path
    st.dataframe(skipped, hide_index=True, key="up_skipped")
for note in found["notes"]:  # logs of two formats combined: where they disagree, both series are kept
    if "disagree" in note:
        st.warning(note, icon=":material/call_split:")
    else:
        st.caption(note)
for kept in log.kept_over:  # one metric from two line layouts: the other is kept under its own name
    st.caption(f"{kept['metric']}: kept {kept['kept']} over {kept['over']} (stored as {kept['stored_as']}).")
if log.segments:  # the steps start again at the first step: each further run is imported as its own
    further = ", ".join(
        f"**{segment_run_name(name, i)}** (steps {s.step_range[0]:,}–{s.step_range[1]:,})"
        for i, s in enumerate(log.segments)
        if s.step_range
    )
    st.warning(
        f"The steps start again {len(log.segments)} time(s): this input holds {len(log.segments) + 1} runs. "
        f"The first is imported as **{name}**, the others as {further}.",
        icon=":material/call_split:",
    )

proposal = log.meta.get("mapping")
if isinstance(proposal, dict):  # no trainer's format matched: the generic reader's proposal, to accept or correct
    st.info(
        "No trainer's format matched: read by the generic reader with the mapping below. Correct a role "
        "with **Use a metric as** (or the CLI's `--map NAME=ROLE`); choose another step key with "
        "`stabscope import --map KEY=step`.",
        icon=":material/rule:",
    )
    st.dataframe(
        pd.DataFrame({"role": list(proposal), "key in the log": [str(k) for k in proposal.values()]}),
        hide_index=True,
        key="up_mapping",
    )

config = st.file_uploader(
    "Run config (optional, for the pre-flight checklist): YAML, JSON, TOML or a Megatron arguments dump",
    type=["yaml", "yml", "json", "toml", "txt", "log", "args"],
    key="up_config",
)
config_meta: dict[str, str] = {}
if config is not None:
    from ingest.importing.configs import read_run_config

    try:
        mapped = read_run_config(config.getvalue(), config.name)
        config_meta = {"config_text": config.getvalue().decode("utf-8", "replace"), "config_filename": config.name}
        st.caption(f"Config {config.name}: {len(mapped)} checklist keys mapped ({', '.join(sorted(mapped)[:8])}…).")
    except StabScopeError as exc:
        show_error(exc)

# a metric the alias table does not know can take a role (the CLI's --map); remembered with the run
# every run of the file (its segments too): a later run may log a metric the first does not
unmapped = [m for m in all_metrics(log) if m not in CANONICAL_METRICS]
metric_map: dict[str, str] = {}
if unmapped:
    u1, u2 = st.columns(2)
    chosen = u1.selectbox(
        "Use a metric as",
        [KEEP_NAMES, *unmapped],
        key="up_map_metric",
        help="For a metric StabScope does not recognise (e.g. your loss under another name): "
        "store it as one of the roles the analyses read. Remembered with the run for later uploads.",
    )
    if chosen != KEEP_NAMES:
        role = u2.selectbox(
            "Role", list(CANONICAL_METRICS), key="up_map_role", format_func=lambda r: f"{r}: {CANONICAL_METRICS[r]}"
        )
        metric_map = {chosen: role}
        try:
            resolve_map(metric_map, all_metrics(log))
            st.caption(f"**{chosen}** will be stored as **{role}**.")
        except StabScopeError as exc:
            show_error(exc)
            metric_map = {}

# the generic reader's proposed roles stand unless the user chose otherwise above
metric_map = with_proposal(metric_map, log.meta.get("proposed_map"))

if log.table.num_rows == 0:
    st.error(
        "No metric records found: nothing to import. Choose another format in the Format box.",
        icon=":material/error:",
    )
    st.stop()
runs = {r.name: r for r in store.list_runs()}
if name in runs:
    st.warning(f"A run named **{name}** exists: importing merges into it (repeated steps take the new value).")
    remembered = {n: r for n, r in stored_map(runs[name].meta).items() if n in log.metrics}
    if remembered:
        said = ", ".join(f"**{n}** is stored as **{r}**" for n, r in remembered.items())
        st.caption(f"As before in this run: {said}.")


def writer_now(run: str) -> LockHolder | None:
    """Who writes run ``run`` now (another process, or another session of this dashboard); None for
    nobody or a name that is not a run's (the import says why)."""
    try:
        return store.run_writer(validate_run_name(run))
    except StabScopeError:
        return None


if (writer := writer_now(name)) is not None:
    st.warning(
        f"Run **{name}** is being written now by {writer.describe()}. Importing waits for it to finish "
        f"(up to {IMPORT_WAIT_S:.0f} s).",
        icon=":material/lock_clock:",
    )
if st.button(f"Import as run {name}", type="primary", key="up_import"):
    log.meta.update(config_meta)
    waiting_notice = st.empty()

    def waiting(holder: LockHolder | None) -> None:
        who = holder.describe() if holder is not None else "another process"
        waiting_notice.info(f"Waiting for {who} to finish writing run **{name}**…", icon=":material/lock_clock:")

    # one writer per run (ingest.store.run_lock): the remembered map is read and the rows written under one
    # hold; a writer still busy after IMPORT_WAIT_S ends the page with its message (who, since when)
    with store.writing(name, wait_s=IMPORT_WAIT_S, on_wait=waiting):
        waiting_notice.empty()
        report = store_parsed(store, name, with_line_report(remembered_map_applied(store, name, log, metric_map)))
    further_runs = import_segments(store, name, log, metric_map)
    shutil.rmtree(paths[0].parent, ignore_errors=True)
    for key in ("up_stage", "up_parsed"):
        st.session_state.pop(key, None)
    st.session_state["selected_run"] = name
    st.success(f"Imported {report.rows:,} rows into run **{name}** (generation {report.gen}).")
    if further_runs:
        st.success(
            "Further runs in the input: " + ", ".join(f"**{r['run']}** ({r['rows']:,} rows)" for r in further_runs)
        )
    nav_link("pages/overview.py", f"Open {name}", icon=":material/show_chart:")
