"""The attempts a resume replaced (issue #31): a job that crashes after a checkpoint and is resumed from it
re-logs the steps it replays, and the later rows win in the stored series. The purged loss rows ride on the
``rollback`` event (``detail['abandoned']``, see ``ingest.formats.log_rows.rollback_detail``); here each
abandoned attempt becomes a view of its own (the run before the resume, then the attempt's values), so
the detector looks at it too: an incident found there is often why the job restarted."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Final

import numpy as np

from stab_core.runview import RankMatrix, RunView, Series

if TYPE_CHECKING:
    from stab_core.incidents import Incident
    from stab_core.severity import SeverityLevel

LEVEL_WINDOW: Final = 60
"""Finite samples before a jump that give the attempt's own level (the golden files' '60 steps before')."""
MIN_HOLD: Final = 20
"""Samples the attempt must hold its new level over (and a replay must share) to be a lasting jump."""
JUMP: Final = 1.1
"""The least rise of a level (the attempt's new median over its old one, and over the replay's median
of the same steps) that is a jump and not the wander of a per-step loss."""
END_SAMPLES: Final = 5
"""The attempt's last finite samples whose median is where an incident in it stood when the resume replaced it."""


@dataclass(frozen=True)
class AbandonedAttempt:
    """One attempt a resume replaced: ``first`` (its first logged step), ``resumed_from`` (the first step
    the attempt that replaced it logged), ``abandoned_at`` (its last logged step) and ``view``: the run's
    loss before ``first``, then the attempt's loss."""

    first: int
    resumed_from: int
    abandoned_at: int
    view: RunView
    onset: int | None = None
    """The first step over a lasting jump of the attempt's loss (:func:`jump_onset`), None when none."""

    def dated(self, incidents: Sequence[Incident]) -> list[Incident]:
        """Those of ``incidents`` (the detector's on :attr:`view`) that peak in the attempt, the one that
        covers its jump dated at the jump's first step over (:attr:`onset`), not at the step the
        detector's rolling level let it see it. (Where the detector saw nothing, nothing is added: an
        incident built from the onset alone had no costed severity or recovery to say.)"""
        incidents = [self._cut_by_resume(i) for i in incidents if i.primary.peak >= self.first]
        if self.onset is None:
            return incidents
        onset, out = self.onset, []
        for incident in incidents:
            lead = incident.primary
            if lead.metric == "loss" and onset <= incident.start <= onset + LEVEL_WINDOW:
                moved = [replace(m, start=onset) if m is lead else m for m in incident.members]
                incident = replace(incident, members=tuple(moved))
            out.append(incident)
        return out

    def _cut_by_resume(self, incident: Incident) -> Incident:
        """``incident`` with a finite lead that never came back marked cut off (not diverged, severity at most
        ``spike``) when the attempt's loss had fallen back more than half-way from its peak to its level (the
        median of its last :data:`END_SAMPLES` samples at or under their geometric mean) when the resume replaced
        it: the attempt ended at a relaunch, not at the run's fate, and a loss coming back is no divergence.
        One still up at its end keeps the detector's call (a divergence is often why the job was relaunched)."""
        lead = incident.primary
        series = self.view.series.get(lead.metric)
        if not lead.diverged or lead.nonfinite or series is None or not 0 < lead.baseline < lead.peak_value:
            return incident
        tail = series.values[series.steps >= lead.start]
        tail = tail[np.isfinite(tail)][-END_SAMPLES:]
        if not tail.size or float(np.median(tail)) > float(np.sqrt(lead.baseline * lead.peak_value)):
            return incident
        members = tuple(replace(m, diverged=False) if m.diverged and not m.nonfinite else m for m in incident.members)
        severity: SeverityLevel = "spike" if incident.severity == "divergence" else incident.severity
        return replace(incident, members=members, severity=severity)

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
            replay = None if current is None else (current.steps, current.values)
            onset = jump_onset(series.steps, series.values, first, resumed_from, replay)
            out.append(AbandonedAttempt(first, resumed_from, last, attempt, onset))
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


