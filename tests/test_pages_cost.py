"""Cost page (AppTest): the DeepSeek-V3 preset's known answers and the checkpoint-interval calculator."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from streamlit.testing.v1 import AppTest

from ingest.services.run_analyses import open_analysed_store
from ingest.store import Store

PAGE = Path(__file__).resolve().parents[1] / "pages" / "cost.py"


@pytest.fixture
def empty_store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("STABSCOPE_STORE", str(tmp_path / "store"))
    open_analysed_store(tmp_path / "store")
    return tmp_path / "store"


def _metrics(at: AppTest) -> dict[str, str]:
    return {m.label: m.value for m in at.metric}


def test_deepseek_preset_prices_a_two_percent_rollback(empty_store: Path) -> None:
    at = AppTest.from_file(str(PAGE), default_timeout=30).run()
    assert not at.exception
    m = _metrics(at)
    assert m["GPU-hours per rollback"] == "53,280"
    assert m["USD per rollback"] == "$106,560"
    assert m["USD for 3 rollbacks"] == "$319,680"
    at.slider(key="cost_fraction").set_value(5.0).run()
    at.slider(key="cost_spikes").set_value(5).run()
    m = _metrics(at)
    assert m["USD per rollback"] == "$266,400" and m["USD for 5 rollbacks"] == "$1,332,000"
    assert m["Share of the budget"] == "25.0%"


def test_young_and_daly_intervals(empty_store: Path) -> None:
    at = AppTest.from_file(str(PAGE), default_timeout=30).run()
    at.number_input(key="cost_c").set_value(5.0).run()
    at.number_input(key="cost_m").set_value(180.0).run()
    m = _metrics(at)
    assert m["Young's interval"] == "42.4 min" and m["Daly's interval"] == "39.2 min"
    assert any("No runs yet" in i.value for i in at.info)


# ----------------------------------------------------------------------------- a stored run, priced

REAL_LOGS = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "real_logs"
LLMC = REAL_LOGS / "mng_llmc_gpt2_124m" / "main.log"


def _priced_table(at: AppTest, key: str) -> Any:
    """The page's priced spike table (a DataFrame): the dataframe with a "USD lost" column."""
    if key == "sp_table":
        return at.dataframe(key=key).value
    return next(d.value for d in at.dataframe if "USD lost" in d.value.columns)


def test_a_run_is_priced_the_same_on_the_cost_and_spikes_pages(own_app_store: Store) -> None:
    from tests.conftest import SMALL_RUN, open_page

    own_app_store.update_meta(SMALL_RUN, {"gpus": 8, "usd_per_gpu_hour": 2.0, "step_time_s": 0.25})
    cost_page = open_page("cost").run()
    spikes_page = open_page("spikes").run()
    assert not cost_page.exception and not spikes_page.exception
    on_cost, on_spikes = _priced_table(cost_page, "cost_table"), _priced_table(spikes_page, "sp_table")
    assert len(on_cost) == len(on_spikes) >= 1
    assert list(on_cost["USD lost"]) == list(on_spikes["USD lost"])
    # the run logs step_time_s: the measured median (0.5375 s) wins over the metadata's 0.25 s
    measured = 0.5 * (3 + 1.3) / 4
    expected = on_cost["steps lost"] * measured * 8 * 2.0 / 3600
    assert on_cost["USD lost"].to_numpy() == pytest.approx(expected.to_numpy(), rel=0.01)
    assert on_cost["steps lost"].sum() > 0
    caption = " ".join(c.value for c in cost_page.caption)
    assert "8 GPUs (metadata gpus)" in caption and "(measured)" in caption and "$2/GPU-hour (metadata)" in caption


def test_llmc_is_unknown_until_its_step_time_is_set_then_priced_exactly(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from ingest.importing.importer import import_logs
    from tests.conftest import open_page

    if not LLMC.exists():
        pytest.skip(f"real log {LLMC} is absent (the shared real_logs folder is not on this machine)")
    store = open_analysed_store(tmp_path / "store")
    monkeypatch.setenv("STABSCOPE_STORE", str(store.root))
    import_logs(store, [LLMC], run="llmc")
    at = open_page("cost").run()
    assert not at.exception
    # llm.c logs no step time and no wall times: unknown, not $0.00 from an assumed 1 s/step on 1 GPU
    assert _metrics(at)["Total"] == "unknown"
    assert any("logs no step time" in w.value for w in at.warning)
    assert any("1 GPUs (ranks logged)" in c.value and "$2/GPU-hour (assumed)" in c.value for c in at.caption)
    # the record's 8x H100 at 140 ms/step (PROVENANCE.txt), at $2/GPU-hour
    store.update_meta("llmc", {"gpus": 8, "usd_per_gpu_hour": 2.0, "step_time_s": 0.14})
    cost_page, spikes_page = open_page("cost").run(), open_page("spikes").run()
    spikes_page.toggle(key="sp_blips").set_value(True).run()  # this healthy run's incidents are all blips
    on_cost, on_spikes = _priced_table(cost_page, "cost_table"), _priced_table(spikes_page, "sp_table")
    expected = (on_cost["steps lost"] * 0.14 * 8 * 2.0 / 3600).to_list()
    assert on_cost["USD lost"].to_list() == expected == on_spikes["USD lost"].to_list()
    assert len(on_cost) == len(store.spikes("llmc")) >= 1


def test_run_settings_form_writes_the_metadata(own_app_store: Store) -> None:
    from tests.conftest import SMALL_RUN, open_page

    at = open_page("cost").run()
    at.number_input(key=f"cost_meta_{SMALL_RUN}_gpus").set_value(16)
    at.selectbox(key=f"cost_meta_{SMALL_RUN}_precision").set_value("bf16")
    at.button[-1].click().run()
    assert not at.exception
    meta = own_app_store.run_info(SMALL_RUN).meta
    assert (meta["gpus"], meta["precision"]) == (16, "bf16")
    assert {"gpus", "precision"} <= set(meta["user_meta_keys"])
    assert any("16 GPUs (metadata gpus)" in c.value for c in at.caption)
    at.number_input(key=f"cost_meta_{SMALL_RUN}_max_norm").set_value(-1.0)
    at.button[-1].click().run()
    assert any("max_norm" in e.value and "expected a number > 0" in e.value for e in at.error)
    assert "max_norm" not in own_app_store.run_info(SMALL_RUN).meta.get("user_meta_keys", [])
