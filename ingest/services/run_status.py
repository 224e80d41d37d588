"""How far a run got: its last finite value, its planned steps, and the status a user reads.

A run imported from a log is "finished" only when it reached the steps it planned; one that ended
before them "stopped at N of M"; with no planned steps known it "ended at step N" (nothing says
whether that was the plan). A run that ``watch`` is still writing stays "live".

N, the run's last step, is its last *training* step (:func:`last_step_reached`): the last step at
which a training metric (loss, LR, step time, grad norm, loss scale: not an evaluation's ``val_*``,
``eval_*``, ``test_*``, ``validation_*``) has a finite value. So nanoGPT printing ``loss nan`` with its
step times ran those iterations, while rows where every metric is non-finite (a golden-values file
padded with "nan" to its planned length) are not steps reached; a run whose loss is never finite
reached the last step its loss was logged at. An evaluation extends it only at the very next step
(llm.c and nanoGPT evaluate the final weights at step N after training steps 0..N-1); one dated later
(an epoch-end validation at epoch x batches, past the last training line) does not: a user comparing
"stopped at N" with the log's last training line must find N there. The status states, in brackets,
what N rests on where it is not the last loss alone ("the last loss; val_loss to 29830").
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

import numpy as np

from ingest.store import Store
from ingest.store.storage_errors import DamagedRunFile
from stab_core.metrics import CANONICAL_METRICS, POLICY_LOSSES, gan_terms

STATUS_WORDS = ("live", "finished", "stopped", "ended", "empty", "damaged")
"""The first word of every status :func:`status_text` writes (what the Runs page filters on)."""

FIRST_WINDOW_STEPS = 256
"""Steps read back from a run's end in the first look for its last finite value (doubled until found)."""


def planned_steps(meta: Mapping[str, Any]) -> int | None:
    """The optimizer steps a run planned: ``planned_steps`` (set by the user or a config, so it wins),
    else ``total_steps`` (the total a log states: ``iteration N/ M``, ``max_steps``, a golden file's
    ``end_step``); None when neither is a positive whole number."""
    for key in ("planned_steps", "total_steps"):
        value = meta.get(key)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            continue
        if math.isfinite(value) and value > 0 and float(value).is_integer():
            return int(value)
    return None


def last_finite(store: Store, name: str, metric: str, *, after: int | None = None) -> tuple[int, float] | None:
    """(step, value) of the last finite value of ``metric`` in run ``name`` at full fidelity (the
    run-level series, else the cross-rank mean); only steps > ``after`` when given. None when there
    is none. Reads back from the run's end in windows that double, so a long run costs a few reads."""
    info = store.run_info(name)
    if info.first_step is None or info.last_step is None or metric not in info.metrics:
        return None
    first, last = info.first_step, info.last_step
    floor = first if after is None else max(first, after + 1)
    width = FIRST_WINDOW_STEPS
    hi = last
    while hi >= floor:
        lo = max(floor, hi - width + 1)
        series = store.read_series(name, metric, start=lo, end=hi, buckets=None)
        finite = np.flatnonzero(np.isfinite(series.values))
        if finite.size:
            i = int(finite[-1])
            return int(series.steps[i]), float(series.values[i])
        hi, width = lo - 1, width * 2
    return None


def last_finite_step(store: Store, name: str) -> int | None:
    """The last step at which any metric of run ``name`` has a finite value (None when none has).

    Loss first (it usually settles it), then each other metric read only past the step found."""
    found = _last_finite_of(store, name, store.run_info(name).metrics)
    return None if found is None else found[0]


def _last_finite_of(store: Store, name: str, metrics: Iterable[str]) -> tuple[int, str] | None:
    """(step, metric) of the last finite value among ``metrics``; at a tie the loss, then the canonical
    metrics in their order (lr before step time), then the rest by name."""
    canonical = list(CANONICAL_METRICS)
    best: tuple[int, str] | None = None
    for metric in sorted(metrics, key=lambda m: (canonical.index(m) if m in canonical else len(canonical), m)):
        found = last_finite(store, name, metric, after=None if best is None else best[0])
        if found is not None:
            best = (found[0], metric)
    return best


