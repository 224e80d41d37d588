"""A reinforcement-learning run's headline is its return, and a fall of the return that lasts is its
incident (issue #32; docs/diagnosis.md, "GANs and RL").

An RL agent's log holds the return of its episodes (SB3's ``rollout/ep_rew_mean``, a Monitor file's
``r`` stored as ``episode_reward``, baselines' ``eprewmean``): higher is better, and a user wants told
when it falls and stays down (the policy collapsed), not when one episode scores 0. Its losses (a DQN's
TD loss, a critic's value loss) chase a moving target: their jumps are no loss spikes a user must see.

The rule, for any series named as an agent's return (:data:`RETURN_NAME`), of :data:`MIN_BLOCKS`
blocks or more: cut its finite samples into :data:`N_BLOCKS` consecutive blocks (at least
:data:`MIN_BLOCK` samples each) and take each block's mean (a single episode's 0 moves it little). A
block whose mean is at most :data:`FALL_RATIO` times the level held before it (the median of the
:data:`HELD_BLOCKS` block means before it, above zero; for a negative level, ``1 - FALL_RATIO`` of
its size below it) and lower than it by more than :data:`FALL_Z` times the usual wander of a block mean,
with the next block still under :data:`STAY_RATIO` of the level, starts a fall; it counts when it lasts
:data:`LASTING_BLOCKS` blocks or more before a block is back at :data:`BACK_RATIO` of the level. It is
over there (severity spike), or open to the log's end (a divergence: the run never got its return back).
A fall whose span overlaps an incident the other detectors report (a critic's loss spike the return falls
with) is that incident: it is not reported twice.

A TD or value loss whose samples span :data:`DECADES` decades or more in a run whose headline is a return
(:func:`return_led`) is that jitter: its incidents are dropped, the return's are the run's.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from typing import Final

import numpy as np

from stab_core.incidents import Incident
from stab_core.rolling_baseline import MAD_TO_Z
from stab_core.runview import FloatArray, IntArray, Series
from stab_core.spikes import SpikeEvent

RETURN_NAME: Final = re.compile(
    r"(?:^|/)(?:ep_?rew_?mean|ep_?ret_?mean|ep_reward\w*|episode_reward\w*|episode_return\w*|return_history)$",
    re.IGNORECASE,
)
"""An RL agent's return: the mean return of recent episodes, or one per episode."""
N_BLOCKS: Final = 100
MIN_BLOCK: Final = 5
MIN_BLOCKS: Final = 20
HELD_BLOCKS: Final = 4
WANDER_BLOCKS: Final = 20
FALL_RATIO: Final = 0.6
"""A block mean at most this share of the held level starts a fall (a return 40 % down)."""
STAY_RATIO: Final = 0.75
FALL_Z: Final = 3.0
LASTING_BLOCKS: Final = 5
BACK_RATIO: Final = 0.85
DECADES: Final = 2.0
"""Decades between the 5th and 95th percentile of a loss that make it a moving target's jitter."""


def headline_return(series: Mapping[str, Series]) -> str | None:
    """The name of the run's return series (see the module), or None."""
    return next((name for name in sorted(series) if RETURN_NAME.search(name)), None)


def _below(mean: float, level: float, ratio: float) -> bool:
    return mean <= ratio * level if level > 0 else mean <= level - (1 - ratio) * abs(level)


def return_falls(steps: IntArray, values: FloatArray, metric: str) -> list[SpikeEvent]:
    """Lasting falls of the return ``values`` (see the module), each an event from the first sample of its
    first low block, its peak the lowest block (value: that block's mean), the held level as baseline."""
    keep = np.isfinite(values)
    s, x = steps[keep], values[keep].astype(float)
    size = max(MIN_BLOCK, x.size // N_BLOCKS)
    n = x.size // size
    if n < MIN_BLOCKS:
        return []
    means = x[: n * size].reshape(n, size).mean(axis=1)
    change = np.abs(np.diff(means))
    events: list[SpikeEvent] = []
    k = HELD_BLOCKS
    while k < n - 1:
        level = float(np.median(means[k - HELD_BLOCKS : k]))
        wander = float(np.median(change[max(0, k - WANDER_BLOCKS) : k - 1])) / MAD_TO_Z / math.sqrt(2.0)
        falls = _below(means[k], level, FALL_RATIO) and level - means[k] > FALL_Z * wander and level != 0
        if not (falls and _below(means[k + 1], level, STAY_RATIO)):
            k += 1
            continue
        back = [j for j in range(k + 1, n) if not _below(means[j], level, BACK_RATIO)]
        end = back[0] if back else n
        if end - k < LASTING_BLOCKS:
            k = end
            continue
        low = k + int(np.argmin(means[k:end]))
        recovery = back[0] * size if back else None
        last = recovery - 1 if recovery is not None else x.size - 1
        start, until = int(s[k * size]), int(s[recovery]) if recovery is not None else int(s[-1])
        events.append(
            SpikeEvent(
                metric=metric,
                start=start,
                peak=int(s[low * size + size // 2]),
                end=int(s[last]),
                peak_value=float(means[low]),
                baseline=level,
                ratio=float(means[low]) / level if level > 0 else math.nan,
                z=MAD_TO_Z * (float(means[low]) - level) / max(wander, 1e-12),
                duration=until - start,
                recovered=recovery is not None,
                recovery_step=int(s[recovery]) if recovery is not None else None,
                diverged=recovery is None,
                nonfinite=False,
                steps_lost=until - start,
                n_samples=last - k * size + 1,
            )
        )
        if not back:
            break
        k = end + HELD_BLOCKS
    return events


def _jitters(loss: Series | None) -> bool:
    """Whether the loss spans :data:`DECADES` decades between its 5th and 95th percentile (positive values)."""
    if loss is None:
        return False
    v = loss.values[np.isfinite(loss.values) & (loss.values > 0)]
    if v.size < MIN_BLOCKS:
        return False
    lo, hi = np.percentile(v, [5, 95])
    return bool(hi >= lo * 10**DECADES)


def return_led(series: Mapping[str, Series], incidents: Sequence[Incident]) -> list[Incident]:
    """``incidents`` with the return's lasting falls added where the run logs an agent's return; where its
    loss is a moving target's jitter (:func:`_jitters`), the loss's finite incidents dropped."""
    name = headline_return(series)
    if name is None:
        return list(incidents)
    ret = series[name]
    falls = [
        Incident("spike", (e,), {}, severity="divergence" if e.diverged else "spike")
        for e in return_falls(ret.steps, ret.values, name)
    ]
    kept = list(incidents)
    if _jitters(series.get("loss")):
        kept = [i for i in kept if any(m.nonfinite for m in i.members) or i.primary.metric != "loss"]
    # a fall overlapping an incident already reported (a loss spike the return falls after) is that incident
    falls = [f for f in falls if not any(f.start <= i.until and i.start <= f.until for i in kept)]
    return sorted([*kept, *falls], key=lambda i: i.start)
