"""The in-memory view of one run that every analysis takes: plain numpy arrays, no I/O.

`ingest` builds a `RunView` from the store (or a simulator builds one directly); `stab_core`
functions read it. Steps are optimizer steps (int64); values are float64 and may be non-finite
(NaN/Inf are evidence, never dropped).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]


@dataclass(frozen=True)
class Series:
    """One run-level series: ``steps`` strictly increasing (int64), ``values`` float64, same length."""

    steps: IntArray
    values: FloatArray

    def __post_init__(self) -> None:
        if self.steps.shape != self.values.shape or self.steps.ndim != 1:
            raise ValueError(
                f"steps and values must be 1-D and of equal length, got {self.steps.shape} and {self.values.shape}"
            )


@dataclass(frozen=True)
class RankMatrix:
    """A per-rank metric on a common step axis: ``values[i, j]`` is rank ``ranks[i]`` at ``steps[j]``.

    Missing samples are NaN; use ``present`` to tell a gap from a logged NaN.
    """

    ranks: IntArray
    steps: IntArray
    values: FloatArray
    present: npt.NDArray[np.bool_]

    def __post_init__(self) -> None:
        expected = (self.ranks.shape[0], self.steps.shape[0])
        if self.values.shape != expected or self.present.shape != expected:
            raise ValueError(f"values/present must have shape {expected}, got {self.values.shape}")


@dataclass(frozen=True)
class RunEvent:
    """Something that happened at a step: ``kind`` is one of ``schedule_transition``,
    ``cycle_restart``, ``checkpoint``, ``rollback``, ``data_switch``, ``warmup_end`` or a free name."""

    step: int
    kind: str
    label: str = ""
    detail: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class RunView:
    """Everything an analysis may look at for one run.

    ``series``: run-level metrics by canonical name (``loss``, ``grad_norm``, ``lr``, ...).
    ``per_rank``: per-rank metrics by canonical name (``grad_norm_local``, ``loss``, ``step_time_s``).
    ``meta``: run metadata (``global_batch_size``, ``per_rank_batch_size``, ``world_size``,
    ``max_norm``, ``scheduler`` settings, ``gpus``, ``usd_per_gpu_hour``, ``tags`` ...; ``suspect_lines``:
    the (line, text) pairs the import flagged as holding values no reader read).
    """

    name: str
    series: dict[str, Series] = field(default_factory=dict)
    per_rank: dict[str, RankMatrix] = field(default_factory=dict)
    events: tuple[RunEvent, ...] = ()
    meta: dict[str, Any] = field(default_factory=dict)

    def has(self, metric: str) -> bool:
        """True when the run-level series ``metric`` exists and holds at least one sample."""
        s = self.series.get(metric)
        return s is not None and s.steps.size > 0
