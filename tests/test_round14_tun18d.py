"""Issue #32 (docs/diagnosis.md, "Findings"): rules for batch 14's false statements, each test failing before its
fix."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import numpy as np

from ingest.formats import read_log
from stab_core.analysis import analyze_run
from stab_core.runview import RunView, Series
from stab_core.throughput import detect_throughput_drops
from tests.test_statement_eval import GOLDEN, claim, incident, incident_verdicts


def test_a_slow_span_opening_the_run_that_then_speeds_up_is_no_loss() -> None:
    """A run at ~12k tokens/s for its first 40 % that is relaunched at ~25k for the rest never held the fast
    level before the slow span: its rate rose, nothing fell. Before: "throughput loss: 25k -> 12k over
    steps 0-3990, back to its norm after it". A drop after a level the run held is still said."""
    rng = np.random.default_rng(3)
    steps = np.arange(0, 10_000, 10, dtype=np.int64)
    tokens = np.where(steps < 4_000, 12_000.0, 25_000.0) * (1 + rng.normal(0, 0.02, steps.size))
    assert detect_throughput_drops(steps, tokens, "throughput_tok_s") == []
    tokens[700:800] *= 0.5  # a lasting slow span after the fast level held
    (drop,) = detect_throughput_drops(steps, tokens, "throughput_tok_s")
    assert 6_900 <= drop.start <= 7_100 and drop.recovered


def _line(step: int, loss: float) -> str:
    return f"step: {step:5d}  loss: {loss:.5f}  grad_norm:  0.3000  memory: 10.00GiB(20.00%)  tps: 1,000  mfu: 30.00%\n"


def _attempt_analysis(tmp_path: Path, end_level: float) -> list[dict[str, Any]]:
    """A run at ~2.0 whose attempt from step 301 restarts at 4.0 and decays to ``end_level`` by 400, when it
    is replaced by a resume from 301 that is normal over the same steps."""
    rng = np.random.default_rng(1)
    lines = [_line(s, 2.0 + 0.05 * rng.standard_normal()) for s in range(1, 301)]
    decay = np.geomspace(4.0, end_level, 100)
    lines += [_line(s, v + 0.02 * rng.standard_normal()) for s, v in zip(range(301, 401), decay, strict=True)]
    lines += [_line(s, 2.0 + 0.05 * rng.standard_normal()) for s in range(301, 601)]
    path = tmp_path / "train.log"
    path.write_text("".join(lines))
    parsed = read_log([path])
    steps, values = parsed.series("loss")
    view = RunView(name="r", series={"loss": Series(steps, values)}, events=tuple(parsed.events))
    return [s for s in analyze_run(view).spike_dicts() if s.get("abandoned_attempt")]


def test_a_loss_coming_back_when_a_resume_replaced_its_attempt_did_not_diverge(tmp_path: Path) -> None:
    """An attempt a resume replaced ends at the relaunch, not at the run's fate: a loss that had fallen back
    more than half-way from its peak (4.0 -> 2.3 against a level of 2.0) is no divergence and "Diverged" is
    not said; whether it would have come back all the way is unknown. Before: severity divergence,
    "Diverged: it has not come back to its level." One still up at the attempt's end keeps the divergence."""
    (found,) = _attempt_analysis(tmp_path, 2.3)
    assert found["severity"] == "spike"
    (recovery,) = [c for c in found["claims"] if c["kind"] == "recovery"]
    assert recovery["text"].startswith("Not back by step 400, where a resume from step 301 replaced this attempt")
    assert "iverge" not in json.dumps([c["text"] for c in found["claims"]])
    (still_up,) = _attempt_analysis(tmp_path, 3.8)
    assert still_up["severity"] == "divergence"


def test_a_sweep_run_nan_from_its_own_first_record_is_non_finite_from_the_start() -> None:
    """Scorer: ``facts.nonfinite_from_start`` is about the file (its first run is finite); the golden run that
    states its first and last loss non-finite is non-finite from its start, so "Nothing to recover to: the
    run was never finite" is true for it. Before: false by the file-level fact."""
    never = claim("recovery", "Nothing to recover to: the run was never finite, so it never held a level.")
    golden = copy.deepcopy(GOLDEN)
    golden["import"]["runs"][0]["first"] = {"loss": float("nan")}
    golden["import"]["runs"][0]["last"] = {"loss": float("nan")}
    assert golden["facts"]["nonfinite_from_start"] is False
    assert incident_verdicts(incident(700, never), golden=golden)[1:] == ["true"]
    golden["import"]["runs"][0]["first"] = {"loss": 7.5}  # finite at its first record: the fact stands
    assert incident_verdicts(incident(700, never), golden=golden)[1:] == ["false"]
