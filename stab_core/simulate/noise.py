"""The simulator's random streams (``stab_core.simulate.model``): one independent stream per simulated
quantity, so that enabling one metric or mechanism never shifts the noise of another."""

from __future__ import annotations

import numpy as np

from stab_core.simulate.output import Float32Array

# One random stream per quantity (see rng).
S_LOSS_STEP, S_LOSS_RANK, S_G_STEP, S_S_STEP, S_SHARD = 1, 2, 3, 4, 5
S_CROSS, S_NORM, S_OFFDIAG, S_TIME, S_TELEMETRY = 6, 7, 8, 9, 10
S_LOAD, S_RANK_BIAS, S_RANK_LOAD = 11, 12, 13


def rng(seed: int, stream: int) -> np.random.Generator:
    """An independent generator per (seed, stream): each quantity draws from its own stream, so
    enabling one metric or mechanism never shifts the noise of another."""
    return np.random.default_rng(np.random.SeedSequence([seed, stream]))


def normal32(seed: int, stream: int, shape: tuple[int, ...]) -> Float32Array:
    return rng(seed, stream).standard_normal(shape, dtype=np.float32)
