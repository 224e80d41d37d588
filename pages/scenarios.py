"""Scenarios: three worked spikes, each told from the stored runs and the stored analyses.

What happened (the before run's loss with its detected spikes), what the decision tree concluded
(causes, confidence and path as stored by the analyses, never the simulator's labels), what was done,
what it cost (``priced_spikes``: the run's own step time, GPUs and price), and before vs after.
Below them, the thesis measured (``thesis_section``): the newest ``stabscope experiment`` results
(this store's, else the committed reference run) beside the article's claims.
"""

from __future__ import annotations

import pages  # noqa: F401  # first: a deep link's first run leaves Streamlit's pages/ mode here

# isort: split
from typing import Any

import pandas as pd  # type: ignore[import-untyped]
import streamlit as st

from ingest.errors import StabScopeError
from ingest.store import RunInfo
from ingest.training import experiment_results, lead_time
from pages.parts import experiment_view as xv
from pages.parts.charts import Panel, compare_figure, panels_figure
from pages.parts.compare_lines import Line
from pages.parts.page_errors import show_error
from pages.parts.run_costs import money, priced_spikes, run_cost
from pages.parts.store_access import (
    auto_buckets,
    get_store,
    list_runs,
    read_events,
    read_series,
    read_spikes,
)
from pages.parts.widgets import MISSING, go_to, nav_link
from stab_core.simulate import scenarios


def loss_of(info: RunInfo) -> Any:
    """The run's loss, min/max-bucketed over its whole span so every spike survives."""
    return read_series(info, "loss", buckets=auto_buckets(int(info.first_step or 0), int(info.last_step or 0)))


def path_text(spike: dict[str, Any]) -> str:
    """The decision path as 'node: answer → ...'."""
    return " → ".join(f"{p['node']}: {p['answer']}" for p in spike.get("path", []))


def config_changes(before: dict[str, Any], after: dict[str, Any]) -> list[str]:
    """The settings the remedy changed, as 'key: old → new'."""
    keys = sorted((set(before) | set(after)) - {"key_sources", "source_format"})
    return [f"`{k}`: {before.get(k, '—')} → {after.get(k, '—')}" for k in keys if before.get(k) != after.get(k)]


def spike_bill(info: RunInfo) -> dict[str, float]:
    """USD, GPU-hours and steps lost to the run's detected spikes (``priced_spikes``, zero when none)."""
    table = priced_spikes(info)
    return {column: float(table[column].sum()) for column in ("USD lost", "GPU-hours lost", "steps lost")}


def seed_scenarios() -> None:
    """Write the demo and scenario runs through the real shard path (what `stabscope demo` does)."""
    from ingest.services.demo import seed_demo_store

    bar = st.progress(0.0, text="Writing the demo and scenario runs…")

    def advance(done: int, total: int) -> None:
        bar.progress(done / total, text=f"run {done}/{total}")

    seed_demo_store(get_store(), force=True, progress=advance)
    bar.empty()


THESIS_ANCHOR = "thesis"
VERDICT_ICONS = {
    xv.AGREES: ":material/check_circle:",
    xv.DISAGREES: ":material/cancel:",
    xv.NO_DIFFERENCE: ":material/remove_circle_outline:",
    xv.UNCHECKED: ":material/help:",
}


def lead_section(results: experiment_results.ExperimentResults) -> None:
    """Does the gradient SNR fall before a spike? The newest results' lead-time table, else the shipped one."""
    st.subheader("Does the gradient SNR fall before a spike?")
    rows, source = list(results.lead_time), xv.source_text(results, experiment_results.DOCS_RESULTS)
    if not rows:
        try:
            reference = lead_time.reference_lead_time()
        except StabScopeError as exc:
            show_error(exc)
            return
        rows, source = reference["rows"], reference["source"]
    st.markdown(lead_time.lead_verdict(rows))
    horizons = sorted({int(row["horizon"]) for row in rows})
    horizon = st.radio(
        "Warning horizon (steps ahead)", horizons, index=len(horizons) // 2, key="th_lead_h", horizontal=True
    )
    st.dataframe(xv.lead_table(rows, int(horizon or horizons[0])), hide_index=True, key="th_lead", placeholder=MISSING)
    st.caption(
        f"{source} An alarm is the first step of each excursion of a causal score to its threshold; it warns of a "
        "spike starting within the horizon after it. Precision: alarms outside spikes that warned; recall: spikes "
        "warned. 95% intervals from resampling runs. The SNR score is its trailing level over its value "
        "(2 = fell to half); the baselines are causal robust z-scores of the grad norm and the loss."
    )


