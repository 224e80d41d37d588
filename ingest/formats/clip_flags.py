"""A per-record "was the gradient clipped" flag and the clip threshold it shows (issue #31; docs/diagnosis.md, round 23
f29b).

A trainer that logs its pre-clip grad norm and a true/false flag on each record (``{"grad_norm": 3.67, "clipped":
true}``) clips exactly the steps whose norm is above its ``max_norm``. A flag is no number, so it is no series; but
with the norms beside it, it says where the threshold lies: above every norm that was not clipped and at or below
every norm that was. The roundest number in that interval (fewest significant digits: a threshold is set by hand,
``1.0``, ``0.5``) is the run's ``max_norm`` (``meta['max_norm']``), from which the clip ratio is read as for a run
whose configuration states it (:func:`stab_core.analysis.run_clip_stats`): the ratio of each window is then that of
the flags. Flags that no threshold explains (a clipped norm below an unclipped one: the norm logged is not the one
clipped) and flags never set (the threshold is only bounded below) give none.
"""

from __future__ import annotations

import math
import re
from typing import Final

import numpy as np
import pyarrow as pa

from ingest.formats._tabular import to_float
from ingest.formats.aliases import canonical_name

CLIP_FLAG: Final = re.compile(
    r"^(?:.*/)?(?:(?:is|was)_)?(?:grad(?:ient)?s?_)?(?:clipped|clip_applied|clip_hit|clip_flag)$", re.IGNORECASE
)
"""A key naming a per-record clipped flag (``clipped``, ``grad_clipped``, ``is_clipped``)."""
MAX_DIGITS: Final = 6
"""Significant digits tried for the threshold before the interval's upper end is taken as it is."""


def _roundest(low: float, high: float) -> float:
    """The number of fewest significant digits in ``(low, high]`` (``high`` > ``low`` >= 0)."""
    top = math.floor(math.log10(high))
    for digits in range(1, MAX_DIGITS + 1):
        scale = 10.0 ** (top - digits + 1)
        value = math.floor(high / scale) * scale
        if value > low:
            return float(f"{value:.{digits}g}")
    return high


def clip_threshold(table: pa.Table) -> tuple[float, str] | None:
    """``(max_norm, the flag's name)`` that a boolean clipped flag and the pre-clip grad norm on the same records
    of ``table`` show, or None (no flag, no norm, no record clipped, or flags no threshold explains)."""
    flag = next((c for c in table.column_names if CLIP_FLAG.match(c) and pa.types.is_boolean(table[c].type)), None)
    norm = next((c for c in table.column_names if canonical_name(c)[0] == "grad_norm"), None)
    if flag is None or norm is None:
        return None
    values, present = to_float(table[norm])
    flags = table[flag].combine_chunks()
    both = present & np.isfinite(values) & np.asarray(flags.is_valid().to_numpy(zero_copy_only=False), dtype=bool)
    clipped = np.asarray(flags.fill_null(False).to_numpy(zero_copy_only=False), dtype=bool)
    hit, kept = values[both & clipped], values[both & ~clipped]
    low = float(kept.max()) if kept.size else 0.0
    if hit.size == 0 or float(hit.min()) <= low:
        return None
    return _roundest(low, float(hit.min())), flag
