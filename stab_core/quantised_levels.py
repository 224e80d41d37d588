"""Levels of a loss printed at a fixed resolution (issue #32; docs/diagnosis.md, "Rules added in round 25").

A loss printed with 4 decimals reads 0.0000 once it is under 0.00005: after a long fall most of its values are
0.0000 or 0.0001, and their median (0, 5e-05) is no level a ratio can be taken against ("rose to 38x its
level (5e-05 -> 0.0019)"), nor one it can be said never to have come back to. The rule: a quantised series'
level is at least half its print's last digit (a printed 0.0000 is "below 0.00005"); a level under the
resolution itself is said as the print's floor, with no ratio; and whether the loss came back is judged against
that floor with a noise of at least one print step (:func:`stab_core.run_end_rises.lasting_at_end`).
"""

from __future__ import annotations

from typing import Final

from stab_core.incidents import RECOVER_RATIO
from stab_core.rolling_baseline import MAD_TO_Z

FLOOR_SIGMAS: Final = 3.0
"""A loss back within this many print-step sigmas (one print step as a MAD) of a floored level is back at it (the
sigmas :func:`stab_core.run_end_rises.lasting_at_end` asks of a level that lasts)."""


def floored_level(level: float, resolution: float) -> float:
    """``level`` (a median of printed values) no lower than half of ``resolution`` (the smallest step between the
    series' distinct values, :func:`stab_core.rolling_baseline.logging_resolution`; ~0 for unrounded floats)."""
    return max(level, resolution / 2.0)


def under_resolution(level: float, resolution: float) -> bool:
    """Whether ``level`` is under the print's ``resolution``: the values it rests on are 0 or one print step, and
    no ratio against it says how far the loss moved."""
    return resolution > 0.0 and level < resolution


def back_at_most(level: float, resolution: float) -> float:
    """The highest value (a block median, a sample) that is back at ``level``: within
    :data:`~stab_core.incidents.RECOVER_RATIO` of it, or, for a level under the print's ``resolution``, within
    :data:`FLOOR_SIGMAS` print-step sigmas of its floor (:func:`floored_level`): a loss printed 0.0000-0.0001 that
    rose to 0.04 is back at 0.0002, two print steps up, and no ratio says otherwise."""
    if not under_resolution(level, resolution):
        return RECOVER_RATIO * level
    return max(RECOVER_RATIO * level, floored_level(level, resolution) + FLOOR_SIGMAS * resolution / MAD_TO_Z)
