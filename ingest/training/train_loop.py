"""The training side's one training loop: the optimizer, LR scheduler and clipper a run trains with
(:func:`build_trainer`), and the step both the demo trainer and the experiment take
(:func:`train_steps`): the batch's gradient, clipping, ``optimizer.step()``, ``scheduler.step()``,
then the caller's ``after`` (logging, checkpoints, evaluation).

A batch may be split into parts whose gradients are computed one at a time (the experiment's two
halves, the two-batch gradient noise measure); the gradient left for the optimizer is then their
mean, which is the whole batch's gradient because the loss is a mean over equal parts.

torch is imported inside the functions, like :mod:`ingest.training.toy_model`.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ingest.training.toy_model import next_token_loss

if TYPE_CHECKING:
    import torch
    from torch import nn

    from ingest.training.torch_clipping import ZClip
    from ingest.training.torch_schedulers import WarmupCosineRestartScheduler
    from stab_core.clipping import ClipRecord, NonFinitePolicy

ROUTER_LR_SCALE = 10.0
"""The MoE router's LR over the model's (its own param group): a router trained faster than the
experts, with no balancing or z-loss, flips tokens between experts when the LR returns to its peak
(the experiment's mechanism C)."""


@dataclass
class Trainer:
    """The objects one run trains with, rebuilt identically on resume."""

    model: nn.Module
    params: list[torch.Tensor]
    """The model's parameters, listed once: ``model.parameters()`` walks the module tree each call."""
    optimizer: torch.optim.Optimizer
    scheduler: WarmupCosineRestartScheduler
    clipper: ZClip | None
    """Adaptive clipping (ZClip); None for global-norm clipping at ``max_norm`` or none at all."""
    max_norm: float | None
    """Global-norm clipping threshold (L2 norm) when ``clipper`` is None; None: the gradient is not clipped."""
    nonfinite: NonFinitePolicy = "skip"
    """What global-norm clipping does with a non-finite gradient norm (``clip_grad_norm``'s policy)."""

    def clip(self) -> ClipRecord | None:
        """Clip the gradients in place; the clipper's record, or None when this run does not clip."""
        from ingest.training.torch_clipping import clip_grad_norm

        if self.clipper is not None:
            return self.clipper.clip(self.params)
        if self.max_norm is not None:
            return clip_grad_norm(self.params, self.max_norm, nonfinite=self.nonfinite)
        return None


def build_trainer(
    model: nn.Module,
    *,
    peak_lr: float,
    betas: tuple[float, float],
    weight_decay: float,
    total_steps: int,
    warmup_steps: int,
    restart_warmup_steps: int,
    num_cycles: int,
    min_lr_ratio: float,
    clipper: ZClip | None = None,
    max_norm: float | None = None,
    nonfinite: NonFinitePolicy = "skip",
) -> Trainer:
    """AdamW at ``peak_lr`` (the router's parameters, if any, at ``ROUTER_LR_SCALE`` times it) under a
    warmup-cosine-restart schedule; ``model`` may be DDP-wrapped already."""
    import torch

    from ingest.training.torch_schedulers import WarmupCosineRestartScheduler

    named = list(model.named_parameters())
    router = [p for name, p in named if ".router." in name]
    groups = [{"params": [p for name, p in named if ".router." not in name], "lr": peak_lr}]
    if router:
        groups.append({"params": router, "lr": peak_lr * ROUTER_LR_SCALE})
    optimizer = torch.optim.AdamW(groups, lr=peak_lr, betas=betas, weight_decay=weight_decay)
    with warnings.catch_warnings():
        # A schedule without a restart warmup is what the lr-jump demo and the experiment's unprotected
        # arms are for; the advice still reaches the run metadata through the monitor.
        warnings.simplefilter("ignore", UserWarning)
        scheduler = WarmupCosineRestartScheduler(
            optimizer,
            total_steps=total_steps,
            warmup_steps=warmup_steps,
            restart_warmup_steps=restart_warmup_steps,
            num_cycles=num_cycles,
            min_lr_ratio=min_lr_ratio,
        )
    return Trainer(model, list(model.parameters()), optimizer, scheduler, clipper, max_norm, nonfinite)


@dataclass(frozen=True)
class StepOutcome:
    """What optimizer step ``step`` did (reported to ``after`` once the scheduler has stepped)."""

    step: int
    loss: float | torch.Tensor
    """The batch's mean loss (nats/token): the detached loss tensor of a batch taken whole (no sync
    with the device), the mean of the parts' losses as a float for a split one."""
    part_grad_norms: tuple[float, ...]
    """Each part's gradient L2 norm, before clipping (empty for a batch taken whole)."""
    router_loads: list[float]
    """Each MoE layer's max-over-mean expert load, the largest over the parts (empty for a dense model)."""
    clip: ClipRecord | None
    """The clipper's record; None when the run does not clip."""
    grad_norm: float | None
    """The global gradient L2 norm before clipping, measured when nothing clipped (else ``clip.total_norm``)."""
    lr: float
    """The LR this step used (the first param group's)."""


def train_steps(
    trainer: Trainer,
    steps: Iterable[int],
    batch: Callable[[int], torch.Tensor],
    after: Callable[[StepOutcome], None],
    *,
    parts: int = 1,
) -> None:
    """Train the optimizer steps ``steps`` on ``batch(step)`` (batch x (seq_len + 1) token ids), each
    batch's gradient computed in ``parts`` equal parts, calling ``after`` after every step."""
    from ingest.training.torch_clipping import global_grad_norm

    for step in steps:
        tokens = batch(step)
        loss, part_norms, loads = _gradient(trainer, tokens.chunk(parts) if parts > 1 else (tokens,))
        record = trainer.clip()
        grad_norm = global_grad_norm(trainer.params) if record is None else None
        lr = float(trainer.optimizer.param_groups[0]["lr"])
        trainer.optimizer.step()
        trainer.scheduler.step()
        after(StepOutcome(step, loss, part_norms, loads, record, grad_norm, lr))


def _gradient(
    trainer: Trainer, parts: Sequence[torch.Tensor]
) -> tuple[float | torch.Tensor, tuple[float, ...], list[float]]:
    """Leave the batch's gradient in the parameters (the mean of the parts' gradients) and return (the
    batch's loss, each part's gradient norm, the router's loads)."""
    import torch

    from ingest.training.torch_clipping import global_grad_norm

    model, params, optimizer = trainer.model, trainer.params, trainer.optimizer
    loads_of = getattr(model, "router_loads", list)  # a DDP-wrapped model: no router (the demo is dense)
    if len(parts) == 1:
        optimizer.zero_grad(set_to_none=True)
        loss = next_token_loss(model, parts[0])
        loss.backward()  # type: ignore[no-untyped-call]
        return loss.detach(), (), loads_of()
    grads: list[list[torch.Tensor | None]] = []
    losses: list[float] = []
    norms: list[float] = []
    loads: list[float] = []
    for tokens in parts:
        optimizer.zero_grad(set_to_none=True)
        part_loss = next_token_loss(model, tokens)
        part_loss.backward()  # type: ignore[no-untyped-call]
        losses.append(float(part_loss.detach()))
        norms.append(global_grad_norm(params))
        grads.append([None if p.grad is None else p.grad.detach().clone() for p in params])
        part_loads: list[float] = loads_of()
        loads = [max(a, b) for a, b in zip(loads, part_loads, strict=True)] if loads else part_loads
    with torch.no_grad():
        for p, *part_grads in zip(params, *grads, strict=True):
            present = [g for g in part_grads if g is not None]
            p.grad = None if len(present) < len(part_grads) else _mean(present)
    return _mean_float(losses), tuple(norms), loads


def _mean(tensors: list[torch.Tensor]) -> torch.Tensor:
    total = tensors[0]
    for tensor in tensors[1:]:
        total = total + tensor
    return total / len(tensors)


def _mean_float(values: list[float]) -> float:
    total = values[0]
    for value in values[1:]:
        total += value
    return total / len(values)