def thesis_section(stored: set[str]) -> None:
    """The thesis, measured: the newest experiment's results beside the article's claims (``stored``:
    the store's run names, for the links to the arms' runs)."""
    st.header("The thesis, measured: clipping vs warmup restarts", anchor=THESIS_ANCHOR)
    try:
        results = experiment_results.load_latest_results(get_store().root, experiment_results.DOCS_RESULTS)
    except StabScopeError as exc:  # a damaged results file: said once, the walkthroughs above stay
        show_error(exc)
        return
    if results is None:
        st.markdown(f"No experiment results yet: run `{xv.REPRODUCE}` to measure clipping against warmup restarts.")
        return
    docs = experiment_results.DOCS_RESULTS
    st.markdown(
        "Does clipping only cap a spike once it starts, while a warmup restart at the transition keeps it from "
        "happening? Small real training runs with each remedy, on the same seeds, answer with numbers."
    )
    st.caption(xv.source_text(results, docs))
    st.subheader("The article's claims against the measurement")
    for claim, said in xv.claim_sentences(results):
        st.markdown(f"**The article: “{claim.text}.”**")
        for verdict, sentence in said:
            st.markdown(f"{VERDICT_ICONS[verdict]} {sentence}")
        if not said:
            st.markdown(f"{VERDICT_ICONS[xv.UNCHECKED]} Not measured by this experiment.")
    choices = [
        line
        for mechanism in xv.mechanisms_of(results)
        for arm, baseline in xv.CHOICES
        if (line := xv.choice_sentence(results, mechanism, arm, baseline))
    ]
    if choices:
        st.subheader("Warmup restart or clipping?")
        st.markdown("\n".join(f"- {line}" for line in choices))
        st.caption(
            "Paired differences (arm minus the other, same seeds), mean [95% interval]; rates in percentage "
            f"points; {xv.sample_text(results, xv.seeds_per_arm(results))}."
        )
    left, right = st.columns(2)
    left.plotly_chart(xv.rate_figure(results, "spike_rate"), key="th_spike_rate")
    right.plotly_chart(xv.rate_figure(results, "success_rate"), key="th_success_rate")
    st.caption("Bars: the share of seeds; whiskers: its bootstrap 95% interval.")

    mechanisms: list[str] = xv.mechanisms_of(results)
    picked_mechanism = st.radio("Mechanism", mechanisms, format_func=xv.mechanism_name, key="th_mech", horizontal=True)
    mechanism = str(picked_mechanism or mechanisms[0])
    arms = xv.arms_of(results, mechanism)
    helps = {
        heading: st.column_config.TextColumn(help=text) for heading, text in xv.column_help(results, mechanism).items()
    }
    table = xv.arm_table(results, mechanism, stored)
    st.dataframe(table, hide_index=True, key="th_arms", placeholder=MISSING, column_config=helps)
    st.caption(f"Each figure: the mean over seeds [its bootstrap 95% interval]. {xv.arms_legend(arms)}.")
    for against_none, title, key in (
        (True, "Each remedy against no remedy", "th_diffs_none"),
        (False, "The remedies against each other", "th_diffs_remedies"),
    ):
        differences = xv.difference_table(results, mechanism, against_none)
        if len(differences):
            st.markdown(f"**{title}** (arm minus baseline, paired by seed: the same data order in both)")
            st.dataframe(differences, hide_index=True, key=key, placeholder=MISSING)
    st.caption(
        f"Each cell: the mean difference over seed pairs [its 95% interval];{xv.SIGNIFICANT}: the interval "
        "excludes 0 (a significant difference); (n=1): a single seed pair, no interval. Rates differ in "
        "percentage points (pts)."
    )
    lines = xv.snr_lines(results, mechanism)
    if lines:
        st.plotly_chart(xv.snr_figure(lines), key="th_snr")
        st.caption(
            "Gradient SNR before the transition: each arm's mean over its seeds (open the arms on Compare "
            "below for each seed's spread). A restart acts only at the transition, so arms that differ only "
            "by it train alike before it and draw one over the other (none under restart, clip under restart+clip)."
        )

    lead_section(results)

    in_store = {arm: [n for n in xv.arm_runs(results, mechanism, arm) if n in stored] for arm in arms}
    if any(in_store.values()):
        default = [a for a in ("none", "clip", "restart") if in_store.get(a)]
        picked = st.multiselect(
            "Arms to open on the Compare page", [a for a in arms if in_store[a]], default=default, key="th_pick"
        )
        if st.button(
            "Open their runs on Compare", key="th_open", icon=":material/compare_arrows:", disabled=not picked
        ):
            st.session_state["compare_runs"] = [n for arm in picked for n in in_store[arm]]  # grouped into seed bands
            go_to("pages/compare.py")
    else:
        st.caption(
            "The runs behind these figures are not in this store; "
            f"`{xv.REPRODUCE}` writes its runs into the store it measures."
        )


st.title("Scenarios")
st.caption(
    "Three loss spikes on simulated runs at scale, each diagnosed by the same analyses that read your runs: "
    "what happened, what the decision tree concluded, what was done, and what it cost. Below them: "
    f"[the thesis, measured]({'#' + THESIS_ANCHOR}) — clipping against warmup restarts on real training runs."
)
catalog = {r.name: r for r in list_runs()}
all_scenarios = scenarios()  # their text, fork step and run names (cheap); the runs are in the store
missing = [s.name for sc in all_scenarios for s in (sc.before, sc.after) if s.name not in catalog]
if missing:
    st.info(
        f"The scenario runs are not in this store (missing: {', '.join(missing)}). Add them with "
        "`stabscope demo` on the command line, or with the button below: it (re)writes the demo and scenario "
        "runs through the real shard → Parquet path (about 10 s)."
    )
    if st.button("Add the scenario runs", key="sc_seed", icon=":material/add:"):
        seed_scenarios()
        st.rerun()
    thesis_section(set(catalog))
    st.stop()

