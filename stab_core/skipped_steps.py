"""One non-finite grad norm the loss never felt is a skipped step, not a divergence (issue #32, round 13).

A dynamic loss scaler (fp16 AMP: PyTorch's ``GradScaler``, MMEngine's ``AmpOptimWrapper``, DeepSpeed)
skips the update whose gradients overflowed and logs that step's grad norm as ``nan`` or ``inf``; the
weights are untouched, so the loss stays finite and the next grad norm is finite again. Such a sample is
not a divergence: nothing was lost but one update. Judged only where the loss is logged: without it a
non-finite grad norm cannot be told from weights that went bad.

- A lone non-finite grad-norm sample (its detector event one sample long) whose next grad-norm sample is
  finite, with every loss sample from its step to that next one finite (at least one logged), recovered
  at that next sample: the event is not diverged (its severity then follows the loss, a blip when the
  loss never left its band).
- At the series' first logged sample it is no incident at all: the scaler's usual first-step overflow
  (its initial scale is too high by design), with no level before it to leave.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import numpy as np

from stab_core.runview import Series
from stab_core.spikes import SpikeEvent


def _skipped_at(event: SpikeEvent, grad: Series, loss: Series) -> int | None:
    """The step of the finite grad-norm sample after ``event``'s lone non-finite one, when the loss
    stayed finite from the event to it; None when the event is no skipped step."""
    if not event.nonfinite or event.n_samples != 1:
        return None
    at = int(np.searchsorted(grad.steps, event.start))
    if at + 1 >= grad.steps.size or not np.isfinite(grad.values[at + 1]):
        return None
    after = int(grad.steps[at + 1])
    lo, hi = (int(i) for i in np.searchsorted(loss.steps, [event.start, after + 1]))
    felt = loss.values[lo:hi]
    if felt.size == 0 or not np.isfinite(felt).all():
        return None
    return after


def skipped_steps(events: Sequence[SpikeEvent], grad: Series, loss: Series | None) -> list[SpikeEvent]:
    """``events`` (grad-norm events of ``grad``) with each skipped overflow step recovered at the next
    grad-norm sample and not diverged, and dropped where it is the series' first sample (see the module)."""
    if loss is None or not loss.steps.size or not grad.steps.size:
        return list(events)
    out = []
    for event in events:
        after = _skipped_at(event, grad, loss)
        if after is None:
            out.append(event)
        elif event.start != int(grad.steps[0]):
            out.append(
                replace(event, recovered=True, recovery_step=after, diverged=False, duration=after - event.start)
            )
    return out
