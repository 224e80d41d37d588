"""A validation loss that blows up while the training loss may be fine (issue #32; docs/diagnosis.md, "Validation
losses").

A held-out loss (:func:`~stab_core.held_out.is_held_out_loss`; the run's ``val_loss`` where it has one, else
each held-out loss component) is evaluated per epoch or every few hundred steps: its series are short (tens
of evaluations) and scatter more than a training loss, so the training loss's windows (60 samples) never fill
and its ratio rules flag ordinary scatter. What holds on any such series is the shape of a blow-up: an
evaluation (the crossing) that

- is :data:`BLOWUP_RATIO` times the level before it, the lowest of the :data:`WITHIN_EVALS` evaluations just
  before it (a blow-up, not a slow climb; a recent level, not the run's all-time lowest: a fine-tune's
  validation loss that swings for a while before it blows up from a higher level still blew up, round 22),
  and :data:`JUMP_RATIO` times the evaluation just before it (an overfitting run's validation loss climbs
  a few percent an evaluation); the first evaluation after the first counts (a validation loss 2.6x its
  value at step 0 at its next evaluation blew up at once);
- is higher than every evaluation since the first (which is often taken before or at the start of
  training), or since the last blow-up came back, among the :data:`SCATTER_EVALS` before it: a noisy
  validation loss whose scatter reached as high before has not blown up, but a blow-up that came back does
  not hide the next one, nor does the untrained model's start of a long run;
- and, where it comes back, is abrupt (also BLOWUP_RATIO times the median of the :data:`RECENT_EVALS` evaluations
  before it, with the next evaluation still :data:`HELD_RATIO` times the level it left, see below, and above the
  :data:`SCATTER_PERCENTILE` th percentile of those SCATTER_EVALS evaluations: one bad evaluation, the next back in
  the series' scatter, is a blip) or lasting (:data:`HELD_EVALS` evaluations from it all HELD_RATIO times the level: a
  climb that held five evaluations and came back is no overfitting, which does not come back, and no blip; round 22);
  where it never comes back, it held (HELD_EVALS or more evaluations from it to the log's end, every one HELD_RATIO
  times the level: a jump in the log's last evaluations may not last) while the training loss did not fall meanwhile
  (a validation loss that rises for good while the training loss falls is overfitting, :mod:`stab_core.overfitting`'s
  finding, not an incident).

It is over at the first evaluation back within :data:`~stab_core.incidents.RECOVER_RATIO` of the level it
left, the median of those WITHIN_EVALS evaluations (their lowest may be one scattered low), whose next
:data:`BACK_EVALS` - 1 evaluations are not blown up again (under HELD_RATIO times that level; a noisy
validation loss back at its level scatters a few percent above it); never back is a divergence. An abrupt
blow-up's second evaluation is measured against that median too: on a noisy late plateau (0.35-0.6) one
evaluation up at 1.04 and the next at 0.61 is a blip, not two evaluations up from a single low 0.35.

An evaluation repeated exactly on the next logged row is one evaluation (round 22: a trainer that
validates every second epoch writes its last validation on every row): the rules count evaluations, and a
repeated row would count each one twice.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Final

import numpy as np

from stab_core.held_out import is_held_out_loss, training_counterpart
from stab_core.held_out_rises import lasting_held_out_rise
from stab_core.incidents import RECOVER_RATIO, Incident, IncidentKind, window_ratio
from stab_core.runview import FloatArray, IntArray, Series
from stab_core.severity import Certainty, SeverityLevel
from stab_core.spikes import SpikeEvent
from stab_core.warmup_end import warmup_end

BLOWUP_RATIO: Final = 1.8
"""The crossing evaluation is at least this many times the level before it (:data:`WITHIN_EVALS`)."""
JUMP_RATIO: Final = 1.3
"""... and at least this many times the evaluation just before it (a jump, not an overfitting drift)."""
HELD_RATIO: Final = 1.5
"""The evaluation after the crossing is still at least this many times that level: two evaluations up."""
WITHIN_EVALS: Final = 3
"""The level a crossing is measured against: the lowest of this many evaluations just before it (a
blow-up, not a slow climb)."""
RECENT_EVALS: Final = 3
"""An abrupt blow-up is also BLOWUP_RATIO times the median of this many evaluations before it: one
evaluation scattered low is no level to blow up from."""
HELD_EVALS: Final = 5
"""A blow-up that is not abrupt counts when it lasts: this many evaluations from the crossing (to the
log's end where it never comes back), every one at least HELD_RATIO times the level."""
TRAIN_FELL: Final = 0.9
"""... and the training loss's median from the crossing on is not under this fraction of its median over
the evaluations before it: a training loss that kept falling makes the rise overfitting."""
MAIN_EVALS: Final = 10
"""A blow-up never back counts as held without HELD_EVALS in a row when it spans this many evaluations to the
log's end ..."""
MAIN_SHARE: Final = 0.9
"""... and this share of them are HELD_RATIO times the level: a few single evaluations back low are scatter."""
BACK_EVALS: Final = 3
"""An evaluation back within RECOVER_RATIO of the level it left ends it where it and the next BACK_EVALS - 1
(or all to the log's end) are under HELD_RATIO times that level."""
MIN_EVALS: Final = 5
"""Finite evaluations a series needs before it is read at all."""
SCATTER_EVALS: Final = 60
"""The evaluations before a crossing whose highest it must top: the scatter it is judged against is the recent one
(the corpus rules' 60 samples before), not the untrained model's first evaluations (round 26: a detector's
validation loss at 13.7 and 15.1 over its first two epochs hid every later blow-up of a 200-epoch run from its
level of 1.3-2.0)."""


SCATTER_PERCENTILE: Final = 95.0
"""An abrupt blow-up's second evaluation tops this percentile of those SCATTER_EVALS evaluations (the band the series
scatters in; an earlier excursion of its own, one or two evaluations, is not that band): one back inside it is the
series in its noise, one evaluation up, a blip (round 26 r26f: a per-epoch MSE validation loss at 31x its level for
one evaluation, then 1.6x, inside its usual 0.3-3x scatter; a YOLOv5 val/cls_loss 3.1x for one evaluation, then at
the 0.021 it held for 60 epochs before)."""


def held_out_blowups(series: Mapping[str, Series]) -> list[SpikeEvent]:
    """The blow-ups (module docstring) of the run's held-out loss (``val_loss``, else every held-out loss)
    in ``series``; steps are the series' own."""
    names = ["val_loss"] if "val_loss" in series else sorted(n for n in series if is_held_out_loss(n))
    out: list[SpikeEvent] = []
    for name in names:
        steps, values = distinct_evaluations(series[name].steps, series[name].values)
        if values.size >= MIN_EVALS and (values > 0).all():
            found = _blowups(name, steps, values, series.get("loss"))
            # no blow-up: a rise to a level that lasted (round 26, :mod:`stab_core.held_out_rises`)
            trained = [series[t] for t in (training_counterpart(name, series), "loss") if t is not None and t in series]
            rise = None if found else lasting_held_out_rise(steps, values, trained)
            out += (
                found
                if rise is None
                else [replace(_event(name, steps, values, rise[0], None, rise[1]), diverged=False)]
            )
    return out


def distinct_evaluations(steps: IntArray, values: FloatArray) -> tuple[IntArray, FloatArray]:
    """The finite evaluations of a held-out loss (``steps``, ``values``), each once: a value equal to the
    one logged on the row before is that evaluation written again (a trainer that validates every second
    epoch repeats its last validation on the rows between), kept at its first step."""
    ok = np.isfinite(values)
    steps, values = steps[ok], values[ok]
    first = np.ones(values.size, dtype=bool)
    first[1:] = values[1:] != values[:-1]
    return steps[first], values[first]


def _blowups(name: str, steps: IntArray, values: FloatArray, train: Series | None) -> list[SpikeEvent]:
    out = []
    i, since = 1, 1  # ``since``: the first evaluation the crossing must top (after the first, or a blow-up's end)
    while i < values.size - 1:
        before = values[max(0, i - WITHIN_EVALS) : i]
        # the lowest before is the level crossed and held; the median, the level left (module docstring)
        level, left = float(before.min()), float(np.median(before))
        # the highest the series scattered to over its recent evaluations (module docstring)
        scatter = float(values[max(since, i - SCATTER_EVALS) : i].max(initial=0.0))
        crossed = values[i] >= BLOWUP_RATIO * level and values[i] >= JUMP_RATIO * values[i - 1] and values[i] > scatter
        back = _back_at(values, i + 1, left) if crossed else None
        recent = float(np.median(values[max(0, i - RECENT_EVALS) : i]))
        # the second evaluation tops the band of that scatter: one back inside it is the series in its noise (a blip)
        recent_scatter = values[max(since, i - SCATTER_EVALS) : i]
        band = float(np.percentile(recent_scatter, SCATTER_PERCENTILE)) if recent_scatter.size else 0.0
        abrupt = values[i] >= BLOWUP_RATIO * recent and values[i + 1] >= HELD_RATIO * left and values[i + 1] > band
        lasting = values.size - i >= HELD_EVALS and bool((values[i : i + HELD_EVALS] >= HELD_RATIO * level).all())
        held = (lasting and bool((values[i:] >= HELD_RATIO * level).all())) or _held_in_main(values[i:], level)
        held = held and not _train_fell(train, int(steps[max(0, i - RECENT_EVALS)]), int(steps[i]))
        if not (crossed and (held if back is None else abrupt or lasting)):
            i += 1
            continue
        out.append(_event(name, steps, values, i, back, level))
        if back is None:
            break
        i = since = back + 1
    return out


def _held_in_main(after: FloatArray, level: float) -> bool:
    """Whether evaluations ``after`` (from a crossing never back, to the log's end) held up in the main: at least
    :data:`MAIN_EVALS` of them, :data:`MAIN_SHARE` of them :data:`HELD_RATIO` times ``level`` or more (round 23:
    a validation loss 5x up from epoch 35 to 100 with five single evaluations back under 1.5x its level never
    held five in a row, yet never came back either); the crossing and the evaluation after it both up."""
    up = after >= HELD_RATIO * level
    # the evaluation after the crossing is up too: a one-evaluation jump back at once is no onset of a hold
    return after.size >= MAIN_EVALS and bool(up[:2].all()) and float(np.mean(up)) >= MAIN_SHARE


def _train_fell(train: Series | None, before: int, crossing: int) -> bool:
    """Whether the training loss's median from step ``crossing`` on is under TRAIN_FELL times its median
    over ``before..crossing`` (False without a training loss there: nothing shows it fell)."""
    if train is None:
        return False
    ok = np.isfinite(train.values)
    prior = train.values[ok & (train.steps >= before) & (train.steps < crossing)]
    after = train.values[ok & (train.steps >= crossing)]
    if not (prior.size and after.size):
        return False
    return bool(np.median(after) < TRAIN_FELL * np.median(prior))


def _back_at(values: FloatArray, first: int, level: float) -> int | None:
    """The first index from ``first`` on whose value is within RECOVER_RATIO of ``level`` and whose value
    and the next BACK_EVALS - 1 (or all to the end) are under HELD_RATIO times it; None: never back."""
    near = values <= RECOVER_RATIO * level
    calm = values < HELD_RATIO * level
    for k in range(first, values.size):
        if near[k] and calm[k : k + BACK_EVALS].all():
            return k
    return None


def _event(name: str, steps: IntArray, values: FloatArray, first: int, back: int | None, low: float) -> SpikeEvent:
    last = (back if back is not None else values.size) - 1
    peak = first + int(np.argmax(values[first : last + 1]))
    start, end = int(steps[first]), int(steps[last])
    recovery = int(steps[back]) if back is not None else None
    return SpikeEvent(
        metric=name,
        start=start,
        peak=int(steps[peak]),
        end=end,
        peak_value=float(values[peak]),
        baseline=low,
        ratio=float(values[peak]) / low,
        z=math.inf,
        duration=(recovery if recovery is not None else end) - start,
        recovered=back is not None,
        recovery_step=recovery,
        diverged=back is None,
        nonfinite=False,
        steps_lost=(recovery if recovery is not None else end) - start,
        n_samples=last - first + 1,
    )


def is_held_out_blowup(event: SpikeEvent) -> bool:
    """Whether ``event`` is a held-out loss's blow-up (:func:`held_out_blowups`)."""
    return is_held_out_loss(event.metric) and not event.nonfinite


def blowup_incidents(series: Mapping[str, Series], incidents: Sequence[Incident], early_until: int) -> list[Incident]:
    """The blow-ups of :func:`held_out_blowups` that no shown incident of ``incidents`` already spans: the
    blow-ups of sibling held-out losses that overlap in steps (val/cls_loss 7-14 and val/dfl_loss 7-11 of one
    validation pass) are one incident with every metric listed (:func:`sibling_groups`), else each one of its
    own: grouped with a training-loss blip beside it, the blip's recovery and severity would be said of the
    blow-up. An early instability where it starts before step ``early_until`` (the training loss's baseline is
    full there; 0 without a training loss) and inside the warm-up where the log shows one
    (:func:`stab_core.warmup_end.warmup_end`: a blow-up after the LR's ramp is over is no longer in the first
    steps), else a spike; a divergence where one never came back."""
    warm = warmup_end(series)
    out = []
    fresh = [
        event
        for event in held_out_blowups(series)
        # a shown incident that starts inside a blow-up never back (a later jump) does not report its onset
        if not any(
            i.severity != "blip"
            and i.start <= event.until
            and event.start <= i.until
            and (i.start <= event.start or event.recovered)
            for i in incidents
        )
    ]
    for members in sibling_groups(fresh):
        start = min(m.start for m in members)
        until = max(m.until for m in members)
        early = start < early_until and (warm is None or start <= warm)
        kind: IncidentKind = "early_instability" if early else "spike"
        co_moves = {
            metric: ratio
            for metric in ("loss", "grad_norm")
            if (ratio := window_ratio(series.get(metric), start, until)) is not None
        }
        diverged = any(m.diverged for m in members)
        severity: SeverityLevel = "divergence" if diverged else "spike"
        certainty: Certainty = "low" if kind == "early_instability" else "high"
        # a lasting rise never back (not diverged, :mod:`stab_core.held_out_rises`) has no recovery either
        back = all(m.recovered for m in members)
        recovery = None if diverged or not back else max(int(m.recovery_step or m.until) for m in members)
        out.append(Incident(kind, tuple(members), co_moves, severity, certainty, recovery))
    return out


def sibling_groups(events: Sequence[SpikeEvent]) -> list[list[SpikeEvent]]:
    """``events`` (held-out blow-ups) grouped: events of one split's losses (``val/cls_loss``, ``val/dfl_loss``)
    whose spans (start .. recovery) overlap are one group, the largest ratio first (the primary): one
    validation pass scored badly, said once with its metrics listed (round 25, issue #32)."""
    groups: list[list[SpikeEvent]] = []
    for event in sorted(events, key=lambda e: (e.start, e.metric)):
        group = next(
            (g for g in groups if any(_split(m.metric) == _split(event.metric) and event.start <= m.until for m in g)),
            None,
        )
        if group is None:
            groups.append([event])
        else:
            group.append(event)
    return [sorted(g, key=lambda e: -e.ratio) for g in groups]


def _split(metric: str) -> str:
    """The split a held-out loss is of: its name up to the first separator (``val`` of ``val/cls_loss``)."""
    for sep in ("/", ".", "_"):
        if sep in metric:
            return metric.split(sep, 1)[0].lower()
    return metric.lower()
