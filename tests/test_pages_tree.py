"""Decision tree page (AppTest): a detected spike's path with its evidence, and the manual walk."""

from __future__ import annotations

from pathlib import Path

import pytest

from ingest.services.run_analyses import open_analysed_store
from ingest.store import Store
from stab_core.decision_tree import DECISION_TREE
from tests.conftest import open_page
from tests.real_runs import import_real_runs

# What a step placeholder becomes when a walk by hand has no run to take the step from.
PLACEHOLDER_TEXTS = ("step of the spike", "step of the transition", "rank the outlier", "{", "}")


def _dot(at) -> str:  # type: ignore[no-untyped-def]
    return str(at.get("graphviz_chart")[0].proto.spec)


def _text(at) -> str:  # type: ignore[no-untyped-def]
    return " ".join(m.value for m in at.markdown)


def test_detected_spike_path_and_evidence(app_store: Store) -> None:
    at = open_page("tree").run()
    assert not at.exception
    spike = app_store.spikes("small")[0]
    text = _text(at)
    for visit in spike["path"]:  # each visited question in the walk, with its answer as a badge
        node = DECISION_TREE.node(visit["node"])
        assert f"**{node.number}. {node.title}** :" in text and f"-badge[{visit['answer']}]" in text
    # the numbers behind each answer are printed in the walk, one code block per visited question
    codes = [c.value for c in at.code]
    assert len(codes) == len(spike["path"])
    assert "nonfinite_loss = 0" in codes[0]  # node 1's evidence
    unasked = [n for n in DECISION_TREE.nodes if n.id not in {v["node"] for v in spike["path"]}]
    assert text.count(":gray-badge[not asked]") == len(unasked)
    if spike["cause"] == "unknown":  # no cause held: no "confidence" beside it, the verdict in words
        assert "Cause **`unknown`**" not in text
        assert any(s in text for s in (spike.get("summary") or "-", "Cause not identified", "No known cause matched"))
    else:
        assert f"Cause **`{spike['cause']}`**" in text
    # the whole tree stays one click away, its path drawn (the evidence is in the walk, not in notes)
    dot = _dot(at)
    for visit in spike["path"]:  # questions are rounded boxes (a third of a diamond's width: readable text)
        assert f"{visit['node']} [shape=box" in dot and f"[{visit['answer']}]" in dot
    assert f"{spike['leaf']} [shape=box" in dot and 'fillcolor="#f4cccc"' in dot  # the leaf reached is filled
    assert "shape=note" not in dot


def test_manual_walk_stops_at_the_first_yes() -> None:
    at = open_page("tree").run()
    at.radio(key="tree_mode").set_value("Walk it by hand").run()
    at.radio(key="tree_q_numerical").set_value("no").run()
    at.radio(key="tree_q_lr_transition").set_value("yes").run()
    assert not at.exception
    asked = [r.key for r in at.radio if r.key and r.key.startswith("tree_q_")]
    assert asked == ["tree_q_numerical", "tree_q_lr_transition"]  # node 3 is never asked
    text = _text(at)
    assert "Scenario A: LR jump at a transition" in text and "Cause **`lr_transition`**" in text
    # by hand there is no step: "Add a warmup restart at the transition (step ...)" is left out,
    # the advice that needs none stays
    assert "size restart_warmup at 1/4-1/3 of the initial warmup" in text.lower()
    assert not any(p in text.split("What to do", 1)[1] for p in PLACEHOLDER_TEXTS)
    assert "penwidth=3, color=red" in _dot(at)


def test_manual_walk_to_a_diverged_data_outlier() -> None:
    at = open_page("tree").run()
    at.radio(key="tree_mode").set_value("Walk it by hand").run()
    for node in ("numerical", "lr_transition", "rank_concentration"):
        at.radio(key=f"tree_q_{node}").set_value("no").run()
    at.radio(key="tree_q_router").set_value("unknown").run()
    at.radio(key="tree_q_snr_collapse").set_value("yes").run()
    at.radio(key="tree_recovered").set_value("diverged").run()
    text = _text(at)
    assert "Scenario B: data-outlier resonance, diverged" in text
    assert "Skip the next 200-500 batches of the data stream" in text
    assert "before step" not in text  # the rollback advice needs the spike's step: not shown by hand
    assert "confidence **" in text
    assert any("MoE runs" in c.value for c in at.caption)  # what would settle the unknown node 4


def test_manual_walk_with_every_answer_no_says_nothing_matched() -> None:
    at = open_page("tree").run()
    at.radio(key="tree_mode").set_value("Walk it by hand").run()
    for node in DECISION_TREE.nodes:
        at.radio(key=f"tree_q_{node.id}").set_value("no").run()
    assert not at.exception
    text = _text(at)
    assert "no known cause matched" in text.lower()
    assert "confidence **50%**" not in text
    what_to_do = text.split("What to do", 1)[1] if "What to do" in text else ""
    assert not any(p in what_to_do for p in PLACEHOLDER_TEXTS)
    assert "missing signals listed" not in what_to_do  # nothing is missing: every answer was given
    assert text.count("-badge[no]") == len(DECISION_TREE.nodes)


def test_no_spikes_yet_still_draws_the_tree(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STABSCOPE_STORE", str(tmp_path / "empty"))
    open_analysed_store(tmp_path / "empty")
    at = open_page("tree").run()
    assert not at.exception
    assert "No detected spikes in the store yet" in at.info[0].value
    assert 'snr_collapse [shape=box, style="rounded"' in _dot(at)


def test_real_runs_incidents_read_in_words(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = import_real_runs(tmp_path / "real")
    monkeypatch.setenv("STABSCOPE_STORE", str(store.root))
    at = open_page("tree")
    at.session_state["selected_run"] = "megds"  # a perf test that blew up in its first steps
    at.run()
    assert not at.exception
    spike = store.spikes("megds")[0]
    leaf = spike["leaf"]
    title = (
        DECISION_TREE.leaf(leaf).title if DECISION_TREE.is_leaf(leaf) else leaf.removeprefix("leaf_").replace("_", " ")
    )
    assert "No known cause matched" not in _text(at)  # only node 1 was asked: nothing was ruled out
    assert f"### {title}".lower() in _text(at).lower()  # a verdict the tree has no leaf for reads in words
    assert "{" not in _text(at) and "step of the spike" not in _text(at)
    assert at.code[0].value.startswith("spike_nonfinite = False")  # node 1's numbers, readable


def test_a_run_nan_from_its_first_logged_step_is_not_called_diverged(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue #32 item 4 on the page: a word_language_model console whose loss is nan on every line from
    the first (batch 200) reads "non-finite from the first step", never "diverged"."""
    from ingest.importing.importer import import_logs

    lines = [
        f"| epoch   1 | {b:5d}/ 2983 batches | lr 20.0000 | ms/batch 11.50 | loss   nan | ppl      nan"
        for b in range(200, 3000, 200)
    ]
    log = tmp_path / "wlm_nan.md"
    log.write_text("\n".join(lines) + "\n")
    store = open_analysed_store(tmp_path / "store")
    import_logs(store, [log], run="wlm-nan")
    monkeypatch.setenv("STABSCOPE_STORE", str(store.root))
    at = open_page("tree").run()
    assert not at.exception
    caption = at.caption[0].value  # the incident's line (later captions describe the questions not asked)
    assert caption.startswith("loss spike, steps 200")
    assert "non-finite from the first step" in caption and "diverged" not in caption.lower()
