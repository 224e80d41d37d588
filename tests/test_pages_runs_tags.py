"""Runs page (AppTest): the tags filter and the notes column, from tags and notes set as with
``stabscope meta RUN tags=a,b notes=...``."""

from __future__ import annotations

from ingest.run_meta import parse_assignments
from ingest.store import Store
from tests.conftest import SMALL_RUN, RunSpec, open_page, write_run


def test_runs_filter_by_tag_and_show_notes(own_app_store: Store) -> None:
    write_run(own_app_store, RunSpec(name="tagged", per_rank=False, seed=5))
    write_run(own_app_store, RunSpec(name="also-tagged", per_rank=False, seed=6))
    for name, pairs in {
        "tagged": ["tags=sweep,lr-high", "notes=peak LR 3e-3, clip 1.0"],
        "also-tagged": ["tags=sweep"],
    }.items():
        updates, removals = parse_assignments(pairs)
        own_app_store.update_meta(name, updates, removals)
    at = open_page("runs").run()
    assert not at.exception
    options = at.multiselect(key="runs_tags").options
    assert {"lr-high", "sweep", "test"} <= set(options) and options == sorted(options)  # the generated runs: "test"
    table = at.dataframe(key="runs_table").value.set_index("name")
    assert table.loc["tagged", "notes"] == "peak LR 3e-3, clip 1.0" and table.loc[SMALL_RUN, "notes"] == ""
    assert table.loc["tagged", "tags"] == "lr-high, sweep"
    at.multiselect(key="runs_tags").set_value(["sweep"]).run()
    assert sorted(at.dataframe(key="runs_table").value["name"]) == ["also-tagged", "tagged"]
    at.multiselect(key="runs_tags").set_value(["sweep", "lr-high"]).run()
    assert list(at.dataframe(key="runs_table").value["name"]) == ["tagged"]
    at.multiselect(key="runs_tags").set_value([]).run()
    at.text_input(key="runs_search").input("clip 1.0").run()  # the search reads the notes too
    assert list(at.dataframe(key="runs_table").value["name"]) == ["tagged"]
