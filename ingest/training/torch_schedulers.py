"""The torch LR schedulers: ``torch.optim.lr_scheduler.LRScheduler`` subclasses whose LR at each step is
the numpy formula of :mod:`stab_core.schedulers` (so a schedule previewed there is exactly the one that
trains).

Apart from :mod:`stab_core.schedulers` because these classes need torch at import, and the formulas and
metrics there are read by pages that preview a schedule without training (``stab_core`` holds no
torch); this module imports torch at the top, and nothing that does not train imports it. No file I/O.

::

    from ingest.training.torch_schedulers import WarmupCosineRestartScheduler

    scheduler = WarmupCosineRestartScheduler(optimizer, total_steps=30_000, warmup_steps=2000)
    # after each optimizer.step():
    scheduler.step()
"""

from __future__ import annotations

import warnings
from typing import Any, Literal

from torch.optim import Optimizer
from torch.optim.lr_scheduler import LRScheduler

from stab_core.schedulers import (
    cycle_boundaries,
    inverse_sqrt_lr,
    lr_at,
    scheduler_warnings,
    validate_single_cycle,
    warmup_cosine_lr,
    wsd_lr,
)

__all__ = [
    "InverseSqrtScheduler",
    "WSDScheduler",
    "WarmupCosineRestartScheduler",
    "WarmupCosineScheduler",
]


class _FormulaScheduler(LRScheduler):
    """An LRScheduler whose LR at step t is ``formula(t, peak_lr=base_lr)`` for each param group.

    The LR is a closed form of ``last_epoch``, so a resumed run (``load_state_dict``) is on the
    identical curve; loading also re-applies the LR of the restored step to the optimizer, whichever
    order the optimizer and the scheduler are restored in.
    """

    def _formula(self, step: int, peak_lr: float) -> float:
        raise NotImplementedError

    def get_lr(self) -> list[float | Any]:
        return [self._formula(self.last_epoch, float(base_lr)) for base_lr in self.base_lrs]

    def _get_closed_form_lr(self) -> list[float]:
        return [self._formula(self.last_epoch, float(base_lr)) for base_lr in self.base_lrs]

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        super().load_state_dict(state_dict)
        lrs = self._get_closed_form_lr()
        for group, lr in zip(self.optimizer.param_groups, lrs, strict=True):
            group["lr"] = lr
        self._last_lr = list(lrs)


class WarmupCosineRestartScheduler(_FormulaScheduler):
    """Warmup, cosine decay, and restarts that warm up again from the floor (see
    :func:`stab_core.schedulers.lr_at`).

    ``peak`` is each param group's own initial lr. Invalid settings raise ValueError; the known
    pitfalls (:func:`stab_core.schedulers.scheduler_warnings`) are emitted with ``warnings.warn`` and
    kept in ``self.advice``. Call ``step()`` once per optimizer step, after ``optimizer.step()``.
    """

    def __init__(
        self,
        optimizer: Optimizer,
        total_steps: int,
        warmup_steps: int = 2000,
        restart_warmup_steps: int = 500,
        num_cycles: int = 3,
        min_lr_ratio: float = 0.1,
        last_epoch: int = -1,
    ) -> None:
        self.advice = scheduler_warnings(total_steps, warmup_steps, restart_warmup_steps, num_cycles, min_lr_ratio)
        for sentence in self.advice:
            warnings.warn(sentence, UserWarning, stacklevel=2)
        self.total_steps = total_steps
        self.warmup_steps = warmup_steps
        self.restart_warmup_steps = restart_warmup_steps
        self.num_cycles = num_cycles
        self.min_lr_ratio = min_lr_ratio
        super().__init__(optimizer, last_epoch)

    def _formula(self, step: int, peak_lr: float) -> float:
        return float(
            lr_at(
                step,
                self.total_steps,
                self.warmup_steps,
                self.restart_warmup_steps,
                self.num_cycles,
                self.min_lr_ratio,
                peak_lr,
            )
        )

    def transition_steps(self) -> dict[str, list[int]]:
        """Where this schedule changes phase (steps): cycle restarts and warmup ends, for run metadata."""
        bounds = cycle_boundaries(self.total_steps, self.num_cycles)
        restarts = [int(b) for b in bounds[1:-1]]
        warmup_ends = [self.warmup_steps] + [r + self.restart_warmup_steps for r in restarts]
        return {"cycle_restart": restarts, "warmup_end": warmup_ends}


class WarmupCosineScheduler(_FormulaScheduler):
    """Baseline scheduler for :func:`stab_core.schedulers.warmup_cosine_lr`; ``peak`` is each group's
    initial lr."""

    def __init__(
        self,
        optimizer: Optimizer,
        total_steps: int,
        warmup_steps: int = 2000,
        min_lr_ratio: float = 0.1,
        last_epoch: int = -1,
    ) -> None:
        validate_single_cycle(total_steps, warmup_steps, min_lr_ratio, 1.0)
        self.total_steps = total_steps
        self.warmup_steps = warmup_steps
        self.min_lr_ratio = min_lr_ratio
        super().__init__(optimizer, last_epoch)

    def _formula(self, step: int, peak_lr: float) -> float:
        return float(warmup_cosine_lr(step, self.total_steps, self.warmup_steps, self.min_lr_ratio, peak_lr))


class WSDScheduler(_FormulaScheduler):
    """Baseline scheduler for :func:`stab_core.schedulers.wsd_lr`; ``peak`` is each group's initial lr."""

    def __init__(
        self,
        optimizer: Optimizer,
        total_steps: int,
        warmup_steps: int = 2000,
        min_lr_ratio: float = 0.0,
        decay_fraction: float = 0.1,
        decay_shape: Literal["linear", "1-sqrt"] = "linear",
        last_epoch: int = -1,
    ) -> None:
        wsd_lr(0, total_steps, warmup_steps, min_lr_ratio, 1.0, decay_fraction, decay_shape)  # validates
        self.total_steps = total_steps
        self.warmup_steps = warmup_steps
        self.min_lr_ratio = min_lr_ratio
        self.decay_fraction = decay_fraction
        self.decay_shape: Literal["linear", "1-sqrt"] = decay_shape
        super().__init__(optimizer, last_epoch)

    def _formula(self, step: int, peak_lr: float) -> float:
        return float(
            wsd_lr(
                step,
                self.total_steps,
                self.warmup_steps,
                self.min_lr_ratio,
                peak_lr,
                self.decay_fraction,
                self.decay_shape,
            )
        )


class InverseSqrtScheduler(_FormulaScheduler):
    """Baseline scheduler for :func:`stab_core.schedulers.inverse_sqrt_lr`; ``peak`` is each group's
    initial lr."""

    def __init__(
        self,
        optimizer: Optimizer,
        total_steps: int,
        warmup_steps: int = 2000,
        min_lr_ratio: float = 0.0,
        last_epoch: int = -1,
    ) -> None:
        inverse_sqrt_lr(0, total_steps, warmup_steps, min_lr_ratio, 1.0)  # validates
        self.total_steps = total_steps
        self.warmup_steps = warmup_steps
        self.min_lr_ratio = min_lr_ratio
        super().__init__(optimizer, last_epoch)

    def _formula(self, step: int, peak_lr: float) -> float:
        return float(inverse_sqrt_lr(step, self.total_steps, self.warmup_steps, self.min_lr_ratio, peak_lr))
