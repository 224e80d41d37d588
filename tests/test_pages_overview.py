"""Run overview page (AppTest): linked panels, full fidelity when zoomed, min/max buckets, EMA, log axes."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from streamlit.testing.v1 import AppTest

from ingest.importing.importer import store_parsed
from ingest.services.run_analyses import open_analysed_store
from ingest.store import SeriesData, Store
from pages.parts.chart_incidents import peak_markers
from pages.parts.chart_ranges import robust_y_range
from pages.parts.view_url import parse_steps
from stab_core.snr import ema as bias_corrected_ema
from tests.conftest import (
    LOSS_SPIKE_STEPS,
    SMALL_RUN,
    WARMUP_STEPS,
    RunSpec,
    figure_of,
    open_page,
    plotly_values,
    write_run,
)


def _figure(at: AppTest) -> dict[str, Any]:
    return figure_of(at)


def _trace(fig: dict[str, Any], name: str) -> dict[str, Any]:
    return next(t for t in fig["data"] if t.get("name") == name)


def _xs(trace: dict[str, Any]) -> np.ndarray:
    return plotly_values(trace["x"])


def _ys(trace: dict[str, Any]) -> np.ndarray:
    return plotly_values(trace["y"])


def test_every_panel_on_one_step_axis_with_events(app_store: Store) -> None:
    at = open_page("overview").run()
    assert not at.exception
    fig = _figure(at)
    titles = [a["text"] for a in fig["layout"]["annotations"]]
    assert titles == ["loss", "grad norm", "learning rate", "clip ratio", "gradient SNR"]
    names = {t.get("name") for t in fig["data"]}
    assert {"loss", "pre-clip", "post-clip", "lr", "clipped fraction (trailing window)", "snr"} <= names
    assert "clip coefficient" not in names  # the logged clip_coef only stands in when clip_ratio is missing
    assert fig["layout"]["yaxis5"]["type"] == "log"  # the SNR spans decades: log by default
    # one step axis (was: five x axes linked by `matches`): every trace is on it, so a zoom moves every
    # panel and one hover reads every panel at that step
    assert [k for k in fig["layout"] if k.startswith("xaxis")] == ["xaxis"]
    assert {t.get("xaxis", "x") for t in fig["data"]} == {"x"}
    assert {t.get("yaxis", "y") for t in fig["data"]} == {"y", "y2", "y3", "y4", "y5"}
    assert fig["layout"]["xaxis"]["range"] == [0, 1999]
    assert (fig["layout"]["hovermode"], fig["layout"]["hoversubplots"]) == ("x unified", "axis")
    assert fig["layout"]["xaxis"]["showspikes"] and fig["layout"]["xaxis"]["spikemode"] == "across"
    # the panels are stacked top to bottom without overlapping, each title just above its own panel
    domains = [fig["layout"][f"yaxis{i}"]["domain"] for i in ("", 2, 3, 4, 5)]
    assert all(upper[0] > lower[1] for upper, lower in itertools.pairwise(domains))
    assert [a["y"] for a in fig["layout"]["annotations"]] == [d[1] for d in domains]
    assert all(a["x"] == 0 and a["xanchor"] == "left" for a in fig["layout"]["annotations"])  # not under the modebar
    # a drag selects a span of steps (re-read from the store), not a browser-side zoom of the buckets
    assert (fig["layout"]["dragmode"], fig["layout"]["selectdirection"]) == ("select", "h")
    checkpoints = [t for t in fig["data"] if t.get("name") == "checkpoint"]
    assert len(checkpoints) == 5  # one marker trace per panel
    assert [x for x in checkpoints[0]["x"] if x is not None] == [500, 500, 1000, 1000, 1500, 1500]
    assert any("every step (full fidelity)" in c.value for c in at.caption)


def test_zoom_rereads_every_step(app_store: Store) -> None:
    at = open_page("overview").run()
    at.slider(key="ov_range").set_value((1190, 1210)).run()
    loss = _ys(_trace(_figure(at), "loss"))
    expected = app_store.read_series(SMALL_RUN, "loss", start=1190, end=1210).values
    assert loss.size == 21
    np.testing.assert_allclose(loss, expected)
    assert loss.max() == pytest.approx(expected[LOSS_SPIKE_STEPS[0] - 1190 : LOSS_SPIKE_STEPS[1] - 1190].max())
    assert any("Steps 1,190–1,210" in c.value for c in at.caption)


def test_ema_overlays_the_raw_series(app_store: Store) -> None:
    at = open_page("overview").run()
    at.slider(key="ov_ema").set_value(0.9).run()
    fig = _figure(at)
    raw = _ys(_trace(fig, "loss (raw)"))
    smooth = _ys(_trace(fig, "loss EMA 0.9"))
    np.testing.assert_allclose(smooth, bias_corrected_ema(raw, 0.9))  # one step per point: beta = 0.9
    assert smooth[0] == pytest.approx(raw[0])  # bias-corrected: starts on the data, not at 0
    assert _trace(fig, "loss (raw)")["opacity"] < 1  # raw kept visible underneath


def test_log_toggle_and_extra_panel(app_store: Store) -> None:
    at = open_page("overview").run()
    at.multiselect(key="ov_log").set_value(["loss"]).run()
    at.multiselect(key="ov_extra").set_value(["step_time_s"]).run()
    fig = _figure(at)
    assert fig["layout"]["yaxis"]["type"] == "log"
    assert fig["layout"]["yaxis2"]["type"] == "linear"
    assert fig["layout"]["annotations"][-1]["text"] == "step_time_s"
    assert fig["layout"]["yaxis6"]["title"]["text"] == "step_time_s (s)"


def test_long_run_is_bucketed_and_keeps_a_one_step_spike(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = write_run(
        open_analysed_store(tmp_path / "store"),
        RunSpec(name="long", n_steps=12_000, per_rank=False, loss_spike=(7001, 7002), grad_spike_step=None,
                run_level=("loss",), events=()),
    )  # fmt: skip
    monkeypatch.setenv("STABSCOPE_STORE", str(store.root))
    at = open_page("overview").run()
    assert not at.exception
    fig = _figure(at)
    spike = store.read_series("long", "loss", start=7001, end=7001).values[0]
    band_top = fig["data"][0]  # the envelope's upper edge, one point per bucket
    steps, top = _xs(band_top), _ys(band_top)
    bucket = int(np.searchsorted(steps, 7001, side="right")) - 1
    assert top.size <= 1500 and top[bucket] == pytest.approx(spike)
    assert top[bucket] > 2.5 * np.median(top[bucket - 5 : bucket + 5])
    assert any("min/max buckets of ~8 steps" in c.value for c in at.caption)
    missing = " ".join(c.value for c in at.caption)
    assert "grad norm" in missing and "learning rate" in missing  # panels the run cannot fill are named
    # and why the SNR is empty: the analyses' reason (meta analysis.snr_reason), else what the run lacks
    reason = store.run_info("long").meta["analysis"].get("snr_reason") or "not computed, no `grad_norm` was logged"
    assert f"**gradient SNR**: {reason}" in missing


def test_transitions_found_in_the_logged_lr_are_marked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = write_run(open_analysed_store(tmp_path / "store"), RunSpec(name="no-events", per_rank=False, events=()))
    monkeypatch.setenv("STABSCOPE_STORE", str(store.root))
    at = open_page("overview").run()
    markers = [t for t in figure_of(at)["data"] if t.get("name") == "warmup_end"]
    assert len(markers) == 5  # on every panel, though the run logged no event
    steps = {x for x in markers[0]["x"] if x is not None}
    assert len(steps) == 1 and abs(steps.pop() - WARMUP_STEPS) <= 1  # the LR peaks where the warmup ends


# ------------------------------------------------------------------------------------- default y range

REAL = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "real_logs"


def test_a_warmup_head_does_not_set_the_y_range() -> None:
    steps = np.arange(1000)
    values = 1.0 + 0.01 * np.sin(steps / 7.0)
    values[:30] = 100.0  # a warmup head 100x the run's level (3% of the steps)
    low, high = robust_y_range([(steps, values)])
    # the tail's 0.5-99.5% band (0.99-1.01), widened to 5% of its level and padded by 10% of that
    assert low == pytest.approx(1 - 0.6 * 0.0505, abs=1e-3) and high == pytest.approx(1 + 0.6 * 0.0505, abs=1e-3)
    # the known answer without the head rule: 3% of the points at 100 sit inside the 99.5% quantile
    assert robust_y_range([(steps, values)], head_fraction=0.0)[1] > 99  # type: ignore[index]


def test_an_incident_peak_stretches_the_range_or_is_marked_at_the_edge() -> None:
    steps = np.arange(1000)
    values = 1.0 + 0.01 * np.sin(steps / 7.0)
    values[500] = 1.025  # near: within one span (0.02) above the band
    near = robust_y_range([(steps, values)], peaks=[1.025])
    assert near is not None and near[1] > 1.025
    values[700] = 50.0  # far: 2,500 spans above
    far = robust_y_range([(steps, values)], peaks=[1.025, 50.0])
    assert far is not None and far[1] < 1.05
    series = SeriesData("grad_norm", steps, values, values, values, "runlevel", False)
    spikes = [
        {"metric": "grad_norm", "start": 500, "peak": 500, "end": 500, "peak_value": 1.025, "cause": "unknown"},
        {"metric": "grad_norm", "start": 700, "peak": 700, "end": 700, "peak_value": 50.0, "cause": "numerical"},
    ]
    traces = peak_markers([("pre-clip", series)], spikes, far, None, set(), log_y=False)
    by_index = {int(i): (t, k) for t in traces for k, i in enumerate(t.customdata)}
    inside, at_500 = by_index[0]
    assert inside.marker.symbol[at_500] == "diamond" and inside.y[at_500] == pytest.approx(1.025)
    edge, at_700 = by_index[1]
    assert edge.marker.symbol[at_700] == "triangle-up" and edge.text[at_700] == "↑ 50"
    assert far[0] < edge.y[at_700] <= far[1]  # drawn just inside the top edge, not off the chart


def test_log_range_is_in_decades() -> None:
    steps = np.arange(1000)
    values = 10.0 ** (1 + np.sin(steps / 50.0))  # 1 to 100
    low, high = robust_y_range([(steps, values)], log_y=True)  # type: ignore[misc]
    assert -0.3 < low < 0.0 and 2.0 < high < 2.3  # log10 units, as Plotly takes a log axis' range


def _llmc_store(tmp_path: Path) -> Store:
    path = REAL / "mng_llmc_gpt2_124m" / "main.log"
    if not path.is_file():
        pytest.skip(f"../shared absent: no llm.c log at {path}")
    from ingest.formats import read_log

    store = open_analysed_store(tmp_path / "store")
    store_parsed(store, "llmc", read_log([path]))
    return store


def test_llmc_spikes_are_visible_at_the_default_view(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The user's report: on llm.c's GPT-2 log step 0 (loss 11, grad norm 15) set the axes and no spike showed."""
    store = _llmc_store(tmp_path)
    monkeypatch.setenv("STABSCOPE_STORE", str(store.root))
    at = open_page("overview").run()
    assert not at.exception
    # every incident of this healthy run is a one-step blip, absorbed at once: none drawn by default
    assert len(_figure(at)["layout"].get("shapes") or []) == 0
    at.toggle(key="ov_blips").set_value(True).run()
    fig = _figure(at)
    loss_range, norm_range = fig["layout"]["yaxis"]["range"], fig["layout"]["yaxis2"]["range"]
    assert 2.9 < loss_range[0] < 3.3 and 4.0 < loss_range[1] < 5.0  # the run sits at 3.3-3.5, not 11
    assert 0.1 < norm_range[0] < 0.25 and 0.4 < norm_range[1] < 1.0  # it sits at ~0.27, not 15
    peaks = {int(s["peak"]): s for s in store.spikes("llmc")}
    assert {7435, 9025} <= set(peaks)
    markers = [t for t in fig["data"] if t.get("customdata") is not None and t.get("yaxis") == "y2"]
    marked = {
        int(x): (symbol, text)
        for t in markers
        for x, symbol, text in zip(t["x"], t["marker"]["symbol"], t["text"], strict=True)
    }
    assert marked[9025] == ("triangle-up", "↑ 2.02") and marked[7435] == ("triangle-up", "↑ 1.44")  # off scale
    assert set(marked) == {int(s["peak"]) for s in peaks.values() if s["metric"] == "grad_norm"}
    # every incident has its band, at least MIN_BAND_PX wide whatever the zoom
    shapes = fig["layout"]["shapes"]
    assert len(shapes) == len(peaks) and all(s["line"]["width"] >= 5 for s in shapes)
    # the pre-clip norm, LR and loss each in their own colour
    colours = {t.get("name"): t["line"]["color"] for t in fig["data"] if t.get("mode") == "lines" and "line" in t}
    assert len({colours["loss"], colours["pre-clip"], colours["lr"], colours["val_loss"]}) == 4
    at.toggle(key="ov_full_y").set_value(True).run()
    assert "range" not in _figure(at)["layout"]["yaxis2"]  # the whole range again: Plotly's autorange


