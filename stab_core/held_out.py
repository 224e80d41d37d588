"""Whether the validation loss moved with an incident: a bad batch moves the training loss only, a model
that got worse moves the loss on held-out data too (issue #32: one logged sample back at the next is a
blip unless the validation loss shares it)."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Final

import numpy as np

from stab_core.incidents import RECOVER_RATIO
from stab_core.runview import FloatArray, IntArray, Series
from stab_core.spikes import SpikeEvent


def held_out_rose(val_loss: Series | None, first: int, last: int) -> bool:
    """Whether the validation loss logged at steps ``first..last`` rose above
    :data:`~stab_core.incidents.RECOVER_RATIO` times its last value before ``first``: the model got
    worse on held-out data with this incident, not only on the batches it trained on (False when it is
    not logged there). The last value, not the lowest: a validation loss still high from an earlier
    incident is not this one's. A validation loss back within that ratio at its first value at or after
    ``last`` (the training loss's return) shared one bad step and came back with it: the model did not stay
    worse (a 1.8x one-row jump of an overfitting run's train loss, val 1.09 -> 1.25 -> 1.07; docs/diagnosis.md,
    "Severity")."""
    if val_loss is None:
        return False
    ok = np.isfinite(val_loss.values)
    before = val_loss.values[ok & (val_loss.steps < first)]
    inside = val_loss.values[ok & (val_loss.steps >= first) & (val_loss.steps <= last)]
    if not (before.size and inside.size):
        return False
    last_before = float(before[-1])
    if not (last_before > 0 and float(inside.max()) > RECOVER_RATIO * last_before):
        return False
    back = val_loss.values[ok & (val_loss.steps >= last)][:1]
    return not (back.size and back[0] <= RECOVER_RATIO * last_before)


_HELD_OUT_SPLITS: Final = ("val", "valid", "validation", "eval", "test", "dev")


def is_held_out_loss(metric: str) -> bool:
    """Whether ``metric`` is a loss on held-out data: ``val_loss``, ``val/cls_loss``, ``eval_loss``, ``test/loss``."""
    low = metric.lower()
    return "loss" in low and low.startswith(tuple(f"{s}{sep}" for s in _HELD_OUT_SPLITS for sep in ("_", "/", ".")))


def training_counterpart(metric: str, names: Iterable[str]) -> str | None:
    """The training split's series of held-out loss ``metric`` among ``names``: ``train/cls_loss`` for
    ``val/cls_loss``, ``train_loss`` for ``val_loss`` (the same part on the batches trained on; round 22:
    f28c); None where none is logged."""
    low = metric.lower()
    head = next((f"{s}{sep}" for s in _HELD_OUT_SPLITS for sep in ("_", "/", ".") if low.startswith(f"{s}{sep}")), None)
    if head is None:
        return None
    wanted = {f"{split}{head[-1]}{low[len(head) :]}" for split in ("train", "training")}
    return next((n for n in names if n.lower() in wanted), None)


def held_out_nonfinite(series: Mapping[str, Series], loss: Series | None) -> list[SpikeEvent]:
    """Incidents of a validation loss that turns non-finite mid-run (docs/diagnosis.md, "Validation losses"): a held-out
    loss (:func:`is_held_out_loss`) finite at some step and NaN/inf at a later one is an incident from that
    step, recovered at its first later value back within :data:`~stab_core.incidents.RECOVER_RATIO` of its level
    before (:func:`level_before`), as any recovery is judged; merely finite again is not back (a YOLO val/cls_loss
    inf, then 292 and 39 before 10.5 at its level of 10.5; round 24 f30c, issue #32). None back: not recovered,
    the step it was finite again kept (:attr:`HeldOutNonfinite.finite_again`). A non-finite value before any
    finite one is the validator's placeholder (every val loss NaN at the first row), no incident; steps
    where the training loss is non-finite too are the training loss's incident. Never a divergence of
    its own: the model is judged by its training loss; a validator that overflowed is at least a spike."""
    out = []
    for name in sorted(n for n in series if is_held_out_loss(n)):
        steps, values = series[name].steps, series[name].values
        ok = np.isfinite(values)
        if ok.all() or not ok.any():
            continue
        first_ok = int(np.argmax(ok))
        bad = np.flatnonzero(~ok[1:] & ok[:-1]) + 1  # a finite value, then a non-finite one
        covered = first_ok  # a non-finite value inside an incident not yet back at its level is that incident's
        for i in bad[bad > covered]:
            if i <= covered:
                continue
            finite = np.flatnonzero(ok[i:])
            last_bad = i + int(finite[0]) - 1 if finite.size else steps.shape[0] - 1
            if loss is not None and _nonfinite_within(loss, int(steps[i]), int(steps[last_bad])):
                continue
            lead = blowup_lead(values, int(i), covered)
            level = level_before(values[:lead])
            back = np.flatnonzero(ok[i:] & (values[i:] <= RECOVER_RATIO * level))
            recovery = i + int(back[0]) if back.size else None
            last = recovery - 1 if recovery is not None else steps.shape[0] - 1
            again = int(steps[i + int(finite[0])]) if finite.size else None
            out.append(_event(name, steps, values, lead, last, recovery, level, again, peak=int(i)))
            covered = last
    return out


LEVEL_EVALS: Final = 3
"""The level a held-out loss's non-finite value is judged back to: the median of this many finite evaluations
before it (one scattered or already rising evaluation is no level; the same count
:mod:`stab_core.held_out_blowups` measures a blow-up against)."""


LEAD_RATIO: Final = 1.8
"""A finite evaluation just before a held-out loss's non-finite value this many times its level or more is the
blow-up's start (the ratio :mod:`stab_core.held_out_blowups` calls a blow-up)."""


def blowup_lead(values: FloatArray, first_bad: int, floor: int) -> int:
    """The index an excursion that ran into the non-finite value at ``first_bad`` began: the earliest of the
    finite evaluations just before it (after index ``floor``) each :data:`LEAD_RATIO` times or more the level
    of the evaluations before it (:func:`level_before`, of at least one), back to the first that is not; the
    non-finite value's own index where none is (round 25, issue #32: val/cls_loss 37 -> 706 at epoch 3, NaN
    at 4, is one blow-up from 3, as a training loss that rose into NaN is dated from its rise)."""
    lead = first_bad
    while lead - 1 > max(floor, 0) and np.isfinite(values[lead - 1]):
        level = level_before(values[: lead - 1])
        if not (level > 0 and values[lead - 1] >= LEAD_RATIO * level):
            break
        lead -= 1
    return lead


def level_before(values: FloatArray) -> float:
    """The median of the last :data:`LEVEL_EVALS` finite ``values`` (a held-out loss before its non-finite value)."""
    finite = values[np.isfinite(values)]
    return float(np.median(finite[-LEVEL_EVALS:]))


def _nonfinite_within(loss: Series, first: int, last: int) -> bool:
    inside = (loss.steps >= first) & (loss.steps <= last)
    return bool((inside & ~np.isfinite(loss.values)).any())


@dataclass(frozen=True)
class HeldOutNonfinite(SpikeEvent):
    """A held-out loss's non-finite incident (:func:`held_out_nonfinite`); ``baseline`` is its level before.

    Attributes:
        finite_again: the first step it was finite again (None: never in the log); not its recovery, which
            is back at its level.
    """

    finite_again: int | None = None


def _event(
    name: str,
    steps: IntArray,
    values: FloatArray,
    first: int,
    last: int,
    recovery: int | None,
    level: float,
    again: int | None,
    *,
    peak: int,
) -> SpikeEvent:
    # ``first``: where the excursion began (a finite lead-in, else the non-finite value); ``peak``: the
    # first non-finite value, the one the incident is named for
    start, end = int(steps[first]), int(steps[last])
    recovery_step = int(steps[recovery]) if recovery is not None else None
    return HeldOutNonfinite(
        finite_again=again,
        metric=name,
        start=start,
        peak=int(steps[peak]),
        end=end,
        peak_value=float(values[peak]),
        baseline=level,
        ratio=math.inf,
        z=math.inf,
        duration=(recovery_step if recovery_step is not None else end) - start,
        recovered=recovery is not None,
        recovery_step=recovery_step,
        diverged=False,
        nonfinite=True,
        steps_lost=(recovery_step if recovery_step is not None else end) - start,
        n_samples=last - first + 1,
    )


def is_held_out_nonfinite(event: SpikeEvent) -> bool:
    """Whether ``event`` is a held-out loss's non-finite incident (:func:`held_out_nonfinite`)."""
    return event.nonfinite and is_held_out_loss(event.metric)


def held_out_back_at(primary: SpikeEvent, members: Sequence[SpikeEvent], otherwise: int | None) -> int | None:
    """The step an incident (its ``primary`` event and ``members``) is back: ``otherwise`` unless it is a held-out
    loss's non-finite incident; then the latest recovery of its held-out members that went non-finite, each back
    (else the primary's own, None: not back). One member back while another stays inf (YOLO's val/box_loss at
    the next epoch, val/cls_loss inf for twelve) has not recovered (round 23 f29d, issue #32)."""
    if not is_held_out_nonfinite(primary):
        return otherwise
    backs = [m.recovery_step for m in members if is_held_out_nonfinite(m)]
    known = [int(b) for b in backs if b is not None]
    return max(known) if known and len(known) == len(backs) else primary.recovery_step


TRAINING_NONFINITE_KEYS: Final = ("nonfinite_loss", "nonfinite_grad_norm", "nan_iterations", "nonfinite_grads")
"""Node 1's counts of non-finite training values around an incident (loss, grad norm, the trainer's counters)."""


def nonfinite_held_out_only(event: SpikeEvent, numerical: Mapping[str, object]) -> bool:
    """Whether ``event`` is a held-out loss's non-finite incident while node 1's ``numerical`` evidence counts
    no non-finite training value in its window: the validation pass overflowed, no training step did (round
    22 f28d, issue #32). Such an incident has no batch to skip, no training loss scale that halved for it,
    and is no precision fault of the training."""
    counts = [numerical.get(k) for k in TRAINING_NONFINITE_KEYS]
    return is_held_out_nonfinite(event) and not any(isinstance(c, int | float) and c > 0 for c in counts)
