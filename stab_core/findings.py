"""A run's findings besides its incidents: overfitting (``stab_core.overfitting``) and throughput
loss (``stab_core.throughput``), as the JSON-ready dict the analyses store, the alerts read and
``stabscope spikes --json`` prints. Pure: series in, a dict out.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np
import numpy.typing as npt

from stab_core.held_out import is_held_out_loss, training_counterpart
from stab_core.held_out_blowups import held_out_blowups
from stab_core.metrics import metrics_naming
from stab_core.overfitting import END_EVALS, Overfitting, detect_overfitting, rose_over, steepest_rise
from stab_core.runview import RunView, Series
from stab_core.throughput import THROUGHPUT_METRICS, ThroughputDrop, detect_throughput_drops, settled_level

FINDING_METRICS = ("val_loss", "loss", *THROUGHPUT_METRICS)
"""The series the findings read: val and train loss, tokens/s, step time (s)."""

SeriesArrays = Mapping[str, tuple[npt.NDArray[np.int64], npt.NDArray[np.float64]]]
"""{metric: (steps, values)} of run-level series (a per-rank metric as its cross-rank mean)."""


def throughput_metric(series: SeriesArrays) -> str | None:
    """The throughput metric a run is judged on: tokens/s when logged, else step time, else None."""
    return next((m for m in THROUGHPUT_METRICS if m in series and series[m][0].size), None)


def finding_metrics(names: Iterable[str]) -> list[str]:
    """The series of a run whose metrics are ``names`` that :func:`run_findings` reads: :data:`FINDING_METRICS`,
    and where no ``loss`` is among them the training losses the run logs under their own names
    (:func:`stab_core.metrics.metrics_naming`: a GAN's or an adversarial adaptation's ``loss/encoder``,
    ``loss/discrim``), which :func:`run_findings` weighs an overfitting against."""
    held = list(names)
    parts = held_out_parts(held)
    trained = [t for m in parts if (t := training_counterpart(m, held)) is not None]
    return [m for m in FINDING_METRICS if m in held] + metrics_naming("loss", held) + parts + trained


def held_out_parts(names: Iterable[str]) -> list[str]:
    """The held-out losses of ``names`` (:func:`~stab_core.held_out.is_held_out_loss`) where none is the run's
    ``val_loss``: a detector's ``val/box_loss``, ``val/cls_loss``, ``val/dfl_loss``, which no reader sums
    (round 22: f28c); empty where a ``val_loss`` is logged."""
    held = list(names)
    return [] if "val_loss" in held else sorted(n for n in held if n != "val_loss" and is_held_out_loss(n))


def _trained_as_loss(series: SeriesArrays, part: str) -> SeriesArrays:
    """``series`` with the training counterpart of held-out loss ``part`` (``train/obj_loss`` for
    ``val/obj_loss``: :func:`~stab_core.held_out.training_counterpart`) as its ``loss``; ``series`` where none
    is logged."""
    trained = training_counterpart(part, series)
    return series if trained is None else {**series, "loss": series[trained]}


def settled_from(
    name: str, steps: npt.NDArray[np.int64], values: npt.NDArray[np.float64]
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.float64]]:
    """The evaluations of held-out loss ``name`` (``steps``, ``values``) from the step its last blow-up
    (:func:`~stab_core.held_out_blowups.held_out_blowups`) came back, where that is before its best: an early
    blow-up's swings (a YOLO validator's cls loss 6.9 -> 211 -> inf -> 5.1 over its first epochs) are no
    eval-to-eval noise, and measured as noise they hide a later rise of 4.9 sigmas (round 22: f28c). All of
    them where it had none."""
    finite = np.isfinite(values)
    if not finite.any():
        return steps, values
    best_step = int(steps[finite][int(np.argmin(values[finite]))])
    backs = [
        e.recovery_step
        for e in held_out_blowups({name: Series(steps, values)})
        if e.recovery_step is not None and e.recovery_step <= best_step
    ]
    if not backs:
        return steps, values
    keep = steps >= max(backs)
    return steps[keep], values[keep]


def _overfitting(series: SeriesArrays, val: str = "val_loss") -> Overfitting | None:
    """The val loss's overfitting against the run's train loss. Without a ``loss`` but with training losses
    logged under their own names, the val loss's rise is overfitting only where one of them fell meanwhile:
    where none did (they stayed flat or rose), the rise is the held-out loss diverging, not a model that learns
    its training set, and "keep the best checkpoint, stop earlier" rests on no fall (docs/diagnosis.md, "Findings").
    A val loss logged alone is judged on its own, as before. ``val``: the held-out loss judged (``val_loss``, or one of
    :func:`held_out_parts`). The val loss is judged from after its last blow-up that came back before its
    best (:func:`settled_from`)."""
    val_steps, val_values = settled_from(val, *series[val])
    train = series.get("loss")
    found = detect_overfitting(val_steps, val_values, *(train if train is not None else (None, None)))
    side = [] if train is not None else [m for m in metrics_naming("loss", series) if series[m][0].size]
    if found is None or not side:
        return found
    return next((f for m in side if (f := detect_overfitting(val_steps, val_values, *series[m])) is not None), None)


def rose_with_training(series: SeriesArrays, found: Overfitting, held: Iterable[str]) -> str | None:
    """The held-out loss of ``held`` (``val_loss``, or a detector's parts) that rose over ``found``'s span while a
    training loss rose with it: overfitting's premise ("the val loss rises while the train loss falls") checked on
    the matching training loss of every component and on the total ``loss``, not on the one pair the finding
    names. A held-out loss whose last :data:`~stab_core.overfitting.END_EVALS` evals sit above its value at the
    best step rose over the span; its steepest rise there (:func:`~stab_core.overfitting.steepest_rise`) came with a
    training rise when its own training counterpart or the total rose over the same windows
    (:func:`~stab_core.overfitting.rose_over`): a warm-up pushing a fine-tuned model off its minimum lifts both,
    which is no model learning its training set (round 26 r26d). None where no such rise is found."""
    first, last = found.span
    for name in held:
        steps, values = series[name]
        ok = np.isfinite(values) & (steps >= first) & (steps <= last)
        if ok.sum() < 2 or not float(np.median(values[ok][-END_EVALS:])) > float(values[ok][0]):
            continue
        window = steepest_rise(steps, values, first, last)
        trained = [t for t in (training_counterpart(name, series), "loss") if t is not None and t in series]
        if window is not None and any(rose_over(*series[t], window) for t in trained):
            return name
    return None


def run_findings(series: SeriesArrays) -> dict[str, Any]:
    """``{"overfitting": dict | None, "throughput": [drop dicts], "throughput_level": {"metric",
    "level"} | None}``: the val loss's overfitting against the train loss (:func:`_overfitting`), the
    throughput metric's drops against the run's own norm, and its settled level (what a sibling run is
    compared with)."""
    out: dict[str, Any] = {"overfitting": None, "throughput": [], "throughput_level": None}
    if "val_loss" in series:
        found = _overfitting(series)
        if found is not None and rose_with_training(series, found, ["val_loss"]) is not None:
            found = None
        out["overfitting"] = found.to_json() if found is not None else None
    else:
        # a run whose validation loss is logged only as its parts (a detector's val/box_loss, val/cls_loss):
        # a model that learns its training set overfits on the part it memorises (YOLO's classification head,
        # val/cls_loss 1.8x its best while the box and dfl parts stay flat); the part that rose most against its
        # best is said (a smooth part's rise of a few percent stands many noise sigmas clear, yet it stayed flat).
        # Each part is weighed against the same part of the training loss where logged: a val/obj_loss that
        # rose while train/obj_loss did not fall is no model learning its training set, whatever the sum did
        held = held_out_parts(series)
        parts = [(f, m) for m in held if (f := _overfitting(_trained_as_loss(series, m), m))]
        parts = [(f, m) for f, m in parts if rose_with_training(series, f, held) is None]
        if parts:
            found, part = max(parts, key=lambda fm: fm[0].rise / abs(fm[0].best_val_loss))
            trained = training_counterpart(part, series) or "the train loss"
            out["overfitting"] = {**found.to_json(), "metric": part, "message": found.message(part, trained)}
    metric = throughput_metric(series)
    if metric is not None:
        steps, values = series[metric]
        drops = detect_throughput_drops(steps, values, metric)
        # the other throughput metric too: a trainer's tokens/s may be a running average (llm.c's) that
        # smooths a stall of a dozen steps away while its step time shows it; a span both show is said once
        for other in THROUGHPUT_METRICS:
            if other != metric and other in series and series[other][0].size:
                more = detect_throughput_drops(*series[other], other)
                more = [d for d in more if metric != "throughput_tok_s" or not _larger_steps(d, *series[metric])]
                drops += [d for d in more if not any(d.start <= e.end and d.end >= e.start for e in drops)]
        out["throughput"] = [d.to_json() for d in sorted(drops, key=lambda d: d.start)]
        level = settled_level(steps, values, metric)
        out["throughput_level"] = None if level is None else {"metric": metric, "level": level}
    return out


def _larger_steps(drop: ThroughputDrop, steps: npt.NDArray[np.int64], rate: npt.NDArray[np.float64]) -> bool:
    """True where a lasting step-time slowdown keeps the logged tokens/s (``steps``, ``rate``) at its
    level (its median over the span >= 85 % of the median before it): each step does more work (an RL
    run's responses grow longer), the hardware is no slower. A slowdown that comes back is kept: a
    running-average tokens/s smooths a short stall away."""
    if drop.recovered:
        return False
    before = rate[steps < drop.start]
    inside = rate[(steps >= drop.start) & (steps <= drop.end)]
    if before.size < 3 or inside.size < 3:
        return False
    return bool(np.median(inside) >= 0.85 * np.median(before))


def view_findings(view: RunView) -> dict[str, Any]:
    """:func:`run_findings` of a ``RunView`` (its run-level series hold the per-rank metrics' means)."""
    return run_findings(
        {m: (view.series[m].steps, view.series[m].values) for m in finding_metrics(view.series) if view.has(m)}
    )
