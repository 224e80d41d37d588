"""A run is compared with the other runs of its log file only when the settings the file states for
them agree (issue #32, claims5 item 2): markdown notes that narrate their runs (a sentence between two
excerpts saying what changed, ``Using device: mps`` then ``cuda``, ``1 epoch = 330 batches`` then 20)
hold different configurations, and "X% slower than its siblings" would be false; notes of a sweep
(runs separated by configuration lines such as ``TP=4/PP=12/MBS=1``) are compared as before. Notes of
both shapes, written here, imported as a user would."""

from __future__ import annotations

from pathlib import Path

import pytest

from ingest.formats.run_settings import settings_by_run, stated_settings
from ingest.importing.importer import import_logs
from ingest.services.run_analyses import open_analysed_store
from ingest.services.run_findings import stored_findings


def _excerpt(tokens_per_s: float, head: list[str]) -> list[str]:
    rows = [
        f"step {i}, loss: {10.0 - 0.05 * i:.4f}, time: {16384 / tokens_per_s * 1000:.2f} ms, "
        f"tokens/sec: {tokens_per_s * (1 + 0.001 * (i % 3)):.2f}"
        for i in range(40)
    ]
    return ["```", *head, *rows, "```", ""]


def _gaps(tmp_path: Path, text: str) -> dict[str, dict | None]:
    path = tmp_path / "notes.md"
    path.write_text(text)
    store = open_analysed_store(tmp_path / "store")
    report = import_logs(store, [path], run="notes")[0]
    names = [report["run"]] + [s["run"] for s in report.get("segments") or []]
    return {n: stored_findings(store, store.run_info(n)).get("throughput_siblings") for n in names}


def test_notes_that_narrate_changes_compare_no_run_with_another(tmp_path: Path) -> None:
    lines = ["# Training GPT-2 from scratch", ""]
    lines += ["Timing the training loop on the laptop at tf32 precision", ""]
    lines += _excerpt(10_000, ["Using device: mps", "1 epoch = 330 batches"])
    lines += ["Switched to cuda and trained the model with bf16 precision", ""]
    lines += _excerpt(85_000, ["Using device: cuda", "1 epoch = 20 batches"])
    lines += ["Added torch.compile() to speed up the model training", ""]
    lines += _excerpt(90_000, ["Using device: cuda", "1 epoch = 20 batches"])
    gaps = _gaps(tmp_path, "\n".join(lines) + "\n")
    assert len(gaps) == 3
    assert all(gap is None for gap in gaps.values())  # main: the mps run -89% against its 2 "siblings"


def test_runs_of_a_sweep_are_still_compared(tmp_path: Path) -> None:
    lines = ["# Reshaping experiments", "", "These are the results for resuming from the same checkpoint", ""]
    for layout, rate in (("TP=4/PP=12/MBS=1", 40_000), ("TP=4/PP=24/MBS=1", 41_000), ("TP=1/PP=72/MBS=1", 20_000)):
        lines += [layout, "", *_excerpt(rate, [])]
    gaps = _gaps(tmp_path, "\n".join(lines) + "\n")
    slow = [gap for gap in gaps.values() if gap is not None]
    assert len(slow) == 1
    assert slow[0]["relation"] == "the same log file" and slow[0]["change_pct"] == pytest.approx(-50.6, abs=1)


def test_a_run_the_notes_state_no_settings_for_has_no_sibling() -> None:
    said = stated_settings(["Using device: cuda", "1 epoch = 20 batches", "Changed n_layers from 6 to 12"])
    assert said == [
        (1, "device", "cuda"),
        (2, "batches per epoch", "20"),
        (3, "model n_layer", "12"),
    ]
    # settings at seq 5 (inside run 0), 12 (between runs 0 and 1: run 1's) and 40 (after the last run)
    runs = settings_by_run([(5, "device", "mps"), (12, "device", "cuda"), (40, "device", "cpu")], [(0, 10), (15, 30)])
    assert runs == [{"device": "mps"}, {"device": "cuda"}]