# ------------------------------------------------------------------------------------------ the URL


def test_the_zoom_round_trips_through_the_url(app_store: Store) -> None:
    at = open_page("overview").run()
    assert "steps" not in at.query_params  # the whole run: no parameter
    at.slider(key="ov_range").set_value((1190, 1210)).run()
    assert at.query_params["steps"] == "1190-1210" and at.query_params["run"] == SMALL_RUN
    link = open_page("overview")
    link.query_params.update(at.query_params)
    link.run()
    assert not link.exception
    assert link.slider(key="ov_range").value == (1190, 1210)
    assert any("Steps 1,190–1,210" in c.value for c in link.caption)
    assert _figure(link)["layout"]["xaxis"]["range"] == [1190, 1210]
    link.button(key="ov_reset").click().run()
    assert "steps" not in link.query_params


def test_picking_an_incident_zooms_to_it_and_a_link_reopens_it(app_store: Store) -> None:
    spikes = app_store.spikes(SMALL_RUN)
    if not spikes:
        pytest.fail(f"no incident detected in {SMALL_RUN}: {app_store.run_info(SMALL_RUN).meta.get('analysis')}")
    at = open_page("overview").run()
    at.selectbox(key="ov_incident").set_value(0).run()
    start, end = int(spikes[0]["start"]), int(spikes[0]["end"])
    pad = max(50, 3 * (end - start + 1))
    assert at.slider(key="ov_range").value == (max(0, start - pad), min(1999, end + pad))
    assert at.query_params["incident"] == str(spikes[0]["peak"])
    fig = _figure(at)
    assert max(s["opacity"] for s in fig["layout"]["shapes"]) == 0.5  # the picked one, darker
    assert any("Incident #0" in m.value for m in at.markdown)
    link = open_page("overview")
    link.query_params.update(at.query_params)
    link.run()
    assert link.selectbox(key="ov_incident").value == 0
    assert link.slider(key="ov_range").value == at.slider(key="ov_range").value
    typed = open_page("overview")  # a link that names the incident only opens on its steps
    typed.query_params.update({"run": SMALL_RUN, "incident": str(spikes[0]["peak"])})
    typed.run()
    assert typed.slider(key="ov_range").value == at.slider(key="ov_range").value


