"""What a generator of :mod:`stab_core.simulate` returns: the run (per-rank and run-level arrays,
events, meta) and, apart from it, the ground truth of what was injected."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from stab_core.causes import DATA_OUTLIER, Cause
from stab_core.runview import RankMatrix, RunEvent, RunView, Series

FloatArray = npt.NDArray[np.float64]
Float32Array = npt.NDArray[np.float32]
IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]


@dataclass(frozen=True)
class InjectedSpike:
    """Ground truth of one injected spike mechanism.

    ``cause``: the root cause the decision tree should find (:data:`stab_core.causes.CAUSES`);
    ``onset`` and ``peak``: steps where the loss starts to rise and where it is highest; ``height``:
    nats at the peak; ``recovered``: whether the loss came back; ``rank``: the faulty rank of a rank
    fault; ``suppressed``: why it did not happen (e.g. bias balancing; then nothing was injected);
    ``mechanism``: which mechanism injected it (a class name of :mod:`stab_core.simulate.spec`, or
    ``signatures`` for the detection measurement's runs).
    """

    cause: Cause
    onset: int
    peak: int
    height: float
    recovered: bool = True
    rank: int | None = None
    suppressed: str | None = None
    mechanism: str = ""

    @property
    def injected(self) -> bool:
        return self.suppressed is None

    @property
    def spike_class(self) -> str:
        """The class the detection measurement counts it in: its cause, with a data outlier split by
        its outcome (``data_outlier_recovered`` or ``data_outlier_diverged``)."""
        if self.cause == DATA_OUTLIER:
            return f"{DATA_OUTLIER}_{'recovered' if self.recovered else 'diverged'}"
        return self.cause


@dataclass(frozen=True)
class SimTruth:
    """What the simulator injected, for tests and benchmarks only (never shown to the analyses).

    ``spikes``; per logged step: ``g_sq`` (|G|^2, grad_norm^2 units), ``trace_sigma`` (S, grad_norm^2 x
    samples), ``loss_clean`` (the loss without step noise, nats).
    """

    spikes: tuple[InjectedSpike, ...]
    g_sq: FloatArray
    trace_sigma: FloatArray
    loss_clean: FloatArray


@dataclass(frozen=True)
class SimulatedRun:
    """A simulated run. ``steps`` (int64, logged steps); ``per_rank[metric]`` of shape (ranks, steps)
    (float32 from the physical model, float64 from the signature model), NaN where ``present_rank`` is
    False; ``run_level[metric]`` float64 of shape (steps,); ``events``; ``meta`` (world_size,
    per_rank_batch_size, global_batch_size, max_norm, ...); ``truth`` (tests and benchmarks only).
    ``present_rank`` is None when every rank logged every step."""

    name: str
    steps: IntArray
    per_rank: Mapping[str, Float32Array | FloatArray]
    run_level: dict[str, FloatArray]
    events: list[RunEvent]
    meta: dict[str, Any]
    truth: SimTruth
    present_rank: BoolArray | None = None

    def to_view(self) -> RunView:
        """The run as the analyses see it (float64 values, no truth)."""
        series = {
            name: Series(self.steps, np.asarray(values, dtype=np.float64)) for name, values in self.run_level.items()
        }
        ranks = np.arange(next(iter(self.per_rank.values())).shape[0] if self.per_rank else 0, dtype=np.int64)
        present = self.present_rank
        per_rank = {}
        for name, values in self.per_rank.items():
            mask = present if present is not None else np.ones(values.shape, dtype=np.bool_)
            per_rank[name] = RankMatrix(ranks, self.steps, values.astype(np.float64), mask)
        return RunView(
            name=self.name,
            series=series,
            per_rank=per_rank,
            events=tuple(self.events),
            meta=dict(self.meta),
        )
