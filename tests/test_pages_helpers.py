"""The helpers behind the pages (series display, uploads, compare lines, costs, incidents...), with known
answers and round trips."""

from __future__ import annotations

import io
import os
from pathlib import Path

import numpy as np
import pandas as pd  # type: ignore[import-untyped]
import pyarrow.parquet as pq
import pytest
import torch
from streamlit.testing.v1 import AppTest

from ingest.errors import StabScopeError
from ingest.store import SeriesData, Store
from pages.parts import (
    compare_lines,
    incident_view,
    rank_table,
    run_costs,
    scheduler_code,
    series_display,
    store_access,
    uploads,
)
from stab_core.schedulers import lr_at
from stab_core.tree_walk import tree_to_dot
from tests.conftest import SMALL_RUN


def _series(steps: list[int], values: list[float]) -> SeriesData:
    v = np.asarray(values, float)
    return SeriesData("m", np.asarray(steps, np.int64), v, v, v, "run", False)


def test_ema_is_per_step_and_bias_corrected() -> None:
    # Two points with beta b: (b*(1-b)*x0 + (1-b)*x1) / (1 - b**2) = (b*x0 + x1) / (1 + b).
    # One step apart, weight 0.5 per step: b = 0.5 -> (1 + 4) / 1.5.
    np.testing.assert_allclose(series_display.ema(np.array([0, 1]), np.array([2.0, 4.0]), 0.5), [2.0, 10 / 3])
    # Ten steps apart the same weight decays ten times: b = 0.5**10, so almost no smoothing is left.
    b = 0.5**10
    out = series_display.ema(np.array([0, 10]), np.array([2.0, 4.0]), 0.5)
    np.testing.assert_allclose(out, [2.0, (2 * b + 4) / (1 + b)])
    with pytest.raises(ValueError, match="EMA weight"):
        series_display.ema(np.array([0]), np.array([1.0]), 1.0)


@pytest.mark.parametrize(
    ("name", "safe"),
    [("../../etc/passwd", "passwd"), ("..\\win\\boot.ini", "boot.ini"), (".bashrc", "bashrc"),
     ("a b/c d.log", "c_d.log"), ("....", "upload"), ("x..y.csv", "x.y.csv"), ("", "upload")],
)  # fmt: skip
def test_safe_filename_strips_paths(name: str, safe: str) -> None:
    assert uploads.safe_filename(name) == safe


def test_stage_uploads_is_private_bounded_and_unique(monkeypatch: pytest.MonkeyPatch) -> None:
    paths = uploads.stage_uploads([("../evil.csv", b"a"), ("sub/evil.csv", b"b")])
    folder = paths[0].parent
    try:
        assert [p.name for p in paths] == ["evil.csv", "1-evil.csv"]
        assert all(p.parent == folder for p in paths) and [p.read_bytes() for p in paths] == [b"a", b"b"]
        assert os.stat(folder).st_mode & 0o777 == 0o700
    finally:
        for p in paths:
            p.unlink()
        folder.rmdir()
    monkeypatch.setattr(uploads, "MAX_UPLOAD_BYTES", 10)
    with pytest.raises(StabScopeError, match="the limit is"):
        uploads.stage_uploads([("big.log", b"x" * 11)])


def test_rank_outliers_finds_the_straggler_and_the_transient() -> None:
    steps = np.arange(0, 100, 10)
    matrix = np.ones((5, 10))
    matrix[3] = 1.3  # a straggler: 30 % slower in every bucket
    matrix[1, 4] = 5.0  # a transient: 5x in one bucket
    table = rank_table.rank_outliers(np.arange(5), steps, matrix)
    assert list(table["rank"][:2]) == [3, 1]
    straggler = table.iloc[0]
    assert straggler["kind"] == "straggler" and straggler["flagged_pct"] == 100
    assert straggler["deviation_pct"] == pytest.approx(30.0)
    transient = table.iloc[1]
    assert transient["kind"] == "transient" and transient["flagged_pct"] == pytest.approx(10.0)
    assert transient["peak_deviation_pct"] == pytest.approx(400.0) and transient["peak_step"] == 40
    assert set(table["kind"][2:]) == {"normal"}
    assert rank_table.rank_outliers(np.arange(2), steps, matrix[:2]).empty  # no median of 2 ranks


def test_seed_groups_and_their_band() -> None:
    def info(name: str, **meta: object) -> object:
        return type("Info", (), {"name": name, "meta": meta})()

    assert compare_lines.seed_group(info("gpt-seed3")) == "gpt"  # type: ignore[arg-type]
    assert compare_lines.seed_group(info("gpt_s12")) == "gpt"  # type: ignore[arg-type]
    assert compare_lines.seed_group(info("llama-7b")) == "llama-7b"  # type: ignore[arg-type]
    assert compare_lines.seed_group(info("x-seed1", seed_group="sweep-a")) == "sweep-a"  # type: ignore[arg-type]
    x = np.array([0.0, 1.0, 2.0])
    Line = compare_lines.Line
    lines = [Line("a-seed0", x, np.array([1.0, 2.0, 3.0])), Line("a-seed1", x, np.array([3.0, 4.0, 9.0])),
             Line("b", x, np.array([0.0, 0.0, 0.0]))]  # fmt: skip
    groups = {"a-seed0": "a", "a-seed1": "a", "b": "b"}
    grouped = compare_lines.group_lines(lines, groups, "minmax")
    assert [g.label for g in grouped] == ["a (mean of 2)", "b"]
    np.testing.assert_allclose(grouped[0].y, [2.0, 3.0, 6.0])
    assert grouped[0].lower is not None and grouped[0].upper is not None
    np.testing.assert_allclose(grouped[0].lower, np.array([1.0, 2.0, 3.0]))
    np.testing.assert_allclose(grouped[0].upper, np.array([3.0, 4.0, 9.0]))
    std = compare_lines.group_lines(lines, groups, "std")[0]
    np.testing.assert_allclose(std.upper - std.y, [1.0, 1.0, 3.0])  # population std of two values
    shifted = [
        compare_lines.Line("a-seed0", x, np.array([1.0, 1.0, 1.0])),
        compare_lines.Line("a-seed1", x + 2, np.array([3.0] * 3)),
    ]
    both = compare_lines.group_lines(shifted, {"a-seed0": "a", "a-seed1": "a"}, "minmax")[0]
    np.testing.assert_allclose(both.x, [0, 1, 2, 3, 4])
    np.testing.assert_allclose(both.y, [1, 1, 2, 3, 3])  # averaged only where a run has data