def jump_onset(
    steps: np.ndarray,
    values: np.ndarray,
    first: int,
    resumed_from: int,
    replay: tuple[np.ndarray, np.ndarray] | None,
) -> int | None:
    """The first step over a lasting jump of an abandoned attempt's loss, or None (docs/diagnosis.md, "Abandoned
    attempts").

    ``steps``/``values``: the run before the attempt, then the attempt (from step ``first``); the later
    attempt logged the same steps again from ``resumed_from`` (``replay``: the stored series). The
    jump is the split of the attempt's samples (with :data:`LEVEL_WINDOW` before it) into an old and a
    higher new level that fits best (a least-squares change point of the log loss); it counts when the
    new level holds :data:`MIN_HOLD` samples to the attempt's end, is :data:`JUMP` times the old level
    at least, stands clear of its noise (the new level's lower quartile over the old level's upper
    quartile), and, where the replay logged :data:`MIN_HOLD` of the attempt's steps again, is
    :data:`JUMP` times the replay's median of those steps too (the same steps run again were normal).
    The onset is the first step at or after the split over the midpoint of the two levels."""
    finite = np.isfinite(values) & (values > 0)
    steps, values = steps[finite], values[finite]
    begin = max(0, int(np.searchsorted(steps, first)) - LEVEL_WINDOW)
    steps, values = steps[begin:], values[begin:]
    own = int(np.searchsorted(steps, first))  # the attempt's first sample
    n = values.shape[0]
    if n - own < MIN_HOLD or own == 0:
        return None
    logs = np.log(values)
    cum = np.concatenate([[0.0], np.cumsum(logs)])
    split = np.arange(max(1, own), n - MIN_HOLD + 1)
    mean_before = cum[split] / split
    mean_after = (cum[n] - cum[split]) / (n - split)
    gain = np.where(mean_after > mean_before, split * (n - split) / n * (mean_after - mean_before) ** 2, -1.0)
    if gain.max() <= 0:
        return None
    cut = int(split[int(np.argmax(gain))])
    before = values[max(0, cut - LEVEL_WINDOW) : cut]
    after = values[cut:]
    old, new = float(np.median(before)), float(np.median(after))
    if new < JUMP * old or np.quantile(after, 0.25) <= np.quantile(before, 0.75):
        return None
    if replay is not None:
        shared = steps[cut:][steps[cut:] >= resumed_from]
        index = np.searchsorted(replay[0], shared)
        index = index[(index < replay[0].shape[0])]
        index = index[np.isin(replay[0][index], shared)]
        again = replay[1][index]
        again = again[np.isfinite(again)]
        if again.shape[0] >= MIN_HOLD:
            mine = values[cut:][np.isin(steps[cut:], replay[0][index])]
            if float(np.median(mine)) < JUMP * float(np.median(again)):
                return None
    over = np.flatnonzero(after > np.sqrt(old * new))
    return int(steps[cut + int(over[0])]) if over.size else None


def attempt_json(out: dict[str, Any], attempt: tuple[int, int] | None) -> dict[str, Any]:
    """An incident's JSON object (``spike_to_dict``) with ``abandoned_attempt`` (``attempt``: resumed from,
    abandoned at; None: found in the run, ``out`` as it is). A recovery cut off where the attempt's values end
    says that a resume replaced the attempt there: the log itself goes on."""
    if attempt is None:
        return out
    out["abandoned_attempt"] = {"resumed_from": attempt[0], "abandoned_at": attempt[1]}
    for claim in out.get("claims") or []:
        if claim.get("kind") == "recovery" and (claim.get("evidence") or {}).get("cut_off"):
            claim["text"] = (
                f"Not back by step {attempt[1]}, where a resume from step {attempt[0]} replaced this attempt: "
                "whether it would have come back cannot be told."
            )
    return out
