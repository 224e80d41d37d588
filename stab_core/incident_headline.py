"""An incident's one-line headline and its span, as the CLI and the Spikes page print them (a
:func:`stab_core.analysis.spike_to_dict` object in, words out; round 25, issue #32: one span formatter for both)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from stab_core.spikes import times


def _ratio_words(ratio: Any) -> str:
    return times(ratio) if isinstance(ratio, int | float) and math.isfinite(ratio) else "non-finite"


def incident_headline(item: Mapping[str, Any]) -> str:
    """One incident (a :func:`stab_core.analysis.spike_to_dict` object) in a line: its kind, steps, every metric
    in it and how far each moved, e.g. "spike at step 7435 (7435-7436): grad_norm 5.14x, loss 1.09x (under its
    spike threshold)"."""
    members = item.get("members") or [item]
    largest: dict[str, float] = {}
    for m in members:
        ratio = m.get("ratio")
        value = float(ratio) if isinstance(ratio, int | float) else math.inf
        largest[m["metric"]] = max(largest.get(m["metric"], -math.inf), value)
    floor = item.get("print_floor")
    moved = [
        # a level under the print's resolution is no level for a ratio (round 25): the print's floor is said
        f"{metric} up from its print's floor (under {floor:g})"
        if isinstance(floor, int | float) and metric == item.get("metric")
        else f"{metric} {_ratio_words(ratio)}"
        for metric, ratio in largest.items()
    ]
    for metric, ratio in (item.get("co_moves") or {}).items():
        if isinstance(ratio, int | float) and ratio < 1.0:
            moved.append(f"{metric} at {times(ratio)} its level")
        else:
            moved.append(f"{metric} {_ratio_words(ratio)} (under its spike threshold)")
    outlier = item.get("rank_outlier")
    if isinstance(outlier, Mapping):
        moved.append(
            f"rank {outlier.get('rank')}'s {outlier.get('metric')} {_ratio_words(outlier.get('ratio'))} the median "
            "of the other ranks"
        )
    kind = str(item.get("kind", "spike")).replace("_", " ")
    return f"{kind} at step {item['peak']} ({span_text(item)}): " + ", ".join(moved)


def span_text(item: Mapping[str, Any]) -> str:
    """An incident's steps (its JSON object) as every view prints them: the first step of any of its members
    to its last, the step it was back included (``until``; ``end`` in an old record without one), "4-6" (round
    25, issue #32: the Spikes page said "4–5" of the incident the CLI said "(4-6)" of)."""
    members = item.get("members") or [item]
    # from the first step of any member (a grad-norm spike that led the loss starts the incident)
    start = min(int(m["start"]) for m in members)
    return f"{start}-{item.get('until', item['end'])}"
