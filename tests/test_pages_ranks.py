"""Ranks page (AppTest): the heatmap, the outlier and straggler ranks with their deviation, a rank vs the median."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from streamlit.testing.v1 import AppTest

from ingest.importing.importer import store_parsed
from ingest.services.run_analyses import open_analysed_store
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
from tests.test_alerts import (
    SILENT_RANK,
    SLOW_PIPELINE_RANK,
    STEADY_RANK,
    write_pipeline_run,
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
    # the one-column transient is ringed at its peak, so that it cannot hide among 400 columns
    ring = figure_of(at)["data"][-1]
    assert ring["marker"]["symbol"] == "circle-open" and list(plotly_values(ring["y"])) == [OUTLIER_RANK]
    assert OUTLIER_STEPS[0] - 5 <= plotly_values(ring["x"])[0] < OUTLIER_STEPS[1]


def test_heatmap_colour_range_known_answers() -> None:
    import numpy as np

    from pages.parts.rank_charts import heatmap_colour_range

    deviation = np.concatenate([np.linspace(-10.0, 10.0, 1001), [300.0] * 100, [np.nan, np.inf]])
    low, high = heatmap_colour_range(deviation, relative=True)
    median_abs = float(np.median(np.abs(deviation[np.isfinite(deviation)])))  # 5.5: the spike barely moves it
    assert high == -low == pytest.approx(6 * median_abs) and 30 < high < 40
    # flat: never inside the 10 % outlier threshold (was +-1 %, which saturated a steady +2.5 % rank)
    assert heatmap_colour_range(np.zeros(5), relative=True) == (-10.0, 10.0)
    # 63 quiet ranks (+-0.1 %), one steady +2.5 %: it stays pale (a quarter of the scale), not saturated
    steady = np.concatenate([np.tile(np.linspace(-0.1, 0.1, 63), 50), np.full(50, 2.5)])
    assert heatmap_colour_range(steady, relative=True) == (-10.0, 10.0)
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
    store = write_run(open_analysed_store(tmp_path / "s"), RunSpec(name="rank0-only", per_rank=False, events=()))
    monkeypatch.setenv("STABSCOPE_STORE", str(store.root))
    at = open_page("ranks").run()
    assert not at.exception
    assert "has no per-rank data" in at.info[0].value


REAL_MEGDS = Path("/work/shared/data/real_logs/bigscience_megds_perf_log/meg_ds_3d_gpt2_perf_n16-ds-off.out")


def _z(trace: dict[str, object]) -> np.ndarray:
    """A heatmap trace's z as a 2-D array (plotly writes it as nested lists or a typed array)."""
    z = trace["z"]
    if isinstance(z, dict):
        shape = [int(n) for n in str(z["shape"]).split(",")]
        return plotly_values(z).astype(float).reshape(shape)
    return np.array([[np.nan if v is None else v for v in row] for row in z], dtype=float)  # type: ignore[union-attr]


def _pipeline_page(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, **kwargs: object) -> AppTest:
    write_pipeline_run(tmp_path / "shards", **kwargs)  # type: ignore[arg-type]
    open_analysed_store(tmp_path / "store").compact("pp", tmp_path / "shards")
    monkeypatch.setenv("STABSCOPE_STORE", str(tmp_path / "store"))
    at = open_page("ranks").run()
    assert not at.exception
    return at


