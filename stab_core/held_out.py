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
    incident is not this one's."""
    if val_loss is None:
        return False
    ok = np.isfinite(val_loss.values)
    before = val_loss.values[ok & (val_loss.steps < first)]
    inside = val_loss.values[ok & (val_loss.steps >= first) & (val_loss.steps <= last)]
    if not (before.size and inside.size):
        return False
    last_before = float(before[-1])
    return last_before > 0 and float(inside.max()) > RECOVER_RATIO * last_before
