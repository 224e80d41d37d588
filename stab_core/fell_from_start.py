"""Whether a run's training loss fell from its first steps up to an incident and through it (issue #32;
docs/diagnosis.md, "Rules added in round 25").

"Check the initialisation scale and the first batches: a healthy loss falls from the first steps" presumes a
loss that did not fall from them. A YOLO validation blow-up at epoch 7 while every training loss fell 0.79x
from its first rows and kept falling through it is no sign of a bad initialisation: that action's premise
fails, and it is not said.
"""

from __future__ import annotations

from typing import Final

import numpy as np

from stab_core.incidents import EARLY_MIN_RATIO
from stab_core.runview import Series
from stab_core.tree_actions import PremiseCheck

FELL_RATIO: Final = 0.9
"""The training loss at the onset under this fraction of its first sample: it fell from the first steps."""


def fell_from_start(loss: Series | None, onset: int, until: int) -> PremiseCheck:
    """(True, evidence) when the finite positive training ``loss`` stood under :data:`FELL_RATIO` times its
    first sample at its last sample before ``onset`` and stayed under
    :data:`~stab_core.incidents.EARLY_MIN_RATIO` times that last sample over ``onset..until`` (it rose less than
    an early instability does, round 26); False when it did not; None without a training
    loss both before and inside."""
    if loss is None:
        return None, {"loss_fell_from_start": None}
    ok = np.isfinite(loss.values) & (loss.values > 0)
    steps, values = loss.steps[ok], loss.values[ok]
    before = values[steps < onset]
    inside = values[(steps >= onset) & (steps <= until)]
    if before.size < 2 or inside.size == 0:
        return None, {"loss_fell_from_start": None}
    first, last = float(before[0]), float(before[-1])
    # round 26: a loss that rose inside the incident by less than an early instability's rise (a YOLOv9 fine-tune's
    # summed loss 7.3 -> 2.4, up 1.17x while the LR warmed up and its val box loss rose) still trains from its
    # initialisation; one up 2.8x (a Whisper fine-tune) is the early instability itself, the start in question
    fell = last < FELL_RATIO * first and float(inside.max()) < EARLY_MIN_RATIO * last
    return fell, {"loss_fell_from_start": fell, "loss_first": first, "loss_before_onset": last}
