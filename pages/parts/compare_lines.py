"""Compared runs as lines: a run's x axis (steps or tokens), seeds grouped into a mean with a band, and
a run's best smoothed value. Pure numpy except ``to_x``, which reads a run's ``tokens`` series."""

from __future__ import annotations

import math
import re
import warnings
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd  # type: ignore[import-untyped]

from ingest.errors import StabScopeError
from ingest.store import RunInfo, SeriesData
from pages.parts.store_access import read_series

BEST_WINDOW = 50
"""Logged values in the rolling median whose lowest point is a run's "best" figure: one noisy batch
does not make it."""


def best_smoothed(values: np.ndarray, window: int = BEST_WINDOW) -> float:
    """The lowest point of the trailing rolling median of ``window`` consecutive finite values (the
    median of all of them when fewer); NaN when there are none. Units: those of ``values``."""
    finite = np.asarray(values, dtype=np.float64)
    finite = finite[np.isfinite(finite)]
    if finite.size == 0:
        return math.nan
    if finite.size < window:
        return float(np.median(finite))
    return float(pd.Series(finite).rolling(window).median().min())


_SEED_SUFFIX = re.compile(r"[-_.]?(?:seed|s)[-_]?\d+$", re.IGNORECASE)


def seed_group(info: RunInfo) -> str:
    """The group a run belongs to: ``meta['seed_group']``, else its name without a seed suffix
    (``gpt-seed3``, ``gpt_s3``, ``gpt-s-3`` -> ``gpt``)."""
    explicit = info.meta.get("seed_group")
    if isinstance(explicit, str) and explicit:
        return explicit
    return _SEED_SUFFIX.sub("", info.name) or info.name


@dataclass
class Line:
    """One compared curve: a run, or a seed group's mean with a band (``lower``/``upper``).

    ``smooth`` is the EMA of ``y`` (computed per run on its step axis, before any grouping).
    """

    label: str
    x: np.ndarray
    y: np.ndarray
    smooth: np.ndarray | None = None
    lower: np.ndarray | None = None
    upper: np.ndarray | None = None
    members: tuple[str, ...] = ()


def to_x(info: RunInfo, s: SeriesData, axis: str) -> np.ndarray:
    """The x coordinate of each point: its step, or the cumulative ``tokens`` logged at that step, else
    ``meta['tokens_per_step']`` x the steps done by then (the first logged step counts as the first)."""
    if axis == "step":
        return s.steps.astype(np.float64)
    tokens = read_series(info, "tokens")
    if tokens.steps.size == 0:
        per_step = info.meta.get("tokens_per_step")
        if isinstance(per_step, int) and per_step > 0 and info.first_step is not None:
            return (s.steps.astype(np.float64) - info.first_step + 1) * per_step
        raise StabScopeError(
            f"run {info.name} logged no `tokens` series and has no tokens_per_step: align by step instead, "
            "or set its tokens per step under Run settings (Cost or Spikes page)"
        )
    return np.asarray(np.interp(s.steps, tokens.steps, tokens.values), dtype=np.float64)


GROUP_GRID_POINTS = 6000
"""Most points of the shared grid a seed group is averaged on (the union of the runs' x when smaller)."""


def group_lines(runs: Sequence[Line], groups: dict[str, str], band: str) -> list[Line]:
    """Seeds of a group -> one mean line with a ``minmax`` or ``std`` band across the seeds.

    Each run (a ``Line`` labelled with its run name) is interpolated onto the union of the runs' x
    (or ``GROUP_GRID_POINTS`` even points when that is larger; NaN outside the run's own range); the mean, band and the
    smoothed mean are taken over the runs that have data at each point. A group of one stays as is.
    """
    if band not in ("minmax", "std"):
        raise ValueError(f"band must be 'minmax' or 'std', got {band!r}")
    members: dict[str, list[Line]] = {}
    for line in runs:
        members.setdefault(groups.get(line.label, line.label), []).append(line)
    out = []
    for group, lines in members.items():
        if len(lines) == 1:
            out.append(lines[0])
            continue
        lo = min(float(np.nanmin(line.x)) for line in lines)
        hi = max(float(np.nanmax(line.x)) for line in lines)
        union = np.unique(np.concatenate([line.x[np.isfinite(line.x)] for line in lines]))
        grid = union if union.size <= GROUP_GRID_POINTS else np.linspace(lo, hi, GROUP_GRID_POINTS)
        stack = np.vstack([_interp_within(grid, line.x, line.y) for line in lines])
        mean, lower, upper = _band(stack, band)
        smooth = None
        if all(line.smooth is not None for line in lines):
            smooth = _band(np.vstack([_interp_within(grid, ln.x, ln.smooth) for ln in lines]), band)[0]  # type: ignore[arg-type]
        names = tuple(line.label for line in lines)
        out.append(Line(f"{group} (mean of {len(lines)})", grid, mean, smooth, lower, upper, names))
    return out


def _band(stack: np.ndarray, band: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(mean, lower, upper) over the rows of ``stack``, ignoring NaN (empty columns give NaN)."""
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore", RuntimeWarning)
        mean = np.nanmean(stack, axis=0)
        if band == "minmax":
            return mean, np.nanmin(stack, axis=0), np.nanmax(stack, axis=0)
        std = np.nanstd(stack, axis=0)
        return mean, mean - std, mean + std


def _interp_within(grid: np.ndarray, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    keep = np.isfinite(x) & np.isfinite(y)
    x, y = x[keep], y[keep]
    if x.size == 0:
        return np.full(grid.shape, np.nan)
    out = np.asarray(np.interp(grid, x, y), dtype=np.float64)
    out[(grid < x[0]) | (grid > x[-1])] = np.nan
    return out
