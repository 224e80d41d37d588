"""Run overview page (AppTest): linked panels, full fidelity when zoomed, min/max buckets, EMA, log axes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from streamlit.testing.v1 import AppTest

from ingest.store import Store
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
    # linked zoom: every panel's x axis follows the first one
    assert all(fig["layout"][f"xaxis{i}"]["matches"] == "x5" for i in ("", 2, 3, 4))
    assert all(fig["layout"][f"xaxis{i}"]["range"] == [0, 1999] for i in ("", 2, 3, 4, 5))
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
        Store(tmp_path / "store"),
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


def test_transitions_found_in_the_logged_lr_are_marked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = write_run(Store(tmp_path / "store"), RunSpec(name="no-events", per_rank=False, events=()))
    monkeypatch.setenv("STABSCOPE_STORE", str(store.root))
    at = open_page("overview").run()
    markers = [t for t in figure_of(at)["data"] if t.get("name") == "warmup_end"]
    assert len(markers) == 5  # on every panel, though the run logged no event
    steps = {x for x in markers[0]["x"] if x is not None}
    assert len(steps) == 1 and abs(steps.pop() - WARMUP_STEPS) <= 1  # the LR peaks where the warmup ends
