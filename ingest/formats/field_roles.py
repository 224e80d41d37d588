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
    if _metric_like(name) or name in roles:
        return False
    if PASS_TIMING.match(name) or EXPLORATION.match(name) or EARLY_STOP.match(name):
        return True
    return first.shape[0] > 0 and bool((first == first[0]).all())


def moved_fields(values_of: dict[str, np.ndarray]) -> dict[str, tuple[str, float]]:
    """``{field: (why, value kept)}`` for the fields of ``values_of`` (a run's values per stored name)
    that are not metric series by the rules above."""
    out: dict[str, tuple[str, float]] = {}
    for name, values in values_of.items():
        if _metric_like(name) or values.shape[0] == 0:
            continue
        if PASS_TIMING.match(name):
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


def setting_value(value: float) -> Any:
    """``value`` as the metadata keeps it (a whole number as an int)."""
    return int(value) if value.is_integer() else value
