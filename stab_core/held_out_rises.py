"""A held-out loss that rises to a new level and stays there while the training loss rose with it (issue #32;
docs/diagnosis.md, round 26 r26c).

The blow-up rules of :mod:`stab_core.held_out_blowups` ask an evaluation 1.8x the level before it. A validation
loss can also step up by 1.3-1.7x and never come back: a YOLOv9 fine-tune's val/box_loss at 0.52-0.68 over its
first 16 epochs goes to 0.81 at the warm-up's end and stays 0.70-1.17 for the remaining 100 epochs, while its
training box loss rose from 0.57 to 0.85-0.93 too. A user wants that shown; it is no divergence (the run goes on
learning at its new level) and no overfitting (the training loss did not fall).

The rule, for a held-out loss's distinct evaluations (positive) with a training loss beside it: the first
evaluation that

- stands :data:`~stab_core.incidents.CLIMB_MIN_RATIO` times the lowest level held before it (the lowest median of
  three consecutive evaluations, :func:`stab_core.early_rises.held_levels`) and :data:`JUMP_RATIO` times the median
  of the :data:`~stab_core.incidents.CLIMB_MIN_SAMPLES` evaluations before it (it stepped up; a slow drift is
  overfitting's shape, or the scatter's);
- is followed by :data:`LASTING_EVALS` evaluations or more to the log's end (a rise in a log's last evaluations
  may not last), whose median, and the median of its first CLIMB_MIN_SAMPLES, stand CLIMB_MIN_RATIO times that
  level, none of them back within :data:`~stab_core.incidents.RECOVER_RATIO` of it;
- while the training loss over those first CLIMB_MIN_SAMPLES evaluations' steps is not under
  :data:`TRAIN_FELL` of its median over the CLIMB_MIN_SAMPLES evaluations' steps before (a validation loss
  rising while the training loss falls is overfitting, :mod:`stab_core.overfitting`'s finding). Without a
  training loss nothing tells the two apart and nothing is said.

Its event (:mod:`stab_core.held_out_blowups`) is never back and not diverged: a ``spike`` cut off by the log's
end. Pure.
"""

from __future__ import annotations

from typing import Final

import numpy as np

from stab_core.early_rises import held_levels
from stab_core.incidents import CLIMB_MIN_RATIO, CLIMB_MIN_SAMPLES, RECOVER_RATIO
from stab_core.runview import FloatArray, IntArray, Series

JUMP_RATIO: Final = 1.2
"""Times the median of the evaluations just before it the first evaluation of the rise stands (the loss
detector's ``min_ratio``): it stepped up."""
LASTING_EVALS: Final = 10
"""Evaluations from the rise's first to the log's end, at least (the blow-up rules' ``MAIN_EVALS``)."""
TRAIN_FELL: Final = 0.9
"""The training loss fell over the rise's first evaluations when its median there is under this fraction of its
median over the evaluations before (the blow-up rules' own ``TRAIN_FELL``)."""


def lasting_held_out_rise(steps: IntArray, values: FloatArray, train: Series | None) -> tuple[int, float] | None:
    """The lasting rise (module docstring) of a held-out loss at its distinct evaluations ``steps``, ``values``
    (positive, finite), judged beside the training loss ``train``: the index of its first evaluation and the level
    it rose from (loss units); None where there is none."""
    if train is None or values.size < LASTING_EVALS + CLIMB_MIN_SAMPLES:
        return None
    levels = held_levels(values)
    w = CLIMB_MIN_SAMPLES
    for i in range(w, values.size - LASTING_EVALS + 1):
        level, after = float(levels[i]), values[i:]
        if not (level > 0 and values[i] >= CLIMB_MIN_RATIO * level):
            continue
        if values[i] < JUMP_RATIO * float(np.median(values[i - w : i])):
            continue
        held = min(float(np.median(after)), float(np.median(after[:w]))) >= CLIMB_MIN_RATIO * level
        if not held or bool(np.any(after <= RECOVER_RATIO * level)):
            continue
        if _train_fell(train, int(steps[i - w]), int(steps[i]), int(steps[i + w - 1])):
            continue
        return i, level
    return None


def _train_fell(train: Series, before: int, start: int, last: int) -> bool:
    """Whether the training loss's median over steps ``start..last`` is under :data:`TRAIN_FELL` times its median
    over ``before..start`` (exclusive); False where either span has no finite sample."""
    ok = np.isfinite(train.values)
    prior = train.values[ok & (train.steps >= before) & (train.steps < start)]
    during = train.values[ok & (train.steps >= start) & (train.steps <= last)]
    return bool(prior.size and during.size and np.median(during) < TRAIN_FELL * np.median(prior))
