"""What a metrics file's column is when its name alone is no alias (issue #31; docs/diagnosis.md, "Import: metrics
files").

A metrics file of a layout no reader was written for (a W&B history export, an ad-hoc script's CSV or
JSON Lines) names its columns ``<group>/<key>``, and qualifies a few keys; the rules, for any such file:

- a parameter count (``model/total_parameters``, ``n_params``) or a batch/sample count
  (``eval/num_batches``) is a property of the model or of the evaluation, never a metric;
- a key under a group of the run's speed or machine (``performance/tokens_per_second``,
  ``system/gpu_mem_gb``) is the metric its last part names when that part is a canonical metric's alias;
  other groups name a model part or a split (``discriminator/loss``, ``eval/tokens_per_second``) and are
  the alias table's to read;
- the gradient norm qualified by clipping is the norm before clipping (``grad_norm_before_clip``,
  ``grad_norm_pre_clip``: ``grad_norm``) or after it (``grad_norm_after_clip``: ``grad_norm_clipped``);
- the ``total`` of a timers group (``timing/total_ms``, ``timers/total_s``) is the step's time, in the
  unit its name ends with; the group's parts (forward, backward, optimizer) keep their own names.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Final

from ingest.formats.aliases import KeyMap, canonical_name
from stab_core.metrics import CANONICAL_METRICS

_SPLITS: Final = frozenset({"train", "training", "eval", "evaluation", "val", "valid", "validation", "test", "dev"})
_COUNTS = re.compile(
    r"(?:num_?|n_|total_|trainable_)?param(?:eter)?s?(?:_count)?|(?:num|n)_(?:batches|samples|examples)",
    re.IGNORECASE,
)
_CLIPPED = re.compile(r"(?P<norm>(?:grad|gradient)_?norm)_?(?P<when>before|pre|after|post)_?clip(?:ping|ped)?", re.I)
_MEASURE_GROUPS = frozenset({"performance", "perf", "throughput", "speed", "system", "sys", "hardware"})
_TIMERS = frozenset({"timing", "timings", "timer", "timers", "time", "times"})
_TOTAL = re.compile(r"total(?:_time)?_?(?P<unit>ms|s|sec|seconds)", re.IGNORECASE)


def column_name(raw: str) -> tuple[str, str | None] | None:
    """``(metric, unit)`` for the column ``raw`` of a metrics file, or None when it is no metric."""
    group, _, tail = raw.strip().rpartition("/")
    if _COUNTS.fullmatch(tail):
        return None
    name, unit = canonical_name(raw)
    if name in CANONICAL_METRICS:
        return name, unit
    clipped = _CLIPPED.fullmatch(tail)
    if clipped is not None and group.lower() not in _SPLITS - {"train", "training"}:
        return ("grad_norm" if clipped["when"].lower() in ("before", "pre") else "grad_norm_clipped"), None
    leaf = group.rpartition("/")[2].lower()
    if leaf in _TIMERS and (total := _TOTAL.fullmatch(tail)) is not None:
        return "step_time_s", {"sec": "s", "seconds": "s"}.get(total["unit"].lower(), total["unit"].lower())
    if leaf in _MEASURE_GROUPS:
        inner, inner_unit = canonical_name(tail)
        if inner in CANONICAL_METRICS:
            return inner, inner_unit
    return name, unit


def column_keymap(names: Iterable[str]) -> KeyMap | None:
    """The key mapping of :func:`column_name` for a table with ``names``; None when every column is read
    by its alias alone (the mapping would change nothing)."""
    if all(column_name(n) == canonical_name(n) for n in names):
        return None
    return column_name
