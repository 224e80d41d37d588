"""Gradient clipping without torch: the formulas, the per-step record, and the clipping statistics of a
stored run.

One coefficient formula serves the clippers and the stored runs alike: torch's
``min(1, max_norm / (norm + 1e-6))`` (``torch.nn.utils.clip_grad_norm_``), implemented once in
:func:`clip_coef` (arrays) and :func:`scalar_clip_coef` (one norm, plain floats, the same IEEE
operations). ZClip's update rule (:func:`zclip_update`) is here too.

The clippers that act on gradients in a training loop (``clip_grad_norm``, ``ZClip``,
``global_grad_norm``) live in :mod:`ingest.training.torch_clipping`, which imports torch at the top; this
module imports numpy only, so the pages and analyses that read a stored run's clipping do not pay
torch's import.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]
NonFinitePolicy = Literal["skip", "raise", "clip"]

CLIP_EPS = 1e-6
"""torch's guard in ``max_norm / (norm + 1e-6)``."""
CLIP_SATURATION = 0.9
"""Trailing clip ratio (fraction of steps clipped) at which clipping counts as saturated: the analyses'
default (``stab_core.analysis.AnalysisParams``) and the alerts' threshold (``stab_core.alerts``)."""

NONFINITE_POLICIES: tuple[str, ...] = ("skip", "raise", "clip")


class NonFiniteGradientError(FloatingPointError):
    """Raised by the ``raise`` policy when the global gradient norm is NaN or infinite."""


# --------------------------------------------------------------------------------------------------
# The one formula
# --------------------------------------------------------------------------------------------------


def clip_coef(norm: npt.ArrayLike, max_norm: float | npt.ArrayLike) -> FloatArray:
    """Clip coefficient ``min(1, max_norm / (norm + 1e-6))`` (torch's convention), elementwise.

    Follows torch on non-finite norms too: a NaN norm gives NaN, an infinite norm gives 0.
    """
    norms = np.asarray(norm, dtype=np.float64)
    limits = np.asarray(max_norm, dtype=np.float64)
    return np.asarray(np.minimum(1.0, limits / (norms + CLIP_EPS)), dtype=np.float64)


def scalar_clip_coef(norm: float, max_norm: float) -> float:
    """:func:`clip_coef` for one norm in plain floats (the same IEEE operations, no numpy call):
    ``min(1, max_norm / (norm + 1e-6))``, NaN when the quotient is NaN."""
    coef = max_norm / (norm + CLIP_EPS)
    return coef if coef < 1.0 or coef != coef else 1.0


def require_max_norm(max_norm: float) -> None:
    """Raise ValueError unless ``max_norm`` is a finite L2 norm > 0."""
    try:
        value = float(max_norm)
    except (TypeError, ValueError):
        raise ValueError(f"max_norm must be a number (an L2 norm), got {max_norm!r}") from None
    if not (math.isfinite(value) and value > 0):
        raise ValueError(f"max_norm must be a finite L2 norm > 0, got {max_norm!r}")


def require_policy(nonfinite: str) -> None:
    """Raise ValueError unless ``nonfinite`` names a policy for non-finite gradients."""
    if nonfinite not in NONFINITE_POLICIES:
        raise ValueError(f"nonfinite must be one of {NONFINITE_POLICIES}, got {nonfinite!r}")


# --------------------------------------------------------------------------------------------------
# The per-step record (both clippers of ingest.training.torch_clipping return it; the monitor logs it)
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ClipRecord:
    """What one clipping call did (norms are global L2 norms of the gradients).

    ``total_norm``: before clipping (NaN/inf when the gradients are non-finite).
    ``post_norm``: after clipping (0 when the step was skipped).
    ``clip_coef``: the factor the gradients were multiplied by (1 = untouched, 0 when skipped).
    ``clipped``: the coefficient was below 1. ``skipped``: non-finite gradients were dropped.
    ``max_norm``: the limit in force this step (ZClip: its adaptive limit; inf when none applied).
    ``z``: ZClip's z-score of the norm (NaN for plain clipping and during ZClip's warm-up).
    """

    total_norm: float
    post_norm: float
    clip_coef: float
    clipped: bool
    skipped: bool
    max_norm: float
    z: float = math.nan

    def as_metrics(self) -> dict[str, float]:
        """The record under the canonical metric names of :mod:`stab_core.metrics`."""
        return {
            "grad_norm": self.total_norm,
            "grad_norm_clipped": self.post_norm,
            "clip_coef": self.clip_coef,
            "nonfinite_grads": 1.0 if self.skipped else 0.0,
        }


