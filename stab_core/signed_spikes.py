"""Spikes of a signed objective, judged by its spread alone (issue #32; docs/diagnosis.md, round 25 r25c).

A loss that takes negative values (a PPO objective: surrogate plus value loss minus an entropy bonus, around
zero) has no level a ratio can be taken to: "3x its level" of 0.02 is noise. Every ratio test is skipped on it
(:data:`~stab_core.metrics.SIGNED_LOSS_REASON`), and so was every test at all: a PPO run whose objective went
from -0.41..0.50 to 3668 in one update (an RL4CO router whose policy reset: entropy 2.8 -> 29.6, reward halved
for good) showed nothing.

The rule, for any run whose loss is signed (:func:`~stab_core.metrics.signed_objective`): the spike detector's
own spread test, without its ratio gate: a sample is flagged at the detector's ``z_threshold`` robust deviations
(the MAD of the ``window`` samples before it, as modified z-scores) above their median, with ``min_history``
samples of history, and it is over at the first sample back within ``recover_z`` deviations of that median
(:func:`stab_core.spikes.detect_spikes` with its ratios set to 1, which every sample over its median passes).
The early-rise, climb and level-shift tests are ratios and stay off.

Each spike is an incident of its own (:func:`signed_incidents`, a pass after the others; the default loss settings,
whatever the run's sensitivity). Its severity cannot come from what the loss lost (a loss near zero has no level
to lose from), so it is the golden rules' in logged rows: one row out, back in its band at the next, is a blip (the
objective of a PPO epoch jumps to 5 on one batch and is back); more rows out are a spike; never back, a
divergence; cut off by the log's end, a spike. The reward overrides the rows: a policy objective is not what the
run is for, the reward is (:func:`~stab_core.reward_collapse.reward_series`). An excursion the reward did not fall
with on any of its rows is a blip (a GRPO surrogate around zero jumps 20-170x on a batch while the reward holds;
the golden rules ask no loss incident of it). Where the reward's median over the rest of the log (at least
:data:`MIN_AFTER` rows after the incident) stands :data:`FELL_SIGMAS` robust deviations (of its :data:`LEVEL_ROWS`
rows before the incident) and :data:`FELL_SHARE` of its magnitude below its median before, the update broke the
policy for good (reward -5.9 before, -11.1 for the 46 rows after, though the objective was back near zero at the
next row): a divergence. "Fell" on a row is the same margins. Pure.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Final

import numpy as np
import numpy.typing as npt

from stab_core.incidents import Incident
from stab_core.metrics import signed_objective
from stab_core.reward_collapse import reward_series
from stab_core.rolling_baseline import MAD_TO_Z
from stab_core.run_end_rises import cut_off_at_log_end
from stab_core.runview import FloatArray, Series
from stab_core.scanned_events import scanned_events
from stab_core.severity import SEVERITIES, SeverityLevel
from stab_core.short_run_surges import MIN_BEFORE
from stab_core.spike_params import LOSS_SPIKE_PARAMS, SpikeParams
from stab_core.spikes import SpikeEvent, detect_spikes


def signed_spikes(loss: Series, params: SpikeParams) -> list[SpikeEvent]:
    """The spikes of a signed ``loss`` by the spread test alone (module docstring): ``params`` with the ratio
    gates made neutral (a ratio of 1 always passes: min_ratio, recover_ratio and outlier_ratio 1)."""
    spread_only = replace(params, min_ratio=1.0, recover_ratio=1.0, outlier_ratio=None)
    return detect_spikes(loss.steps, loss.values, "loss", spread_only)


def early_signed_spikes(loss: Series, params: SpikeParams) -> list[SpikeEvent]:
    """The spread test on the first ``params.min_history`` finite samples of a signed ``loss``, where the detector
    has no window yet: from the :data:`~stab_core.short_run_surges.MIN_BEFORE`-th sample on, against the median
    and MAD of all the samples before it (what there is: :func:`signed_incidents` marks them less certain). Over
    at the first later sample within ``params.recover_z`` deviations of that median."""
    keep = np.isfinite(loss.values)
    s, x = loss.steps[keep], loss.values[keep]

    def flag(i: int) -> tuple[float, float] | None:
        level = float(np.median(x[:i]))
        scale = max(float(np.median(np.abs(x[:i] - level))), params.abs_mad_floor)
        return (level, scale) if MAD_TO_Z * (x[i] - level) / scale >= params.z_threshold else None

    def back(after: FloatArray, level: float, scale: float) -> npt.NDArray[np.bool_]:
        return MAD_TO_Z * (after - level) / scale <= params.recover_z

    return scanned_events(s, x, MIN_BEFORE, min(params.min_history, x.size), "loss", flag, back)


MIN_AFTER: Final = 5
"""Reward rows after an incident its lasting fall is judged on, at least (fewer may be a few hard batches)."""
LEVEL_ROWS: Final = 16
"""Reward rows before an incident whose median and MAD are its level and scatter (the detector's ``min_history``:
the level the reward held just before; a longer window reaches back over an earlier fall of its own)."""
FELL_SIGMAS: Final = 6.0
"""Robust deviations (modified z-scores) under its level the reward's median after must stand (the spike
detector's own z threshold: a level moved that far is no scatter)."""
FELL_SHARE: Final = 0.1
"""... and this share of the level's magnitude (a reward that scatters by 0.001 is not broken by 0.01)."""


