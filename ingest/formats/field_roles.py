"""Which fields a reader found are metric series and which are not (issue #31): rules stated in general
terms, applied per run after the file is split into runs, so a field never turns into a series by the
layout of a log nobody has seen.

- **A field that never changes is a setting of the run.** A non-canonical field that holds one finite
  value on every record of the run (:data:`MIN_CONSTANT_RECORDS` at least: Megatron's ``actual seqlen:
  2048``, a layout's ``world_size``, a memory budget printed on every step line) says how the run was
  set up, not how it trains: it goes to the run's metadata (``meta['log_settings']``), not a series.
  Canonical metrics, losses and learning rates of any name (``lrm``, a loss scale that stays at 65536, a grad
  norm), an evaluation's score (``val_accuracy`` stuck at 0.0135), times and speeds, and fields a
  reader proposed a role for are never moved: a flat curve of one of them is a fact about training.
- **An evaluation pass's own timing is no training metric.** Hugging Face's ``eval_runtime``,
  ``eval_samples_per_second``, ``eval_steps_per_second`` (and ``train_runtime`` and its speeds, the
  whole run's summary) time the evaluation loop or the run, not an optimizer step: left out of the
  series (their last value kept in the metadata).
- **An agent's exploration setting is no training metric.** The scale of the noise an RL agent explores
  with (baselines' ``param_noise_stddev``, an ``action_noise_std``/``_sigma``/``_scale``) and its
  exploration rate (``exploration_rate``, ``exploration_eps``) are what the agent's schedule or
  adaptation sets for how it acts, like an optimizer setting of its behaviour, not a measure of how it
  trains (the distance the noise moved the policy, ``param_noise_distance``, is a measure and stays):
  left out of the series (their last value kept in the metadata).

- **A count of the data or steps consumed is no training metric** (round 20: f26b). A field named as a
  count of samples, tokens or examples (``samples``, ``tokens``, ``tokens_seen``, ``num_tokens``,
  ``total_tokens``) or of the steps taken (``effective_steps``) says how far the run
  has got, or how big its batches are, not how it trains: it is the progress axis (a cumulative count rises
  by a batch a step) or the batch size, and a stability question never asks for it. A trainer's estimate of
  the time left (``eta``, ``eta_seconds``) counts down with the run the same way. Left out of the series
  (the last value kept in the metadata); a speed (``tokens_per_s``) is a measure and stays, and so does
  the canonical ``tokens`` where it is what that name means, the cumulative count (it never goes down:
  the Compare page aligns runs by it); a ``tokens`` shown not to rise is a batch's size.
- **An early stop's state is no training metric.** Its flag (``early_stop: 0`` on a run's last line) and
  its patience count (``patience``, ``num_bad_epochs``) are the trainer's control state, read from the
  evaluations it already logs: left out of the series (the last value kept in the metadata).

Each move is listed in :func:`moved_fields`' answer, which the import report shows (``moved``), so
nothing is lost silently.
"""

from __future__ import annotations

import re
from typing import Any, Final

import numpy as np

from stab_core.metrics import CANONICAL_METRICS, POLICY_LOSSES

MIN_CONSTANT_RECORDS: Final = 5
"""Records a field must hold one value on to be a setting: fewer say too little (an eval field logged
twice with one value is not shown to be fixed)."""
PASS_TIMING: Final = re.compile(
    r"^(?:eval|val|valid|validation|test|predict|train)_(?:runtime|samples_per_second|steps_per_second)$"
)
"""The timing of an evaluation (or the whole training) pass that Hugging Face's Trainer logs."""
EXPLORATION: Final = re.compile(
    r"^(?:.*/)?(?:(?:param|parameter|action|exploration|ou)_)?noise_(?:std|stddev|sigma|scale)$"
    r"|^(?:.*/)?exploration_(?:rate|eps|epsilon)$",
    re.IGNORECASE,
)
"""An RL agent's exploration setting: its noise scale or exploration rate (:func:`moved_fields`)."""
EARLY_STOP: Final = re.compile(
    r"^(?:.*/)?(?:early_?stop(?:ping)?|should_stop|patience|num_bad_epochs|bad_epochs)(?:_(?:counter|count|flag|wait))?$",
    re.IGNORECASE,
)
"""An early stop's state: its flag (nanochat's ``early_stop: 0``) or its patience countdown (:func:`moved_fields`)."""
CONSUMED: Final = re.compile(
    r"^(?:.*/)?(?:num_|n_|total_|cumulative_|seen_)?(?:input_)?(?:samples|tokens|examples|effective_steps)"
    r"(?:_seen|_consumed|_processed|_so_far)?$"
    r"|^(?:.*/)?eta(?:_s|_sec|_secs|_seconds)?$",
    re.IGNORECASE,
)
"""A count of the data or steps consumed (``tokens_seen``, ``samples``, ``effective_steps``) or a trainer's
estimate of the time left (``eta_seconds``): progress, not a measure (:func:`moved_fields`). Megatron's and
NeMo's ``consumed_samples`` stays a series (its readers' choice: a batch-size ramp shows in it)."""
SETTINGS_KEY: Final = "log_settings"
"""The run metadata key the settings moved out of the series go to (``{field: value}``)."""