def test_parse_steps() -> None:
    assert parse_steps("1200-1400") == (1200, 1400)
    assert parse_steps(None) is None and parse_steps("x-1") is None and parse_steps("5-5") is None


def test_a_flat_series_is_not_magnified_into_its_rounding_steps() -> None:
    steps = np.arange(200)
    lr = np.where(steps < 150, 594e-6, 593e-6)  # an LR logged to 6 decimals: one rounding step
    low, high = robust_y_range([(steps, lr)])  # type: ignore[misc]
    assert high - low >= 0.05 * 594e-6 and low < 593e-6 < 594e-6 < high


def test_a_fraction_at_zero_is_not_magnified_into_float_noise() -> None:
    steps = np.arange(3000)
    clipped = np.zeros(3000)
    clipped[160] = 6e-13  # the float noise a trailing-window mean leaves (seen on demo-fp16-350m)
    low, high = robust_y_range([(steps, clipped)], min_span=0.05)  # type: ignore[misc]
    assert low == 0.0 and high >= 0.025  # 0 to a few percent, not 0 to 600 femto


def test_pre_clip_norm_is_drawn_over_a_wider_post_clip_norm(app_store: Store) -> None:
    """Unclipped steps have equal norms: the post-clip line used to hide the pre-clip one (same place,
    drawn later) and share the LR's green."""
    fig = _figure(open_page("overview").run())
    names = [t.get("name") for t in fig["data"]]
    pre, post, lr = (_trace(fig, n) for n in ("pre-clip", "post-clip", "lr"))
    assert names.index("post-clip") < names.index("pre-clip")  # underneath
    assert post["line"]["width"] > pre["line"]["width"]  # a halo round the pre-clip line where they agree
    assert len({pre["line"]["color"], post["line"]["color"], lr["line"]["color"]}) == 3


