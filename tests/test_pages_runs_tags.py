"""Runs page (AppTest): the tags filter and the notes column, from tags and notes set as with
``stabscope meta RUN tags=a,b notes=...``."""

from __future__ import annotations

from ingest.store import Store
from ingest.store.run_meta import parse_assignments
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


def test_runs_filter_by_format_and_date_and_notes_are_saved_from_the_page(own_app_store: Store) -> None:
    import datetime as dt

    write_run(own_app_store, RunSpec(name="noted", per_rank=False, seed=7))
    at = open_page("runs").run()
    assert not at.exception
    assert at.multiselect(key="runs_format").options == ["shards"]  # written through the shard writer
    table = at.dataframe(key="runs_table").value
    assert set(table["format"]) == {"shards"}
    at.multiselect(key="runs_format").set_value(["shards"]).run()
    assert "noted" in list(at.dataframe(key="runs_table").value["name"])
    at.date_input(key="runs_since").set_value(dt.date.today() + dt.timedelta(days=1)).run()
    assert at.dataframe(key="runs_table").value.empty  # nothing was written tomorrow
    at.date_input(key="runs_since").set_value(dt.date.today()).run()
    assert "noted" in list(at.dataframe(key="runs_table").value["name"])

    at.selectbox(key="runs_note_run").set_value("noted").run()
    at.text_area(key="runs_note_text_noted").input("  resumed from step 400 after a node failure ").run()
    at.button(key="runs_note_save").click().run()
    assert not at.exception
    assert own_app_store.run_info("noted").meta["notes"] == "resumed from step 400 after a node failure"
    table = at.dataframe(key="runs_table").value.set_index("name")
    assert table.loc["noted", "notes"] == "resumed from step 400 after a node failure"
    at.text_area(key="runs_note_text_noted").input("").run()
    at.button(key="runs_note_save").click().run()
    assert "notes" not in own_app_store.run_info("noted").meta


def test_run_format_reads_the_catalog_source() -> None:
    from ingest.store.run_meta import run_format

    assert run_format("import:megatron_deepspeed:/a/b.out") == "megatron_deepspeed"
    assert run_format("watch:tensorboard:/logs") == "tensorboard"
    assert run_format("shards:/x/y") == "shards"
    assert run_format("recovered:run=a") == "recovered"
    assert run_format("") == "unknown"
