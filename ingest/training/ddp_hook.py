"""The DDP communication hook that measures the gradient norm at two batch sizes.

:class:`GradNormHook` measures each gradient bucket before and after its all-reduce, which gives the
norm of a rank's own batch (``grad_norm_local``) and of the global batch (``grad_norm``): the inputs
of the two-batch noise scale (:mod:`stab_core.snr`; McCandlish et al. 2018, arXiv:1812.06162). The
idea of measuring inside a DDP comm hook follows k-diffusion's ``gns.py`` (Crowson).
:class:`ingest.training.monitor.StabilityMonitor` registers it when given a DDP model.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from ingest.errors import StabScopeError

if TYPE_CHECKING:
    from torch._C._distributed_c10d import GradBucket
    from torch.amp import GradScaler


class GradNormHook:
    """A DDP communication hook that all-reduces (averages) each gradient bucket like DDP's default
    hook, and records the bucket's L2 norm before the all-reduce (this rank's gradient) and after it
    (the gradient of the global batch).

    Squared bucket norms add up to the squared norm of the whole gradient, so :meth:`take` returns
    ``(sqrt(sum local_b^2), sqrt(sum global_b^2))`` over the buckets of the last synchronised backward
    pass. Norms stay on the device until :meth:`take` (one host sync per step). Registered with
    ``ddp_model.register_comm_hook`` on construction (before the first backward); DDP allows one
    hook per model.
    """

    grad_scaler: GradScaler | None = None
    """The job's ``torch.amp.GradScaler`` (fp16): its scale is divided out of the norms."""
    _scale: torch.Tensor | None = None
    """The loss scale the recorded backward pass ran with (None: not scaled)."""

    def __init__(
        self,
        ddp_model: DistributedDataParallel,
        process_group: dist.ProcessGroup | None = None,
        grad_scaler: GradScaler | None = None,
    ) -> None:
        if not isinstance(ddp_model, DistributedDataParallel):
            raise StabScopeError(
                f"the gradient-norm hook needs a DistributedDataParallel model, got {type(ddp_model).__name__}; "
                "wrap the model in DDP first, or pass model=None (no grad_norm_local without DDP)"
            )
        self.process_group = process_group
        self.grad_scaler = grad_scaler
        self.world_size = dist.get_world_size(process_group)
        self._local: list[torch.Tensor] = []
        self._global: list[torch.Tensor] = []
        self._pass_complete = False
        self.last_bucket_count = 0
        """How many buckets the last :meth:`take` summed over."""
        _resolve_hook_annotations()
        try:
            ddp_model.register_comm_hook(self, _grad_norm_comm_hook)
        except RuntimeError as exc:
            raise StabScopeError(
                f"cannot register the StabScope gradient-norm hook on this DDP model ({exc}); DDP allows one "
                "communication hook per model: remove the other one, or pass model=None"
            ) from exc

    def _record_local(self, buffer: torch.Tensor, *, is_last: bool) -> None:
        if self._pass_complete or not self._local:  # a new backward pass: keep only the latest one
            self._local, self._global = [], []
            self._pass_complete = False
            self._scale = _loss_scale_now(self.grad_scaler)
        self._local.append(torch.linalg.vector_norm(buffer, dtype=torch.float32))
        self._pass_complete = is_last

    def _record_global(self, reduced: torch.Tensor) -> None:
        self._global.append(torch.linalg.vector_norm(reduced, dtype=torch.float32))

    def take(self) -> tuple[float, float] | None:
        """(local, global) gradient L2 norms of the last synchronised backward; None when no bucket was
        all-reduced since the last call (e.g. inside ``no_sync`` accumulation). Clears the record."""
        if not self._local or len(self._local) != len(self._global):
            self._local, self._global, self._pass_complete = [], [], False
            return None
        count = self.last_bucket_count = len(self._local)
        parts = self._local + self._global
        if self._scale is not None:
            parts.append(self._scale.to(device=parts[0].device, dtype=parts[0].dtype).reshape(()))
        # On the CPU there is nothing to transfer and a float each costs less than a stack; a GPU's
        # norms (and the loss scale) come in one stack and one host transfer. The few per-bucket
        # norms are then summed in Python (float32 -> float64 squares are exact; fsum rounds once).
        on_cpu = parts[0].device.type == "cpu"
        norms = [float(n) for n in parts] if on_cpu else torch.stack(parts).tolist()
        scale = norms.pop() if self._scale is not None else 1.0
        self._local, self._global, self._pass_complete, self._scale = [], [], False, None
        return _norm_from_parts(norms[:count]) / scale, _norm_from_parts(norms[count : 2 * count]) / scale


