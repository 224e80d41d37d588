"""The last step of a run's initial LR warm-up, read from its logged LR groups (issue #32; docs/diagnosis.md,
"Rules added in round 25").

An incident is "early" (its level from a handful of samples, its causes those of a run's first steps) only
inside the first steps: on a log of a few tens of rows (one per epoch) every row is inside the detector's
first window, so the window alone calls a blow-up at epoch 7 of 50, after the warm-up, "early". Where the log
shows a warm-up (an LR group that rises from its first sample), the first steps end with it.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from stab_core.runview import Series


def is_lr_group(metric: str) -> bool:
    """Whether ``metric`` is a logged learning rate: ``lr`` or one of its parameter groups (``lr/pg1``, ``lr_1``)."""
    low = metric.lower()
    return low == "lr" or low.startswith(("lr/", "lr_", "lr-"))


def warmup_end(series: Mapping[str, Series]) -> int | None:
    """The step the initial warm-up ends: over every LR group whose second finite sample is above its first
    (a ramp from the run's start), the first step from which the next sample is not above it (the top of the
    ramp), the latest over such groups; None when no logged LR rises from its first sample (no warm-up shown:
    a bias group that falls to meet the others is no warm-up of its own)."""
    ends = []
    for name, s in series.items():
        if not is_lr_group(name):
            continue
        ok = np.isfinite(s.values)
        steps, values = s.steps[ok], s.values[ok]
        if values.size < 2 or not values[1] > values[0]:
            continue
        stops = np.flatnonzero(values[1:] <= values[:-1])
        ends.append(int(steps[stops[0]]) if stops.size else int(steps[-1]))
    return max(ends) if ends else None
