"""Compare page (AppTest): seeds grouped into a mean with a min/max or std band, step or token alignment."""

from __future__ import annotations

import numpy as np
import pytest
from streamlit.testing.v1 import AppTest

from ingest.store import Store
from tests.conftest import SMALL_RUN, RunSpec, open_page, write_run

SEEDS = ("gpt-seed0", "gpt-seed1", "gpt-seed2")


@pytest.fixture(scope="module")
def seeds_store(module_store: Store) -> Store:
    for i, name in enumerate(SEEDS):
        write_run(module_store, RunSpec(name=name, seed=10 + i, per_rank=False, loss_floor=2.0 + 0.1 * i,
                                        loss_spike=None, events=()))  # fmt: skip
    write_run(module_store, RunSpec(name="no-tokens", per_rank=False, run_level=("loss",), events=()))
    return module_store


def _open(store: Store, monkeypatch: pytest.MonkeyPatch, runs: list[str]) -> AppTest:
    monkeypatch.setenv("STABSCOPE_STORE", str(store.root))
    at = open_page("compare")
    at.session_state["compare_runs"] = runs
    return at.run()


def _last(store: Store, run: str) -> float:
    return float(store.read_series(run, "loss").values[-1])


def test_seeds_become_one_mean_with_a_minmax_band(seeds_store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    at = _open(seeds_store, monkeypatch, [SMALL_RUN, *SEEDS])
    assert not at.exception
    table = at.dataframe[0].value.set_index("line")
    assert list(table.index) == [SMALL_RUN, "gpt (mean of 3)"]
    group = table.loc["gpt (mean of 3)"]
    assert group["runs"] == ", ".join(SEEDS)
    finals = [_last(seeds_store, r) for r in SEEDS]
    assert group["final loss"] == pytest.approx(np.mean(finals))
    assert group["band width at end"] == pytest.approx(max(finals) - min(finals))
    assert table.loc[SMALL_RUN, "final loss"] == pytest.approx(_last(seeds_store, SMALL_RUN))
    at.radio(key="cmp_band").set_value("std").run()
    group = at.dataframe[0].value.set_index("line").loc["gpt (mean of 3)"]
    assert group["band width at end"] == pytest.approx(2 * np.std(finals))


def test_ungrouped_and_aligned_by_tokens(seeds_store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    at = _open(seeds_store, monkeypatch, list(SEEDS))
    at.toggle(key="cmp_group").set_value(False).run()
    table = at.dataframe[0].value
    assert list(table["line"]) == list(SEEDS)
    at.radio(key="cmp_axis").set_value("tokens").run()
    table = at.dataframe[0].value
    assert list(table["last tokens"]) == [2000 * 65536.0] * 3  # tokens logged as (step + 1) * 65,536


def test_a_run_without_tokens_is_left_out_with_a_reason(seeds_store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    at = _open(seeds_store, monkeypatch, [SEEDS[0], "no-tokens"])
    at.radio(key="cmp_axis").set_value("tokens").run()
    assert "no-tokens logged no `tokens`" in at.warning[0].value
    assert list(at.dataframe[0].value["line"]) == [SEEDS[0]]
    at.selectbox(key="cmp_metric").set_value("grad_norm").run()
    assert "**no-tokens** has no `grad_norm`" in at.warning[0].value
