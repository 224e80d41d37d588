"""Gradient clipping: the torch half that clips in a training loop, and the numpy half that reads a
stored run's clipping behaviour.

One coefficient formula serves both halves: torch's ``min(1, max_norm / (norm + 1e-6))``
(``torch.nn.utils.clip_grad_norm_``), implemented once in :func:`clip_coef`.

torch is imported lazily inside the torch half, so the numpy half (used on stored runs) costs no
torch import.
"""

from __future__ import annotations

import math
import weakref
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, NamedTuple

import numpy as np
import numpy.typing as npt

if TYPE_CHECKING:
    import torch

FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]
NonFinitePolicy = Literal["skip", "raise", "clip"]

CLIP_EPS = 1e-6
"""torch's guard in ``max_norm / (norm + 1e-6)``."""

_POLICIES: tuple[str, ...] = ("skip", "raise", "clip")


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


def _require_max_norm(max_norm: float) -> None:
    try:
        value = float(max_norm)
    except (TypeError, ValueError):
        raise ValueError(f"max_norm must be a number (an L2 norm), got {max_norm!r}") from None
    if not (math.isfinite(value) and value > 0):
        raise ValueError(f"max_norm must be a finite L2 norm > 0, got {max_norm!r}")


def _require_policy(nonfinite: str) -> None:
    if nonfinite not in _POLICIES:
        raise ValueError(f"nonfinite must be one of {_POLICIES}, got {nonfinite!r}")


# --------------------------------------------------------------------------------------------------
# The per-step record (both clippers return it; the monitor logs it)
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
# torch half
# --------------------------------------------------------------------------------------------------


class _Gradients(NamedTuple):
    """The parameters that have a gradient, their gradients, whether those are plain tensors on one
    device of one dtype (:func:`_uniform_plain`, checked once a call), and (when they tile whole
    storages, see :func:`_flat_buffers`) those storages as flat tensors, else None."""

    params: list[torch.Tensor]
    grads: list[torch.Tensor]
    uniform: bool
    flat: list[torch.Tensor] | None


def _grads(parameters: torch.Tensor | Iterable[torch.Tensor]) -> _Gradients:
    """The parameters with a gradient and their gradients (one pass), and their flat buffers."""
    import torch

    params: list[torch.Tensor] = []
    grads: list[torch.Tensor] = []
    for p in (parameters,) if isinstance(parameters, torch.Tensor) else parameters:
        g = p.grad
        if g is not None:
            params.append(p)
            grads.append(g)
    last = _last_flat_layout
    if last is not None and _same_tensors(last, grads):  # DDP's bucket views again: known uniform
        return _Gradients(params, grads, True, _flat_views(grads, last.owners))
    uniform = bool(grads) and _uniform_plain(grads)
    return _Gradients(params, grads, uniform, _flat_buffers(grads) if uniform else None)


def global_grad_norm(parameters: torch.Tensor | Iterable[torch.Tensor]) -> float:
    """Global L2 norm of the parameters' gradients, the same on every rank.

    Plain gradients (single process, or DDP after its all-reduce) give the norm directly; sharded
    DTensor gradients (FSDP2, tensor parallel) give a DTensor norm whose ``full_tensor()`` reduces the
    shards' contributions across the mesh (one collective per mesh). Returns 0.0 when no parameter
    has a gradient. Costs one device-to-host sync.
    """
    return _norm_of(_grads(parameters))


def _uniform_plain(grads: list[torch.Tensor]) -> bool:
    """Every gradient is a plain tensor (no DTensor or other subclass) on one device, of one dtype:
    the case one ``torch._foreach_*`` call handles (single process, DDP)."""
    import torch

    first = grads[0]
    device, dtype = first.device, first.dtype
    plain = torch.Tensor
    return all(type(g) is plain and g.device == device and g.dtype == dtype for g in grads)


class _FlatLayout(NamedTuple):
    """The last gradients :func:`_flat_buffers` found tiling their storages (held weakly, so a model
    that is gone is not kept alive), and for each storage the index of a gradient on it and its size
    in elements."""

    grads: tuple[weakref.ref[torch.Tensor], ...]
    owners: tuple[tuple[int, int], ...]


_last_flat_layout: _FlatLayout | None = None


def _flat_buffers(grads: list[torch.Tensor]) -> list[torch.Tensor] | None:
    """The storages that the (uniform, plain) gradients tile exactly, each as one flat tensor; None
    when any gradient is not such a tile (its own tensor, strided, overlapping, or sharing its storage
    with anything that is not one of these gradients).

    DDP with ``gradient_as_bucket_view=True`` keeps every gradient as a view of a few flat buckets
    (contiguous gradient buffers such as Megatron's do the same): one kernel per bucket then does
    what one kernel per tensor did. Exact tiling is required, so scaling a buffer scales these
    gradients and nothing else. The layout found is remembered: DDP hands out the same view tensors
    every step, so :func:`_grads` then only checks that they are the same objects.
    """
    global _last_flat_layout
    owners = _tiled_storages(grads)
    if owners is None:
        return None
    _last_flat_layout = _FlatLayout(tuple(weakref.ref(g) for g in grads), owners)
    return _flat_views(grads, owners)