def _reward_level(series: Mapping[str, Series], start: int) -> tuple[Series, float, float] | None:
    """The run's reward, and the median and robust sigma of its :data:`LEVEL_ROWS` finite rows before step
    ``start``; None without a reward or with fewer than :data:`MIN_AFTER` rows before."""
    name = reward_series(series)
    if name is None:
        return None
    reward = series[name]
    before = reward.values[np.isfinite(reward.values) & (reward.steps < start)][-LEVEL_ROWS:]
    if before.size < MIN_AFTER:
        return None
    level = float(np.median(before))
    return reward, level, float(np.median(np.abs(before - level))) / MAD_TO_Z


def _fell(level: float, sigma: float, value: float) -> bool:
    return level - value > FELL_SIGMAS * sigma and level - value > FELL_SHARE * abs(level)


def reward_fell_for_good(series: Mapping[str, Series], start: int, until: int) -> bool:
    """Did the run's reward stay lower after an incident from step ``start`` to ``until`` (module docstring)?"""
    known = _reward_level(series, start)
    if known is None:
        return False
    reward, level, sigma = known
    after = reward.values[np.isfinite(reward.values) & (reward.steps > until)]
    return after.size >= MIN_AFTER and _fell(level, sigma, float(np.median(after)))


def reward_fell_during(series: Mapping[str, Series], start: int, until: int) -> bool | None:
    """Did the run's reward fall out of its scatter on a row from step ``start`` to ``until`` (None: no reward)?"""
    known = _reward_level(series, start)
    if known is None:
        return None
    reward, level, sigma = known
    during = reward.values[np.isfinite(reward.values) & (reward.steps >= start) & (reward.steps <= until)]
    return bool(during.size) and _fell(level, sigma, float(during.min()))


def signed_incidents(series: Mapping[str, Series], incidents: Sequence[Incident]) -> list[Incident]:
    """``incidents`` and, where the run's loss is a signed objective (the loss detectors skipped it), one incident
    per spike of its spread test (:func:`signed_spikes`, the default loss settings; :func:`early_signed_spikes` in
    its first samples, less certain), with the severity the module docstring gives."""
    loss = series.get("loss")
    if loss is None or not loss.steps.size or not signed_objective(loss.values):
        return list(incidents)
    detected = signed_spikes(loss, LOSS_SPIKE_PARAMS)
    first = [
        e
        for e in early_signed_spikes(loss, LOSS_SPIKE_PARAMS)
        if not any(d.start <= e.start <= d.until for d in detected)
    ]
    out = list(incidents)
    for e in cut_off_at_log_end(first + detected, loss):
        severity = _severity(series, e)
        at = next((k for k, i in enumerate(out) if i.start <= e.until and e.start <= i.until), None)
        if at is None:
            out.append(Incident("spike", (e,), {}, severity=severity, certainty="low" if e in first else "high"))
        else:  # one incident with what it overlaps (a grad-norm outlier of the same update); the objective leads it
            # only where it is the worse (a grad-norm divergence is not "recovered" by the objective's return)
            lead = SEVERITIES.index(severity) > SEVERITIES.index(out[at].severity)
            members = (e, *out[at].members) if lead else (*out[at].members, e)
            out[at] = replace(out[at], members=members, severity=severity if lead else out[at].severity)
    return sorted(out, key=lambda i: i.start)


def _severity(series: Mapping[str, Series], event: SpikeEvent) -> SeverityLevel:
    """A signed objective's spike's severity (module docstring): never back, a divergence, and so is one after
    which the reward fell for good; cut off by the log's end, a spike; one row out, or an excursion the reward did
    not fall with, a blip; else a spike."""
    if event.diverged or reward_fell_for_good(series, event.start, event.until):
        return "divergence"
    if not event.recovered:
        return "spike"  # the log ends on it: whether it lasted is unknown
    if event.n_samples == 1 or reward_fell_during(series, event.start, event.until) is False:
        return "blip"
    return "spike"
