"""What the store hands out and takes in: the series a page draws, the report of an ingestion, run names."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from ingest.errors import StabScopeError

ProgressFn = Callable[[int, int], None]
"""``progress(done, total)``: called as long work advances (bytes or rows)."""

_RUN_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")


def validate_run_name(name: str) -> str:
    """Return ``name`` if it is a safe run name (letters, digits, ``._-``; no separators, no ``..``)."""
    if not isinstance(name, str) or not _RUN_NAME.match(name) or ".." in name:
        raise StabScopeError(
            f"invalid run name {name!r}: use 1-128 letters, digits, '.', '_' or '-', starting with a "
            "letter or digit (no path separators, no '..')"
        )
    return name


@dataclass
class SeriesData:
    """A series as read for display (steps are optimizer steps, values in the metric's own unit).

    Full fidelity: ``min``/``max`` equal ``values`` for a run-level series, or hold the cross-rank
    band for a per-rank one. Downsampled (``bucketed``): one point per bucket with the bucket's mean
    in ``values`` and its extremes in ``min``/``max`` (at ``min_step``/``max_step``), so a
    single-step spike survives any number of buckets.
    """

    metric: str
    steps: np.ndarray
    values: np.ndarray
    min: np.ndarray
    max: np.ndarray
    source: str
    bucketed: bool
    min_step: np.ndarray | None = None
    max_step: np.ndarray | None = None
    n_nonfinite: np.ndarray | None = None


def empty_series(metric: str) -> SeriesData:
    """The series of a metric with no rows in the window asked for."""
    empty = np.zeros(0)
    return SeriesData(metric, np.zeros(0, np.int64), empty, empty, empty, "none", bucketed=False)


@dataclass
class IngestReport:
    """What a compaction or import did: rows folded in, records rejected (with where), torn tails."""

    run: str
    rows: int = 0
    frames: int = 0
    segments: int = 0
    rejected: int = 0
    rejected_examples: list[str] = field(default_factory=list)
    torn: list[str] = field(default_factory=list)
    events: int = 0
    gen: int = 0

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def skipped_example_texts(parsed: Any) -> list[str]:
    """``file: line N: reason`` for each skipped example of a ParsedLog (``byte N`` for binary formats,
    whose readers report byte offsets)."""
    unit = "byte" if parsed.format == "tensorboard" else "line"
    return [f"{f}: {unit} {pos}: {why}" for f, pos, why in parsed.skipped_examples]
