"""JSON Lines records whose every statistic is a summary of several samples (issue #31; docs/diagnosis.md, "Import:
metrics files"): StyleGAN2/3's ``stats.jsonl`` (``torch_utils.training_stats``) writes ``{"Loss/G/loss": {"num": 32,
"mean": 3.48, "std": 0.89}, "Progress/tick": {"num": 1, "mean": 0.0, ...}, ...}`` once per tick. The rules,
for any such file:

- a statistic nested as ``{num, mean[, std]}`` is one value, its mean, stored under the statistic's own
  name; ``num`` (a sample count) and ``std`` (a spread) are no series of their own;
- with no step field, a progress counter (``Progress/tick``, ``progress/step``) is the step axis, and the
  seconds per that unit (``Timing/sec_per_tick``) are then the step's time.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Final

import pyarrow as pa

_PROGRESS: Final = re.compile(r"^progress/(?P<unit>tick|step|iter|iteration|batch)$", re.IGNORECASE)


def unwrap_stats(table: pa.Table) -> pa.Table:
    """``table`` (flattened ``parent/child`` columns) with each ``X/mean`` beside an ``X/num`` stored as
    ``X`` and the ``X/num``/``X/std`` columns dropped; unchanged without such a statistic."""
    names = table.column_names
    stats = [n[: -len("/mean")] for n in names if n.endswith("/mean") and n[: -len("/mean")] + "/num" in names]
    if not stats:
        return table
    taken = set(names)
    drop = [f"{s}/{part}" for s in stats for part in ("num", "std") if f"{s}/{part}" in taken]
    for stat in stats:
        if stat in taken:  # a plain column already holds that name: keep the mean under its own
            continue
        table = table.rename_columns([stat if n == f"{stat}/mean" else n for n in table.column_names])
    return table.drop_columns(drop)


def progress_step(table: pa.Table, step_candidates: Sequence[str]) -> pa.Table:
    """``table`` with its progress counter renamed ``step`` (and the seconds per that counter's unit
    ``step_time_s``) where no column of ``step_candidates`` is the step; unchanged otherwise."""
    names = table.column_names
    if any(c in names for c in step_candidates):
        return table
    found = next(((n, m["unit"]) for n in names if (m := _PROGRESS.match(n))), None)
    if found is None or "step" not in step_candidates:
        return table
    counter, unit = found
    per_unit = re.compile(rf"(?:^|/)(?:sec|s|seconds)_per_{unit}$", re.IGNORECASE)
    renamed = []
    for n in names:
        if n == counter:
            renamed.append("step")
        elif per_unit.search(n) and "step_time_s" not in names and "step_time_s" not in renamed:
            renamed.append("step_time_s")
        else:
            renamed.append(n)
    return table.rename_columns(renamed)
