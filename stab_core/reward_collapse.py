"""An RL fine-tune whose reward falls to one constant value for good is a collapse (round 23, issue #32;
docs/diagnosis.md, "GANs and RL").

A GRPO/RLOO/PPO trainer (TRL's ``reward``, ``rewards/<fn>/mean``) scores a group of completions per prompt
and learns from how they differ (the advantages). When every completion gets the same score (``reward_std``
0: every completion hits the length cap and scores 0, say) the advantages are all zero: the policy gets no
learning signal, and what the loss still shows is the KL term (it falls to ~0, which reads as "healthy").
A reward stuck at one value below where it was, to the end of the log, is the run's incident.

The rule, for the run's reward (:data:`REWARD_NAME`; ``reward`` itself first): its last
:data:`MIN_TAIL` or more finite samples are all exactly one value, below the median of the finite samples
before them (at least one), and where the run logs the reward's spread (:data:`SPREAD_NAME`) it is 0 at
every one of them. The incident starts at the first sample of that constant tail; it never recovers: a
``divergence``. A reward at its ceiling (every completion right) is not below its level, so not a collapse.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Final

import numpy as np

from stab_core.incidents import Incident
from stab_core.runview import Series
from stab_core.spikes import SpikeEvent, build_event

REWARD_NAME: Final = re.compile(r"(?:^|/)(?:rewards?(?:_mean)?|rewards/[^/]+/mean)$", re.IGNORECASE)
"""An RL fine-tune's mean reward per logging step (not its std, not a zero-std fraction)."""
SPREAD_NAME: Final = re.compile(r"(?:^|/)(?:reward_std|rewards/[^/]+/std)$", re.IGNORECASE)
MIN_TAIL: Final = 5
"""Logged samples the reward must hold one value to the end: fewer may be a few hard prompts in a row."""


def reward_series(series: Mapping[str, Series]) -> str | None:
    """The run's mean-reward series: ``reward`` when logged, else the first name :data:`REWARD_NAME` matches."""
    names = sorted(n for n in series if REWARD_NAME.search(n))
    return "reward" if "reward" in names else next(iter(names), None)


def _spread_zero(series: Mapping[str, Series], start: int) -> bool:
    """Is every logged reward spread (:data:`SPREAD_NAME`) 0 from step ``start`` on (True: none logged)?"""
    for name, spread in series.items():
        if SPREAD_NAME.search(name):
            tail = spread.values[spread.steps >= start]
            tail = tail[np.isfinite(tail)]
            if tail.size and bool(np.any(tail != 0.0)):
                return False
    return True


def reward_collapse(series: Mapping[str, Series]) -> SpikeEvent | None:
    """The reward's collapse (see the module) as a diverged event from the first sample of its constant
    tail, its level the median of the samples before; None when there is none."""
    name = reward_series(series)
    if name is None:
        return None
    reward = series[name]
    keep = np.isfinite(reward.values)
    steps, values = reward.steps[keep], reward.values[keep]
    if values.size <= MIN_TAIL:
        return None
    stuck = values == values[-1]
    first = int(values.size - np.argmin(stuck[::-1])) if not stuck.all() else 0
    if first == 0 or values.size - first < MIN_TAIL:
        return None
    level = float(np.median(values[:first]))
    value = float(values[-1])
    start = int(steps[first])
    if not value < level or not _spread_zero(series, start):
        return None
    # build_event reads an upward spike: its z and "back at or below the level" mean nothing for a fall
    event = build_event(name, steps, values, first, values.size - 1, None, level, math.inf)
    return replace(event, z=math.nan, steps_lost=int(steps[-1]) - start)


def reward_collapses(series: Mapping[str, Series], incidents: Sequence[Incident]) -> list[Incident]:
    """``incidents`` with the reward's collapse added as a ``divergence`` unless an incident of the reward
    already holds its start."""
    event = reward_collapse(series)
    if event is None or any(
        m.metric == event.metric and m.start <= event.start <= m.until for i in incidents for m in i.members
    ):
        return list(incidents)
    return sorted([*incidents, Incident("spike", (event,), {}, severity="divergence")], key=lambda i: i.start)