# --------------------------------------------------------------------------------------------------
# ZClip's update rule (Kumar et al. 2025, arXiv:2504.02507; the clipper is torch_clipping.ZClip)
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ZClipUpdate:
    """One ZClip step on a scalar grad norm.

    ``z``: ``(norm - mean) / (sqrt(var) + eps)``. ``clipped``: ``z > z_thresh``. ``threshold``: the norm
    the gradient is clipped to, ``mean + z_thresh*sqrt(var) / (z / z_thresh)`` when clipped, else the
    norm itself. ``mean``, ``var``: the EMA statistics after the step, updated with ``threshold``.
    """

    z: float
    clipped: bool
    threshold: float
    mean: float
    var: float


def zclip_update(
    mean: float, var: float, grad_norm: float, alpha: float = 0.97, z_thresh: float = 2.5, eps: float = 1e-6
) -> ZClipUpdate:
    """ZClip's z-score test, adaptive threshold and EMA update (Kumar et al. 2025, "adaptive scaling").

    The EMA absorbs the clipped norm, so a spike does not inflate the statistics it is judged by:
    ``mean' = alpha*mean + (1-alpha)*t``, ``var' = alpha*var + (1-alpha)*(t - mean')**2``.
    Known answer: mean 1, var 0.01, norm 2 -> z ~ 10.0, threshold 1.0625006, mean' 1.001875,
    var' 0.0098103.
    """
    if not (math.isfinite(mean) and math.isfinite(var) and var >= 0):
        raise ValueError(f"ZClip statistics must be finite with var >= 0, got mean={mean!r}, var={var!r}")
    if not math.isfinite(grad_norm):
        raise ValueError(f"grad_norm must be finite to update ZClip's statistics, got {grad_norm!r}")
    std = math.sqrt(var)
    z = (grad_norm - mean) / (std + eps)
    clipped = z > z_thresh
    threshold = mean + z_thresh * std / (z / z_thresh) if clipped else grad_norm
    new_mean = alpha * mean + (1.0 - alpha) * threshold
    new_var = alpha * var + (1.0 - alpha) * (threshold - new_mean) ** 2
    return ZClipUpdate(z, clipped, threshold, new_mean, new_var)


# --------------------------------------------------------------------------------------------------
# Clipping statistics of a stored run
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ClipStats:
    """Clipping behaviour of a run, per logged step and per trailing window.

    Per step: ``clipped`` (coefficient below 1), ``coef`` (NaN where the norm is non-finite),
    ``post_norm`` (grad norm after clipping), ``nonfinite`` (the grad norm was NaN/inf; such steps are
    left out of every ratio and mean). Per trailing window of ``window`` logged steps:
    ``clip_ratio`` (fraction of finite steps clipped), ``mean_coef``, ``saturated`` (a full window
    with ``clip_ratio >= saturation``: max_norm is too low, or the run is sick).
    ``overall_clip_ratio``: clipped steps over finite steps (NaN when none is finite).
    """

    clipped: BoolArray
    coef: FloatArray
    post_norm: FloatArray
    nonfinite: BoolArray
    clip_ratio: FloatArray
    mean_coef: FloatArray
    saturated: BoolArray
    overall_clip_ratio: float
    max_norm: float
    window: int
    saturation: float


_STATS_BLOCK = 1 << 18
"""Entries per block of ``clipping_stats`` (2 MB of float64: reused memory, not fresh pages)."""


def _trailing_sum(values: FloatArray, window: int) -> FloatArray:
    """Sum over the last ``window`` entries ending at each index (fewer at the start)."""
    sums = np.cumsum(values, dtype=np.float64)
    if window < sums.size:
        sums[window:] -= sums[:-window].copy()
    return sums


def _logged_coefficients(logged: npt.ArrayLike, expected_shape: tuple[int, ...]) -> FloatArray:
    values = np.asarray(logged, dtype=np.float64)
    if values.shape != expected_shape:
        raise ValueError(f"clip_coef has shape {values.shape}, grad_norm has shape {expected_shape}")
    negative = np.flatnonzero(values < 0)
    if negative.size:
        raise ValueError(f"clip_coef must be >= 0; entry {int(negative[0])} is {values[negative[0]]!r}")
    # Some trainers log the unclamped max_norm/norm; above 1 it means "not clipped".
    return np.asarray(np.minimum(values, 1.0), dtype=np.float64)


