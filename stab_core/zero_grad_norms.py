"""Exact-zero grad norms among positive ones are not measurements (issue #32; docs/diagnosis.md, "Rules added
in round 26").

Some trainers log a grad norm of exactly 0.0 at steps where they computed none: a Hugging Face Trainer LoRA
run whose accelerator skips the norm on some logging steps, a skipped update, a gradient-accumulation
boundary. A gradient that moved a non-zero loss has no norm of 0, so a 0.0 logged beside a non-zero loss
in a series whose other samples are positive is a placeholder: it carries no level, no spike and no
recovery. Left in, such zeros pull the rolling median towards 0, so every ordinary norm reads as a spike
and a spike "recovers" on the next placeholder.

- A grad-norm sample is dropped when it is exactly 0.0, the loss logged at the same step is finite and
  non-zero, and the series holds a positive finite sample after it (trailing zeros, once nothing positive
  follows, may be weights that froze: kept).
- A series of zeros only (no positive sample) is left as it is: :mod:`stab_core.detectors_not_run` reads it.
- Without a loss at a step, nothing tells a placeholder from a norm of 0: the sample is kept.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import numpy.typing as npt

from stab_core.runview import RunView, Series


def placeholder_zeros(grad: Series, loss: Series | None) -> npt.NDArray[np.bool_]:
    """Mask over ``grad``'s samples that are exact-zero placeholders (module docstring); all False when
    the series has no positive finite sample or no loss is logged."""
    values = grad.values
    none = np.zeros(values.size, dtype=bool)
    if loss is None or values.size == 0:
        return none
    positive = np.flatnonzero(np.isfinite(values) & (values > 0.0))
    if positive.size == 0:
        return none
    at = np.searchsorted(loss.steps, grad.steps)
    found = at < loss.steps.size
    found[found] = loss.steps[at[found]] == grad.steps[found]
    loss_at = np.full(values.size, np.nan)
    loss_at[found] = loss.values[at[found]]
    with np.errstate(invalid="ignore"):
        moved = np.isfinite(loss_at) & (loss_at != 0.0)
    mask: npt.NDArray[np.bool_] = (values == 0.0) & moved
    mask[int(positive[-1]) :] = False  # zeros with nothing positive after them may be a collapse: kept
    return mask


def without_placeholder_grad_norms(view: RunView) -> RunView:
    """``view`` with the exact-zero placeholder samples of its ``grad_norm`` series dropped
    (:func:`placeholder_zeros`); the same view when there are none."""
    grad = view.series.get("grad_norm")
    if grad is None:
        return view
    drop = placeholder_zeros(grad, view.series.get("loss"))
    if not drop.any():
        return view
    keep = ~drop
    return replace(view, series={**view.series, "grad_norm": Series(grad.steps[keep], grad.values[keep])})
