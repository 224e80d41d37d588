"""The step an incident starts (issue #32; docs/diagnosis.md, round 25 r25c). Pure."""

from __future__ import annotations

from collections.abc import Sequence

from stab_core.spikes import SpikeEvent


def excursion_start(spike: SpikeEvent, members: Sequence[SpikeEvent]) -> int:
    """The step an incident's excursion of ``spike``'s metric starts: the earliest start of its ``members`` of that
    metric. Its primary (the highest) may come from a later test that fired at the highest sample of a burst (a
    speedrun's loss out for 20 steps from 5579, peak 5591): the incident started at the first step out, not there.
    A grad norm that led a loss incident stays its lead (``grad_norm_lead_steps``), not the loss's start. Where the
    primary is non-finite, a member back before it began is an earlier episode the grouping put beside it, not the
    excursion's start (a start-up overshoot at step 2, back at 4, beside a loss that is NaN from step 20 on: the
    incident starts at 20; a finite burst's dips between its tests' events stay inside it)."""
    return min(
        (
            m.start
            for m in members
            if m.metric == spike.metric and not (spike.nonfinite and _back_before(m, spike.start))
        ),
        default=spike.start,
    )


def _back_before(member: SpikeEvent, step: int) -> bool:
    """Whether ``member`` was back in its band before ``step``."""
    return member.recovery_step is not None and member.recovery_step < step
