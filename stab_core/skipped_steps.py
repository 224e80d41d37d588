"""One non-finite grad norm the loss never felt is a skipped step, not a divergence (issue #32; docs/diagnosis.md,
"Non-finite values").

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
  (its initial scale is too high by design), with no level before it to leave. There the scaler may
  skip a few steps in a row while it halves its initial scale (HF Trainer's fp16 LoRA runs: NaN at steps
  1 and 2, the loss finite, the LR not advancing): up to :data:`START_SKIPS` non-finite samples from the
  first, the loss finite through them and the next grad norm finite, are that start-up overflow too
  (docs/diagnosis.md, "Non-finite values").
- On the series' last logged sample, a lone non-finite grad norm with the loss finite at its step, in a run
  whose earlier non-finite grad norms were all such skipped updates (at least one), is the same skip again
  with no later sample to show it: neither recovered nor diverged (the log ends at it), not a divergence
  (round 23, issue #32: a GRPO fp16 run's fourth lone NaN grad norm on its last log was said "Diverged").
- :func:`skipped_update_steps`: the steps of such skips anywhere in a run, read as the sign of a dynamic
  loss scaler, i.e. of fp16 mixed precision (``stab_core.action_premises``): without a scaler a
  non-finite gradient reaches the weights and the next loss is non-finite too.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Final

import numpy as np

from stab_core.runview import Series
from stab_core.spikes import SpikeEvent
from stab_core.throughput import true_runs

START_SKIPS: Final = 4
"""At most this many non-finite grad-norm samples from the series' first, the loss finite through them, are
the loss scaler's start-up overflows (it halves its initial scale, 2**16 by default, once per skip)."""


def _skip_end(grad: Series, loss: Series, at: int, samples: int) -> int | None:
    """The step of the finite grad-norm sample after the ``samples`` non-finite ones from index ``at``, when
    the loss stayed finite (at least one logged) from the first of them to it; None otherwise."""
    end = at + samples
    if end >= grad.steps.size or np.isfinite(grad.values[at:end]).any() or not np.isfinite(grad.values[end]):
        return None
    after = int(grad.steps[end])
    lo, hi = (int(i) for i in np.searchsorted(loss.steps, [int(grad.steps[at]), after + 1]))
    felt = loss.values[lo:hi]
    if felt.size == 0 or not np.isfinite(felt).all():
        return None
    return after


def _skipped_at(event: SpikeEvent, grad: Series, loss: Series) -> int | None:
    """The step of the finite grad-norm sample after ``event``'s lone non-finite one (or its first
    :data:`START_SKIPS` at the series' start), when the loss stayed finite from the event to it; None when
    the event is no skipped step."""
    at = int(np.searchsorted(grad.steps, event.start))
    limit = START_SKIPS if at == 0 else 1
    if not event.nonfinite or event.n_samples > limit:
        return None
    return _skip_end(grad, loss, at, event.n_samples)


def _cut_off_skip(event: SpikeEvent, grad: Series, loss: Series) -> bool:
    """Is ``event`` a lone non-finite grad-norm sample on the series' last sample, the loss logged and finite
    from its step to the log's end? It may be one more skipped update (the loss never felt it) or the start
    of a blow-up: with no grad norm after it, the log cannot tell, so "diverged" claims more than it shows
    (round 23 f29d, issue #32)."""
    at = int(np.searchsorted(grad.steps, event.start))
    if not event.nonfinite or event.n_samples != 1 or at != grad.steps.size - 1 or at == 0:
        return False
    felt = loss.values[int(np.searchsorted(loss.steps, event.start)) :]
    return bool(felt.size) and bool(np.isfinite(felt).all())


def skipped_update_steps(grad: Series, loss: Series | None) -> list[int]:
    """The steps of the non-finite grad-norm samples a run went on from with its loss finite (runs of at
    most :data:`START_SKIPS` samples, the next grad norm finite): updates a dynamic loss scaler skipped."""
    if loss is None or not loss.steps.size or not grad.steps.size:
        return []
    out: list[int] = []
    for first, last in true_runs(~np.isfinite(grad.values)):
        n = last - first + 1
        if n <= START_SKIPS and _skip_end(grad, loss, first, n) is not None:
            out += [int(s) for s in grad.steps[first : last + 1]]
    return out


def skip_at_end(event: SpikeEvent, grad: Series, loss: Series) -> bool:
    """Is ``event`` a lone non-finite grad norm on the series' last sample, the loss finite at its step (its
    last sample at or before it), in a run whose every earlier non-finite grad norm was a skipped update?"""
    last = int(grad.steps[-1])
    if not event.nonfinite or event.n_samples != 1 or event.start != last:
        return False
    earlier = ~np.isfinite(grad.values[:-1])
    if not earlier.any() or len(skipped_update_steps(grad, loss)) != int(earlier.sum()):
        return False
    at = int(np.searchsorted(loss.steps, last, side="right")) - 1
    return at >= 0 and bool(np.isfinite(loss.values[at]))


def skipped_steps(events: Sequence[SpikeEvent], grad: Series, loss: Series | None) -> list[SpikeEvent]:
    """``events`` (grad-norm events of ``grad``) with each skipped overflow step recovered at the next
    grad-norm sample and not diverged, dropped where it is the series' first sample, and one more skip on
    the last sample neither recovered nor diverged (see the module)."""
    if loss is None or not loss.steps.size or not grad.steps.size:
        return list(events)
    out = []
    for event in events:
        after = _skipped_at(event, grad, loss)
        if after is None and (_cut_off_skip(event, grad, loss) or skip_at_end(event, grad, loss)):
            # the log ends at it: no later sample shows whether the run went on, so neither recovered nor
            # diverged ("the log ends at this sample", as for a finite one, run_end_rises.cut_off_at_log_end)
            out.append(replace(event, recovered=False, diverged=False))
        elif after is None:
            out.append(event)
        elif event.start != int(grad.steps[0]):
            out.append(
                replace(event, recovered=True, recovery_step=after, diverged=False, duration=after - event.start)
            )
    return out