EVAL_PREFIXES: Final = ("val_", "eval_", "test_", "validation_")
"""Metric names an evaluation writes (the readers' convention: ``val_loss``, nanoGPT's ``eval_train_loss``,
``test_ppl``): values dated by an evaluation, not by a training step the trainer logged."""


BENCHMARKS: Final = ("hellaswag", "mmlu", "piqa", "winogrande", "lambada", "arc_easy", "arc_challenge")
"""Downstream benchmarks a trainer scores during training (llm.c's ``eval:`` HellaSwag accuracy): an
evaluation too, whatever prefix its reader gave it."""


def is_eval_metric(metric: str) -> bool:
    """Is ``metric`` an evaluation's (:data:`EVAL_PREFIXES`, or a score on one of :data:`BENCHMARKS`)?"""
    return metric.startswith(EVAL_PREFIXES) or any(b in metric.lower() for b in BENCHMARKS)


@dataclass(frozen=True)
class Reached:
    """The run's last training step and what it rests on: ``evidence`` is empty where the last loss
    settles it and nothing was logged after it, else the words the status adds in brackets."""

    step: int | None
    evidence: str = ""


def _last_loss_row(store: Store, name: str) -> int | None:
    """The last step at which the loss is logged, finite or not (None: no loss row)."""
    info = store.run_info(name)
    if info.last_step is None or "loss" not in info.metrics:
        return None
    steps = store.read_series(name, "loss", start=info.first_step, end=info.last_step, buckets=None).steps
    return int(steps[-1]) if len(steps) else None


def _last_rows(store: Store, name: str, metric: str, count: int = 8) -> np.ndarray:
    """The steps of the last ``count`` rows of ``metric`` (finite or not; empty: none), read back from the
    run's end in windows that double."""
    info = store.run_info(name)
    if info.first_step is None or info.last_step is None or metric not in info.metrics:
        return np.zeros(0, dtype=np.int64)
    width, hi = FIRST_WINDOW_STEPS, info.last_step
    while True:
        lo = max(info.first_step, hi - width + 1)
        steps = store.read_series(name, metric, start=lo, end=info.last_step, buckets=None).steps
        if len(steps) >= count or lo == info.first_step:
            return np.asarray(steps[-count:], dtype=np.int64)
        width *= 2


def log_interval(store: Store, name: str, metric: str = "loss") -> int:
    """The steps between the last rows of ``metric`` (their median gap; 1 with fewer than two rows): how
    far past its last row the run's next row of it would have been."""
    steps = _last_rows(store, name, metric)
    gaps = np.diff(steps)
    return max(1, int(np.median(gaps))) if gaps.size else 1


def last_step_reached(store: Store, name: str) -> Reached:
    """Run ``name``'s last training step (the rule is the module docstring's) and the evidence the
    status states with it: why it is not the loss's, and the metric logged furthest past it."""
    metrics = store.run_info(name).metrics
    training = [m for m in metrics if not is_eval_metric(m)]
    found = _last_finite_of(store, name, training)
    loss_rows = _last_rows(store, name, "loss", 1)
    if found is not None and loss_rows.size and found[0] > int(loss_rows[-1]):
        # the run's steps are its loss's: a metric logged past the last loss row (a progress line's step
        # time, a summary line's epoch) is no training step the log shows the loss of
        found = (int(loss_rows[-1]), "loss")
    words: list[str] = []
    if "loss" in metrics and last_finite(store, name, "loss") is None:
        # never finite: every loss row is a step the trainer ran (llm.c printing "loss nan" from step 1)
        row = _last_loss_row(store, name)
        if row is not None and (found is None or row >= found[0]):
            found = (row, "loss")
        words.append("the loss is non-finite at every logged step")
    if found is None:  # no training metric: an evaluation-only run
        found = _last_finite_of(store, name, metrics)
        if found is None:
            return Reached(None)
        words.append("no training metric in this run")
    reached, metric = found
    if metric != "loss" and not words:
        loss = last_finite(store, name, "loss")
        words.append(
            f"the last {metric}"
            + (f"; the last finite loss at {loss[0]}" if loss else ": no metric read as the training loss")
        )
    evals = _last_finite_of(store, name, [m for m in metrics if is_eval_metric(m)])
    gap = log_interval(store, name) if loss_rows.size and reached == int(loss_rows[-1]) else 1
    if evals is not None and reached < evals[0] <= reached + gap:
        # an evaluation after the last training row, no later than the next row would have been, evaluates
        # the final weights: the trainer ran to its step (llm.c and nanoGPT evaluate at step N after
        # training steps 0..N-1; Lightning validates at an epoch's last step, between logging steps)
        words, reached = [f"the final {evals[1]}, after the last training step {reached}"], evals[0]
    further = [(f[0], m) for m in metrics if (f := last_finite(store, name, m, after=reached)) is not None]
    if further:
        # the furthest; at a tie a loss (val_loss before val_ppl) names it best
        step, named = min(further, key=lambda f: (-f[0], "loss" not in f[1], f[1]))
        words += ([] if words else ["the last training step"]) + [f"{named} to {step}"]
    return Reached(reached, "; ".join(words))