def _loss_scale_now(grad_scaler: GradScaler | None) -> torch.Tensor | None:
    """The scale a GradScaler multiplies the loss by now (a copy: ``update`` changes it in place), as
    a tensor on its device, read without a host sync; None without a scaler, or one that is off or
    has not scaled a loss yet."""
    if grad_scaler is None or not grad_scaler.is_enabled():
        return None
    scale = getattr(grad_scaler, "_scale", None)  # get_scale() would sync with the GPU every step
    return None if scale is None else scale.detach().clone()


def loss_scale_factor(hook_norm: float, clipper_norm: float) -> float:
    """The power of two by which the hook's global norm exceeds the clipper's pre-clip norm of the
    same gradient: the fp16 loss scale when the backward ran on scaled gradients and the clipper saw
    them unscaled, else 1.0 (equal norms, non-finite or zero ones, or a ratio that is no power of
    two, as when the clipper was given other parameters)."""
    if not (math.isfinite(hook_norm) and math.isfinite(clipper_norm)) or hook_norm <= 0 or clipper_norm <= 0:
        return 1.0
    ratio = hook_norm / clipper_norm
    power = round(math.log2(ratio))
    if power == 0 or abs(ratio / 2.0**power - 1.0) > 1e-4:
        return 1.0
    return 2.0**power


def _norm_from_parts(norms: list[float]) -> float:
    """L2 norm of a vector from the L2 norms of its parts (NaN/inf propagate)."""
    return math.sqrt(math.fsum(x * x for x in norms))


def _grad_norm_comm_hook(state: GradNormHook, bucket: GradBucket) -> torch.futures.Future[torch.Tensor]:
    """Average the bucket across ranks (DDP does not pre-divide for a custom hook), measuring it on
    both sides of the all-reduce (on one rank there is nothing to reduce)."""
    buffer = bucket.buffer()
    state._record_local(buffer, is_last=bucket.is_last())
    if state.world_size == 1:
        # The mean over one rank is the bucket itself: no collective, no Python callback, and its
        # global norm is the local one. DDP's default hook would still all-reduce it.
        state._global.append(state._local[-1])
        done: torch.futures.Future[torch.Tensor] = torch.futures.Future()
        done.set_result(buffer)
        return done
    group = state.process_group if state.process_group is not None else dist.group.WORLD
    future = dist.all_reduce(buffer, group=group, async_op=True).get_future()  # type: ignore[union-attr]

    def average(done: torch.futures.Future[list[torch.Tensor]]) -> torch.Tensor:
        reduced = done.value()[0].div_(state.world_size)
        state._record_global(reduced)
        return reduced

    averaged: torch.futures.Future[torch.Tensor] = future.then(average)
    return averaged


def _resolve_hook_annotations() -> None:
    """DDP compares the hook's annotations with the real ``dist.GradBucket`` and ``Future[Tensor]``
    objects; ``from __future__ import annotations`` leaves strings there, which DDP rejects. Imported
    here: torch's C extension has no ``_distributed_c10d`` where torch.distributed is unavailable."""
    from torch._C._distributed_c10d import GradBucket

    _grad_norm_comm_hook.__annotations__.update({"bucket": GradBucket, "return": torch.futures.Future[torch.Tensor]})