def _flat_views(grads: list[torch.Tensor], owners: tuple[tuple[int, int], ...]) -> list[torch.Tensor]:
    return [grads[index].as_strided((numel,), (1,), 0) for index, numel in owners]


def _same_tensors(layout: _FlatLayout, grads: list[torch.Tensor]) -> bool:
    """``grads`` are the very tensor objects the layout was found for."""
    return len(layout.grads) == len(grads) and all(ref() is g for ref, g in zip(layout.grads, grads, strict=True))


def _tiled_storages(grads: list[torch.Tensor]) -> tuple[tuple[int, int], ...] | None:
    """For each storage the gradients tile exactly: (index of a gradient on it, its size in elements)."""
    spans: dict[int, list[tuple[int, int]]] = {}
    owner_of: dict[int, int] = {}
    for index, g in enumerate(grads):
        if not g.is_contiguous():
            return None
        storage = g.untyped_storage()
        key = storage.data_ptr()
        if key not in owner_of:
            if storage.nbytes() == g.numel() * g.element_size():  # a tensor of its own: no gain
                return None
            owner_of[key] = index
        spans.setdefault(key, []).append((int(g.storage_offset()), g.numel()))
    owners: list[tuple[int, int]] = []
    for key, tiles in spans.items():
        tiles.sort()
        end = 0
        for offset, numel in tiles:
            if offset != end:
                return None
            end += numel
        owner = grads[owner_of[key]]
        if end * owner.element_size() != owner.untyped_storage().nbytes():
            return None
        owners.append((owner_of[key], end))
    return tuple(owners)


def _norm_of(gradients: _Gradients) -> float:
    import torch

    grads = gradients.grads
    if not grads:
        return 0.0
    if gradients.flat is not None:
        return _flat_norm(gradients.flat, grads[0].dtype)
    if gradients.uniform:
        # What torch.nn.utils.get_total_norm computes here (per-tensor norms, then the norm of
        # their stack), without its regrouping by device and dtype and its per-norm .to() copies.
        return float(torch.linalg.vector_norm(torch.stack(torch._foreach_norm(grads)), 2.0))
    return _mixed_norm_of(grads)


def _flat_norm(buffers: list[torch.Tensor], dtype: torch.dtype) -> float:
    """The L2 norm of the gradients held in flat buffers, accumulated in float64 and then rounded to
    the gradients' dtype, as torch's norm is.

    Why float64: DDP lays its buckets out anew after the first iteration (in the order gradients became
    ready), so a run resumed from a checkpoint meets a different layout at its first step than the
    uninterrupted run did. A float32 sum depends on that layout at ~1e-7; the float64 sum at ~1e-14,
    which the rounding to float32 removes (unless the two sums straddle a float32 rounding boundary,
    odds ~1e-6 per resume), so ZClip's statistics stay bit-identical across a resume.
    """
    import torch

    norms = [torch.linalg.vector_norm(b, 2.0, dtype=torch.float64) for b in buffers]
    total = norms[0] if len(norms) == 1 else torch.linalg.vector_norm(torch.stack(norms), 2.0)
    return float(total.to(dtype))


def _mixed_norm_of(grads: list[torch.Tensor]) -> float:
    """The norm when some gradients are DTensors (summed per device mesh) or devices/dtypes differ."""
    from torch.distributed.tensor import DTensor
    from torch.nn.utils import get_total_norm

    plain = [g for g in grads if not isinstance(g, DTensor)]
    by_mesh: dict[int, list[torch.Tensor]] = {}
    for g in grads:
        if isinstance(g, DTensor):
            by_mesh.setdefault(id(g.device_mesh), []).append(g)
    squares: list[float] = []
    if plain:
        squares.append(float(get_total_norm(plain, 2.0)) ** 2)
    for mesh_grads in by_mesh.values():
        norm = get_total_norm(mesh_grads, 2.0)
        if isinstance(norm, DTensor):
            norm = norm.full_tensor()
        squares.append(float(norm) ** 2)
    return math.sqrt(math.fsum(squares)) if all(math.isfinite(s) for s in squares) else _nonfinite(squares)


def _nonfinite(squares: list[float]) -> float:
    return math.nan if any(math.isnan(s) for s in squares) else math.inf