def status_text(
    status: str,
    reached: int | None,
    planned: int | None,
    first_step: int | None,
    evidence: str = "",
    *,
    interval: int = 1,
    ended_on_eval: bool = False,
) -> str:
    """What the Runs table says about a run.

    ``status``: the catalog's ("live" or "finished": whether something still writes it); ``reached``:
    the run's last training step (:func:`last_step_reached`); ``planned``: :func:`planned_steps`;
    ``first_step``: the first logged step; ``evidence``: what the step rests on where it is not plain
    (:attr:`Reached.evidence`), said in brackets after "ended at step N" / "stopped at N of M". A log
    counted from 0 reaches its plan at step M - 1, one counted from 1 at M.

    ``interval``: the steps between the run's loss rows, given where the log records something after the
    last one (a final summary line, an evaluation); a run whose next row would have been past its plan's
    last step, and that went on past its last row, reached its plan as far as the log can show (a loss
    logged every 10 steps, last at 6560 of 6566, a summary line at 6565), so it "finished".

    ``ended_on_eval``: the run's last record is an evaluation at its last step; that a run short of its
    plan ended there on its own terms or was stopped cannot be told, so it "ended at step N" with the plan
    stated beside it, never "stopped"."""
    if status == "live":
        return "live"
    if reached is None:
        return "empty: no finite value logged"
    why = f" ({evidence})" if evidence else ""
    if planned is None:
        return f"ended at step {reached}{why}"
    last_planned = planned - (1 if first_step == 0 else 0)
    if reached >= last_planned or reached + max(1, interval) > last_planned:
        return "finished"
    if ended_on_eval:
        words = "; ".join(w for w in (evidence, f"an evaluation at its last step; {planned} planned") if w)
        return f"ended at step {reached} ({words})"
    return f"stopped at {reached} of {planned}{why}"


def damaged_status(name: str) -> str:
    """The status of a run a file of which cannot be read, with the command that says what is wrong."""
    return f"damaged: run `stabscope check {name} --repair`"


def run_status(store: Store, name: str) -> str:
    """:func:`status_text` of run ``name``, from the catalog and its data (the trainer's own step
    count, ``meta['last_step']`` where a log states one, counts as reached)."""
    info = store.run_info(name)
    if store.damage(name) is not None:  # a long file gone is seen by no series read: asked for first
        return damaged_status(name)
    if info.status == "live":
        return "live"
    try:
        found = last_step_reached(store, name)
    except DamagedRunFile:  # one damaged run must not hide the others' statuses
        return damaged_status(name)
    reached, evidence = found.step, found.evidence
    stated = info.meta.get("last_step")
    if isinstance(stated, int) and not isinstance(stated, bool) and reached is not None and stated > reached:
        reached, evidence = stated, "the trainer's own step count"
    if reached is not None and not _trains(store, name, info.metrics):
        return no_training_status(info.metrics)
    first = info.first_step
    ended_on_eval = reached is not None and _ended_on_eval(store, name, info.metrics, reached)
    # the interval counts only where the log records something after the last loss row (a final summary,
    # an evaluation): the trainer went on past it. A checkpoint's state at step 2800 of 2808 cannot tell
    # whether the last 8 steps ran
    went_on = reached is not None and info.last_step is not None and info.last_step > reached
    interval = log_interval(store, name) if went_on else 1
    printed = info.meta.get("printed_step_offset")
    if isinstance(printed, int) and not isinstance(printed, bool) and printed and reached is not None:
        # llm.c prints step + 1 and is stored 0-based: a user looks for the number the log prints, and the
        # plan it states ("step 1/19560") is in that numbering
        evidence = "; ".join(w for w in (evidence, f"stored as step {reached}") if w)
        reached, first = reached + printed, None if first is None else first + printed
    return status_text(
        info.status,
        reached,
        planned_steps(info.meta),
        first,
        evidence,
        interval=interval,
        ended_on_eval=ended_on_eval,
    )