_MEASURED: Final = re.compile(r"(?:_s|_ms|per_s|/s|/sec|_tok_s)$")
"""A time (in seconds, as stored) or a speed: a measurement even where it does not change."""


_EVAL_SCORE: Final = re.compile(
    r"^(?:val|valid|validation|eval|test)_.*(?:acc|accuracy|f1|dice|dsc|iou|auc|precision|recall|top-?[15])$",
    re.IGNORECASE,
)
"""An evaluation's score (``val_accuracy``, ``test_f1``): stuck at one value it is a fact about the model
(a segmenter whose accuracy never moves), never a setting."""


_LR_NAME: Final = re.compile(r"(?:^|[_/])(?:lr|lrm|learning_rate)(?:$|[_/])", re.IGNORECASE)
"""A learning rate of any name: nanochat's ``lrm`` (the schedule's multiplier), a group's ``matrix_lr``,
an ``lr_mult``: a flat one is the schedule's, a fact about training (round 20: f26c)."""


def _metric_like(name: str) -> bool:
    """A canonical metric (or a namespaced one of it, ``grad_norm/layer.3``), a loss of any name (MaxText
    DPO's ``lm_loss: 0.000`` on every line is that loss, not a setting), a learning rate of any name
    (:data:`_LR_NAME`), a time or speed (:data:`_MEASURED`), or an evaluation's score (:data:`_EVAL_SCORE`)."""
    base = name.split("/", 1)[0]
    return (
        base in CANONICAL_METRICS
        or "loss" in base
        or name in POLICY_LOSSES
        or bool(_MEASURED.search(name) or _EVAL_SCORE.match(name) or _LR_NAME.search(name))
    )


def candidate(name: str, first: np.ndarray, roles: Any = ()) -> bool:
    """Whether a rule may move field ``name`` whose first rows hold ``first`` (a cheap test before its
    rows are gathered); ``roles``: names a reader proposed a role for (the generic reader's
    ``proposed_map``), never moved."""
    if name in roles:
        return False
    if CONSUMED.match(name):
        return True
    if _metric_like(name):
        return False
    if PASS_TIMING.match(name) or EXPLORATION.match(name) or EARLY_STOP.match(name):
        return True
    return first.shape[0] > 0 and bool((first == first[0]).all())


def moved_fields(values_of: dict[str, np.ndarray]) -> dict[str, tuple[str, float]]:
    """``{field: (why, value kept)}`` for the fields of ``values_of`` (a run's values per stored name)
    that are not metric series by the rules above."""
    out: dict[str, tuple[str, float]] = {}
    for name, values in values_of.items():
        if values.shape[0] == 0:
            continue
        if CONSUMED.match(name) and not (name in CANONICAL_METRICS and not _not_cumulative(values)):
            why = "a count of the data or steps consumed (or of the time left): the run's progress, not a measure"
            out[name] = (why, float(values[-1]))
        elif _metric_like(name):
            continue
        elif PASS_TIMING.match(name):
            out[name] = ("the timing of an evaluation or training pass, not of an optimizer step", float(values[-1]))
        elif EXPLORATION.match(name):
            out[name] = (
                "an agent's exploration setting (its noise scale or rate), not a measure of training",
                float(values[-1]),
            )
        elif EARLY_STOP.match(name):
            why = "an early stop's flag or patience count, the trainer's control state, not a measure"
            out[name] = (why, float(values[-1]))
        elif values.shape[0] >= MIN_CONSTANT_RECORDS and np.isfinite(values[0]) and bool((values == values[0]).all()):
            out[name] = (f"one value on all {values.shape[0]} records: a setting of the run", float(values[0]))
    return out


def _not_cumulative(values: np.ndarray) -> bool:
    """Whether ``values`` (a run's, in record order) are shown not to be a running count: two finite
    entries or more that go down somewhere or never rise (one value shows nothing)."""
    finite = values[np.isfinite(values)]
    return finite.shape[0] > 1 and not (bool(np.all(np.diff(finite) >= 0)) and bool(finite[-1] > finite[0]))


def setting_value(value: float) -> Any:
    """``value`` as the metadata keeps it (a whole number as an int)."""
    return int(value) if value.is_integer() else value
