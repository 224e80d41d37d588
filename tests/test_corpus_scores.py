"""The corpus scorer's parts that need no corpus (bench.corpus_eval, bench.corpus_scores): the baselines
scored on each run of a multi-run log, and the totals split per golden batch. Synthetic series and
scores with known answers."""

from __future__ import annotations

from typing import Any

import numpy as np

from bench.corpus_eval import baseline_scores, samples_before
from bench.corpus_scores import LogScore, batch_label, detector_table, split_table, split_totals


def series(n: int, spike_at: int | None = None, first_step: int = 0) -> dict[str, tuple[Any, Any]]:
    """A flat noisy loss of ``n`` steps from ``first_step``, 10x its level at sample ``spike_at``."""
    rng = np.random.default_rng(0)
    values = 3.0 + 0.01 * rng.standard_normal(n)
    if spike_at is not None:
        values[spike_at] = 30.0
    return {"loss": (np.arange(first_step, first_step + n, dtype=np.int64), values)}


GOLDEN: dict[str, Any] = {
    "name": "two_runs",
    "incidents": {
        "must_find": [{"step": 200, "metric": "loss", "tolerance_steps": 2}],
        "may_find": [],
        "must_not_flag": [],
        "healthy": False,
    },
}


def test_baselines_score_every_run_of_a_multi_run_log() -> None:
    # the spike is in the first run; the last run (a later resume, steps 1000-1299) is healthy
    stored = [{"run": "a", "series": series(300, spike_at=200)}, {"run": "b", "series": series(300, first_step=1000)}]
    scores = baseline_scores(GOLDEN, stored)
    llmc, olmo = scores["llm.c (z > 7 over 128)"], scores["OLMo-core (mean + 6 sigma over 128)"]
    assert (llmc["required"], llmc["found"], llmc["invented"]) == (1, 1, 0)
    assert (olmo["required"], olmo["found"], olmo["invented"]) == (1, 1, 0)
    # Megatron's rule flags >= 10x the max of the first 100 samples: 30 >= 10 * ~3.03 is false
    assert scores["Megatron-LM (10x max of first 100)"]["found"] == 0
    # run by run: the first run's 128-sample window does not carry into the second, whose own first 128
    # samples flag nothing
    assert baseline_scores(GOLDEN, stored[1:])["llm.c (z > 7 over 128)"]["found"] == 0


def test_a_spike_before_the_window_fills_is_not_seen() -> None:
    early = [{"run": "a", "series": series(300, spike_at=100)}]
    truth = {"step": 100, "metric": "loss", "tolerance_steps": 2}
    golden = {**GOLDEN, "incidents": {**GOLDEN["incidents"], "must_find": [truth]}}
    scores = baseline_scores(golden, early)
    assert scores["llm.c (z > 7 over 128)"]["found"] == 0
    assert scores["OLMo-core (mean + 6 sigma over 128)"]["found"] == 0
    # the samples each rule had seen: 98 (steps 0-97, before the tolerance window 98-102), in the run
    # that spans the step, not the other run's
    other = {"run": "b", "series": series(500, first_step=1000)}
    assert samples_before([*early, other], truth) == 98
    assert samples_before([*early, other], {"step": 1400, "tolerance_steps": 0}) == 400
    assert samples_before([*early, other], {"step": 5000, "tolerance_steps": 0}) == 0  # no run spans it
    # non-finite samples are not seen (the rules leave them out)
    nan = series(300)
    nan["loss"][1][:50] = np.nan
    assert samples_before([{"run": "c", "series": nan}], truth) == 48


def score(name: str, batch: str, tuned_on: bool, required: int, found: int, samples: list[int]) -> LogScore:
    out = LogScore(name, tuned_on=tuned_on, batch=batch, required=required, found=found)
    out.required_samples_before = samples
    return out


def test_totals_per_golden_batch() -> None:
    scores = [
        score("bs_x", "old", True, 2, 2, [10, 300]),
        score("a_x", "6", False, 1, 0, [0]),
        score("c_x", "8", False, 1, 1, [128]),
        score("b_x", "7", False, 0, 0, []),
    ]
    assert [batch_label(g) for g in ({"batch": 8}, {})] == ["8", "old"]
    t = split_totals(scores)
    assert list(t) == ["all", "held_out", "tuned_on", "batch_old", "batch_6", "batch_7", "batch_8"]
    assert (t["batch_old"]["logs"], t["batch_old"]["required_incidents"], t["batch_old"]["found"]) == (1, 2, 2)
    assert (t["batch_6"]["recall"], t["batch_7"]["recall"], t["batch_8"]["recall"]) == (0.0, None, 1.0)
    assert t["held_out"]["logs"] == 3 and t["tuned_on"]["logs"] == 1
    assert [t[w]["required_with_baseline_window"] for w in ("all", "batch_old", "batch_6", "batch_8")] == [2, 1, 0, 1]
    summary = split_table(scores)
    assert "| | all | held out | tuned on | batch old | batch 6 | batch 7 | batch 8 |" in summary
    found = "| required incidents found (recall) | 3/4 (0.75) | 1/2 (0.50) | 2/2 (1.00) | 2/2 (1.00) | 0/1 (0.00) |"
    assert found in summary
    assert "| StabScope | batch 8 | 1.00 | 1 / 1 | 0 | 0 |" in detector_table(scores)


def test_a_throughput_in_samples_per_second_is_the_throughput_its_golden_names() -> None:
    """A golden whose run logs Megatron's ``samples/sec`` lists ``throughput`` with ``median_throughput`` keyed
    ``samples_per_s``: the stored ``samples_per_s`` is that throughput (tokens per second would need the sequence
    length); a run that stores neither still misses it."""
    from bench.corpus_eval import _throughput_named

    want = {"metrics": ["loss", "throughput"], "median_throughput": {"samples_per_s": 32.6}}
    assert _throughput_named("throughput", {"loss": None, "samples_per_s": None}, want)
    assert _throughput_named("throughput", {"samples_per_sec": None}, want)  # 'per second' however it is spelled
    assert not _throughput_named("throughput", {"loss": None}, want)
    assert not _throughput_named("throughput", {"samples_per_s": None}, {"median_throughput": None})
    assert not _throughput_named("loss", {"samples_per_s": None}, want)