def _scalar_clip_coef(norm: float, max_norm: float) -> float:
    """:func:`clip_coef` for one norm in plain floats (the same IEEE operations, no numpy call):
    ``min(1, max_norm / (norm + 1e-6))``, NaN when the quotient is NaN."""
    coef = max_norm / (norm + CLIP_EPS)
    return coef if coef < 1.0 or coef != coef else 1.0


def _scale(gradients: _Gradients, coef: float) -> None:
    import torch

    grads = gradients.grads
    if gradients.flat is not None:
        for buffer in gradients.flat:  # the buffers hold exactly these gradients: the same mul_
            buffer.mul_(coef)
        return
    if gradients.uniform and grads[0].dtype in (torch.float32, torch.float64):
        # Bit-identical to g.mul_(coef) in these dtypes; for bf16/fp16 mul_ rounds the scalar to the
        # tensor's dtype first and _foreach_mul_ does not, so those keep the loop.
        torch._foreach_mul_(grads, coef)
        return
    for g in grads:
        g.mul_(coef)


def _first_nonfinite(grads: list[torch.Tensor]) -> str:
    """Where the non-finite values are, for the error message (this rank's shard for DTensors)."""
    from torch.distributed.tensor import DTensor

    for index, g in enumerate(grads):
        local = g.to_local() if isinstance(g, DTensor) else g
        if not bool(local.isfinite().all()):
            return f"first non-finite gradient: parameter #{index} with a gradient, shape {tuple(g.shape)}"
    return "every gradient is finite here: the sum of squares overflowed, or another shard holds the NaN"


def _handle_nonfinite(gradients: _Gradients, total_norm: float, policy: str, limit: float) -> ClipRecord | None:
    """Apply the non-finite policy; None when the norm is finite or the policy is ``clip``."""
    if math.isfinite(total_norm) or policy == "clip":
        return None
    if policy == "raise":
        raise NonFiniteGradientError(
            f"global gradient norm is {total_norm} ({_first_nonfinite(gradients.grads)}); "
            "the optimizer step would write NaN/inf into the weights"
        )
    # Dropping the gradients (grad = None) makes every torch optimizer leave these parameters and
    # their moments untouched; zeroed gradients would still move AdamW weights through momentum
    # and weight decay.
    for p in gradients.params:
        p.grad = None
    return ClipRecord(total_norm, 0.0, 0.0, False, True, limit)


def clip_grad_norm(
    parameters: torch.Tensor | Iterable[torch.Tensor],
    max_norm: float,
    nonfinite: NonFinitePolicy = "skip",
) -> ClipRecord:
    """Clip the global gradient norm to ``max_norm`` in place, as ``torch.nn.utils.clip_grad_norm_``.

    Returns the pre-clip norm and what was done. Gradients are scaled by :func:`clip_coef` when it is
    below 1. Non-finite gradients: ``skip`` drops them (``p.grad = None``, so ``optimizer.step()``
    changes neither the weights nor the optimizer state) and reports ``skipped``; ``raise`` raises
    :class:`NonFiniteGradientError`; ``clip`` does what torch does (scales by a NaN or 0
    coefficient). Works under DDP (gradients are already all-reduced) and FSDP2 / DTensor (see
    :func:`global_grad_norm`); the norm is global, so every rank takes the same decision.

    Cheapest with DDP's ``gradient_as_bucket_view=True``: the gradients then tile DDP's buckets, and
    each bucket takes one norm (summed in float64, so the result does not depend on how DDP lays the
    bucket out) and one multiply. Pass a parameter list made once: ``model.parameters()`` walks the
    module tree on every call.
    """
    _require_max_norm(max_norm)
    _require_policy(nonfinite)
    gradients = _grads(parameters)
    total_norm = _norm_of(gradients)
    handled = _handle_nonfinite(gradients, total_norm, nonfinite, max_norm)
    if handled is not None:
        return handled
    coef = _scalar_clip_coef(total_norm, max_norm)
    clipped = coef < 1.0 or math.isnan(coef)
    if clipped:
        _scale(gradients, coef)
    return ClipRecord(total_norm, total_norm * coef, coef, clipped, False, max_norm)


# --------------------------------------------------------------------------------------------------
# ZClip: adaptive z-score clipping (Kumar et al. 2025, arXiv:2504.02507)
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


