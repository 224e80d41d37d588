"""A gradient norm printed as 0 at every step is a placeholder, not a measurement (issue #32, claims5
item 3): Megatron-DeepSpeed prints ``grad norm: 0.000`` (with ``loss scale: -1.0``) when DeepSpeed's
engine, not Megatron, steps the optimizer. "no SNR yet: 49 grad-norm samples" counted the zeros as
samples; the note now says the run logs no gradient norm. A run of that shape, written here."""

from __future__ import annotations

import numpy as np

from stab_core.analysis import analyze_run
from stab_core.runview import RunView, Series


def _run(grad_norm: np.ndarray) -> RunView:
    steps = np.arange(1, grad_norm.size + 1)
    loss = 11.0 - 0.01 * steps
    return RunView("megds", {"loss": Series(steps, loss), "grad_norm": Series(steps, grad_norm)})


def test_a_grad_norm_of_zeros_is_no_gradient_norm() -> None:
    reason = analyze_run(_run(np.zeros(49))).snr_reason
    assert reason is not None
    assert reason.startswith("no SNR: the run logs no gradient norm (0 at every step: a placeholder)")


def test_a_measured_grad_norm_is_counted_as_before() -> None:
    grad = np.abs(np.sin(np.arange(49))) + 0.5
    grad[:3] = 0.0  # a few zeros among measurements stay samples
    reason = analyze_run(_run(grad)).snr_reason
    assert reason is not None and reason.startswith("no SNR yet: 49 grad-norm samples")
