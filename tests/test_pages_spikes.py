"""Spikes page (AppTest): the table of detected spikes with their price, zoom and diagnosis of the selected one."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from ingest.importing.importer import store_parsed
from ingest.services.run_analyses import open_analysed_store
from ingest.store import Store
from stab_core.incident_headline import incident_headline
from tests.conftest import (
    GRAD_SPIKE_STEP,
    LOSS_SPIKE_FACTOR,
    LOSS_SPIKE_STEPS,
    SLOW_FACTOR,
    STEP_TIME_S,
    RunSpec,
    figure_of,
    open_page,
    plotly_values,
    write_run,
)


def test_table_lists_the_injected_spikes_with_their_cost(app_store: Store) -> None:
    at = open_page("spikes").run()
    assert not at.exception
    table = at.dataframe(key="sp_table").value.set_index("metric")
    loss = table.loc["loss"]
    assert LOSS_SPIKE_STEPS[0] <= loss["peak step"] < LOSS_SPIKE_STEPS[1]
    assert loss["ratio"].endswith("x")
    assert float(loss["ratio"].rstrip("x")) == pytest.approx(LOSS_SPIKE_FACTOR, rel=0.15)
    assert loss["outcome"] == "recovered"
    # the grad-norm spike two steps before the loss spike is the same incident: one row, not two (#20)
    assert len(table) == 1
    (incident,) = app_store.spikes("small")
    (grad,) = [m for m in incident["members"] if m["metric"] == "grad_norm"]
    assert grad["peak"] == GRAD_SPIKE_STEP and grad["ratio"] > 10  # 20x the grad-norm level
    assert incident["metrics"] == ["loss", "grad_norm"] and incident["grad_norm_lead_steps"] == 2
    # the span in the CLI's words (its headline's "(a-b)"): one formatter for both (round 25, issue #32)
    assert f"({loss['steps']})" in incident_headline(incident)
    # priced with the run's own logged step time on its 4 GPUs at $2/GPU-hour: the median over steps of
    # the cross-rank mean, three ranks at 0.5 s and one at 1.3 x 0.5 s -> 0.5375 s
    step_time = STEP_TIME_S * (3 + SLOW_FACTOR) / 4
    expected_usd = table["steps lost"] * step_time * 4 / 3600 * 2.0
    np.testing.assert_allclose(table["USD lost"], expected_usd, rtol=0.01)
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["Incidents"] == str(len(table)) and metrics["Diverged"] == "0"
    assert float(metrics["Cost"].lstrip("$")) == pytest.approx(expected_usd.sum(), abs=0.006)


def test_selecting_a_spike_zooms_and_explains_it(app_store: Store) -> None:
    at = open_page("spikes").run()
    spikes = app_store.spikes("small")
    index = 0  # the one incident: the loss spike and the grad-norm spike that led it
    at.selectbox(key="sp_idx").set_value(index).run()
    assert not at.exception
    fig = figure_of(at)
    x = plotly_values(next(t for t in fig["data"] if t.get("name") == "loss")["x"])
    # the window covers the whole incident, from the grad-norm spike that led it, padded by 50 steps
    lo, hi = GRAD_SPIKE_STEP - 50, max(m["end"] for m in spikes[index]["members"]) + 50
    assert x.min() == lo and x.max() == hi  # padded window, every step
    assert f"Cause: `{spikes[index]['cause']}`" in " ".join(m.value for m in at.markdown)
    path = at.dataframe[1].value
    assert list(path["node"]) == [f"{p['number']}. {p['node']}" for p in spikes[index]["path"]]
    assert path["answer"].iloc[0] == "no"  # no non-finite value: not a numerical fault
    at.button(key="sp_zoom").click().run()
    assert at.session_state["ov_range"] == (lo, hi)


def test_a_huge_ratio_reads_as_said_not_clipped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A loss explosion of 5.1e13x its level (a PaiNN run of batch 12) reads "5.1e+13x" in the ratio
    column, as the statements say it (stab_core.spikes.times), not a 14-digit number a "%.2f" clips."""
    import streamlit as st

    store = write_run(open_analysed_store(tmp_path / "s"), RunSpec(name="small"))
    monkeypatch.setenv("STABSCOPE_STORE", str(store.root))
    real_spikes = Store.spikes

    def spikes(self: Store, name: str) -> list[dict[str, object]]:
        stored = real_spikes(self, name)
        return [{**stored[0], "ratio": 5.0643482308069e13}, *stored[1:]]

    monkeypatch.setattr(Store, "spikes", spikes)
    st.cache_data.clear()
    at = open_page("spikes").run()
    assert not at.exception
    assert list(at.dataframe(key="sp_table").value["ratio"])[:1] == ["5.1e+13x"]


