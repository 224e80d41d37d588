"""One scan for the tests that judge a series' first samples one at a time (issue #32): early jumps
(:func:`stab_core.incidents.early_jumps`), short runs' grad-norm surges (:mod:`stab_core.short_run_surges`) and a
signed objective's first rows (:mod:`stab_core.signed_spikes`). Each flags a sample against a level of its own,
and the event it starts lasts until a later sample is back; the scan then goes on after it. Pure.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import numpy.typing as npt

from stab_core.runview import FloatArray, IntArray
from stab_core.spikes import SpikeEvent, build_event

Flag = Callable[[int], tuple[float, float] | None]
"""For index i: ``(level, scale)`` when sample i starts an event, None otherwise (units of the series)."""
Back = Callable[[FloatArray, float, float], npt.NDArray[np.bool_]]
"""For the samples after a flagged one, its level and scale: which of them are back."""


def scanned_events(
    steps: IntArray, x: FloatArray, first: int, stop: int, metric: str, flag: Flag, back: Back, resume: int = 1
) -> list[SpikeEvent]:
    """The events of ``x`` (finite samples at ``steps``) flagged from index ``first`` to ``stop`` (exclusive):
    each recovers at the first later sample ``back`` says is back (None: never, and the scan stops), and the scan
    resumes ``resume`` samples after that recovery."""
    events: list[SpikeEvent] = []
    i = first
    while i < stop:
        judged = flag(i)
        if judged is None:
            i += 1
            continue
        level, scale = judged
        hits = np.flatnonzero(back(x[i + 1 :], level, scale))
        recovery = i + 1 + int(hits[0]) if hits.size else None
        last = recovery - 1 if recovery is not None else x.size - 1
        events.append(build_event(metric, steps, x, i, last, recovery, level, scale))
        if recovery is None:
            break
        i = recovery + resume
    return events