class ZClip:
    """Adaptive gradient clipping on the z-score of the global grad norm (Kumar et al. 2025).

    The first ``warmup_steps`` finite norms are collected unclipped (except by the optional fixed
    ``max_norm``) and give the initial mean and population variance; from then on each step runs
    :func:`zclip_update`. Non-finite norms follow ``nonfinite`` as in :func:`clip_grad_norm` and never
    touch the statistics. ``state_dict()`` / ``load_state_dict()`` resume it exactly (the saved
    settings win, as for torch schedulers).
    """

    def __init__(
        self,
        alpha: float = 0.97,
        z_thresh: float = 2.5,
        warmup_steps: int = 25,
        max_norm: float | None = None,
        nonfinite: NonFinitePolicy = "skip",
        eps: float = 1e-6,
    ) -> None:
        if not (0.0 < alpha < 1.0):
            raise ValueError(f"alpha (EMA smoothing factor) must lie in (0, 1), got {alpha!r}")
        if not (math.isfinite(z_thresh) and z_thresh > 0):
            raise ValueError(f"z_thresh must be a positive number of standard deviations, got {z_thresh!r}")
        if isinstance(warmup_steps, bool) or not isinstance(warmup_steps, int) or warmup_steps < 1:
            raise ValueError(f"warmup_steps must be an integer >= 1, got {warmup_steps!r}")
        if max_norm is not None:
            _require_max_norm(max_norm)
        _require_policy(nonfinite)
        if not (math.isfinite(eps) and eps > 0):
            raise ValueError(f"eps must be > 0, got {eps!r}")
        self.alpha = alpha
        self.z_thresh = z_thresh
        self.warmup_steps = warmup_steps
        self.max_norm = max_norm
        self.nonfinite: NonFinitePolicy = nonfinite
        self.eps = eps
        self.warmup_norms: list[float] = []
        self.mean: float | None = None
        self.var: float | None = None

    @property
    def initialized(self) -> bool:
        """True once the warm-up has produced the EMA statistics."""
        return self.mean is not None

    def clip(self, parameters: torch.Tensor | Iterable[torch.Tensor]) -> ClipRecord:
        """Clip the gradients in place (call after backward, before ``optimizer.step()``)."""
        gradients = _grads(parameters)
        total_norm = _norm_of(gradients)
        fixed_limit = math.inf if self.max_norm is None else self.max_norm
        handled = _handle_nonfinite(gradients, total_norm, self.nonfinite, fixed_limit)
        if handled is not None:
            return handled
        limit, z = fixed_limit, math.nan
        if math.isfinite(total_norm):  # else the "clip" policy: torch's behaviour
            limit, z = self._observe(total_norm, fixed_limit)
        coef = _scalar_clip_coef(total_norm, limit)
        clipped = coef < 1.0 or math.isnan(coef)
        if clipped:
            _scale(gradients, coef)
        return ClipRecord(total_norm, total_norm * coef, coef, clipped, False, limit, z)

    def _observe(self, total_norm: float, fixed_limit: float) -> tuple[float, float]:
        """Update the statistics with a finite norm; return (limit in force, z-score)."""
        if self.mean is None or self.var is None:
            self.warmup_norms.append(total_norm)
            if len(self.warmup_norms) >= self.warmup_steps:
                values = np.asarray(self.warmup_norms, dtype=np.float64)
                self.mean, self.var = float(values.mean()), float(values.var())
                self.warmup_norms = []
            return fixed_limit, math.nan
        update = zclip_update(self.mean, self.var, total_norm, self.alpha, self.z_thresh, self.eps)
        self.mean, self.var = update.mean, update.var
        trigger = update.threshold if update.clipped else math.inf
        return min(trigger, fixed_limit), update.z

    def state_dict(self) -> dict[str, Any]:
        """Settings and statistics, plain Python values (safe for ``torch.save`` and JSON)."""
        return {
            "alpha": self.alpha,
            "z_thresh": self.z_thresh,
            "warmup_steps": self.warmup_steps,
            "max_norm": self.max_norm,
            "nonfinite": self.nonfinite,
            "eps": self.eps,
            "warmup_norms": list(self.warmup_norms),
            "mean": self.mean,
            "var": self.var,
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore a :meth:`state_dict`; raises ValueError naming a missing or invalid key."""
        missing = sorted(set(self.state_dict()) - set(state))
        if missing:
            raise ValueError(f"ZClip state is missing keys {missing}")
        restored = ZClip(
            alpha=float(state["alpha"]),
            z_thresh=float(state["z_thresh"]),
            warmup_steps=int(state["warmup_steps"]),
            max_norm=None if state["max_norm"] is None else float(state["max_norm"]),
            nonfinite=state["nonfinite"],
            eps=float(state["eps"]),
        )
        if (state["mean"] is None) != (state["var"] is None):
            raise ValueError("ZClip state must hold both mean and var, or neither (still warming up)")
        restored.warmup_norms = [float(x) for x in state["warmup_norms"]]
        restored.mean = None if state["mean"] is None else float(state["mean"])
        restored.var = None if state["var"] is None else float(state["var"])
        self.__dict__.update(restored.__dict__)


# --------------------------------------------------------------------------------------------------
# numpy half: clipping statistics of a stored run
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
    _require_max_norm(max_norm)
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