by_key = {sc.key: sc for sc in all_scenarios}
key = st.radio("Scenario", list(by_key), format_func=lambda k: by_key[k].title, horizontal=True, key="sc_pick")
sc = by_key[key]
before, after = catalog[sc.before.name], catalog[sc.after.name]
spikes = read_spikes(before)

st.header(sc.title)
st.subheader("1. What happened")
st.markdown(sc.setup)
panel = Panel("loss", "loss (nats/token)", [(before.name, loss_of(before))])
st.plotly_chart(panels_figure([panel], read_events(before), spikes, panel_height=300), key="sc_before_chart")
st.caption("Detected spikes are shaded in their diagnosed cause's colour; dashed lines mark the run's events.")

st.subheader("2. What the decision tree concluded")
if not spikes:
    st.success(f"No spike detected in {before.name}.")
else:
    causes = sorted({s["cause"] for s in spikes})
    diverged = sum(not s["recovered"] for s in spikes)
    st.markdown(
        f"The analyses found **{len(spikes)}** spike event(s) in `{before.name}` "
        f"({diverged} diverged), diagnosed as " + ", ".join(f"**`{c}`**" for c in causes) + "."
    )
    st.dataframe(
        pd.DataFrame(
            {
                "metric": s["metric"],
                "peak step": int(s["peak"]),
                "steps": f"{s['start']}–{s['end']}",
                "ratio (x)": round(float(s.get("ratio") or float("nan")), 2),
                "outcome": "recovered" if s["recovered"] else "diverged",
                "cause": s["cause"],
                "confidence": float(s["confidence"]),
                "decision path": path_text(s),
            }
            for s in spikes
        ),
        hide_index=True,
        key="sc_spikes",
        column_config={"confidence": st.column_config.ProgressColumn(min_value=0.0, max_value=1.0, format="%.2f")},
        placeholder=MISSING,
    )
    worst = max(spikes, key=lambda s: (not s["recovered"], float(s.get("ratio") or 0)))
    st.markdown(f"**The tree's advice** (for the `{worst['cause']}` spike at step {worst['peak']}):")
    st.markdown("\n".join(f"1. {a}" for a in worst.get("actions", [])))
    nav_link("pages/tree.py", "See the path in the decision tree", icon=":material/account_tree:")

st.subheader("3. What was done")
st.markdown(sc.remedy)
changes = config_changes(before.meta.get("config") or {}, after.meta.get("config") or {})
if changes:
    st.markdown("Config changes: " + "; ".join(changes) + ".")
st.session_state["selected_run"] = before.name  # the checklist page opens on this run
nav_link("pages/checklist.py", "Grade this run on the pre-flight checklist", icon=":material/checklist:")

st.subheader("4. What it cost")
bills = {side: spike_bill(info) for side, info in (("before", before), ("after", after))}
usd_before, usd_after = bills["before"]["USD lost"], bills["after"]["USD lost"]
c1, c2, c3 = st.columns(3)
for column, side in ((c1, "before"), (c2, "after")):
    lost = f"{bills[side]['steps lost']:,.0f} steps lost"
    column.metric(f"Spikes cost {side}", money(bills[side]["USD lost"]), lost, delta_color="off")
c3.metric("Saved by the remedy", money(usd_before - usd_after))
priced_with = run_cost(before)
step_time = priced_with.step_time_s if priced_with.step_time_s is not None else float("nan")
st.caption(
    f"Priced with the run's own step time ({step_time:.3g} s), {priced_with.gpus:,} GPUs at "
    f"${priced_with.usd_per_gpu_hour:g}/GPU-hour: recovered "
    "spikes cost their lost steps, a diverged one the rollback to the last checkpoint before it "
    f"({bills['before']['GPU-hours lost']:,.1f} vs {bills['after']['GPU-hours lost']:,.1f} GPU-hours)."
)

st.subheader("5. Before and after")
lines = []
for side, info in (("before", before), ("after", after)):
    loss = loss_of(info)
    lines.append(Line(f"{side}: {info.name}", loss.steps, loss.values))
fig = compare_figure(lines, "step", "loss (nats/token)", log_y=False)
fig.add_vline(
    x=sc.fork_step, line={"dash": "dot", "color": "#868e96"}, annotation_text=f"fork at step {sc.fork_step:,}"
)
st.plotly_chart(fig, key="sc_compare_chart")
st.caption(f"Both runs share every random draw up to step {sc.fork_step:,}; they differ only by the remedy.")

thesis_section(set(catalog))
