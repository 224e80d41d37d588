"""Cost page (AppTest): the DeepSeek-V3 preset's known answers and the checkpoint-interval calculator."""

from __future__ import annotations

from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from ingest.store import Store

PAGE = Path(__file__).resolve().parents[1] / "pages" / "cost.py"


@pytest.fixture
def empty_store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("STABSCOPE_STORE", str(tmp_path / "store"))
    Store(tmp_path / "store")
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
