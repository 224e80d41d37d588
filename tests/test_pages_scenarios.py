"""Scenarios page (AppTest) on the demo store: each walkthrough shows the causes the stored analyses
found (not the simulator's labels), prices the before and after runs, and overlays both losses; an
empty store offers to write the scenario runs."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from streamlit.testing.v1 import AppTest

from ingest.services.run_analyses import open_analysed_store
from ingest.services.run_cost import price_run_spikes, run_cost_inputs
from ingest.store import Store
from pages.parts.chart_style import CAUSE_COLORS
from tests.conftest import demo_store_copy, open_page

EXPECTED_CAUSE = {"s1-moe-7b": "router", "s2-dense-70b": "lr_transition", "s3-dense-140b": "data_outlier"}
LAST_NODE = {"router": "router: yes", "lr_transition": "lr_transition: yes", "data_outlier": "snr_collapse: yes"}
"""The decision-tree node whose 'yes' leads to each cause's leaf."""


@pytest.fixture(scope="module")
def demo_root(demo_store_template: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """This module's copy of the demo store (demo and scenario runs through the real shard path)."""
    return demo_store_copy(demo_store_template, tmp_path_factory.mktemp("scenarios"))


@pytest.fixture
def demo_store(demo_root: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Store]:
    monkeypatch.setenv("STABSCOPE_STORE", str(demo_root))
    yield open_analysed_store(demo_root)


def _open(key: str) -> AppTest:
    at = open_page("scenarios").run()
    at.radio(key="sc_pick").set_value(key).run()
    assert not at.exception
    return at


def _figures(at: AppTest) -> list[dict[str, Any]]:
    return [json.loads(chart.proto.spec) for chart in at.get("plotly_chart")]


def _ys(values: Any) -> np.ndarray:
    if isinstance(values, dict):  # plotly's typed-array encoding
        import base64

        return np.frombuffer(base64.b64decode(values["bdata"]), dtype=np.dtype(values["dtype"]))
    return np.asarray(values, dtype=float)


def _usd(text: str) -> float:
    return float(text.replace("$", "").replace(",", ""))


@pytest.mark.parametrize("key", list(EXPECTED_CAUSE))
def test_walkthrough_shows_the_stored_diagnosis(demo_store: Store, key: str) -> None:
    at = _open(key)
    before = f"{key}-before"
    stored = demo_store.spikes(before)
    table = at.dataframe[0].value
    assert set(table["cause"]) == {EXPECTED_CAUSE[key]}
    # exactly the stored analysis, spike by spike: peaks, causes, confidences and decision paths
    assert list(table["peak step"]) == [int(s["peak"]) for s in stored]
    assert list(table["confidence"]) == pytest.approx([float(s["confidence"]) for s in stored])
    assert all(path.startswith("numerical: no → ") for path in table["decision path"])
    assert all(path.endswith(LAST_NODE[EXPECTED_CAUSE[key]]) for path in table["decision path"])
    assert any(f"diagnosed as **`{EXPECTED_CAUSE[key]}`**" in m.value for m in at.markdown)
    # the before chart shades every detected spike in its cause's colour, with a legend entry
    before_fig = _figures(at)[0]
    colours = {shape["fillcolor"] for shape in before_fig["layout"]["shapes"]}
    assert colours == {CAUSE_COLORS[EXPECTED_CAUSE[key]]}
    assert len(before_fig["layout"]["shapes"]) == len(stored)
    assert f"incident: {EXPECTED_CAUSE[key]}" in {t.get("name") for t in before_fig["data"]}


def test_scenario3_diverged_spike_and_its_rollback_cost(demo_store: Store) -> None:
    at = _open("s3-dense-140b")
    table = at.dataframe[0].value
    diverged = table[table["outcome"] == "diverged"]
    assert len(diverged) == 1 and diverged["cause"].iloc[0] == "data_outlier"
    assert any("(1 diverged)" in m.value for m in at.markdown)
    metrics = {m.label: m.value for m in at.metric}
    before_usd, after_usd = _usd(metrics["Spikes cost before"]), _usd(metrics["Spikes cost after"])
    assert before_usd > after_usd > 0
    # the same bill computed without the page: the run's own step time, GPUs and price from its metadata
    name = "s3-dense-140b-before"
    meta = demo_store.run_info(name).meta
    step_time = run_cost_inputs(demo_store, demo_store.run_info(name)).step_time_s
    assert step_time is not None
    _, bill = price_run_spikes(
        demo_store, name, gpus=meta["gpus"], usd_per_gpu_hour=meta["usd_per_gpu_hour"], step_time_s=step_time
    )
    assert before_usd == pytest.approx(bill.total.usd, abs=0.5)
    assert _usd(metrics["Saved by the remedy"]) == pytest.approx(before_usd - after_usd, abs=1.0)
    assert any("`min_lr_ratio`: 0.0 → 0.1" in m.value for m in at.markdown)


@pytest.mark.parametrize("key", ["s1-moe-7b", "s2-dense-70b"])
def test_remedy_removes_the_cost(demo_store: Store, key: str) -> None:
    metrics = {m.label: m.value for m in _open(key).metric}
    assert _usd(metrics["Spikes cost before"]) > 0
    assert metrics["Spikes cost after"] == "$0.00" and demo_store.spikes(f"{key}-after") == []


def test_before_and_after_losses_on_one_axis(demo_store: Store) -> None:
    at = _open("s2-dense-70b")
    compare = _figures(at)[1]
    traces = {t["name"]: t for t in compare["data"]}
    assert set(traces) == {"before: s2-dense-70b-before", "after: s2-dense-70b-after"}
    for side in ("before", "after"):
        name = f"s2-dense-70b-{side}"
        shown = _ys(traces[f"{side}: {name}"]["y"])
        stored = demo_store.read_series(name, "loss", buckets=1500).values
        np.testing.assert_allclose(shown, stored)
    fork = [s for s in compare["layout"]["shapes"] if s.get("x0") == 3000]
    assert len(fork) == 1  # the data switch where the runs part


@pytest.mark.slow
def test_empty_store_explains_and_seeds_the_scenarios(own_app_store: Store) -> None:
    at = open_page("scenarios").run()
    assert not at.exception
    assert "`stabscope demo`" in at.info[0].value and "s3-dense-140b-after" in at.info[0].value
    assert "sc_pick" not in [radio.key for radio in at.radio]  # no scenario to pick (the thesis section has its own)
    at.button(key="sc_seed").click().run(timeout=60)
    assert not at.exception and not at.info
    assert {f"{k}-{v}" for k in EXPECTED_CAUSE for v in ("before", "after")} <= {
        r.name for r in own_app_store.list_runs()
    }
    assert at.dataframe[0].value["cause"].iloc[0] == "router"
