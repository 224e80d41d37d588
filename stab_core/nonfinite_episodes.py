"""A loss non-finite on consecutive logged samples, then finite again: an episode to report (issue #32;
docs/diagnosis.md, "Non-finite values").

A value gone non-finite that the series comes back from is no divergence (docs/diagnosis.md, "Spike detector"): a NaN
loss at one log with the next back at its level is one batch whose loss overflowed, a ``blip``. Two or more logged
samples in a row non-finite are more than one batch: every update (or every batch of an epoch mean) between
them produced a non-finite loss, and the run trained on (or skipped) them for that long. On a run logged per
epoch (a YOLOv5 results table: the box and objectness losses NaN on two consecutive epoch rows at a high
learning rate, then finite again) the blip rule's few steps are two whole epochs.

The rule, for any run: an incident the severity rules made a ``blip`` whose loss is non-finite on
:data:`EPISODE_SAMPLES` consecutive logged samples or more inside it is a ``spike`` (recovered when the loss
is finite and back: its recovery stands). A lone non-finite sample stays a blip.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Final

import numpy as np

from stab_core.incidents import Incident
from stab_core.runview import Series

EPISODE_SAMPLES: Final = 2
"""Consecutive non-finite logged loss samples that make an episode, not one overflowed batch."""


def longest_nonfinite(loss: Series, start: int, until: int) -> int:
    """The most consecutive non-finite logged samples of ``loss`` in ``start..until`` (steps, inclusive)."""
    first, last = np.searchsorted(loss.steps, [start, until + 1])
    longest = run = 0
    for bad in ~np.isfinite(loss.values[first:last]):
        run = run + 1 if bad else 0
        longest = max(longest, run)
    return longest


def nonfinite_episodes(series: Mapping[str, Series], incidents: Sequence[Incident]) -> list[Incident]:
    """``incidents`` with each blip holding a non-finite loss episode made a ``spike`` (module docstring)."""
    loss = series.get("loss")
    if loss is None or loss.steps.size == 0 or np.isfinite(loss.values).all():
        return list(incidents)
    return [
        replace(incident, severity="spike")
        if incident.severity == "blip"
        and any(m.metric == "loss" and m.nonfinite for m in incident.members)
        and longest_nonfinite(loss, incident.start, incident.until) >= EPISODE_SAMPLES
        else incident
        for incident in incidents
    ]
