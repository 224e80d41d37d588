"""From measured runs to an experiment's aggregates: per (mechanism, arm) means with bootstrap
intervals, paired differences between arms, and the article's claims set against the measurements.

The statistics themselves are :mod:`stab_core.bootstrap`; this module only arranges the runs into
samples aligned by seed (a seed's runs in two arms saw the same data in the same order).
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Sequence

import numpy as np

from ingest.training.experiment_results import (
    ARMS,
    ARTICLE_CLAIMS,
    SUMMARY_FIGURES,
    ArmDifference,
    ArmSummary,
    Claim,
    ClaimCheck,
    RunResult,
)
from stab_core.bootstrap import Interval, bootstrap_mean, bootstrap_paired_difference, bootstrap_relative_change

COMPARED_PAIRS: tuple[tuple[str, str], ...] = (
    ("clip", "none"),
    ("zclip", "none"),
    ("restart", "none"),
    ("restart+clip", "none"),
    ("restart", "clip"),
    ("restart", "zclip"),
    ("restart+clip", "restart"),
    ("restart+clip", "clip"),
)
"""(arm, baseline) pairs whose differences are reported: every remedy against none, and the two
remedies against each other (the user's choice)."""
POOLED = "all"
"""The mechanism name of claim checks pooled over every mechanism (pairs are (mechanism, seed))."""


def figure_value(run: RunResult, figure: str) -> float:
    """One run's value of a ``SUMMARY_FIGURES`` figure (rates as 0/1; NaN where it has none)."""
    if figure == "spike_rate":
        return float(run.spiked)
    if figure == "success_rate":
        return float(run.succeeded)
    if figure == "divergence_rate":
        return float(run.diverged)
    if figure == "steps_to_recover":
        return math.nan if run.steps_to_recover is None else float(run.steps_to_recover)
    value = float(getattr(run, figure))
    return value if math.isfinite(value) else math.nan


def _stable_seed(*parts: str) -> int:
    """A bootstrap seed fixed by what is resampled, so the same runs always give the same intervals."""
    return zlib.crc32("|".join(parts).encode("utf-8"))


def _aligned(runs: Sequence[RunResult], keys: list[tuple[str, int]], arm: str, figure: str) -> np.ndarray:
    """``figure`` of ``arm``'s runs at each (mechanism, seed) key; NaN where that run is missing."""
    by_key = {(r.mechanism, r.seed): figure_value(r, figure) for r in runs if r.arm == arm}
    return np.array([by_key.get(k, math.nan) for k in keys], dtype=np.float64)


def _keys(runs: Sequence[RunResult], mechanism: str) -> list[tuple[str, int]]:
    return sorted({(r.mechanism, r.seed) for r in runs if mechanism in (POOLED, r.mechanism)})


def summarise_arms(runs: Sequence[RunResult], seed_groups: dict[tuple[str, str], str]) -> tuple[ArmSummary, ...]:
    """One :class:`ArmSummary` per (mechanism, arm) present, in mechanism then ``ARMS`` order."""
    out = []
    for mechanism in sorted({r.mechanism for r in runs}):
        for arm in ARMS:
            mine = [r for r in runs if r.mechanism == mechanism and r.arm == arm]
            if not mine:
                continue
            figures = {
                f: bootstrap_mean([figure_value(r, f) for r in mine], seed=_stable_seed(mechanism, arm, f))
                for f in SUMMARY_FIGURES
            }
            out.append(ArmSummary(mechanism, arm, len(mine), figures, seed_groups.get((mechanism, arm), "")))
    return tuple(out)


def arm_differences(runs: Sequence[RunResult]) -> tuple[ArmDifference, ...]:
    """Paired differences (arm - baseline) of every figure, for ``COMPARED_PAIRS`` present."""
    out = []
    for mechanism in sorted({r.mechanism for r in runs}):
        keys = _keys(runs, mechanism)
        arms = {r.arm for r in runs if r.mechanism == mechanism}
        for arm, baseline in COMPARED_PAIRS:
            if arm not in arms or baseline not in arms:
                continue
            for figure in SUMMARY_FIGURES:
                diff = bootstrap_paired_difference(
                    _aligned(runs, keys, arm, figure),
                    _aligned(runs, keys, baseline, figure),
                    seed=_stable_seed(mechanism, arm, baseline, figure),
                )
                out.append(ArmDifference(mechanism, arm, baseline, figure, diff))
    return tuple(out)


def _inside(value: float | None, interval: Interval) -> bool:
    return value is not None and interval.low - 1e-12 <= value <= interval.high + 1e-12


def check_claim(runs: Sequence[RunResult], claim: Claim, mechanism: str) -> ClaimCheck:
    """What ``mechanism`` (or ``POOLED``) measured for ``claim``."""
    keys = _keys(runs, mechanism)
    arm = _aligned(runs, keys, claim.arm, claim.figure)
    base = _aligned(runs, keys, claim.baseline, claim.figure)
    seed = _stable_seed(claim.key, mechanism)
    measured_arm = bootstrap_mean(arm, seed=seed)
    measured_base = bootstrap_mean(base, seed=seed + 1)
    change = bootstrap_relative_change(arm, base, seed=seed + 2)
    agrees: bool | None
    # the direction from the paired difference: a ratio's interval collapses to -100 % whenever the arm
    # has no event at all, however few the baseline's were
    diff = bootstrap_paired_difference(arm, base, seed=seed + 3)
    if claim.kind == "relative_change":
        agrees = None if change.empty else _inside(claim.claimed_change, change)
        claimed = claim.claimed_change or 0.0
    else:
        empty = measured_arm.empty or measured_base.empty
        agrees = (
            None
            if empty
            else _inside(claim.claimed_baseline, measured_base) and _inside(claim.claimed_arm, measured_arm)
        )
        claimed = (claim.claimed_arm or 0.0) - (claim.claimed_baseline or 0.0)
    direction = None if diff.empty or (change.empty and claim.kind == "relative_change") else _same_side(claimed, diff)
    return ClaimCheck(claim.key, mechanism, measured_base, measured_arm, change, agrees, direction)


def _same_side(claimed: float, interval: Interval) -> bool:
    """The interval excludes 0 on the side of ``claimed``'s sign."""
    return interval.low > 0.0 if claimed > 0 else interval.high < 0.0


def claim_checks(runs: Sequence[RunResult], claims: Sequence[Claim] = ARTICLE_CLAIMS) -> tuple[ClaimCheck, ...]:
    """Every claim for each mechanism with both of its arms, and pooled when there are several."""
    mechanisms = sorted({r.mechanism for r in runs})
    scopes = [*mechanisms, POOLED] if len(mechanisms) > 1 else mechanisms
    out = []
    for claim in claims:
        for mechanism in scopes:
            arms = {r.arm for r in runs if mechanism in (POOLED, r.mechanism)}
            if claim.arm in arms and claim.baseline in arms:
                out.append(check_claim(runs, claim, mechanism))
    return tuple(out)
