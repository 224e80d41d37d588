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
- while a training loss rose with it: the held-out loss's own training counterpart
  (:func:`~stab_core.held_out.training_counterpart`: ``train/box_loss`` for ``val/box_loss``) or the total ``loss``,
  its median over those first CLIMB_MIN_SAMPLES evaluations' steps above its median over the CLIMB_MIN_SAMPLES
  evaluations' steps before by more than :data:`~stab_core.overfitting.TRAIN_ROSE_RELATIVE` of it
  (:func:`~stab_core.overfitting.rose_over`, the overfitting finding's own co-rise test). A validation loss that
  rises while no training loss rises with it is left to :mod:`stab_core.overfitting` (round 26 r26f: a WS-DAN
  run's val loss drifting 1.5 -> 3.3 over 10,000 steps while its training loss fell 0.57 -> 0.32, 0.92x per eight
  evaluations, never under the 0.9x "fell" the rule first asked, was shown as a spike on a log whose golden calls
  it healthy overfitting). Without a training loss nothing tells the two apart and nothing is said.

Its event (:mod:`stab_core.held_out_blowups`) is never back and not diverged: a ``spike`` cut off by the log's
end. Pure.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

import numpy as np

from stab_core.early_rises import held_levels
from stab_core.incidents import CLIMB_MIN_RATIO, CLIMB_MIN_SAMPLES, RECOVER_RATIO
from stab_core.overfitting import rose_over
from stab_core.runview import FloatArray, IntArray, Series

JUMP_RATIO: Final = 1.2
"""Times the median of the evaluations just before it the first evaluation of the rise stands (the loss
detector's ``min_ratio``): it stepped up."""
LASTING_EVALS: Final = 10
"""Evaluations from the rise's first to the log's end, at least (the blow-up rules' ``MAIN_EVALS``)."""


def lasting_held_out_rise(steps: IntArray, values: FloatArray, trained: Sequence[Series]) -> tuple[int, float] | None:
    """The lasting rise (module docstring) of a held-out loss at its distinct evaluations ``steps``, ``values``
    (positive, finite), judged beside the training losses ``trained`` (its training counterpart and the total, where
    logged): the index of its first evaluation and the level it rose from (loss units); None where there is none."""
    if not trained or values.size < LASTING_EVALS + CLIMB_MIN_SAMPLES:
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
        window = (int(steps[i - w]), int(steps[i]), int(steps[i + w - 1]))
        if not any(rose_over(t.steps, t.values, window) for t in trained):
            continue  # no training loss rose with it: overfitting's shape (module docstring)
        return i, level
    return None
