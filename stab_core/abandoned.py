"""The attempts a resume replaced (issue #31): a job that crashes after a checkpoint and is resumed from it
re-logs the steps it replays, and the later rows win in the stored series. The purged loss rows ride on the
``rollback`` event (``detail['abandoned']``, see ``ingest.formats.log_rows.rollback_detail``); here each
abandoned attempt becomes a view of its own (the run before the resume, then the attempt's values), so
the detector looks at it too: an incident found there is often why the job restarted."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from stab_core.runview import RankMatrix, RunView, Series


@dataclass(frozen=True)
class AbandonedAttempt:
    """One attempt a resume replaced: ``first`` (its first logged step), ``resumed_from`` (the first step
    the attempt that replaced it logged), ``abandoned_at`` (its last logged step) and ``view``: the run's
    loss before ``first``, then the attempt's loss."""

    first: int
    resumed_from: int
    abandoned_at: int
    view: RunView

    def note(self) -> str:
        """How an incident found in it is introduced."""
        return f"in an attempt abandoned at step {self.abandoned_at} (resumed from {self.resumed_from})"


def abandoned_attempts(view: RunView, metric: str = "loss") -> list[AbandonedAttempt]:
    """The attempts of ``view`` that a resume replaced and whose ``metric`` rows were kept, by step. An
    attempt was resumed from the first step of the next one, the last from the rollback's first step."""
    out = []
    current = view.series.get(metric)
    for event in view.events:
        chunks: list[Any] = (event.detail.get("abandoned", {}).get(metric) if event.kind == "rollback" else None) or []
        s0 = int(event.detail.get("replayed_from", event.step))
        for index, chunk in enumerate(chunks):
            if len(chunk) != 2 or not chunk[0]:
                continue
            steps = np.asarray(chunk[0], dtype=np.int64)
            values = np.asarray([np.nan if v is None else v for v in chunk[1]], dtype=np.float64)
            first, last = int(steps[0]), int(steps[-1])
            later = chunks[index + 1][0] if index + 1 < len(chunks) and chunks[index + 1][0] else None
            resumed_from = int(later[0]) if later else s0
            if current is not None:
                before = current.steps < first
                steps = np.concatenate([current.steps[before], steps])
                values = np.concatenate([current.values[before], values])
            order = np.argsort(steps, kind="stable")
            series = Series(steps[order], values[order])
            attempt = _before(view, first)
            attempt.series[metric] = series
            out.append(AbandonedAttempt(first, resumed_from, last, attempt))
    return sorted(out, key=lambda a: a.first)


def _before(view: RunView, first: int) -> RunView:
    """``view`` up to the step before ``first``: what the run had logged when the attempt began (the
    replay's own values of the other metrics are not the abandoned attempt's; none of its were kept)."""
    series = {k: Series(v.steps[v.steps < first], v.values[v.steps < first]) for k, v in view.series.items()}
    per_rank = {
        k: RankMatrix(m.ranks, m.steps[m.steps < first], m.values[:, m.steps < first], m.present[:, m.steps < first])
        for k, m in view.per_rank.items()
    }
    events = tuple(e for e in view.events if e.step < first)
    return RunView(name=view.name, series=series, per_rank=per_rank, events=events, meta=view.meta)
