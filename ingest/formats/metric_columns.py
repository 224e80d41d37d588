"""A reader's metric values gathered line by line and handed to the builder once, at the end of the file."""

from __future__ import annotations

import numpy as np

from ingest.formats._common import LogBuilder


class MetricColumns:
    """Per metric (its stored name), the steps, values and line sequence numbers read so far, in the
    order they were read; :meth:`add_to` stores each as one series under that name."""

    def __init__(self) -> None:
        self.columns: dict[str, tuple[list[int], list[float], list[int]]] = {}

    def put(self, metric: str, step: int, value: float, seq: int) -> None:
        """One value of ``metric`` at ``step``, read on the line numbered ``seq`` (the builder's order)."""
        steps, values, seqs = self.columns.setdefault(metric, ([], [], []))
        steps.append(step)
        values.append(value)
        seqs.append(seq)

    def steps_of(self, metric: str) -> list[int]:
        """The steps of ``metric`` read so far (empty when none)."""
        return self.columns[metric][0] if metric in self.columns else []

    def add_to(self, builder: LogBuilder) -> None:
        """Every metric to ``builder`` as a series of canonical name (the reader named it)."""
        for metric, (steps, values, seqs) in self.columns.items():
            builder.add(
                metric, np.asarray(steps, np.int64), np.asarray(values), seq=np.asarray(seqs, np.int64), canonical=True
            )
