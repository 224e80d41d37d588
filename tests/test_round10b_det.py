"""Round 10b (issue #32): shapes of batch 10 as rules, each on a small synthetic run.

- a grad norm non-finite at every logged step while the loss is finite: the model never trains; there is
  no finite checkpoint to roll back to and no one batch to skip, and nothing "diverged";
- the "Not run" notes of such a run say that every sample is non-finite, not "0 finite samples"."""

from __future__ import annotations

from typing import Any

import numpy as np

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
