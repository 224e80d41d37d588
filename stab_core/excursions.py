"""The step an incident starts (issue #32; docs/diagnosis.md, round 25 r25c). Pure."""

from __future__ import annotations

from collections.abc import Sequence

from stab_core.spikes import SpikeEvent


def excursion_start(spike: SpikeEvent, members: Sequence[SpikeEvent]) -> int:
    """The step an incident's excursion of ``spike``'s metric starts: the earliest start of its ``members`` of that
    metric. Its primary (the highest) may come from a later test that fired at the highest sample of a burst (a
    speedrun's loss out for 20 steps from 5579, peak 5591): the incident started at the first step out, not there.
    A grad norm that led a loss incident stays its lead (``grad_norm_lead_steps``), not the loss's start."""
    return min((m.start for m in members if m.metric == spike.metric), default=spike.start)
