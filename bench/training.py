"""Goal 5: the training side. ``ingest.train_demo.measure_overhead(steps, ranks)`` times the demo
model's step with and without StabilityMonitor + clipping (real torch on CPU); the overhead must stay
under 2%. Measured on one rank (the goal's figure: the quietest measurement on 2 cores) and on the
demo's default 2 ranks, where gloo's threads and the two ranks share the 2 cores.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from bench import Figure, Sizes, Unavailable, log, median, repeat_child


def overhead(steps: int, ranks: int = 1) -> dict[str, Any]:
    try:
        from ingest.train_demo import measure_overhead
    except ImportError as exc:
        raise Unavailable(f"ingest.train_demo.measure_overhead not available yet ({exc})") from exc
    result = measure_overhead(steps, ranks)
    if dataclasses.is_dataclass(result) and not isinstance(result, type):
        result = dataclasses.asdict(result)
    if not isinstance(result, dict):
        result = {"overhead": float(result)}
    return {k: v for k, v in result.items() if isinstance(v, int | float | str | bool)}


def _overhead_fraction(result: dict[str, Any]) -> float:
    """The relative overhead from whatever ``measure_overhead`` names it (fraction, not percent)."""
    for key in ("overhead_fraction", "overhead", "relative_overhead"):
        if key in result:
            return float(result[key])
    if "overhead_pct" in result:
        return float(result["overhead_pct"]) / 100.0
    raise KeyError(f"no overhead figure in {sorted(result)}")


def run(sizes: Sizes, workdir: Path) -> list[Figure]:
    del workdir
    figures = []
    for ranks in (1, 2):
        log(f"goal 5: training overhead over {sizes.overhead_steps} steps, {ranks} rank(s)")
        args = {"steps": sizes.overhead_steps, "ranks": ranks}
        children = repeat_child("bench.training:overhead", sizes.repeats, args)
        fractions = [_overhead_fraction(c.result) for c in children]
        value = median(fractions)
        details = ", ".join(
            f"{k} {v:.4g}" if isinstance(v, float) else f"{k} {v}" for k, v in children[0].result.items()
        )
        figures.append(
            Figure(
                "5",
                f"StabilityMonitor + clipping overhead on the demo model's step, {ranks} rank(s)",
                value * 100.0,
                "%",
                target="< 2 %",
                met=value < 0.02,
                peak_rss_mb=median([c.peak_rss_mb for c in children]),
                repeats=sizes.repeats,
                note=details,
                samples=[f * 100.0 for f in fractions],
            )
        )
    return figures
