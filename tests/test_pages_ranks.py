"""Ranks page (AppTest): the heatmap, the outlier and straggler ranks with their deviation, a rank vs the median."""

from __future__ import annotations

from pathlib import Path

import pytest

from ingest.store import Store
from tests.conftest import (
    OUTLIER_RANK,
    OUTLIER_STEPS,
    SLOW_RANK,
    RunSpec,
    figure_of,
    open_page,
    plotly_values,
    write_run,
)


def test_outlier_rank_leads_the_table(app_store: Store) -> None:
    at = open_page("ranks").run()
    assert not at.exception
    assert at.selectbox(key="rk_metric").value == "grad_norm_local"
    table = at.dataframe(key="rk_table").value
    top = table.iloc[0]
    assert top["rank"] == OUTLIER_RANK and top["kind"] == "transient"
    assert OUTLIER_STEPS[0] - 5 <= top["peak_step"] < OUTLIER_STEPS[1]
    assert 250 <= top["peak_deviation_pct"] <= 350  # 4x the others: +300 %
    assert at.selectbox(key="rk_rank").value == OUTLIER_RANK
    heat = figure_of(at)["data"][0]
    assert heat["type"] == "heatmap" and list(plotly_values(heat["y"])) == [0, 1, 2, 3]
    # the +300 % outlier saturates its cells; the colour range follows the ordinary spread instead
    assert heat["zmin"] == -heat["zmax"] and 1.0 <= heat["zmax"] < 250
    assert figure_of(at)["data"][1]["marker"]["color"] == "rgba(0,0,0,0)"  # the click grid is not drawn


def test_heatmap_colour_range_known_answers() -> None:
    import numpy as np

    from pages.charts import heatmap_colour_range

    deviation = np.concatenate([np.linspace(-10.0, 10.0, 1001), [300.0] * 100, [np.nan, np.inf]])
    low, high = heatmap_colour_range(deviation, relative=True)
    median_abs = float(np.median(np.abs(deviation[np.isfinite(deviation)])))  # 5.5: the spike barely moves it
    assert high == -low == pytest.approx(6 * median_abs) and 30 < high < 40
    assert heatmap_colour_range(np.zeros(5), relative=True) == (-1.0, 1.0)  # flat: at least +-1 %
    assert heatmap_colour_range(np.arange(101.0), relative=False) == (1.0, 99.0)
    assert heatmap_colour_range(np.full(3, np.nan), relative=False) == (None, None)
    assert heatmap_colour_range(np.full(4, 7.0), relative=False) == (None, None)  # plotly picks its own


def test_straggler_and_rank_vs_median(app_store: Store) -> None:
    at = open_page("ranks").run()
    at.selectbox(key="rk_metric").set_value("step_time_s").run()
    table = at.dataframe(key="rk_table").value
    top = table.iloc[0]
    assert top["rank"] == SLOW_RANK and top["kind"] == "straggler" and top["flagged_pct"] == 100
    assert 25 <= top["deviation_pct"] <= 35  # 1.3x slower
    assert set(table["kind"].iloc[1:]) == {"normal"}
    at.selectbox(key="rk_rank").set_value(1).run()
    assert "Rank **1**" in at.markdown[-1].value and "**normal**" in at.markdown[-1].value
    names = [t.get("name") for t in figure_of(at, 1)["data"]]
    assert "rank 1" in names and "cross-rank median" in names


def test_run_without_per_rank_data(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = write_run(Store(tmp_path / "s"), RunSpec(name="rank0-only", per_rank=False, events=()))
    monkeypatch.setenv("STABSCOPE_STORE", str(store.root))
    at = open_page("ranks").run()
    assert not at.exception
    assert "has no per-rank data" in at.info[0].value
