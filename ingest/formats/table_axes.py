"""Roles of a table's columns that are not plain metrics (CSV, JSON Lines, Parquet tables).

- **Axis counters.** A column that counts epochs or steps (``epoch``, ``step``, ``global_step``,
  ``iteration`` ...) is an axis of the run, never a metric: beside the step column it chose, a table's
  other counter (Lightning's and YOLO's ``epoch``, Keras' ``epoch`` next to ``step``) is no series to
  draw or to find spikes in. So are W&B's own clocks (``_runtime``: seconds since the start;
  ``_timestamp``: the wall clock) in its run-history export: the time axis, not a training quantity.
- **A batch counter within the epoch** (docs/diagnosis.md, "Import: steps, epochs and runs"). Beside an ``epoch`` column
  and no step column, a column named as the batch's index (``batch``, ``batch_idx``, ``iter_in_epoch`` ...) holding
  whole numbers counts the batches of the epoch: with the epoch it is the step column (``epoch * batches_per_epoch +
  batch``, :class:`~ingest.formats.epoch_steps.EpochSteps`; a counter that never restarts is kept as written), an
  axis, never a metric. A table logged one row per batch read one row per epoch would keep one record in
  twenty (a GAN's ``Epoch,Batch,Gen Loss,Disc Loss``).
- **Param-group learning rates.** A table holding two or more learning rates of numbered optimizer
  param groups and no plain ``lr`` (Ultralytics' ``lr/pg0, lr/pg1, lr/pg2``; an LR monitor's
  ``lr-SGD/pg1, lr-SGD/pg2``; YOLOv5's ``x/lr0, x/lr1, x/lr2``: a numbered ``lrN``) stores one of
  them as the run's ``lr``: the first group (the lowest-numbered one logged), as the canonical ``lr``
  is the first param group's (docs/diagnosis.md, "Import: metrics files"; before, the group the most others agreed with,
  YOLO's weight groups rather than its bias group pg0 that warms up from its own value). The others keep
  their own names.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Final

import numpy as np
import numpy.typing as npt

AXIS_COUNTERS: Final = frozenset(
    {
        "epoch",
        "epochs",
        "train/epoch",
        "trainer/epoch",
        "step",
        "steps",
        "_step",
        "global_step",
        "trainer/global_step",
        "train/global_step",
        "iteration",
        "iterations",
        "iter",
        "current_steps",
        "current_step",
        "_runtime",
        "_timestamp",
    }
)
"""Column names (compared stripped and lower-cased) that count epochs or steps, or W&B's clocks: axes,
never metrics."""

BATCH_IN_EPOCH: Final = (
    "batch",
    "batch_idx",
    "batch_index",
    "batch_id",
    "batch_num",
    "batch_no",
    "i_batch",
    "ibatch",
    "iter_in_epoch",
    "step_in_epoch",
    "epoch_step",
    "epoch_iter",
)
"""Column names (compared lower-cased) of a batch's index within the epoch: a step axis beside ``epoch``."""

_PLAIN_LR: Final = frozenset({"lr", "learning_rate", "learning rate", "train/lr", "train/learning_rate"})
_GROUP_LR: Final = re.compile(
    r"^(?:(?:lr|learning_rate)(?:[-_/ ][A-Za-z]\w*)?[-_/ ](?:pg|group|param_group)_?|(?:[A-Za-z]\w*/)?lr_?)(?P<n>\d+)$",
    re.IGNORECASE,
)


def is_axis_counter(column: str) -> bool:
    """Whether ``column`` names an epoch or step counter or a W&B clock (an axis, not a metric)."""
    return column.strip().lower() in AXIS_COUNTERS


def group_lr_columns(columns: Sequence[str]) -> list[str]:
    """The param-group learning-rate columns of a table, by group number; empty unless there are two
    or more and no plain ``lr`` column."""
    if any(c.strip().lower() in _PLAIN_LR for c in columns):
        return []
    found = [(int(m["n"]), c) for c in columns if (m := _GROUP_LR.match(c.strip()))]
    return [c for _, c in sorted(found)] if len(found) >= 2 else []


def run_lr_group(
    columns: Sequence[str], values: Sequence[npt.NDArray[np.float64]], present: Sequence[npt.NDArray[np.bool_]]
) -> str | None:
    """Which of the param-group ``columns`` (from :func:`group_lr_columns`, by group number; their ``values``
    and ``present`` masks row by row) is the run's ``lr``: the first group, the lowest-numbered one logged
    (the canonical ``lr`` is the first param group's, :data:`stab_core.metrics.CANONICAL_METRICS`;
    docs/diagnosis.md, "Import: metrics files"); None for no columns."""
    return next((column for column, shown in zip(columns, present, strict=True) if shown.any()), None)