def test_mixtral_golden_values_say_why_panels_are_empty(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Megatron's Mixtral 8x7B golden values: loss only (no grad norm, so no SNR), every metric "nan" from
    step 22,690 (unrecorded steps). The page says why the panels are missing."""
    path = REAL / "megatron_mixtral8x7b_h100" / "golden_values_dev_dgx_h100.json"
    if not path.is_file():
        pytest.skip(f"../shared absent: no Mixtral golden values at {path}")
    from ingest.formats import read_log

    store = open_analysed_store(tmp_path / "store")
    store_parsed(store, "mixtral", read_log([path]))
    monkeypatch.setenv("STABSCOPE_STORE", str(store.root))
    at = open_page("overview").run()
    assert not at.exception
    analysis = store.run_info("mixtral").meta["analysis"]
    captions = " ".join(c.value for c in at.caption)
    assert f"**gradient SNR**: {analysis.get('snr_reason') or 'not computed, no `grad_norm` was logged'}" in captions
    fig = _figure(at)
    loss_range = fig["layout"]["yaxis"]["range"]
    assert 1.8 < loss_range[0] < 2.0 and 3.0 < loss_range[1] < 3.6  # the run at ~2, not its first steps' 12.7
    marked = {int(x) for t in fig["data"] if t.get("customdata") is not None for x in t["x"]}
    loss_peaks = {int(s["peak"]): s["severity"] for s in store.spikes("mixtral") if s["metric"] == "loss"}
    assert marked == {peak for peak, severity in loss_peaks.items() if severity != "blip"}
    at.toggle(key="ov_blips").set_value(True).run()
    marked = {int(x) for t in _figure(at)["data"] if t.get("customdata") is not None for x in t["x"]}
    assert marked >= set(loss_peaks)
    if analysis.get("logging_end"):
        step = int(analysis["logging_end"]["step"])
        assert f"Logging stopped at step {step:,}" in captions
        line = next(t for t in fig["data"] if t.get("name") == "logging_end")
        assert {x for x in line["x"] if x is not None} == {step}
    # the file's steps 22,690-24,000 are "nan" in every metric, memory and time included: unrecorded steps, not
    # NaN records (imp10b), so the run ends at its last recorded step and the import account counts the rest
    assert store.run_info("mixtral").last_step == 22_685
    assert "Logging stopped at step" not in captions


def test_every_metric_of_an_incident_is_marked_on_its_own_panel(app_store: Store) -> None:
    spikes = app_store.spikes(SMALL_RUN)
    fig = _figure(open_page("overview").run())
    marked = {(t["yaxis"], int(x)) for t in fig["data"] if t.get("customdata") is not None for x in t["x"]}
    panel_of = {"loss": "y", "grad_norm": "y2"}
    expected = {
        (panel_of[m["metric"]], int(m["peak"]))
        for s in spikes
        for m in (s.get("members") or [s])
        if m["metric"] in panel_of
    }
    assert expected and marked == expected  # a loss spike and its grad-norm twin: a marker on each panel


def test_an_incident_on_a_metric_no_default_panel_holds_opens_its_panel(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An RL run's return is its headline: its lasting fall is the run's incident, and the overview must
    show it without the user finding the metric under "More panels" (it said "Nothing to plot")."""
    from ingest.formats import read_log

    rng = np.random.default_rng(7)
    returns = np.concatenate([rng.poisson(6.0, 3000), rng.poisson(1.0, 3000)])
    lines = ['#{"t_start": 1700000000.0, "env_id": "SomeGame-v5"}', "r,l,t"]
    lines += [f"{r:.1f},{200 + i % 50},{0.5 * (i + 1):.2f}" for i, r in enumerate(returns)]
    path = tmp_path / "0.monitor.csv"
    path.write_text("\n".join(lines) + "\n")
    store = open_analysed_store(tmp_path / "store")
    store_parsed(store, "agent", read_log([path]))
    monkeypatch.setenv("STABSCOPE_STORE", str(store.root))
    at = open_page("overview").run()
    assert not at.exception
    assert at.multiselect(key="ov_extra").value == ["episode_reward"]
    fig = _figure(at)
    assert any(a["text"] == "episode_reward" for a in fig["layout"]["annotations"])