TRAINING_SIGNALS: Final = ("loss", "grad_norm", *POLICY_LOSSES)
"""Metrics only a training step writes. A run with none of them, and an LR at one step at most (printed at
initialisation), shows no training step whatever steps its lines carry (a prediction loop's timings); an
LR logged at several steps is a schedule advancing (a reward model's run logs its scores, not a loss)."""


TRAINING_WORDS: Final = ("loss", "ppl", "perplexity", "acc", "accuracy", "reward", "entropy", "kl")
"""Words in a metric's name that only a training step writes, besides :data:`TRAINING_SIGNALS` (a run
logging its perplexity, accuracy or an RL reward alone trains: said with less, never "no training steps").
Whole words of the name (``train/acc``, ``rewards_mean``, ``ZLoss``), never a piece of one (``grad_accum``)
nor a word that names a scale (``loss_scale``: the fp16 scaler's factor)."""


def _names_training(metric: str) -> bool:
    """Whether ``metric`` holds one of :data:`TRAINING_WORDS` as a whole word (plural too)."""
    spaced = re.sub(r"([a-z0-9])([A-Z])|([A-Z])([A-Z][a-z])", r"\1\3 \2\4", metric)
    words = [w for w in re.split(r"[^a-z0-9]+", spaced.lower()) if w]
    for word, after in zip(words, [*words[1:], ""], strict=True):
        if after != "scale" and (word in TRAINING_WORDS or (word.endswith("s") and word[:-1] in TRAINING_WORDS)):
            return True
    return False


def _gan_sides(held: Iterable[str]) -> bool:
    """Whether ``held`` holds a GAN's generator and discriminator terms (``stab_core.metrics.gan_terms``): a run
    logging both sides trains, whatever else it lacks."""
    return bool(gan_terms(held))


def _trains(store: Store, name: str, metrics: Iterable[str]) -> bool:
    held = list(metrics)
    if any(m in TRAINING_SIGNALS for m in held) or _gan_sides(held):
        return True
    if any(_names_training(m) for m in held if not is_eval_metric(m)):
        return True
    return "lr" in held and _last_rows(store, name, "lr", 2).size > 1


def no_training_status(metrics: Iterable[str]) -> str:
    """The status of a run that logs no training signal (:data:`TRAINING_SIGNALS`): what the file holds."""
    held = sorted(metrics)
    shown = ", ".join(held[:4]) + (f" and {len(held) - 4} more" if len(held) > 4 else "")
    return f"empty: no training steps (no loss or grad norm logged; only {shown})"


def _ended_on_eval(store: Store, name: str, metrics: Iterable[str], reached: int) -> bool:
    """Is the run's last record an evaluation at its last training step ``reached`` (nothing logged later)?"""
    evals = [m for m in metrics if is_eval_metric(m)]
    if not evals or store.run_info(name).last_step != reached:
        return False
    # an evaluation logged with every training row (Keras' per-epoch val_loss) marks no end: only one
    # sparser than the loss (a final or periodic evaluation) does
    every = log_interval(store, name)
    return any(
        (f := last_finite(store, name, m, after=reached - 1)) is not None
        and f[0] == reached
        and ((rows := _last_rows(store, name, m, 2)).size < 2 or int(rows[-1] - rows[-2]) > every)
        for m in evals
    )
