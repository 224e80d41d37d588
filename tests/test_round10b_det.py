"""Issue #32 (docs/diagnosis.md, "Lasting rises"): shapes of batch 10 as rules, each on a small synthetic run.

- a grad norm non-finite at every logged step while the loss is finite: the model never trains; there is
  no finite checkpoint to roll back to and no one batch to skip, and nothing "diverged";
- the "Not run" notes of such a run say that every sample is non-finite, not "0 finite samples"."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from bench.run_statement_rules import count_note_verdict
from bench.statement_rules import FALSE, TRUE
from stab_core.analysis import INCIDENT_VERDICT, analyze_run, statements, verdict_words
from stab_core.runview import RunView, Series


def _inf_grads(first_finite: int | None = None) -> RunView:
    """A LoRA-like run logged every 4 steps from 3: loss flat ~2.44 (finite), grad norm inf from the first
    log on (or, with ``first_finite``, finite from that log index: fp16's loss-scale warm-up)."""
    rng = np.random.default_rng(3)
    steps = np.arange(3, 687, 4)
    loss = 2.44 + 0.04 * rng.standard_normal(steps.size)
    grad = np.full(steps.size, np.inf)
    if first_finite is not None:
        grad[first_finite:] = 1.0 + 0.1 * rng.random(steps.size - first_finite)
    lr = np.minimum(2e-4, 8e-6 * (np.arange(steps.size) + 1))
    return RunView("lora", {"loss": Series(steps, loss), "grad_norm": Series(steps, grad), "lr": Series(steps, lr)})


def _items(view: RunView) -> list[dict[str, Any]]:
    return analyze_run(view).spike_dicts()


def test_a_grad_norm_non_finite_from_its_first_log_with_a_finite_loss_is_a_run_that_never_trains() -> None:
    (item,) = [i for i in _items(_inf_grads()) if i["metric"] == "grad_norm"]
    assert item["leaf"] == "leaf_nonfinite_from_start"
    said = " ".join(statements(item, (*INCIDENT_VERDICT, "action")))
    assert "the gradients are non-finite from the first steps" in said.lower()
    assert "the model is not training" in said
    for wrong in ("Roll back to the last", "Skip the offending batch", "iverged"):
        assert wrong not in said
    assert "DIVERGED" not in verdict_words(item)


def test_a_few_non_finite_grad_norms_of_an_fp16_warm_up_keep_the_precision_leaf() -> None:
    """inf at the first 3 logs, then finite: the loss scaler found its scale; the run trains."""
    items = [i for i in _items(_inf_grads(first_finite=3)) if i["metric"] == "grad_norm"]
    assert all(i["leaf"] != "leaf_nonfinite_from_start" for i in items)


def test_the_not_run_notes_say_every_grad_norm_is_non_finite() -> None:
    from stab_core.detectors_not_run import detectors_not_run
    from stab_core.spike_params import SpikeParams

    not_run, reason = detectors_not_run(_inf_grads(), (SpikeParams(), SpikeParams()), 100, None)
    texts = dict(not_run)
    assert texts["grad_norm spikes"].startswith("all 171 grad_norm samples are non-finite")
    assert reason is not None and reason.startswith("no SNR: all 171 grad-norm samples are non-finite")
    assert "0 finite" not in " ".join(texts.values())


def test_the_scorer_judges_all_non_finite_from_the_facts() -> None:
    run = {"records_by_metric": {"loss": 171, "grad_norm": 171}}
    note = "Not run: grad_norm spikes: all 171 grad_norm samples are non-finite: nothing to compare"
    assert count_note_verdict(note, run, {"nonfinite_from_start": True})[0] == TRUE  # type: ignore[index]
    assert count_note_verdict(note, run, {"nonfinite_from_start": False})[0] == FALSE  # type: ignore[index]
    snr = "Not run: snr: no SNR: all 171 grad-norm samples are non-finite; the SNR proxy needs finite ones"
    assert count_note_verdict(snr, run, {"nonfinite_from_start": True})[0] == TRUE  # type: ignore[index]
    assert count_note_verdict(snr.replace("171", "400"), run, {"nonfinite_from_start": True})[0] == FALSE  # type: ignore[index]


def _noisy_cut_off_on_an_outlier(metric: str) -> RunView:
    """A noisy, healthy loss (and grad norm) logged every 10 steps whose last sample is a one-sample
    outlier of ``metric``: the log ends there."""
    rng = np.random.default_rng(5)
    steps = np.arange(10, 4010, 10)
    loss = 0.5 * np.exp(0.15 * rng.standard_normal(steps.size))
    grad = 1.8 * np.exp(0.15 * rng.standard_normal(steps.size))
    (loss if metric == "loss" else grad)[-1] *= 8.0
    return RunView("cut", {"loss": Series(steps, loss), "grad_norm": Series(steps, grad)})


def test_a_one_sample_outlier_on_the_logs_last_step_is_not_a_divergence() -> None:
    from stab_core.analysis import outcome

    for metric in ("loss", "grad_norm"):
        (item,) = [i for i in _items(_noisy_cut_off_on_an_outlier(metric)) if i["peak"] == 4000]
        assert item["severity"] == "spike" and item["diverged"] is False
        assert outcome(item) == "cut off by the log's end"
        said = " ".join(statements(item, (*INCIDENT_VERDICT, "action")))
        assert "iverged" not in said and "DIVERGED" not in verdict_words(item)
        (recovery,) = [c for c in item["claims"] if c["kind"] == "recovery"]
        assert recovery["text"].startswith("The log ends at this sample (step 4000)")


def test_two_trailing_samples_out_stay_a_divergence() -> None:
    """Two samples or more above the level at the end is what a run-end rise needs (END_MIN_SAMPLES)."""
    view = _noisy_cut_off_on_an_outlier("loss")
    loss = view.series["loss"]
    values = loss.values.copy()
    values[-2] = values[-1]
    items = _items(RunView("cut2", {"loss": Series(loss.steps, values)}))
    assert any(i["severity"] == "divergence" for i in items)


def test_a_tree_question_is_not_a_statement_for_must_not_say() -> None:
    """ "Is the loss or grad norm non-finite around the spike ...?" is asked of every incident; the scorer's
    must-not-say check reads what an incident asserts, not the questions asked of it."""
    from bench.corpus_eval import _texts

    item = {
        "path": [{"question": "Is the loss or grad norm non-finite around the spike?", "answer": "no"}],
        "claims": [{"text": "Loss rose to 2.00x its level."}],
    }
    texts = list(_texts([item]))
    assert "Loss rose to 2.00x its level." in texts and not any("non-finite" in t for t in texts)


def test_an_action_whose_premise_failed_is_not_a_statement_for_must_not_say() -> None:
    """An action checked and not said (``holds`` False) stays in the JSON as evidence; it asserts nothing
    (``Claim.words`` is None), so must-not-say does not read it (docs/diagnosis.md, "Lasting rises"); a held one is
    read."""
    from bench.corpus_eval import _texts

    bf16 = "Train in bf16 with fp32 master weights."
    item = {
        "action_evidence": [{"action": bf16, "premise": "fp16_loss_felt", "holds": False}],
        "claims": [
            {"kind": "action", "text": bf16, "holds": False},
            {"kind": "action", "text": "Log the LR.", "holds": None},
        ],
    }
    texts = list(_texts([item]))
    assert bf16 not in texts and "Log the LR." in texts
    item["claims"][0]["holds"] = True
    assert bf16 in list(_texts([item]))


def _per_iteration(shift_from: int, shift_to: int, factor: float, n: int = 3000, seed: int = 7) -> tuple[Any, Any]:
    """A per-iteration loss at ~0.8 whose batches spread it +-40% (lognormal), its level ``factor`` times
    higher over iterations ``shift_from..shift_to``."""
    rng = np.random.default_rng(seed)
    steps = np.arange(n)
    level = np.where((steps >= shift_from) & (steps < shift_to), 0.8 * factor, 0.8)
    return steps, level * np.exp(0.3 * rng.standard_normal(n))


def test_a_lasting_level_rise_of_a_noisy_per_iteration_loss_is_found() -> None:
    from stab_core.level_shifts import level_shifts

    steps, loss = _per_iteration(1500, 1850, 1.3)
    (event,) = level_shifts(steps, loss)
    assert 1450 <= event.start <= 1550 and event.recovered and 1800 <= (event.recovery_step or 0) <= 1950
    items = _items(RunView("noisy", {"loss": Series(steps, loss)}))
    (item,) = [i for i in items if i["start"] <= 1600 and i["until"] >= 1800 and i["severity"] != "blip"]
    # a level is back when the level is, not when one noisy sample dips into the trend's band
    (recovery,) = [c for c in item["claims"] if c["kind"] == "recovery"]
    assert item["loss_recovered_at"] >= 1800 and "1501" not in recovery["text"]


def test_no_level_rise_on_a_noisy_loss_without_one_nor_on_its_last_blocks() -> None:
    from stab_core.level_shifts import level_shifts

    steps, loss = _per_iteration(0, 0, 1.0)
    assert level_shifts(steps, loss) == []
    # a rise over the last 150 iterations only: the last few blocks of a noisy run are no lasting level
    steps, loss = _per_iteration(2850, 3000, 1.5)
    assert level_shifts(steps, loss) == []


def test_a_level_rise_says_the_level_it_held_not_one_batch() -> None:
    """Review item 11 (docs/diagnosis.md, "Lasting rises"): a lasting 1.5x shift under +-30 % noise is said as about
    1.5x (the median of its block medians over the held level), not the 1.9x of its one highest batch."""
    from stab_core.level_shifts import BLOCK, level_shifts

    for seed in range(10):
        rng = np.random.default_rng(seed)
        loss = 1.0 + rng.uniform(-0.3, 0.3, 3000)
        loss[1500:2000] *= 1.5
        (event,) = level_shifts(np.arange(3000), loss)
        assert event.ratio == pytest.approx(1.5, abs=0.1)
        assert event.peak_value == pytest.approx(event.ratio * event.baseline)
        assert event.start <= event.peak < 2000 and (event.peak - event.start) % BLOCK == BLOCK // 2


def test_held_levels_all_at_once_equal_the_per_block_definition() -> None:
    """The held level and wander of every block, computed at once, are the medians the definition takes block by
    block (a median per block in a Python loop was most of a 10^6-step run's analysis)."""
    from stab_core.level_shifts import HELD_BLOCKS, WANDER_BLOCKS, _held_levels
    from stab_core.rolling_baseline import MAD_TO_Z

    med = np.random.default_rng(5).lognormal(0.0, 0.3, 64)
    level_at, wander_at = _held_levels(med)
    for k in range(HELD_BLOCKS + 1, med.size):
        assert level_at[k] == np.median(med[k - HELD_BLOCKS : k])
        changes = np.abs(np.diff(med[max(0, k - WANDER_BLOCKS) : k]))
        assert wander_at[k] == pytest.approx(np.median(changes) / MAD_TO_Z / np.sqrt(2.0), rel=1e-12)
