"""Where each rank sits in a job's parallel layout, and which ranks logged nothing.

Pure: run metadata (a mapping) and rank numbers in, stage numbers and rank lists out.

Megatron-LM, DeepSpeed's pipeline topology and torchtitan all put the pipeline dimension outermost:
with ``world_size`` ranks and ``pipeline_parallel_size`` stages, stage ``s`` holds the contiguous
ranks ``s * world_size / pipeline_parallel_size`` onwards (the tensor- and data-parallel ranks of a
stage are its neighbours). Ranks of different stages hold different layers (the first the embedding,
the last the output layer and the loss), so their memory, gradient norms and even step times differ
by design: a rank is judged against the ranks of its own stage.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

PIPELINE_KEYS = ("pipeline_parallel_size", "pipeline_parallel", "pipeline_model_parallel_size")
"""Metadata keys that give the pipeline-parallel degree (the canonical one first; the others are
what the Megatron reader and Megatron's own arguments call it)."""
TENSOR_KEYS = ("tensor_parallel_size", "tensor_parallel", "tensor_model_parallel_size")
"""Metadata keys that give the tensor-parallel degree."""
MIN_PEERS = 3
"""Ranks a comparison group needs for a robust median (fewer: a rank cannot be told from its peers)."""

IntArray = npt.NDArray[np.int64]


@dataclass(frozen=True)
class StageLayout:
    """A pipeline layout: ``stages`` stages of ``world_size / stages`` contiguous ranks each."""

    stages: int
    world_size: int

    @property
    def ranks_per_stage(self) -> int:
        """Ranks in each pipeline stage (tensor x data parallel x ...)."""
        return self.world_size // self.stages

    def stage_of(self, ranks: npt.ArrayLike) -> IntArray:
        """The pipeline stage (0-based) of each rank."""
        return np.asarray(ranks, dtype=np.int64) // self.ranks_per_stage


def meta_int(meta: Mapping[str, Any], keys: Iterable[str]) -> int | None:
    """The first of ``keys`` in ``meta`` that holds a whole number >= 1 (``16``, ``16.0``, ``"16"``), else None."""
    for key in keys:
        value = meta.get(key)
        if isinstance(value, bool) or value is None:
            continue
        try:
            number = float(value)
        except (TypeError, ValueError):
            continue
        if np.isfinite(number) and number >= 1 and number == int(number):
            return int(number)
    return None


def expected_world_size(meta: Mapping[str, Any], ranks: npt.ArrayLike) -> int | None:
    """Ranks the job had: meta ``world_size``, or the highest rank that logged + 1 when that is more
    (or when the metadata has none). None when neither is known."""
    logged = np.asarray(ranks, dtype=np.int64)
    highest = int(logged.max()) + 1 if logged.size else 0
    declared = meta_int(meta, ("world_size",)) or 0
    return max(declared, highest) or None


def stage_layout(meta: Mapping[str, Any], ranks: npt.ArrayLike) -> StageLayout | None:
    """The pipeline layout the metadata gives (``pipeline_parallel_size`` and ``world_size``, or the
    highest rank + 1), or None when it gives none or a contradictory one (the world size not a
    multiple of the stages, or a stage's ranks not a multiple of ``tensor_parallel_size``)."""
    stages = meta_int(meta, PIPELINE_KEYS)
    world = expected_world_size(meta, ranks)
    if stages is None or world is None or world % stages:
        return None
    tensor = meta_int(meta, TENSOR_KEYS)
    if tensor is not None and (world // stages) % tensor:
        return None
    return StageLayout(stages, world)


def comparison_groups(layout: StageLayout | None, ranks: npt.ArrayLike) -> IntArray | None:
    """One group number per rank: its pipeline stage, when the layout is known, has more than one
    stage and every stage that logged has at least ``MIN_PEERS`` ranks; else None (all ranks are
    one group)."""
    if layout is None or layout.stages < 2:
        return None
    stage = layout.stage_of(ranks)
    _, counts = np.unique(stage, return_counts=True)
    return stage if counts.size and int(counts.min()) >= MIN_PEERS else None


def missing_ranks(meta: Mapping[str, Any], logged: npt.ArrayLike) -> list[int]:
    """Ranks below the expected world size (``expected_world_size``) that logged nothing, ascending."""
    have = {int(r) for r in np.asarray(logged, dtype=np.int64).tolist()}
    world = expected_world_size(meta, sorted(have))
    return [r for r in range(world or 0) if r not in have]


def compress_ranks(ranks: Iterable[int]) -> str:
    """``[3, 4, 5, 6, 9, 11, 12]`` -> ``"3–6, 9, 11, 12"``: runs of 3 or more consecutive ranks as ranges."""
    ordered = sorted(set(int(r) for r in ranks))
    parts: list[str] = []
    i = 0
    while i < len(ordered):
        j = i
        while j + 1 < len(ordered) and ordered[j + 1] == ordered[j] + 1:
            j += 1
        if j - i >= 2:
            parts.append(f"{ordered[i]}–{ordered[j]}")
        else:
            parts.extend(str(r) for r in ordered[i : j + 1])
        i = j + 1
    return ", ".join(parts)
