"""Runs page (AppTest): the catalog's values, search and status filters, selection, delete, empty store."""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd  # type: ignore[import-untyped]
import pytest
from streamlit.testing.v1 import AppTest

from ingest.services.run_analyses import open_analysed_store
from ingest.store import Store
from tests.conftest import SLOW_RANK, SMALL_RUN, RunSpec, open_page, write_run
from tests.real_runs import RUNS, import_real_runs


def _table(at: AppTest) -> pd.DataFrame:
    return at.dataframe(key="runs_table").value


def test_catalog_shows_the_runs_values(app_store: Store) -> None:
    at = open_page("runs").run()
    assert not at.exception
    row = _table(at).set_index("name").loc[SMALL_RUN]
    loss = app_store.read_series(SMALL_RUN, "loss")
    # the generated run states no planned steps: it "ended" at its last step (it was "finished" before #20)
    assert row["status"] == "ended at step 1999" and row["steps"] == 2000 and row["ranks"] == 4
    assert row["last loss"] == pytest.approx(float(loss.values[-1])) and row["last loss step"] == 1999
    summary = app_store.spike_summary()[SMALL_RUN]
    assert row["spikes"] == summary["n_spikes"] >= 1
    assert row["worst spike (x)"] == pytest.approx(summary["worst_ratio"])
    straggler = re.search(rf"straggler: rank {SLOW_RANK} step_time_s \+(\d+)% vs the median", row["alerts"])
    assert straggler and 25 <= int(straggler.group(1)) <= 35  # 1.3x slower: about +30 %
    assert "test" in row["tags"]


def test_search_and_status_filter(own_app_store: Store) -> None:
    write_run(own_app_store, RunSpec(name="other-run", per_rank=False, seed=5))
    at = open_page("runs").run()
    assert sorted(_table(at)["name"]) == ["other-run", SMALL_RUN]
    at.text_input(key="runs_search").input("other").run()
    assert list(_table(at)["name"]) == ["other-run"]
    at.text_input(key="runs_search").input("").run()
    at.multiselect(key="runs_status").set_value(["live"]).run()
    assert _table(at).empty
    assert any("0 of 2 runs" in c.value for c in at.caption)
    at.multiselect(key="runs_status").set_value([]).run()
    other = _table(at).set_index("name").loc["other-run"]
    assert pd.isna(other["ranks"])  # no per-rank data: a dash, not "0 ranks"
    assert at.dataframe(key="runs_table").proto.placeholder == "—"
    at.checkbox(key="runs_alerts").check().run()
    assert list(_table(at)["name"]) == [SMALL_RUN]  # the run without per-rank data has no straggler alert


def test_selecting_runs_opens_and_compares(own_app_store: Store) -> None:
    write_run(own_app_store, RunSpec(name="second", seed=3))
    at = open_page("runs").run()
    at.session_state["runs_table"] = {"selection": {"rows": [0, 1], "columns": []}}
    at.run()
    assert not at.exception
    assert at.session_state["selected_run"] == SMALL_RUN
    assert at.session_state["compare_runs"] == [SMALL_RUN, "second"]
    chart = at.get("plotly_chart")[0].proto.spec
    assert f"{SMALL_RUN}: loss" in chart


def test_delete_needs_confirmation(own_app_store: Store) -> None:
    write_run(own_app_store, RunSpec(name="doomed", per_rank=False, seed=7))
    at = open_page("runs").run()
    names = list(_table(at)["name"])
    at.session_state["runs_table"] = {"selection": {"rows": [names.index("doomed")], "columns": []}}
    at.run()
    assert at.button(key="runs_delete").disabled
    at.checkbox(key="runs_delete_confirm").check().run()
    at.button(key="runs_delete").click().run()
    assert not at.exception
    assert [r.name for r in own_app_store.list_runs()] == [SMALL_RUN]
    assert any("Deleted doomed" in s.value for s in at.success)
    assert not own_app_store.run_dir(SMALL_RUN).parent.joinpath("run=doomed").exists()


def test_empty_store_explains_what_to_do(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STABSCOPE_STORE", str(tmp_path / "empty"))
    open_analysed_store(tmp_path / "empty")
    at = open_page("runs").run()
    assert not at.exception
    assert "No runs in this store yet" in at.info[0].value


@pytest.fixture(scope="module")
def real_store(tmp_path_factory: pytest.TempPathFactory) -> Store:
    return import_real_runs(tmp_path_factory.mktemp("real") / "store")


def test_runs_that_ended_before_their_planned_steps_say_where(
    real_store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("STABSCOPE_STORE", str(real_store.root))
    at = open_page("runs").run()
    assert not at.exception
    table = _table(at).set_index("name")
    assert table.loc["megds", "status"] == "stopped at 62 of 1000"  # "iteration 62/ 1000" was its last line
    assert table.loc["mixtral-h100", "status"] == "stopped at 22685 of 24000"  # "nan" from 22690 on
    # main.log states no planned steps; its last training loss is s:19559, the final val line s:19560
    assert table.loc["llmc", "status"] == "ended at step 19560 (the final val_loss, after the last training step 19559)"
    last_train = re.findall(r"^s:(\d+) trl:(\S+)", RUNS["llmc"].read_text(), re.M)[-1]  # s:19559 trl:3.2217
    assert table.loc["llmc", "last loss step"] == int(last_train[0])
    assert table.loc["llmc", "last loss"] == pytest.approx(float(last_train[1]))
    assert table.loc["mixtral-h100", "last loss step"] == 22685
    at.multiselect(key="runs_status").set_value(["stopped early"]).run()
    assert sorted(_table(at)["name"]) == ["megds", "mixtral-h100"]
    at.multiselect(key="runs_status").set_value(["ended", "finished"]).run()
    assert list(_table(at)["name"]) == ["llmc"]


def test_planned_steps_the_user_sets_change_the_status_at_once(own_app_store: Store) -> None:
    at = open_page("runs").run()
    assert _table(at).set_index("name").loc[SMALL_RUN, "status"] == "ended at step 1999"
    own_app_store.update_meta(SMALL_RUN, {"planned_steps": 5000})
    at.run()
    assert _table(at).set_index("name").loc[SMALL_RUN, "status"] == "stopped at 1999 of 5000"
    own_app_store.update_meta(SMALL_RUN, {"planned_steps": 2000})  # steps 0..1999: all 2,000 of them
    at.run()
    assert _table(at).set_index("name").loc[SMALL_RUN, "status"] == "finished"


def test_the_status_filter_offers_every_status_a_listed_run_can_have(own_app_store: Store) -> None:
    """Each first word ``ingest.services.run_status`` writes has a filter option, "damaged" included; "empty" needs
    none, since a run with no committed generation is not listed."""
    from ingest.services.run_status import STATUS_WORDS

    at = open_page("runs").run()
    options = {str(o).split()[0] for o in at.multiselect(key="runs_status").options}
    assert options == set(STATUS_WORDS) - {"empty"}