def clipping_stats(
    grad_norm: np.ndarray,
    max_norm: float,
    clip_coef: np.ndarray | None = None,
    window: int = 100,
    saturation: float = 0.9,
) -> ClipStats:
    """Clipping statistics of a stored run from its pre-clip global grad norm (L2, per logged step).

    The coefficient is the logged ``clip_coef`` where present and finite, else reconstructed from
    ``grad_norm`` and the run's ``max_norm`` with torch's formula (:func:`clip_coef`). Windows count
    logged steps (steps, when the run logs every step).
    """
    require_max_norm(max_norm)
    if isinstance(window, bool) or not isinstance(window, int | np.integer) or window < 1:
        raise ValueError(f"window must be an integer >= 1 (logged steps), got {window!r}")
    if not (0.0 < saturation <= 1.0):
        raise ValueError(f"saturation must be a fraction in (0, 1], got {saturation!r}")
    norms = np.asarray(grad_norm, dtype=np.float64)
    if norms.ndim != 1:
        raise ValueError(f"grad_norm must be a 1-D array of norms, got shape {norms.shape}")
    logged = None if clip_coef is None else _logged_coefficients(clip_coef, norms.shape)
    n = norms.size
    clipped = np.empty(n, dtype=np.bool_)
    coef = np.empty(n, dtype=np.float64)
    post_norm = np.empty(n, dtype=np.float64)
    nonfinite = np.empty(n, dtype=np.bool_)
    clip_ratio = np.empty(n, dtype=np.float64)
    mean_coef = np.empty(n, dtype=np.float64)
    # Blocks of a few MB, each re-reading the ``window`` entries before it for the trailing sums: whole-
    # series temporaries (80 MB each at 10M steps) made the time grow faster than the series.
    for a in range(0, n, _STATS_BLOCK):
        b = min(a + _STATS_BLOCK, n)
        lead = min(a, window - 1)  # earlier entries that windows ending in [a, b) reach back to
        part = slice(a - lead, b)
        block_nonfinite = ~np.isfinite(norms[part])
        block_coef = _reconstructed_coef(norms[part], max_norm)
        if logged is not None:
            block_logged = logged[part]
            block_coef = np.where(np.isfinite(block_logged), block_logged, block_coef)
        block_coef[block_nonfinite] = np.nan
        finite = ~block_nonfinite
        block_clipped = finite & (block_coef < 1.0)
        finite_count = _trailing_sum(finite.astype(np.float64), window)[lead:]
        clipped_count = _trailing_sum(block_clipped.astype(np.float64), window)[lead:]
        coef_sum = _trailing_sum(np.where(finite, block_coef, 0.0), window)[lead:]
        with np.errstate(invalid="ignore", divide="ignore"):
            clip_ratio[a:b] = np.where(finite_count > 0, clipped_count / finite_count, np.nan)
            mean_coef[a:b] = np.where(finite_count > 0, coef_sum / finite_count, np.nan)
        nonfinite[a:b] = block_nonfinite[lead:]
        coef[a:b] = block_coef[lead:]
        clipped[a:b] = block_clipped[lead:]
        post_norm[a:b] = np.where(finite[lead:], norms[a:b] * block_coef[lead:], np.nan)
    saturated = np.nan_to_num(clip_ratio, nan=0.0) >= saturation
    saturated[: window - 1] = False  # a window that is not full yet never counts as saturated
    total_finite = n - int(np.count_nonzero(nonfinite))
    overall = float(np.count_nonzero(clipped)) / total_finite if total_finite else math.nan
    return ClipStats(
        clipped=np.asarray(clipped, dtype=np.bool_),
        coef=np.asarray(coef, dtype=np.float64),
        post_norm=np.asarray(post_norm, dtype=np.float64),
        nonfinite=np.asarray(nonfinite, dtype=np.bool_),
        clip_ratio=np.asarray(clip_ratio, dtype=np.float64),
        mean_coef=np.asarray(mean_coef, dtype=np.float64),
        saturated=np.asarray(saturated, dtype=np.bool_),
        overall_clip_ratio=overall,
        max_norm=float(max_norm),
        window=int(window),
        saturation=float(saturation),
    )


_reconstructed_coef = clip_coef
"""The module's formula under a second name: ``clipping_stats`` has a parameter called clip_coef."""