def test_a_clean_run_says_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = write_run(open_analysed_store(tmp_path / "s"), RunSpec(name="clean", loss_spike=None, grad_spike_step=None))
    monkeypatch.setenv("STABSCOPE_STORE", str(store.root))
    at = open_page("spikes").run()
    assert not at.exception
    assert "No loss or grad-norm spike detected in **clean**" in at.success[0].value


def test_the_selected_spike_is_the_darker_band_and_the_table_fits(app_store: Store) -> None:
    at = open_page("spikes").run()
    spikes = app_store.spikes("small")
    at.selectbox(key="sp_idx").set_value(len(spikes) - 1).run()
    shapes = figure_of(at)["layout"]["shapes"]
    shown = [s for s in shapes if s["opacity"] == 0.5]
    assert len(shown) == 1 and shown[0]["x0"] == int(spikes[-1]["start"]) - 0.5
    # start, end and duration are one "steps" column, so that the table fits a 1280 px window
    table = at.dataframe(key="sp_table")
    assert "steps" in table.value.columns
    # the incident's steps run from the grad-norm spike that led it to the step it was back, as the CLI says
    first, last = GRAD_SPIKE_STEP, spikes[0]["until"]
    assert table.value["steps"].iloc[0] == f"{first}-{last}" and table.value["incident"].iloc[0] == "loss + grad_norm"


def test_real_runs_read_as_incidents_with_what_could_not_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.real_runs import import_real_runs

    store = import_real_runs(tmp_path / "real")
    monkeypatch.setenv("STABSCOPE_STORE", str(store.root))
    at = open_page("spikes")
    at.session_state["selected_run"] = "megds"
    at.run()
    assert not at.exception
    table = at.dataframe(key="sp_table").value
    # 12.4 -> 48.1 over steps 1-4, back by 29; then 11.65 -> 20.44 from step 35 to the end (read from the log)
    assert list(table["incident"]) == ["early instability: loss"] * 2
    assert list(table["outcome"]) == ["recovered", "diverged"]
    captions = " ".join(c.value for c in at.caption)
    assert "Not run: snr: no SNR yet: 62 grad-norm samples" in captions
    at = open_page("spikes")
    at.session_state["selected_run"] = "mixtral-h100"
    at.run()
    assert not at.exception
    captions = " ".join(c.value for c in at.caption)
    # steps 22,690-24,000 are "nan" in every metric: unrecorded (imp10b), not a logging stop inside the run
    assert "Logging stopped at step 22690" not in captions
    # 3850 is back on the loss's trend 10 steps later (a spike: more than a blip's few steps); 4260 within 5
    # (a blip, counted, listed on demand)
    table = at.dataframe(key="sp_table").value
    assert list(table["peak step"]) == [3850] and list(table["severity"]) == ["spike"]
    assert any("1 blip absorbed within" in c.value for c in at.caption)
    at.toggle(key="sp_blips").set_value(True).run()
    assert not at.exception
    table = at.dataframe(key="sp_table").value
    assert list(table["peak step"]) == [3850, 4260]  # nothing at the NaN tail
    assert list(table["severity"]) == ["spike", "blip"]


