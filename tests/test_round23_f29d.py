"""Round 23, f29d (issue #32): statements that hold on the log.

No words about a grad norm a run does not log, beyond that it is not logged; a non-finite grad norm on the log's
last sample, the loss finite, is neither diverged nor a reason to move to bf16; a throughput span half of
whose samples ran at the norm is no slower level; a validation incident is back only when every member
that went non-finite is finite again. Series of each shape are written here, not read from the corpus."""

from __future__ import annotations

from typing import Any

import numpy as np

from stab_core.analysis import analyze_run
from stab_core.runview import RunView, Series


def _said(item: dict[str, Any]) -> list[str]:
    """The texts an incident says (claims whose premise held or is unknown)."""
    return [str(c["text"]) for c in item["claims"] if c.get("holds") is not False]


def _early_jump(grad: bool) -> RunView:
    """A loss that falls for 12 samples, jumps 3x at one sample and is back at the next."""
    steps = np.arange(1, 61)
    loss = 6.0 * np.exp(-steps / 30.0) + 2.0
    loss[12] *= 3.0
    series = {"loss": Series(steps, loss)}
    if grad:  # a grad norm logged only from well after the jump
        series["grad_norm"] = Series(steps[30:], np.full(30, 1.0))
    return RunView(name="early", series=series, meta={})


def _early_cause(view: RunView) -> str:
    for item in analyze_run(view).spike_dicts():
        if item["kind"] == "early_instability":
            return next(str(c["text"]) for c in item["claims"] if c["kind"] == "cause")
    raise AssertionError("no early instability")


def test_an_early_jump_in_a_run_without_grad_norm_says_nothing_of_one_but_that_it_is_not_logged() -> None:
    # round 23 (f29d): "whether it moved before the grad norm cannot be told" said what a grad norm would do
    # on a run that logs none; the sentence now says only that it is not logged
    text = _early_cause(_early_jump(grad=False))
    assert text.startswith("Cause unknown") and "grad norm" not in text, text
    assert "gradient norm is not logged" in text, text
    # a grad norm logged, none before the onset: the lead cannot be told, as before
    assert "the log has no grad norm before it" in _early_cause(_early_jump(grad=True))
