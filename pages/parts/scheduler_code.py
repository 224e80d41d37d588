"""The Scheduler page's "Use it" code: Python that builds the tuned scheduler, runnable as written."""

from __future__ import annotations


def scheduler_snippet(
    total_steps: int,
    warmup_steps: int,
    restart_warmup_steps: int,
    num_cycles: int,
    min_lr_ratio: float,
    peak_lr: float,
) -> str:
    """Python that builds ``WarmupCosineRestartScheduler`` with these settings (runs as written)."""
    return f"""import torch

from ingest.training.torch_schedulers import WarmupCosineRestartScheduler

model = torch.nn.Linear(16, 16)  # your model
optimizer = torch.optim.AdamW(model.parameters(), lr={peak_lr!r})  # lr = the peak LR
scheduler = WarmupCosineRestartScheduler(
    optimizer,
    total_steps={total_steps},
    warmup_steps={warmup_steps},
    restart_warmup_steps={restart_warmup_steps},
    num_cycles={num_cycles},
    min_lr_ratio={min_lr_ratio!r},
)
# in the training loop, after each optimizer.step():
#     scheduler.step()
"""