def test_sensitivity_control_stores_the_setting_and_the_analyses_follow(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue #32: one sensitivity setting, a page control, stored with the run. At the default Mixtral's
    3850 bump (10 steps above its trend) is shown and 4260 counted as a blip; the setting is stored."""
    path = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "real_logs"
    log = path / "megatron_mixtral8x7b_h100" / "golden_values_dev_dgx_h100.json"
    if not log.is_file():
        pytest.skip(f"../shared absent: no Mixtral golden values at {log}")
    from ingest.formats import read_log

    store = open_analysed_store(tmp_path / "store")
    store_parsed(store, "mixtral", read_log([log]))
    monkeypatch.setenv("STABSCOPE_STORE", str(store.root))
    at = open_page("spikes").run()
    assert not at.exception
    assert list(at.dataframe(key="sp_table").value["peak step"]) == [3850]
    at.selectbox(key="sp_sensitivity_mixtral").set_value("high").run()
    assert not at.exception
    assert store.run_info("mixtral").meta["sensitivity"] == "high"
    table = at.dataframe(key="sp_table").value
    assert list(table["peak step"]) == [3850] and list(table["severity"]) == ["spike"]
    assert any("blip absorbed within" in c.value for c in at.caption)  # 4260 is still a blip, counted


def test_one_rerun_reads_the_spikes_once_and_the_lr_transitions_from_the_analyses(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue #34 item 5: a rerun of the page reads the run's spikes once (the table is priced from the
    spikes the page read), the cost inputs come from the catalog row the page holds (no second read of
    it), and the LR transitions are the ones the analyses stored, not detected at page time."""
    import sys

    import streamlit as st

    import stab_core.schedulers as schedulers
    from pages.parts.store_access import read_events

    store = write_run(open_analysed_store(tmp_path / "s"), RunSpec(name="small"))
    info = store.run_info("small")
    stored = info.meta["analysis"]["lr_transitions"]
    assert [t["kind"] for t in stored][:1] == ["warmup_end"]  # the linear warmup's end, found by the analyses
    monkeypatch.setenv("STABSCOPE_STORE", str(store.root))
    calls: dict[str, list[str]] = {"spikes": [], "run_info": [], "transitions": []}
    real_spikes, real_run_info, real_detect = Store.spikes, Store.run_info, schedulers.schedule_transitions

    def spikes(self: Store, name: str) -> list[dict[str, object]]:
        calls["spikes"].append(name)
        return real_spikes(self, name)

    def run_info(self: Store, name: str) -> object:
        calls["run_info"].append(sys._getframe(1).f_globals["__name__"])
        return real_run_info(self, name)

    def detect(*args: object, **kwargs: object) -> object:
        calls["transitions"].append("page")
        return real_detect(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(Store, "spikes", spikes)
    monkeypatch.setattr(Store, "run_info", run_info)
    monkeypatch.setattr(schedulers, "schedule_transitions", detect)
    st.cache_data.clear()
    at = open_page("spikes").run()
    assert not at.exception and len(at.dataframe(key="sp_table").value) >= 1
    assert calls["spikes"] == ["small"]
    assert "ingest.services.run_cost" not in calls["run_info"]  # priced from the page's own catalog row
    assert calls["transitions"] == []
    # each stored transition is drawn, or a logged event of its kind within 5 steps stands for it
    drawn = read_events(info)
    assert all(any(e.kind == t["kind"] and abs(e.step - t["step"]) <= 5 for e in drawn) for t in stored)


def yolo_results_csv(path: Path) -> Path:
    """A YOLOv8 ``results.csv`` of 40 epochs whose training losses fall while ``val/cls_loss`` (4.3, easing
    0.01 an epoch) blows up over epochs 5-11 (9.0 -> 108.9) and is back at 12; no total ``val_loss``."""
    factors = [2.1, 4.5, 15.0, 5.3, 1.9, 6.6, 26.0]
    rows = ["epoch,train/box_loss,train/cls_loss,train/dfl_loss,val/box_loss,val/cls_loss,val/dfl_loss,lr/pg0"]
    for epoch in range(40):
        train = 3.0 * np.exp(-epoch / 15) + 0.5
        val = 4.3 - 0.01 * epoch
        if 5 <= epoch <= 11:
            val *= factors[epoch - 5]
        elif epoch > 11:
            val = 4.3 * np.exp(-(epoch - 11) / 10) + 0.7
        rows.append(
            f"{epoch},{train:.4f},{train * 1.1:.4f},{train * 0.9:.4f},{3.6 - 0.02 * epoch:.4f},{val:.4f},"
            f"{4.0 - 0.03 * epoch:.4f},{0.01 - 0.0002 * epoch:.5f}"
        )
    path.write_text("\n".join(rows) + "\n")
    return path


def test_a_validation_blowup_is_drawn_and_no_val_loss_is_not_said(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """See docs/diagnosis.md, "Validation losses": a validation loss's blow-up is an incident
    (stab_core.held_out_blowups). The zoom draws that series in a panel of its own (the training loss falls through it:
    shading it alone shows nothing), and the findings caption does not say "the run logs no val loss" of a run that logs
    its parts."""
    from ingest.cli import main

    store = tmp_path / "s"
    assert (
        main(["import", str(yolo_results_csv(tmp_path / "results.csv")), "--run", "yolo", "--store", str(store)]) == 0
    )
    monkeypatch.setenv("STABSCOPE_STORE", str(store))
    at = open_page("spikes").run()
    assert not at.exception
    table = at.dataframe(key="sp_table").value
    assert list(table["incident"]) == ["early instability: val/cls_loss"]
    names = [t.get("name") for t in figure_of(at)["data"]]
    assert "val/cls_loss" in names and "loss" in names
    trace = next(t for t in figure_of(at)["data"] if t.get("name") == "val/cls_loss")
    assert plotly_values(trace["y"]).max() == pytest.approx(4.23 * 26.0, rel=0.01)
    captions = " ".join(c.value for c in at.caption)
    assert "logs no val loss" not in captions
    assert "parts of its validation loss (`val/box_loss`, `val/cls_loss`, `val/dfl_loss`)" in captions
