"""A loss excursion inside an incident the loss has not come back from is part of it, not a new incident (issue
#32; docs/diagnosis.md, "Recovery").

A run that blew up and stays far above its level (a learning rate of 1.0 in a sweep: the loss at 7-700 for
thousands of steps) keeps swinging: each swing clears the spike detector's window of the swings before it, and
each was shown as a new spike that "recovered", to a level the run never returned to. For any run: a training-loss
incident that starts after an earlier shown (not blip) training-loss incident began and before that incident's
loss was back (its recovery step; never, for one that never came back) joins the earlier incident as members; the
incident keeps the earlier one's kind and primary, takes the higher severity of the two, and is over when both are.
A validation loss's or a grad norm's incident inside it stays its own (another series, judged on its own).
Pure: incidents in, incidents out.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Final

from stab_core.incidents import Incident

SEVERITY_RANK: Final = {"blip": 0, "spike": 1, "divergence": 2}
"""Severities from the least to the most costly."""


def _loss_led(incident: Incident) -> bool:
    return incident.primary.metric == "loss"


def _still_out(host: Incident, step: int) -> bool:
    """Is ``host``'s loss not yet back at ``step`` (after its start)?"""
    if step <= host.start:
        return False
    if host.loss_recovered_at is not None:
        return step < host.loss_recovered_at
    return not host.primary.recovered or step < host.until


def _joined(host: Incident, later: Incident) -> Incident:
    severity = max(host.severity, later.severity, key=SEVERITY_RANK.__getitem__)
    back = [b for b in (host.loss_recovered_at, later.loss_recovered_at) if b is not None]
    recovered_at = None if severity == "divergence" or host.loss_recovered_at is None else max(back)
    return replace(host, members=(*host.members, *later.members), severity=severity, loss_recovered_at=recovered_at)


def within_earlier(incidents: Sequence[Incident]) -> list[Incident]:
    """``incidents`` (sorted by start) with each training-loss incident that starts while an earlier shown
    training-loss incident's loss is still out joined to that one (module docstring)."""
    out: list[Incident] = []
    for incident in sorted(incidents, key=lambda i: i.start):
        host = next(
            (
                k
                for k in range(len(out) - 1, -1, -1)
                if out[k].severity != "blip" and _loss_led(out[k]) and _still_out(out[k], incident.start)
            ),
            None,
        )
        if host is not None and _loss_led(incident):
            out[host] = _joined(out[host], incident)
        else:
            out.append(incident)
    return out