def test_pipeline_run_flags_the_slow_rank_not_the_memory_stages(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """64 ranks, 4 pipeline stages in the metadata: +13 % memory on the first and last stage, rank 22
    20 % slower, rank 5 a steady 2.5 % slower, rank 41 silent."""
    at = _pipeline_page(tmp_path, monkeypatch)
    assert [w.value for w in at.warning] == [
        f"Rank {SILENT_RANK} logged nothing: 63 of 64 ranks have data (world size 64 in the run's metadata)."
    ]
    assert at.selectbox(key="rk_metric").value == "step_time_s"
    table = at.dataframe(key="rk_table").value
    assert (table.iloc[0]["rank"], table.iloc[0]["kind"]) == (SLOW_PIPELINE_RANK, "straggler")
    assert table.iloc[0]["deviation_pct"] == pytest.approx(20.0, abs=1.0)
    assert set(table["kind"].iloc[1:]) == {"normal"} and at.subheader[0].value == "Outlier ranks: 1 of 63"
    heat = figure_of(at)["data"][0]
    ranks, z = list(plotly_values(heat["y"])), _z(heat)
    assert heat["colorbar"]["title"]["text"] == "% vs its stage's median" and heat["zmax"] == 10.0
    # the flagged rank is the one in full colour; the steady +2.5 % rank is pale; the rest near white
    slow, steady = z[ranks.index(SLOW_PIPELINE_RANK)], z[ranks.index(STEADY_RANK)]
    assert np.all(slow >= heat["zmax"]) and np.all(np.abs(steady) < 0.4 * heat["zmax"])
    others = np.delete(z, [ranks.index(SLOW_PIPELINE_RANK), ranks.index(STEADY_RANK)], axis=0)
    assert np.nanpercentile(np.abs(others), 99) < 0.2 * heat["zmax"]
    assert SILENT_RANK not in ranks and len(ranks) == 63
    # the straggler's label is the one in colour (its whole row is; only a transient is ringed)
    assert [t.get("marker", {}).get("symbol") for t in figure_of(at)["data"]] == [None, None]
    yaxis = figure_of(at)["layout"]["yaxis"]
    assert [t for t in yaxis["ticktext"] if "<b>" in t] == [
        f"<span style='color:#2b8a3e'><b>{SLOW_PIPELINE_RANK} ▸</b></span>"
    ]

    at.selectbox(key="rk_metric").set_value("gpu_mem_gb").run()
    table = at.dataframe(key="rk_table").value
    assert set(table["kind"]) == {"normal"} and at.subheader[0].value == "Outlier ranks: 0 of 63"
    assert "compared with the ranks of its own pipeline stage (4 stages of 16 ranks" in at.caption[-1].value
    at.selectbox(key="rk_rank").set_value(0).run()
    assert "vs its stage's median" in at.markdown[-1].value
    names = [t.get("name") for t in figure_of(at, 1)["data"]]
    assert "stage 0's ranks median" in names and "stage 0's ranks min–max" in names


def test_memory_without_a_stage_layout_flags_no_straggler(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The same job with 16 stages (as the BigScience log) and no layout in its metadata: the first and
    last stage stand apart in memory (persistent), none is called a straggler, and the page says why."""
    at = _pipeline_page(tmp_path, monkeypatch, layout_meta=False, stages=16)
    at.selectbox(key="rk_metric").set_value("gpu_mem_gb").run()
    table = at.dataframe(key="rk_table").value
    apart = set(table.loc[table["kind"] != "normal", "rank"])
    assert apart == {0, 1, 2, 3, 60, 61, 62, 63} and set(table["kind"]) == {"persistent", "normal"}
    [note] = [i.value for i in at.info]  # said above the heatmap, where whole stages stand apart
    assert (
        "The pipeline layout is unknown" in note and "Memory differences between pipeline stages are expected" in note
    )
    at.selectbox(key="rk_metric").set_value("step_time_s").run()
    table = at.dataframe(key="rk_table").value
    assert (table.iloc[0]["rank"], table.iloc[0]["kind"]) == (SLOW_PIPELINE_RANK, "straggler")


def test_short_run_has_a_column_per_logged_step(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """62 steps, ranks logging every 10th: 7 columns at whole steps 0, 10, ..., 60, ticks on them."""
    at = _pipeline_page(tmp_path, monkeypatch, steps=62, every=10)
    heat = figure_of(at)["data"][0]
    assert list(plotly_values(heat["x"])) == list(range(0, 62, 10))
    assert figure_of(at)["layout"]["xaxis"]["tickvals"] == list(range(0, 62, 10))
    assert "63 ranks x 7 columns, one per step with per-rank `step_time_s`" in at.caption[0].value
    assert heat["customdata"][0][0] == "steps 0–9" and heat["customdata"][0][-1] == "steps 60–61"


@pytest.mark.skipif(not REAL_MEGDS.exists(), reason=f"real log absent: {REAL_MEGDS}")
def test_real_megatron_deepspeed_log(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """BigScience's TP4 x PP16 perf log: 63 of 64 ranks print their memory once, after iteration 1; the
    first and last pipeline stage hold 13 % more (17.5 vs 15.5 GB allocated)."""
    from ingest.formats import read_log

    store = open_analysed_store(tmp_path / "store")
    store_parsed(store, "megds", read_log([REAL_MEGDS]))
    monkeypatch.setenv("STABSCOPE_STORE", str(store.root))
    at = open_page("ranks").run()
    assert not at.exception
    assert at.warning[0].value.startswith("Rank 47 logged nothing: 63 of 64 ranks have data")
    heat = figure_of(at)["data"][0]
    assert list(plotly_values(heat["x"])) == [1]  # one column, on a whole step
    xaxis = figure_of(at)["layout"]["xaxis"]
    assert xaxis["tickvals"] == [1] and xaxis["range"] == [0.5, 1.5]
    assert at.caption[0].value.startswith("63 ranks x 1 column: step 1, the only step with per-rank `gpu_mem_gb`")
    table = at.dataframe(key="rk_table").value
    assert set(table["kind"]) == {"normal"}  # the +13 % stages are compared with their own stage
    assert "16 stages of 4 ranks" in at.caption[-1].value
