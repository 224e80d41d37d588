"""Scheduler page (AppTest): the curve, its largest LR jump, transitions, live pitfall warnings, a run's LR."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from streamlit.testing.v1 import AppTest

from ingest.store import Store
from stab_core.schedulers import lr_at
from tests.app_pages import open_in_app
from tests.conftest import figure_of, open_page, plotly_values


def _metrics(at: AppTest) -> dict[str, str]:
    return {m.label: m.value for m in at.metric}


def test_defaults_have_no_pitfall_and_a_small_restart_step(app_store: Store) -> None:
    at = open_page("scheduler").run()
    assert not at.exception
    assert not at.warning and "No known pitfall" in at.success[0].value
    # A restart warms up from the floor 0.1*peak by 0.9*peak/500 per step: relative to the floor,
    # 0.0018/0.1 = +1.80 % per step, first reached at step 10,001 (cycles of 30,000/3 steps).
    m = _metrics(at)
    assert m["Largest per-step LR change"] == "+1.80%" and m["at step"] == "10,001"
    assert m["Final LR"] == f"{lr_at(29_999, 30_000, 2000, 500, 3, 0.1, 3e-4):.3g}"
    transitions = at.dataframe[1].value
    assert {(1999 <= s <= 2001, k) for s, k in zip(transitions["step"], transitions["kind"], strict=True)} >= {
        (True, "warmup_end")
    }
    restarts = transitions[transitions["kind"] == "cycle_restart"]["step"].tolist()
    assert [round(s, -2) for s in restarts] == [10_000, 20_000]
    fig = figure_of(at)
    chosen = next(t for t in fig["data"] if t["name"] == "warmup-cosine-restart")
    x, y = plotly_values(chosen["x"]), plotly_values(chosen["y"])
    np.testing.assert_allclose(y, lr_at(x, 30_000, 2000, 500, 3, 0.1, 3e-4))  # the same lr_at that trains
    assert {"warmup + cosine", "WSD (10% decay)", "transitions"} <= {t["name"] for t in fig["data"]}
    assert "restart_warmup_steps=500" in at.code[0].value and "total_steps=30000" in at.code[0].value


def test_pitfalls_show_up_live(app_store: Store) -> None:
    at = open_page("scheduler").run()
    at.slider(key="sch_restart").set_value(0).run()
    assert "outside 1/4-1/3 of warmup_steps" in at.warning[0].value
    # no restart warmup: at each restart the LR jumps from the floor (0.1*peak) to the peak: +900 %
    jump = float(_metrics(at)["Largest per-step LR change"].rstrip("%"))
    assert jump == pytest.approx(900.0, abs=0.1) and _metrics(at)["at step"] in ("10,000", "20,000")
    at.slider(key="sch_restart").set_value(500).run()
    at.slider(key="sch_min_ratio").set_value(0.0).run()
    assert any("min_lr_ratio = 0" in w.value for w in at.warning)
    at.slider(key="sch_min_ratio").set_value(0.1).run()
    at.slider(key="sch_cycles").set_value(6).run()
    assert any("num_cycles = 6 > 5" in w.value for w in at.warning)


def test_refused_settings_are_explained_beside_the_slider_and_the_last_valid_chart_stays(
    app_store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    at = open_in_app("scheduler", monkeypatch).run()
    at.slider(key="sch_warmup").set_value(4000).run()  # valid: the last valid chart from now on
    at.slider(key="sch_warmup").set_value(12_000).run()
    assert not at.exception
    (refusal,) = at.error
    assert "warmup_steps (12000) must be shorter than the first cycle (10000 steps" in refusal.value
    assert "last valid settings (total_steps 30,000, warmup_steps 4,000" in refusal.value
    # beside the slider it names: in the warmup column, not at the page's foot
    columns = at.columns
    assert any("must be shorter than the first cycle" in e.value for e in columns[1].error)
    assert not columns[0].error and not columns[2].error
    # the chart is still drawn, with the last valid settings (warmup 4,000, not the refused 12,000)
    chosen = _schedule_trace(at)
    x, y = plotly_values(chosen["x"]), plotly_values(chosen["y"])
    np.testing.assert_allclose(y, lr_at(x, 30_000, 4000, 500, 3, 0.1, 3e-4))
    assert "warmup_steps=4000" in at.code[0].value
    # restart warmup as long as a cycle: said under that slider
    at.slider(key="sch_warmup").set_value(2000).run()
    assert not at.error
    at.slider(key="sch_restart").set_value(10_000).run()
    assert any("restart_warmup_steps (10000) must be shorter than a cycle" in e.value for e in at.columns[1].error)
    again = _schedule_trace(at)  # the last valid settings again: warmup back at 2,000
    x = plotly_values(again["x"])
    np.testing.assert_allclose(plotly_values(again["y"]), lr_at(x, 30_000, 2000, 500, 3, 0.1, 3e-4))


def test_stored_runs_logged_lr_is_overlaid(app_store: Store) -> None:
    at = open_page("scheduler").run()
    at.selectbox(key="sch_overlay").set_value("small").run()
    rows = at.dataframe[0].value.set_index("schedule")
    # the fixture warms up linearly from 0 over 200 steps: each step adds peak/200, which relative to
    # the floor 0.1*peak is +5.00 % per step (for the first 20 steps, while the LR is under the floor)
    assert rows.loc["small (logged)", "largest per-step LR change"] == "+5.00%"
    assert 1 <= rows.loc["small (logged)", "at step"] <= 20
    assert "small (logged lr)" in {t["name"] for t in figure_of(at)["data"]}


def _schedule_trace(at: AppTest) -> dict[str, Any]:
    """The warmup-cosine-restart curve, in whichever of the app's charts draws it."""
    traces = [t for i in range(len(at.get("plotly_chart"))) for t in figure_of(at, i)["data"]]
    return next(t for t in traces if t.get("name") == "warmup-cosine-restart")
