"""The root causes a spike can be given: one vocabulary for the decision tree's leaves, the simulator's
injected mechanisms, the detection measurement and the pages' colours.

Each name is the ``cause`` field of ``stabscope spikes --json`` (a contract: renaming one is a breaking
change), so code spells a cause through these constants, never as a fresh string literal.
"""

from __future__ import annotations

from typing import Final, Literal

Cause = Literal["numerical", "lr_transition", "rank_fault", "router", "data_outlier", "unknown"]

NUMERICAL: Final = "numerical"
"""Non-finite loss or gradients, or an fp16 loss scale that collapsed."""
LR_TRANSITION: Final = "lr_transition"
"""A schedule transition (warmup end, cycle restart, LR jump, data switch) shortly before the spike."""
RANK_FAULT: Final = "rank_fault"
"""One or a few ranks far above the others: a hardware or data-shard fault."""
ROUTER: Final = "router"
"""An MoE router seesaw: expert load imbalance jumping before the spike."""
DATA_OUTLIER: Final = "data_outlier"
"""Outlier data: the gradient SNR collapsed before the spike (recovered or diverged)."""
UNKNOWN: Final = "unknown"
"""No node of the tree answered yes."""

CAUSES: Final[tuple[Cause, ...]] = (NUMERICAL, LR_TRANSITION, RANK_FAULT, ROUTER, DATA_OUTLIER, UNKNOWN)
"""Every cause, in the order the tree asks about them (``unknown`` last)."""
