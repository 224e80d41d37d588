"""The learning rates a run logs, one per optimizer param group (issue #32; docs/diagnosis.md, round 26 r26d).

A trainer that logs several param groups (YOLOv5's ``x/lr0, x/lr1, x/lr2``, Ultralytics' ``lr/pg0..pg2``, an LR
monitor's ``lr-SGD/pg1``) has one stored as the run's ``lr`` (the first group, ``ingest.formats.table_axes``) and
the others under their own names. The groups need not move together: YOLO's bias group warms *down* from its own
value while the weight groups ramp up, so the LR-rise signature read on ``lr`` alone says "the LR fell" through
the very warm-up the weights climbed. A rise in any group is a rise of the LR the model trained with.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Final

import numpy as np

from stab_core.runview import Series
from stab_core.warmup_end import is_lr_group

_NUMBERED_LR: Final = re.compile(r"^lr_?\d+$")
"""The last path part of a numbered group's LR under a namespace (YOLOv5's ``x/lr1``)."""
_GROUP_NUMBER: Final = re.compile(r"\d+$")
"""A param group's number, at the end of its LR's name."""


def is_param_group_lr(metric: str) -> bool:
    """Whether ``metric`` is a logged learning rate of a param group: ``lr``, or a name that ends in the group's
    number, ``lr/pg1``, ``lr-SGD/pg1``, ``lr_1`` (:func:`stab_core.warmup_end.is_lr_group`) or ``x/lr1`` (a numbered
    ``lrN`` under a namespace). A name with no group number (``lr_scale``, ``lr_decay``) is no param group's LR."""
    low = metric.lower()
    if low == "lr":
        return True
    numbered = bool(_GROUP_NUMBER.search(low))
    return numbered and (is_lr_group(low) or bool(_NUMBERED_LR.match(low.rsplit("/", 1)[-1])))


def other_lr_groups(series: Mapping[str, Series]) -> list[tuple[str, Series]]:
    """The logged LRs other than ``lr`` with at least 2 finite samples, (name, series) by name."""
    return [
        (name, s)
        for name, s in sorted(series.items())
        if name != "lr" and is_param_group_lr(name) and int(np.isfinite(s.values).sum()) >= 2
    ]
