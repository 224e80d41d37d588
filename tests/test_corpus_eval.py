"""The held-out corpus evaluation (bench.corpus_eval) on the real logs: runs only where
``STABSCOPE_CORPUS`` names the folder holding them (they are not in the repository)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from bench.corpus_eval import evaluate, load_goldens, main, totals

CORPUS = os.environ.get("STABSCOPE_CORPUS")
pytestmark = pytest.mark.skipif(
    not CORPUS or not Path(CORPUS).is_dir(),
    reason="STABSCOPE_CORPUS does not name a corpus folder (the held-out logs live outside the repository; "
    "see tests/corpus/README.md)",
)

# the figures of docs/diagnosis.md ("Held-out corpus") on the code that wrote them: a ratchet, never worse
MAX_IMPORT_FAULTS = 17
MIN_RECALL = 12 / 13
MAX_SHOWN_ON_HEALTHY = 116


def test_corpus_scores_hold() -> None:
    goldens = load_goldens()
    scores = evaluate(Path(str(CORPUS)), goldens)
    assert [s.error for s in scores if s.error] == []  # every log present, with the sha256 its golden names
    t = totals(scores)
    assert t["logs"] == len(goldens)
    assert sum(t["import_faults"].values()) <= MAX_IMPORT_FAULTS, t["import_faults"]
    assert t["recall"] >= MIN_RECALL
    assert t["shown_on_healthy"] <= MAX_SHOWN_ON_HEALTHY
    assert t["statements_broken"] == 0
    assert t["quiet_spans_flagged"] == 0


def test_cli_prints_the_table(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--corpus", str(CORPUS)]) == 0
    out = capsys.readouterr().out
    assert "| log | runs stored / in log |" in out and "| StabScope |" in out
