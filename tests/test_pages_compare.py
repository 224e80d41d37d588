"""Compare page (AppTest): seeds grouped into a mean with a min/max or std band, step or token alignment."""

from __future__ import annotations

import re

import numpy as np
import pandas as pd  # type: ignore[import-untyped]
import pytest
from streamlit.testing.v1 import AppTest

from ingest.store import Store
from tests.conftest import SMALL_RUN, RunSpec, open_page, write_run
from tests.real_runs import RUNS, import_real_runs

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


@pytest.fixture(scope="module")
def real_store(tmp_path_factory: pytest.TempPathFactory) -> Store:
    return import_real_runs(tmp_path_factory.mktemp("real") / "store")


def test_compare_agrees_with_runs_and_its_best_is_smoothed(real_store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    text = RUNS["llmc"].read_text()
    train = [(int(s), float(v)) for s, v in re.findall(r"^s:(\d+) trl:(\S+)", text, re.M)]
    val = [float(v) for v in re.findall(r"^s:\d+ tel:(\S+)", text, re.M)]
    at = _open(real_store, monkeypatch, ["llmc", "megds"])
    assert not at.exception
    row = at.dataframe[0].value.set_index("line").loc["llmc"]
    assert (row["last loss step"], row["final loss"]) == (19559, pytest.approx(3.2217)) == train[-1]
    runs_page = open_page("runs").run()
    runs_row = runs_page.dataframe(key="runs_table").value.set_index("name").loc["llmc"]
    assert (row["last loss step"], row["final loss"]) == (runs_row["last loss step"], runs_row["last loss"])
    # best: the lowest 50-value rolling median (3.2575), not the luckiest batch (3.1022 at step 18017)
    losses = pd.Series([v for _, v in train])
    assert row["best loss (rolling median of 50)"] == pytest.approx(losses.rolling(50).median().min())
    assert row["best loss (rolling median of 50)"] > losses.min() + 0.1
    assert row["best val_loss"] == pytest.approx(min(val))  # 3.2722, the last eval
    assert at.dataframe[0].value.set_index("line").loc["megds", "last loss step"] == 62
