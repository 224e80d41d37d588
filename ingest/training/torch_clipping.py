"""Gradient clipping in a training loop: :func:`clip_grad_norm` (torch's ``clip_grad_norm_`` that also
says what it did), :class:`ZClip` (adaptive z-score clipping, Kumar et al. 2025, arXiv:2504.02507) and
:func:`global_grad_norm`.

The torch half of clipping: it imports torch at the top, so it lives on the training side, apart from
:mod:`stab_core.clipping` (the formulas, the :class:`~stab_core.clipping.ClipRecord` both clippers
return, ZClip's update rule and the statistics of a stored run), which the pages read without torch and
which ``stab_core`` keeps torch-free. Tensors in, numbers and dataclasses out, no file I/O.

::

    from ingest.training.torch_clipping import clip_grad_norm

    params = list(model.parameters())  # listed once: parameters() walks the module tree each call
    record = clip_grad_norm(params, 1.0)  # after backward, before optimizer.step()
"""

from __future__ import annotations

import math
import weakref
from collections.abc import Iterable, Mapping
from typing import Any, NamedTuple

import numpy as np
import torch

from stab_core.clipping import (
    ClipRecord,
    NonFiniteGradientError,
    NonFinitePolicy,
    require_max_norm,
    require_policy,
    scalar_clip_coef,
    zclip_update,
)

__all__ = ["ZClip", "clip_grad_norm", "global_grad_norm"]


# --------------------------------------------------------------------------------------------------
# The gradients and their global norm
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
    params: list[torch.Tensor] = []
    grads: list[torch.Tensor] = []
    for p in (parameters,) if isinstance(parameters, torch.Tensor) else parameters:
        g = p.grad
        if g is not None:
            params.append(p)
            grads.append(g)
    last = _last_flat_layout
    if last is not None and _same_tensors(last, grads):  # DDP's bucket views again: known uniform
        return _Gradients(params, grads, uniform=True, flat=_flat_views(grads, last.owners))
    uniform = bool(grads) and _uniform_plain(grads)
    return _Gradients(params, grads, uniform=uniform, flat=_flat_buffers(grads) if uniform else None)


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
    norms = [torch.linalg.vector_norm(b, 2.0, dtype=torch.float64) for b in buffers]
    total = norms[0] if len(norms) == 1 else torch.linalg.vector_norm(torch.stack(norms), 2.0)
    return float(total.to(dtype))


def _mixed_norm_of(grads: list[torch.Tensor]) -> float:
    """The norm when some gradients are DTensors (summed per device mesh) or devices/dtypes differ."""
    # Imported here: only sharded or mixed gradients come this way, and torch.distributed's tensor
    # package is a large import that plain single-process and DDP training never needs.
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


def _scale(gradients: _Gradients, coef: float) -> None:
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
    return ClipRecord(total_norm, post_norm=0.0, clip_coef=0.0, clipped=False, skipped=True, max_norm=limit)


def clip_grad_norm(
    parameters: torch.Tensor | Iterable[torch.Tensor],
    max_norm: float,
    nonfinite: NonFinitePolicy = "skip",
) -> ClipRecord:
    """Clip the global gradient norm to ``max_norm`` in place, as ``torch.nn.utils.clip_grad_norm_``.

    Returns the pre-clip norm and what was done. Gradients are scaled by
    :func:`stab_core.clipping.clip_coef` when it is below 1. Non-finite gradients: ``skip`` drops
    them (``p.grad = None``, so ``optimizer.step()`` changes neither the weights nor the optimizer
    state) and reports ``skipped``; ``raise`` raises :class:`NonFiniteGradientError`; ``clip`` does
    what torch does (scales by a NaN or 0 coefficient). Works under DDP (gradients are already
    all-reduced) and FSDP2 / DTensor (see :func:`global_grad_norm`); the norm is global, so every
    rank takes the same decision.

    Cheapest with DDP's ``gradient_as_bucket_view=True``: the gradients then tile DDP's buckets, and
    each bucket takes one norm (summed in float64, so the result does not depend on how DDP lays the
    bucket out) and one multiply. Pass a parameter list made once: ``model.parameters()`` walks the
    module tree on every call.
    """
    require_max_norm(max_norm)
    require_policy(nonfinite)
    gradients = _grads(parameters)
    total_norm = _norm_of(gradients)
    handled = _handle_nonfinite(gradients, total_norm, nonfinite, max_norm)
    if handled is not None:
        return handled
    coef = scalar_clip_coef(total_norm, max_norm)
    clipped = coef < 1.0 or math.isnan(coef)
    if clipped:
        _scale(gradients, coef)
    return ClipRecord(
        total_norm, post_norm=total_norm * coef, clip_coef=coef, clipped=clipped, skipped=False, max_norm=max_norm
    )


# --------------------------------------------------------------------------------------------------
# ZClip: adaptive z-score clipping (Kumar et al. 2025, arXiv:2504.02507)
# --------------------------------------------------------------------------------------------------


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
            require_max_norm(max_norm)
        require_policy(nonfinite)
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
        coef = scalar_clip_coef(total_norm, limit)
        clipped = coef < 1.0 or math.isnan(coef)
        if clipped:
            _scale(gradients, coef)
        return ClipRecord(
            total_norm,
            post_norm=total_norm * coef,
            clip_coef=coef,
            clipped=clipped,
            skipped=False,
            max_norm=limit,
            z=z,
        )

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
