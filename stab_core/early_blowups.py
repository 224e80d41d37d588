"""An early blow-up of the loss past the early-rise rules' first samples (issue #32; docs/diagnosis.md, round 24 f30c).

The early-rise rules (:mod:`stab_core.early_rise_rules`) judge a run's first ``window`` logged samples, where a
rise is a blip only when it is one sample back at the next (:data:`~stab_core.severity.EARLY_BLIP_SAMPLES`). A run
logged every step warms up over far more steps than that (a 200-step warm-up logged every step), and a loss that
rises 1.3-1.5x the lowest level it held for three steps inside it gave back its early progress: an early
blow-up by the golden rules, not a blip, though it came back within the blip rule's three samples. Such an
incident is in the run's first :data:`~stab_core.action_premises.RUN_START_FRACTION` of its length and has at
least :data:`LASTING_SAMPLES` consecutive loss samples :data:`UP_RATIO` times the lowest level the loss held
before it, one of them :data:`~stab_core.incidents.EARLY_MIN_RATIO` times
(:func:`~stab_core.early_rises.held_levels`, the median of three consecutive samples: one lucky batch is no
level), on a loss not noisy throughout (:func:`_noisy`); its blip length is then the early rule's. Only past the
early-rise rules' window: inside it a start-up overshoot back at or below its level is a blip by those rules
(:data:`~stab_core.severity.EARLY_BLIP_SAMPLES`), the first updates' fall not yet a level to give back.
"""

from __future__ import annotations

from typing import Final

import numpy as np

from stab_core.action_premises import RUN_START_FRACTION, run_length
from stab_core.early_rises import held_levels
from stab_core.incidents import EARLY_MIN_RATIO, Incident
from stab_core.lasting_rises import NOISY_SHARE, RISE_RATIO, level_ratios
from stab_core.runview import RunView, Series
from stab_core.severity import EARLY_BLIP_SAMPLES
from stab_core.throughput import true_runs

LASTING_SAMPLES: Final = 3
"""Consecutive loss samples up at :data:`UP_RATIO` times the held level (the early-rise rules' lasting rise: a
noisy per-batch loss jumps for one or two logs, not three in a row) ..."""
UP_RATIO: Final = 1.2
"""... each this many times the held level (the quiet loss's lasting-rise rows), ..."""


def early_blowup(loss: Series | None, start: int, until: int, run_length: int | None) -> bool:
    """Whether the loss rose as an early blow-up (module docstring) inside an incident from step ``start`` to
    ``until`` (inclusive) of a run ``run_length`` steps long (None: unknown, False). Early in the run's plan and
    in its log both: a wobble at the loss's floor on the last steps of a 252-step log of a run planned longer
    is no early blow-up (0.0049 -> 0.0066, 0.001 nats)."""
    if loss is None or not run_length or not loss.steps.size:
        return False
    if start > RUN_START_FRACTION * min(run_length, int(loss.steps[-1])):
        return False
    ok = np.isfinite(loss.values) & (loss.steps <= until)  # nothing after the incident is read
    steps, values = loss.steps[ok], loss.values[ok]
    levels = held_levels(values)
    with np.errstate(invalid="ignore"):
        ratios = np.where(levels > 0, values / levels, 0.0)
    up = (steps >= start) & (steps <= until) & (ratios >= UP_RATIO)
    rose = any(
        last - first + 1 >= LASTING_SAMPLES and float(ratios[first : last + 1].max()) >= EARLY_MIN_RATIO
        for first, last in true_runs(up)
    )
    return rose and not _noisy(loss)


def _noisy(loss: Series) -> bool:
    """Whether the loss is noisy throughout (:data:`~stab_core.lasting_rises.NOISY_SHARE` of its finite rows at
    :data:`~stab_core.lasting_rises.RISE_RATIO` times the median of the rows before): a per-step fine-tune loss
    with a quarter of its rows 1.15x up holds three rows 1.2-2.5x up in its first steps as its scatter, not as
    a blow-up (the lasting-rise rules judge such a loss)."""
    values = loss.values[np.isfinite(loss.values)]
    if values.size == 0 or float(values.min()) <= 0.0:
        return False
    judged = level_ratios(values)
    judged = judged[np.isfinite(judged)]
    return bool(judged.size) and float(np.mean(judged >= RISE_RATIO)) >= NOISY_SHARE


def above_start(loss: Series | None, start: int, until: int) -> bool:
    """Whether the loss stood above the run's first finite loss sample (its untrained level) from step ``start``
    to ``until`` (inclusive), having been below it before ``start``, and stayed at an early rise's height
    (:data:`~stab_core.incidents.EARLY_MIN_RATIO` times the lowest loss before ``start``) for two samples or more
    (issue #32). Such an early rise gave back all the run's progress and more for more than one batch (a nanoGPT
    speedrun's 10.40 -> 6.18 over seven warm-up steps, then 13.66 and 9.13, 1.48x the low, back at 6.00): an early
    blow-up, not a start-up overshoot back at its level. One sample up and back under 1.3x at the next is one
    batch, above the start or not (a torchtitan start's 12.55, 10.61, 15.82, 12.14: the golden rules' blip)."""
    if loss is None:
        return False
    finite = np.isfinite(loss.values)
    steps, values = loss.steps[finite], loss.values[finite]
    if steps.size < 2 or steps[0] >= start:
        return False
    during = values[(steps >= start) & (steps <= until)]
    low = float(values[steps < start].min())
    high = int(np.count_nonzero(during >= EARLY_MIN_RATIO * low)) if low > 0 else 0
    return bool(during.size) and float(during.max()) > float(values[0]) > low and high >= 2


def blip_length(
    default: int, incident: Incident, at_level: bool, loss: Series | None, until: int, view: RunView
) -> int:
    """The most logged samples ``incident`` (over at step ``until``) may last and be a blip: the early rule's
    :data:`~stab_core.severity.EARLY_BLIP_SAMPLES` for an early instability whose loss came back only into its
    band (not ``at_level``, back at or below the level it held) and for an early blow-up (:func:`early_blowup`),
    else ``default`` (the sensitivity setting's). An early instability back at its level that stood above the run's
    start (:func:`above_start`) is held to the early rule's length too: it was no overshoot."""
    early = incident.kind == "early_instability" and not (at_level and not above_start(loss, incident.start, until))
    blowup = incident.kind == "spike" and early_blowup(loss, incident.start, until, run_length(view)[0])
    return min(default, EARLY_BLIP_SAMPLES) if early or blowup else default
