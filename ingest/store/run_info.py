"""One catalog row of a run (:class:`RunInfo`): what the store, the alerts and the pages read about a run.

Its own module, below ``ingest.store``, so that readers of a run's row (``ingest.services.run_alerts``) need not import
the store: the store runs the analyses and alerts after each merge, and data flows one way.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any


@dataclass(frozen=True)
class RunInfo:
    """One catalog row. Steps are optimizer steps; ``ranks`` counts ranks with per-rank data."""

    name: str
    created: datetime
    updated: datetime
    source: str
    status: str
    gen: int
    first_step: int | None
    last_step: int | None
    n_steps: int
    n_rows: int
    ranks: int
    metrics: list[str]
    rank_metrics: list[str]
    meta: dict[str, Any]
    rejected: int
    rejected_examples: list[str]
    heat_bucket: int
    analysis_gen: int
    base_gen: int = 0
    """The generation whose full files the current one builds on; ``gen`` itself when it has no
    delta parts (see ``ingest.store.commit``)."""

    def to_json(self) -> dict[str, Any]:
        """The ``stabscope runs --json`` object (contract: name, steps, ranks, metrics)."""
        return {
            "name": self.name,
            "steps": [self.first_step, self.last_step],
            "n_steps": self.n_steps,
            "ranks": self.ranks,
            "metrics": self.metrics,
            "rank_metrics": self.rank_metrics,
            "rows": self.n_rows,
            "status": self.status,
            "source": self.source,
            "created": self.created.isoformat(),
            "updated": self.updated.isoformat(),
            "rejected": self.rejected,
            "meta": self.meta,
        }
