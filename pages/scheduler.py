"""Scheduler: tune warmup-cosine-restart with sliders; the curve is the same ``lr_at`` the torch scheduler uses."""

from __future__ import annotations

import pages  # noqa: F401  # first: a deep link's first run leaves Streamlit's pages/ mode here

# isort: split
import numpy as np
import pandas as pd  # type: ignore[import-untyped]
import streamlit as st

from pages.parts.charts import schedule_figure
from pages.parts.scheduler_code import scheduler_snippet
from pages.parts.store_access import list_runs, read_series
from pages.parts.widgets import MISSING
from stab_core.schedulers import (
    largest_lr_change,
    lr_at,
    schedule_transitions,
    scheduler_warnings,
    validate_restart_schedule,
    warmup_cosine_lr,
    wsd_lr,
)

PEAK_LRS = [1e-5, 2e-5, 3e-5, 6e-5, 1e-4, 1.5e-4, 2e-4, 3e-4, 4e-4, 6e-4, 1e-3, 2e-3, 3e-3, 6e-3, 1e-2]
PLOT_POINTS = 4000  # points drawn per curve; the metrics use every step

st.title("Scheduler")
st.caption("Warmup, cosine decay, and restarts that warm up again from the floor (`WarmupCosineRestartScheduler`).")
c1, c2, c3 = st.columns(3)
total = c1.slider("total_steps", 1_000, 200_000, 30_000, 1_000, key="sch_total")
c1_note = c1.empty()
peak = c1.select_slider("peak LR", PEAK_LRS, 3e-4, format_func=lambda v: f"{v:.1e}", key="sch_peak")
warmup = c2.slider("warmup_steps", 0, 20_000, 2000, 50, key="sch_warmup")
warmup_note = c2.empty()
restart = c2.slider("restart_warmup_steps", 0, 10_000, 500, 50, key="sch_restart")
restart_note = c2.empty()
cycles = c3.slider("num_cycles", 1, 10, 3, key="sch_cycles")
cycles_note = c3.empty()
min_ratio = c3.slider("min_lr_ratio", 0.0, 1.0, 0.1, 0.01, key="sch_min_ratio")

# the sliders' defaults: a valid schedule, drawn when no valid setting was seen yet (no docstrings
# here: Streamlit would draw a bare string as text)
DEFAULTS = (30_000, 3e-4, 2000, 500, 3, 0.1)
# where the scheduler's refusal is explained: under the slider its message names first
NOTE_BESIDE = {"warmup_steps": warmup_note, "restart_warmup_steps": restart_note, "num_cycles": cycles_note}

try:
    validate_restart_schedule(total, warmup, restart, cycles, min_ratio)
    st.session_state["sch_last_valid"] = (total, peak, warmup, restart, cycles, min_ratio)
except ValueError as exc:  # the core's own check: said beside the slider, the last valid chart stays
    named = str(exc).split(" ", 1)[0]
    last = st.session_state.get("sch_last_valid", DEFAULTS)
    NOTE_BESIDE.get(named, c1_note).error(
        f"The scheduler refuses this: {exc}. The chart below keeps the last valid settings "
        f"(total_steps {last[0]:,}, warmup_steps {last[2]:,}, restart_warmup_steps {last[3]:,}, "
        f"num_cycles {last[4]}, min_lr_ratio {last[5]:g}).",
        icon=":material/block:",
    )
    total, peak, warmup, restart, cycles, min_ratio = last

steps = np.arange(total, dtype=np.int64)
lr = lr_at(steps, total, warmup, restart, cycles, min_ratio, peak)
advice = scheduler_warnings(total, warmup, restart, cycles, min_ratio)
for sentence in advice:
    st.warning(sentence, icon=":material/warning:")
if not advice:
    st.success(
        "No known pitfall: restart warmup within 1/4–1/3 of warmup, ≤ 5 cycles, min_lr_ratio > 0.",
        icon=":material/check_circle:",
    )

curves = {"warmup-cosine-restart": lr}
b1, b2 = st.columns([2, 2])
chosen = b1.multiselect(
    "Baselines", ["warmup + cosine", "WSD (10% decay)"], ["warmup + cosine", "WSD (10% decay)"], key="sch_baselines"
)
baseline_fns = {
    "warmup + cosine": lambda: warmup_cosine_lr(steps, total, warmup, min_ratio, peak),
    "WSD (10% decay)": lambda: wsd_lr(steps, total, warmup, min_ratio, peak, decay_fraction=0.1),
}
for name in chosen:
    try:
        curves[name] = baseline_fns[name]()
    except ValueError as exc:
        st.caption(f"{name} not drawn: {exc}")
runs_with_lr = [r for r in list_runs() if "lr" in r.metrics]
overlay_name = b2.selectbox(
    "Overlay a stored run's logged LR", ["(none)"] + [r.name for r in runs_with_lr], key="sch_overlay"
)

rows = []
for name, values in curves.items():
    step, rel = largest_lr_change(steps, values)
    rows.append({"schedule": name, "largest per-step LR change": f"{rel:+.2%}", "at step": step})
jump_step, jump = largest_lr_change(steps, lr)
transitions = schedule_transitions(steps, lr)
overlay = None
if overlay_name != "(none)":
    info = next(r for r in runs_with_lr if r.name == overlay_name)
    logged = read_series(info, "lr", buckets=None)
    if logged.steps.size >= 2:
        step, rel = largest_lr_change(logged.steps, logged.values)
        rows.append(
            {"schedule": f"{overlay_name} (logged)", "largest per-step LR change": f"{rel:+.2%}", "at step": step}
        )
        keep = np.unique(np.linspace(0, logged.steps.size - 1, PLOT_POINTS).astype(int))
        overlay = (logged.steps[keep], logged.values[keep], f"{overlay_name} (logged lr)")

m1, m2, m3 = st.columns(3)
m1.metric("Largest per-step LR change", f"{jump:+.2%}", help="Relative to max(previous LR, 10% of peak)")
m2.metric("at step", f"{jump_step:,}")
m3.metric("Final LR", f"{lr[-1]:.3g}")
marks = [int(t.step) for t in transitions]
plot_at = np.unique(
    np.concatenate(
        [
            np.linspace(0, total - 1, PLOT_POINTS).astype(np.int64),
            marks,
            np.clip(np.array(marks, np.int64) - 1, 0, total - 1),
        ]
    )
)
fig = schedule_figure(
    plot_at,
    {k: v[plot_at] for k, v in curves.items()},
    [(t.step, t.kind, float(lr[t.step])) for t in transitions],
    overlay,
)
st.plotly_chart(fig, key="sch_chart", config={"displaylogo": False})
st.dataframe(pd.DataFrame(rows), hide_index=True, key="sch_jumps", placeholder=MISSING)
with st.expander(f"{len(transitions)} transition points", expanded=False):
    st.dataframe(
        pd.DataFrame(
            [
                {
                    "step": t.step,
                    "kind": t.kind,
                    "relative change": f"{t.rel_change:+.1%}",
                    "LR before": t.lr_before,
                    "LR after": t.lr_after,
                    "over steps": t.span_steps,
                }
                for t in transitions
            ]
        ),
        hide_index=True,
        placeholder=MISSING,
    )
st.subheader("Use it")
st.code(scheduler_snippet(total, warmup, restart, cycles, min_ratio, peak), language="python")