def test_shown_frame_round_trips_through_csv_and_parquet() -> None:
    shown = {"loss": _series([0, 1, 2], [3.0, 2.0, 1.0]), "lr": _series([0, 2], [0.1, 0.2])}
    frame = series_display.shown_frame(shown, 0.0)
    assert list(frame["metric"]) == ["loss"] * 3 + ["lr"] * 2
    back = pd.read_csv(io.BytesIO(series_display.to_bytes(frame, "csv")))
    np.testing.assert_allclose(back["value"], [3.0, 2.0, 1.0, 0.1, 0.2])
    table = pq.read_table(io.BytesIO(series_display.to_bytes(frame, "parquet")))
    assert table.column("step").to_pylist() == [0, 1, 2, 0, 2]


def test_full_export_is_the_whole_long_table(app_store: Store) -> None:
    frame = pd.read_csv(io.BytesIO(store_access.full_export(SMALL_RUN, "csv")))
    assert len(frame) == app_store.run_info(SMALL_RUN).n_rows
    assert {"step", "rank", "metric", "value"} <= set(frame.columns)
    table = pq.read_table(io.BytesIO(store_access.full_export(SMALL_RUN, "parquet")))
    assert table.num_rows == len(frame)


def test_priced_spikes_use_the_runs_step_time_and_gpus(app_store: Store) -> None:
    info = app_store.run_info(SMALL_RUN)
    table = run_costs.priced_spikes(info)
    spikes = app_store.spikes(SMALL_RUN)
    assert len(table) == len(spikes) >= 1
    for _, row in table[table["outcome"] == "recovered"].iterrows():
        inputs = run_costs.run_cost(info)
        assert inputs.step_time_s is not None
        hours = row["steps lost"] * inputs.step_time_s * inputs.gpus / 3600
        assert row["GPU-hours lost"] == pytest.approx(hours)
        assert row["USD lost"] == pytest.approx(row["GPU-hours lost"] * inputs.usd_per_gpu_hour)
    assert run_costs.money(0.0078) == "$0.01" and run_costs.money(106_560) == "$106,560"


def test_tree_dot_draws_evidence_beside_the_visited_nodes(app_store: Store) -> None:
    spike = app_store.spikes(SMALL_RUN)[0]
    diagnosis = incident_view.diagnosis_of(spike)
    assert diagnosis.visited_ids()[0] == "numerical" and diagnosis.visited_ids()[-1] == spike["leaf"]
    dot = incident_view.dot_with_evidence(tree_to_dot(diagnosis), diagnosis)
    assert dot.count("shape=note") == sum(bool(incident_view.evidence_text(p["evidence"])) for p in spike["path"])
    assert "{rank=same; numerical; leaf_numerical}" in dot and dot.rstrip().endswith("}")
    assert incident_view.evidence_text({"a": 0.123456, "b": None, "c": 3}) == "a = 0.1235\nc = 3"


def test_scheduler_snippet_builds_the_same_schedule() -> None:
    code = scheduler_code.scheduler_snippet(3000, 200, 60, 3, 0.1, 3e-4)
    scope: dict[str, object] = {}
    exec(code, scope)
    optimizer, scheduler = scope["optimizer"], scope["scheduler"]
    seen = []
    for _ in range(1100):
        seen.append(optimizer.param_groups[0]["lr"])  # type: ignore[attr-defined]
        optimizer.step()  # type: ignore[attr-defined]
        scheduler.step()  # type: ignore[attr-defined]
    np.testing.assert_allclose(seen, lr_at(np.arange(1100), 3000, 200, 60, 3, 0.1, 3e-4), rtol=1e-12)
    assert isinstance(scope["model"], torch.nn.Module)


def test_box_selection_becomes_the_visible_range() -> None:
    def script() -> None:
        import streamlit as st

        from pages.parts.widgets import zoom_to_selection

        st.session_state["chart"] = {"selection": {"box": [{"x": [1210.6, 1100.2]}], "points": [], "lasso": []}}
        zoom_to_selection("chart", "range")
        st.write(f"range {st.session_state['range']}")

    at = AppTest.from_function(script).run()
    assert at.markdown[0].value == "range (1100, 1211)"


def test_parsed_summary_counts_per_metric(tmp_path: Path) -> None:
    from ingest.formats import read_log

    log = tmp_path / "m.csv"
    log.write_text("step,loss,lr\n1,2.5,0.1\n2,nan,0.2\n3,2.0,0.3\n")
    summary = uploads.parsed_summary(read_log([log])).set_index("metric")
    assert summary.loc["loss", "rows"] == 3 and summary.loc["loss", "non-finite"] == 1
    assert summary.loc["loss", "min"] == 2.0 and summary.loc["lr", "last step"] == 3
