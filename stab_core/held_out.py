"""Whether the validation loss moved with an incident: a bad batch moves the training loss only, a model
that got worse moves the loss on held-out data too (issue #32: one logged sample back at the next is a
blip unless the validation loss shares it)."""

from __future__ import annotations

import numpy as np

from stab_core.incidents import RECOVER_RATIO
from stab_core.runview import Series


def held_out_rose(val_loss: Series | None, first: int, last: int) -> bool:
    """Whether the validation loss logged at steps ``first..last`` rose above
    :data:`~stab_core.incidents.RECOVER_RATIO` times its last value before ``first``: the model got
    worse on held-out data with this incident, not only on the batches it trained on (False when it is
    not logged there). The last value, not the lowest: a validation loss still high from an earlier
    incident is not this one's. A validation loss back within that ratio at its first value at or after
    ``last`` (the training loss's return) shared one bad step and came back with it: the model did not stay
    worse (a 1.8x one-row jump of an overfitting run's train loss, val 1.09 -> 1.25 -> 1.07; round 14)."""
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
