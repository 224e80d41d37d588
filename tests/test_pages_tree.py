"""Decision tree page (AppTest): a detected spike's path with its evidence, and the manual walk."""

from __future__ import annotations

from pathlib import Path

import pytest

from ingest.store import Store
from tests.conftest import open_page


def _dot(at) -> str:  # type: ignore[no-untyped-def]
    return str(at.get("graphviz_chart")[0].proto.spec)


def test_detected_spike_path_and_evidence(app_store: Store) -> None:
    at = open_page("tree").run()
    assert not at.exception
    spike = app_store.spikes("small")[0]
    dot = _dot(at)
    for visit in spike["path"]:
        assert f"{visit['node']} [shape=diamond" in dot
        assert f"[{visit['answer']}]" in dot  # each visited node shows its answer
    assert f"{spike['leaf']} [shape=box" in dot and 'fillcolor="#f4cccc"' in dot  # the leaf reached is filled
    assert "ev_numerical [shape=note" in dot and "nonfinite_loss = 0" in dot  # evidence beside node 1
    text = " ".join(m.value for m in at.markdown)
    assert f"Cause **`{spike['cause']}`**" in text
    assert [e.label.split(" → ")[1] for e in at.expander] == [p["answer"] for p in spike["path"]]


def test_manual_walk_stops_at_the_first_yes() -> None:
    at = open_page("tree").run()
    at.radio(key="tree_mode").set_value("Walk it by hand").run()
    at.radio(key="tree_q_numerical").set_value("no").run()
    at.radio(key="tree_q_lr_transition").set_value("yes").run()
    assert not at.exception
    asked = [r.key for r in at.radio if r.key and r.key.startswith("tree_q_")]
    assert asked == ["tree_q_numerical", "tree_q_lr_transition"]  # node 3 is never asked
    text = " ".join(m.value for m in at.markdown)
    assert "Scenario A: LR jump at a transition" in text and "Cause **`lr_transition`**" in text
    assert "warmup restart" in text
    assert "penwidth=3, color=red" in _dot(at)


def test_manual_walk_to_a_diverged_data_outlier() -> None:
    at = open_page("tree").run()
    at.radio(key="tree_mode").set_value("Walk it by hand").run()
    for node in ("numerical", "lr_transition", "rank_concentration"):
        at.radio(key=f"tree_q_{node}").set_value("no").run()
    at.radio(key="tree_q_router").set_value("unknown").run()
    at.radio(key="tree_q_snr_collapse").set_value("yes").run()
    at.radio(key="tree_recovered").set_value("diverged").run()
    text = " ".join(m.value for m in at.markdown)
    assert "Scenario B: data-outlier resonance, diverged" in text
    assert "Roll back to a checkpoint ~100 steps before the spike" in text
    assert "confidence **" in text


def test_no_spikes_yet_still_draws_the_tree(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STABSCOPE_STORE", str(tmp_path / "empty"))
    Store(tmp_path / "empty")
    at = open_page("tree").run()
    assert not at.exception
    assert "No detected spikes in the store yet" in at.info[0].value
    assert "snr_collapse [shape=diamond" in _dot(at)
