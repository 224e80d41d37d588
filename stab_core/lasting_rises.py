"""Lasting rises of a loss noisy throughout: several logged rows up together, not one outlier (issue #32;
docs/diagnosis.md, "Lasting rises").

On a per-batch loss that scatters a lot (rows commonly 0.3-1.4x the median of the rows before them: a tiny
regression MSE, a PPO loss dominated by its value loss) the spike detector's modified z-score is never
reached, and :mod:`stab_core.noisy_series` makes a row inside the series' scatter a ``blip``. A rise that
*lasts* is still an incident there: a one-row outlier is back at the next row, a rise that cost steps is
up on the rows after it too.

The rule, for any positive loss noisy throughout (at least :data:`NOISY_SHARE` of its rows at
:data:`RISE_RATIO` times the median of the :data:`LEVEL_ROWS` finite rows before each) that does not jitter
over orders of magnitude (:data:`JITTER_SHARE`): a run of
consecutive rows each at ``RISE_RATIO`` x that median or more is a lasting rise when

- it is :data:`MIN_ROWS` rows or longer and peaks at :data:`PEAK_RATIO` x or more, or is two rows both at
  ``PEAK_RATIO`` x or more, *and* such runs are rare in the series (at most one per :data:`RARE_ROWS`
  rows, on :data:`MIN_RARE_ROWS` rows or more) and one as long and as high is no chance coincidence of
  the series' own rows (:data:`SHORT_CHANCE`): where they are common, they are the series' own scatter
  (a near-zero loss whose noise is multiplicative rises 2-5x over two or three logs again and again);
- or it is :data:`LONG_ROWS` rows or longer, its median row is :data:`LONG_MEDIAN` x or more and a run
  that long and high is no chance coincidence of the series' own rows (:data:`LONG_CHANCE`): a surge of a
  heavy-tailed loss that holds, however common short surges are there.

Each such run not already shown by an incident becomes one (a ``spike``, recovered at the first row back
under ``RISE_RATIO`` x); a loss blip inside it is a spike again, unless the noisy-series rule judged it
inside the series' own scatter of log(loss) (:func:`stab_core.noisy_series.stands_out`): a memorised loss
at 0.004 whose excursions to 14-63x stay within that scatter keeps its blips.
Pure numpy; steps are the run's logged steps.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Final

import numpy as np

from stab_core.incidents import Incident
from stab_core.metrics import signed_objective
from stab_core.noisy_series import noisy_throughout, stands_out
from stab_core.runview import FloatArray, IntArray, Series
from stab_core.spikes import SpikeEvent, build_event
from stab_core.throughput import true_runs
from stab_core.window_medians import window_medians

LEVEL_ROWS: Final = 60
"""Finite rows before a row whose median is its level."""
MIN_LEVEL_ROWS: Final = 32
"""Fewer rows before a row are no level to judge it by (the noisy-series rule's minimum)."""
RISE_RATIO: Final = 1.15
"""A row at this many times its level or more is up."""
PEAK_RATIO: Final = 1.85
"""A lasting rise peaks at this many times its level or more (both rows of a two-row rise)."""
SHORT_CHANCE: Final = 0.2
"""Runs as long and as high the series would hold by chance (:func:`chance_peaked_runs`) under which a short
rise is its own: a per-batch loss that scatters 2-3x holds 3-row runs peaking 1.9-2.3x with a chance of
0.3-2.4 (healthy fine-tunes and GANs), a rise that stands out 0.02-0.16."""
MIN_ROWS: Final = 3
"""Rows up in a row from which a rise peaking at ``PEAK_RATIO`` lasted."""
RARE_ROWS: Final = 50
"""Rows per short lasting rise below which such rises are the series' own scatter."""
MIN_RARE_ROWS: Final = 4 * RARE_ROWS
"""Rows a series needs before it can show that such rises are rare in it (four spans of ``RARE_ROWS``): on a
short log one run of per-batch noise after an outlier batch is as likely its nature as an incident."""
MAX_SHORT: Final = 5
"""Short lasting rises a series may hold before they are its nature, not incidents."""
LONG_ROWS: Final = 5
"""Rows up in a row that make a surge lasting however noisy the series."""
LONG_MEDIAN: Final = 1.9
"""The median row of a long surge over its level."""
LONG_CHANCE: Final = 0.01
"""Runs as long and as high the series would hold by chance (independent rows, its own share of rows that
high, :func:`chance_runs`) under which a long surge is no chance coincidence of its scatter: a squared error
per row (chi-square, half its rows at 1.15x their median) puts 4-12-row runs at a median of 2-10x its level
about every hundred rows, their chance 0.05 or more."""
JITTER_RATIO: Final = 10.0
JITTER_SHARE: Final = 0.10
"""A series with this share of its rows at ``JITTER_RATIO`` x their level or more jitters over orders of
magnitude (a DQN's TD loss at 1e-7: 11 % of its rows 10x, runs of 5-20 rows at a median of 5-130x all
run long): no run of high rows stands out of it, and the rule says nothing there (a PPO loss whose
surges are the value loss of a learning phase: 6 %)."""
NOISY_SHARE: Final = 0.10
"""Share of rows up (``RISE_RATIO``) from which a loss is noisy throughout (a falling or flat training loss
puts few rows there; the detector's z already sees a rise on a quiet loss)."""


@dataclass(frozen=True)
class Rise:
    """Rows ``first..last`` (indices into the finite rows) up together; ``level``: the median before ``first``."""

    first: int
    last: int
    level: float
    long: bool


def level_ratios(values: FloatArray) -> FloatArray:
    """Each finite row over the median of the (up to) :data:`LEVEL_ROWS` finite rows before it, from the
    :data:`MIN_LEVEL_ROWS`-th row on (NaN before); ``values`` finite."""
    out = np.full(values.size, np.nan)
    for i in range(MIN_LEVEL_ROWS, min(LEVEL_ROWS, values.size)):
        out[i] = values[i] / float(np.median(values[:i]))
    if values.size > LEVEL_ROWS:
        medians = window_medians(np.lib.stride_tricks.sliding_window_view(values, LEVEL_ROWS)[:-1])
        with np.errstate(divide="ignore", invalid="ignore"):
            out[LEVEL_ROWS:] = values[LEVEL_ROWS:] / medians
    return out


def chance_runs(judged: FloatArray, run: FloatArray) -> float:
    """How many runs as long as ``run`` with every row as high as its lowest the series' own rows
    (``judged``: every row's ratio to its level) would hold if they were independent: N (1 - s) s^n, s the
    share of rows at or over that lowest ratio, n the run's rows."""
    share = float(np.mean(judged >= float(run.min())))
    return judged.size * (1.0 - share) * share**run.size


def chance_peaked_runs(judged: FloatArray, run: FloatArray) -> float:
    """How many runs as long as ``run``, every row up and one as high as its peak, the series' own rows
    (``judged``) would hold if they were independent: N p^n (1 - (1 - q)^n), p the share of rows up
    (:data:`RISE_RATIO`), q the share of those as high as the peak, n the run's rows."""
    up = float(np.mean(judged >= RISE_RATIO))
    if up <= 0.0:
        return 0.0
    high = min(1.0, float(np.mean(judged >= float(run.max()))) / up)
    return judged.size * up**run.size * (1.0 - (1.0 - high) ** run.size)


def lasting_rises(values: FloatArray) -> list[Rise]:
    """The lasting rises of the finite, positive rows ``values`` (module docstring); none where the series
    is not noisy throughout."""
    ratios = level_ratios(values)
    judged = ratios[np.isfinite(ratios)]
    if judged.size == 0 or float(np.mean(judged >= RISE_RATIO)) < NOISY_SHARE:
        return []
    if float(np.mean(judged >= JITTER_RATIO)) >= JITTER_SHARE:
        return []  # a jitter over orders of magnitude: a run of high rows is its norm
    up = np.nan_to_num(ratios, nan=0.0) >= RISE_RATIO
    short: list[tuple[int, int, bool]] = []
    long: list[tuple[int, int]] = []
    multi = 0
    for first, last in true_runs(up):
        run = ratios[first : last + 1]
        top = np.sort(run)[::-1]
        multi += int(run.size >= 2 and top[0] >= PEAK_RATIO)
        if run.size >= LONG_ROWS and float(np.median(run)) >= LONG_MEDIAN and chance_runs(judged, run) <= LONG_CHANCE:
            long.append((first, last))
        elif (run.size >= MIN_ROWS and top[0] >= PEAK_RATIO) or (run.size == 2 and top[1] >= PEAK_RATIO):
            short.append((first, last, chance_peaked_runs(judged, run) <= SHORT_CHANCE))
    rare = judged.size >= MIN_RARE_ROWS and judged.size / max(multi, 1) >= RARE_ROWS and len(short) <= MAX_SHORT
    kept = long + ([(a, b) for a, b, unlikely in short if unlikely] if rare else [])
    return [Rise(a, b, float(np.median(values[max(0, a - LEVEL_ROWS) : a])), (a, b) in long) for a, b in sorted(kept)]


def _event(steps: IntArray, values: FloatArray, rise: Rise) -> SpikeEvent:
    back = rise.last + 1 if rise.last + 1 < values.size else None
    before = np.log(values[max(0, rise.first - LEVEL_ROWS) : rise.first])
    scale = rise.level * max(float(np.median(np.abs(before - np.median(before)))), 1e-12)
    return build_event("loss", steps, values, rise.first, rise.last, back, rise.level, scale)


def noisy_lasting_rises(series: Mapping[str, Series], incidents: Sequence[Incident]) -> list[Incident]:
    """``incidents`` with each lasting rise of a noisy loss shown (module docstring): a blip over it is a
    ``spike``; where no incident covers it, a new ``spike`` incident of its rows."""
    loss = series.get("loss")
    if loss is None or loss.steps.size == 0 or signed_objective(loss.values):
        return list(incidents)
    finite = np.isfinite(loss.values)
    steps, values = loss.steps[finite], loss.values[finite]
    if values.size <= MIN_LEVEL_ROWS or float(values.min()) <= 0.0:
        return list(incidents)
    out = list(incidents)
    noisy = noisy_throughout(loss)
    for rise in lasting_rises(values):
        start, end = int(steps[rise.first]), int(steps[rise.last])
        over = [k for k, i in enumerate(out) if i.start <= end and start <= i.until]
        if any(out[k].severity != "blip" for k in over):
            continue
        loss_blips = [k for k in over if any(m.metric == "loss" for m in out[k].members)]
        if loss_blips:
            for k in loss_blips:
                # a blip the noisy-series rule judged inside the series' own scatter of log(loss) stands
                ordinary = noisy and stands_out(loss, out[k].start, out[k].until) is False
                out[k] = out[k] if ordinary else replace(out[k], severity="spike")
            continue
        event = _event(steps, values, rise)
        out.append(Incident("spike", (event,), {}, "spike", "high", event.recovery_step, (rise.level, LEVEL_ROWS)))
    return sorted(out, key=lambda i: i.start)
