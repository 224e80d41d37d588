"""Cost of rollback: what a spike costs in GPU-hours and USD, and how often to checkpoint."""

from __future__ import annotations

import pages  # noqa: F401  # first: a deep link's first run leaves Streamlit's pages/ mode here

# isort: split
import streamlit as st

from ingest.services.run_cost import no_step_time_words
from pages.parts.run_costs import money, priced_spikes, run_cost
from pages.parts.run_meta import run_settings
from pages.parts.widgets import MISSING, pick_run
from stab_core import cost

st.title("Cost of rollback")
st.caption("One loss spike and the rollback it forces can cost a large run $40K–$250K of GPU time.")

st.subheader("What one rollback costs")
preset = st.radio("Preset", ["DeepSeek-V3", "Custom"], horizontal=True, key="cost_preset")
p = cost.DEEPSEEK_V3
c1, c2, c3 = st.columns(3)
gpus = c1.number_input("GPUs", 1, 1_000_000, p.gpus, key="cost_gpus", disabled=preset != "Custom")
total_gpu_hours = c2.number_input(
    "Run budget (GPU-hours)", 1.0, 1e9, p.total_gpu_hours, step=1e4, key="cost_budget", disabled=preset != "Custom"
)
usd = c3.number_input(
    "USD per GPU-hour", 0.0, 100.0, p.usd_per_gpu_hour, step=0.1, key="cost_usd", disabled=preset != "Custom"
)
if preset != "Custom":
    gpus, total_gpu_hours, usd = p.gpus, p.total_gpu_hours, p.usd_per_gpu_hour
c4, c5 = st.columns(2)
fraction_pct = c4.slider("Progress lost per rollback (%)", 0.0, 20.0, 2.0, 0.5, key="cost_fraction")
spikes_per_run = c5.slider("Rollbacks per run", 0, 20, 3, key="cost_spikes")
one = cost.rollback_cost(total_gpu_hours, fraction_pct / 100, usd)
per_run = cost.run_spike_cost(one, spikes_per_run, total_gpu_hours)
m1, m2, m3, m4 = st.columns(4)
m1.metric("GPU-hours per rollback", f"{one.gpu_hours:,.0f}")
m2.metric("USD per rollback", f"${one.usd:,.0f}")
m3.metric(f"USD for {spikes_per_run} rollbacks", f"${per_run.per_run.usd:,.0f}")
m4.metric("Share of the budget", f"{per_run.budget_share:.1%}")
st.caption(
    f"Budget: {total_gpu_hours:,.0f} GPU-hours = ${total_gpu_hours * usd:,.0f} on {gpus:,} GPUs "
    f"({total_gpu_hours / gpus / 24:.1f} days)."
)

st.subheader("Checkpoint interval (Young / Daly)")
failures = cost.LLAMA3_405B_FAILURES
d1, d2, d3, d4 = st.columns(4)
write_min = d1.number_input("Checkpoint write time C (min)", 0.1, 600.0, 5.0, key="cost_c")
default_mtbf = round(failures.mtbf_hours_at(int(gpus)) * 60, 1)
mtbf_min = d2.number_input(
    "MTBF M (min)",
    1.0,
    1e6,
    min(max(default_mtbf, 1.0), 1e6),
    key="cost_m",
    help=f"Default: the {failures.name} record ({failures.interruptions} interruptions in "
    f"{failures.days:.0f} days on {failures.gpus:,} GPUs, MTBF "
    f"{failures.mtbf_hours:.2f} h) scaled to your GPU count.",
)
restart_min = d3.number_input("Restart time (min)", 0.0, 600.0, 10.0, key="cost_restart")
current_min = d4.number_input("Your interval (min)", 1.0, 10_000.0, 120.0, key="cost_current")
young, daly = cost.young_interval(write_min, mtbf_min), cost.daly_interval(write_min, mtbf_min)
advice = cost.interval_advice(
    current_min / 60, write_min / 60, mtbf_min / 60, restart_min / 60, total_gpu_hours / gpus, int(gpus), usd
)
e1, e2, e3 = st.columns(3)
e1.metric("Young's interval", f"{young:.1f} min")
e2.metric("Daly's interval", f"{daly:.1f} min")
e3.metric("Saving by moving to Daly", f"${advice.saving.usd:,.0f}", help="over the whole run")
st.write(
    f"Expected waste per failure: **{advice.waste_per_failure_current_hours * 60:.0f} min** at your "
    f"interval vs **{advice.waste_per_failure_optimum_hours * 60:.0f} min** at Daly's (half an interval "
    f"+ restart). Checkpoint + failure overhead: {advice.overhead_fraction_current:.1%} → "
    f"{advice.overhead_fraction_optimum:.1%}."
)

st.subheader("A stored run's spikes, priced")
run = pick_run(key="cost_run")
if run is not None:
    run_settings(run, "cost")
    inputs = run_cost(run)
    table = priced_spikes(run, inputs=inputs)  # the Spikes page's table: one computation, the same inputs
    st.caption(f"Priced with {inputs.describe()}, as on the Spikes page.")
    if not inputs.priced:
        st.warning(
            f"{run.name} {no_step_time_words(run)}, so its spikes' cost is unknown: log "
            "`step_time_s`, or set the step time under **Run settings**.",
            icon=":material/timer_off:",
        )
    if table.empty:
        st.info(f"No spikes detected in {run.name}: nothing to price.")
    else:
        st.dataframe(
            table[["peak step", "metric", "cause", "outcome", "steps lost", "GPU-hours lost", "USD lost"]],
            hide_index=True,
            key="cost_table",
            column_config={
                "GPU-hours lost": st.column_config.NumberColumn(format="%.2f"),
                "USD lost": st.column_config.NumberColumn(format="$%.2f"),
            },
            placeholder=MISSING,
        )
        total_usd, total_hours = float(table["USD lost"].sum()), float(table["GPU-hours lost"].sum())
        st.metric(
            "Total",
            money(total_usd) if inputs.priced else "unknown",
            f"{total_hours:,.2f} GPU-hours" if inputs.priced else f"{table['steps lost'].sum():,.0f} steps",
            delta_color="off",
        )
