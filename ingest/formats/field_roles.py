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

- **A count of the data or steps consumed is no training metric** (docs/diagnosis.md, "Import: settings and counters").
  A field named as a count of samples, tokens or examples (``samples``, ``tokens``, ``tokens_seen``, ``num_tokens``,
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

- **A run's per-layer diagnostics are no training metrics** (docs/diagnosis.md, "Import: settings and counters"). A run
  whose records carry many fields (:data:`WIDE_RUN` or more: more than any trainer's own summary of a step prints) holds
  the model's internals beside its training metrics: per-layer or per-depth values (``hub_delta_layer_3``,
  ``ponder_depth_frac_2``: one of a family of three or more fields that differ only by a trailing index)
  and summary statistics of an internal quantity (``token_uncertainty_std``, ``write_mag_mean``,
  ``conv_delta_correlation``, ``val_avg_saturation``: a statistic's word, of no training quantity). They
  describe the model, not whether it trains: kept under their own names, with their last value, in the
  run's metadata (``meta['log_diagnostics']``, listed in ``moved``), out of the metric list. Losses,
  learning rates, norms, scores, rewards, times and speeds of any name stay series
  (:func:`diagnostic_fields`), and so does any field of a narrower run (a TRL record's ``reward_std``).
- **A policy trainer's rollout statistics are measures, however wide its record** (round 26 r26a). A record that holds
  a reward (:func:`_rollout_record`: an RL or RLHF trainer's, TRL's GRPO or PPO) summarises the rollouts the step
  sampled: the completions' lengths (``completions/mean_length``), how often the policy ratio was clipped
  (``clip_ratio/low_mean``), a count in the completions (``items/detected_mean``). They say how the policy trains, not
  what the model holds inside: no statistic of such a record is a diagnostic (a GRPO record with per-position
  rewards prints 66 fields, wider than :data:`WIDE_RUN`); a per-layer family still is.
- **A statistic of a measured distribution is a measure even when it does not change** (docs/diagnosis.md, "Import:
  settings and counters"): ``clip_ratio/low_mean`` at 0 on every record says that nothing was clipped,
  ``completions/min_length`` at 2 that the shortest completion stayed 2 tokens: facts about training, not settings of
  the run; so is an entropy (a policy's ``actor_entropy`` stuck at one value: round 24 f30b).
- An episode counter (``episode``: completions or episodes sampled so far) is a count consumed, as above.
- **Progress and bookkeeping are no training metrics** (round 23 f29b). A count of the steps, iterations, epochs or
  updates done (``total_step_count``: the step counter plus one; ``num_updates``, ``epochs_completed``) is the step
  axis again; a fraction or percentage of the plan done (``progress_pct``, ``percent_done``) is the step over the
  planned steps; where the best evaluation so far was (Ultralytics' ``best_epoch``, a ``best_step``) is the trainer's
  checkpoint bookkeeping. None of them says how the run trains: left out of the series (the last value kept in
  the metadata), by name, whatever their values (a progress that rises is no less a progress).
- **A count of the batch's prompt groups is bookkeeping** (round 24 f30b): ``n_groups``, ``skipped_groups``,
  ``num_prompts`` (:data:`GROUP_COUNT`) count what the sampler put in the batch or left out, not how the run trains.

Each move is listed in :func:`moved_fields`' answer, which the import report shows (``moved``), so
nothing is lost silently.
"""

from __future__ import annotations

import re
from typing import Any, Final

import numpy as np

from ingest.formats.eval_sets import first_set_loss
from stab_core.metrics import CANONICAL_METRICS, POLICY_LOSSES, gan_terms

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
    r"^(?:.*/)?(?:num_|n_|total_|cumulative_|seen_)?(?:input_)?(?:samples|tokens|examples|effective_steps|episodes?)"
    r"(?:_seen|_consumed|_processed|_so_far)?$"
    r"|^(?:.*/)?eta(?:_s|_sec|_secs|_seconds)?$",
    re.IGNORECASE,
)
"""A count of the data or steps consumed (``tokens_seen``, ``samples``, ``effective_steps``) or a trainer's
estimate of the time left (``eta_seconds``): progress, not a measure (:func:`moved_fields`). Megatron's and
NeMo's ``consumed_samples`` stays a series (its readers' choice: a batch-size ramp shows in it)."""
STEP_COUNT: Final = re.compile(
    r"^(?:.*/)?(?:(?:total_|num_|n_|cumulative_)?(?:steps?|iters?|iterations?|epochs?|updates?|batches)"
    r"_(?:count|done|taken|completed|so_far)|(?:total|num|n|cumulative)_(?:steps|iters|iterations|epochs|updates)"
    r"(?:_(?:done|taken|completed|so_far))?)$",
    re.IGNORECASE,
)
"""A count of the steps (iterations, epochs, updates) done: ``total_step_count`` (a step counter plus one),
``num_updates``, ``epochs_completed``; the step axis again, not a measure (:func:`moved_fields`; round 23 f29b)."""
PROGRESS: Final = re.compile(
    r"^(?:.*/)?(?:(?:progress|percent(?:age)?|pct)(?:_(?:pct|percent|percentage|frac|fraction|done|complete|completed))?"
    r"|(?:pct|percent|frac|fraction)_(?:done|complete|completed))$",
    re.IGNORECASE,
)
"""How far the run is through its planned steps (``progress_pct``, ``percent_done``): the step over the plan, not a
measure (:func:`moved_fields`; round 23 f29b)."""
BEST_SO_FAR: Final = re.compile(r"^(?:.*/)?best_(?:epoch|step|iter|iteration|update)s?$", re.IGNORECASE)
"""Where the best evaluation so far was (Ultralytics' ``best_epoch``): the trainer's checkpoint bookkeeping, an axis
value, not a measure (:func:`moved_fields`; round 23 f29b)."""
GROUP_COUNT: Final = re.compile(
    r"^(?:.*/)?(?:(?:n|num|total|skipped|dropped|filtered|valid|used)_?)?(?:groups|prompts)$", re.IGNORECASE
)
"""A count of the prompt groups a step sampled, used or skipped (a GRPO trainer's ``n_groups``, ``skipped_groups``: the
groups whose rewards had no spread), or of the prompts: the sampler's bookkeeping of the batch, not a measure of
training (:func:`moved_fields`; round 24 f30b)."""
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
an ``lr_mult``: a flat one is the schedule's, a fact about training (docs/diagnosis.md, "Import: settings and
counters")."""


WIDE_RUN: Final = 48
"""Fields a run must store for :func:`diagnostic_fields` to apply: a trainer's step summary prints fewer
(TRL's GRPO record ~30, a Megatron line ~20); a record wider than that carries the model's internals."""
_INDEXED: Final = re.compile(r"^(?P<family>.*\D)\d+$")
"""A field named by a family and a trailing index (``hub_delta_layer_12``, ``halt_prob_step_0``)."""
MIN_FAMILY: Final = 3
"""Indexed fields a family must have to be per-layer (or per-depth) values: two may be a pair (``beta1``, ``beta2``)."""
STAT_WORDS: Final = frozenset(
    {"mean", "avg", "average", "std", "stdev", "var", "min", "max", "median", "corr", "correlation"}
)
"""Words naming a summary statistic of a distribution (``token_uncertainty_std``, ``completions/min_length``)."""
_TRAINING_WORDS: Final = frozenset(
    {
        "loss",
        "lr",
        "grad",
        "norm",
        "perplexity",
        "ppl",
        "acc",
        "accuracy",
        "reward",
        "rewards",
        "return",
        "kl",
        "entropy",
        "score",
        "scores",
        "time",
        "throughput",
    }
)
"""Words of a training quantity's name: a field holding one is never a diagnostic (``grad_norm_max``)."""


def _words(name: str) -> set[str]:
    return set(re.split(r"[^a-z0-9]+", name.lower())) - {""}


def _statistic(name: str) -> bool:
    """Whether ``name`` names a summary statistic of a distribution (:data:`STAT_WORDS`)."""
    return bool(_words(name) & STAT_WORDS)


def _flat_measure(name: str) -> bool:
    """Whether ``name``, flat, is still a measure: a statistic of a distribution of samples (:func:`_statistic`),
    not a memory peak (``gpu_mem_max_gb``: MMSeg's ``memory`` on every line, a budget the run was set to)."""
    if "entropy" in _words(name):
        return True  # a distribution's entropy (a policy's stuck at one value) is a measure (round 24 f30b)
    return _statistic(name) and not (_words(name) & {"mem", "memory"} or name.endswith(("_gb", "_mb")))


def diagnostic_fields(names: list[str], roles: Any = (), printed: int | None = None) -> list[str]:
    """The fields of a run (all its stored ``names``) that are the model's diagnostics, not training metrics:
    in a run of :data:`WIDE_RUN` fields or more, one of a family of :data:`MIN_FAMILY` indexed fields or a
    summary statistic, whose name holds no training quantity's word; empty for a narrower run. ``roles``:
    names a reader proposed a role for, never moved; ``printed``: the fields the log's records print, where
    fewer than ``names`` (a step time read off a progress bar is stored, not printed in a record)."""
    if (len(names) if printed is None else printed) < WIDE_RUN:
        return []
    families: dict[str, int] = {}
    for name in names:
        if m := _INDEXED.match(name):
            families[m["family"]] = families.get(m["family"], 0) + 1
    rollouts = _rollout_record(names)
    out = []
    for name in names:
        if name in roles or _metric_like(name) or _words(name) & _TRAINING_WORDS:
            continue
        m = _INDEXED.match(name)
        if (m is not None and families[m["family"]] >= MIN_FAMILY) or (_statistic(name) and not rollouts):
            out.append(name)
    return out


def _rollout_record(names: list[str]) -> bool:
    """Whether a run's fields are a policy trainer's (one of them names a reward): its statistics summarise the
    rollouts it sampled (completion lengths, clipped ratios), not the model's internals."""
    return any(_words(name) & {"reward", "rewards"} for name in names)


DERIVED_ORIGIN: Final = "progress bar rate"
"""The origin of rows a reader derives from no record's field (:mod:`ingest.formats.tqdm_rates`' step times): they
make no record wider."""
DIAGNOSTICS_KEY: Final = "log_diagnostics"
"""The run metadata key of the diagnostics moved out of the series (``{field: last value}``)."""
DIAGNOSTIC_WHY: Final = (
    "a per-layer value or a statistic of the model's internals in a wide record: a diagnostic, not a training metric"
)


def last_value(pieces: list[np.ndarray]) -> Any:
    """The last finite value of a field's ``pieces`` (its values in record order), as the metadata keeps it;
    None when none is finite."""
    values = np.concatenate(pieces)
    finite = values[np.isfinite(values)]
    return setting_value(float(finite[-1])) if finite.size else None


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
    if CONSUMED.match(name) or _bookkeeping(name) is not None:
        return True
    if _metric_like(name):
        return False
    if PASS_TIMING.match(name) or EXPLORATION.match(name) or EARLY_STOP.match(name):
        return True
    if _flat_measure(name):
        return False  # a statistic of a measured distribution: a measure, even flat
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
        elif (kept := _bookkeeping(name)) is not None:
            out[name] = (kept, float(values[-1]))
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
        elif _flat_measure(name):
            continue
        elif values.shape[0] >= MIN_CONSTANT_RECORDS and np.isfinite(values[0]) and bool((values == values[0]).all()):
            out[name] = (f"one value on all {values.shape[0]} records: a setting of the run", float(values[0]))
    return out


def _bookkeeping(name: str) -> str | None:
    """Why field ``name`` is the run's progress or bookkeeping, not a measure (a count of the steps done, the
    fraction of the plan done, where the best evaluation was), or None."""
    if STEP_COUNT.match(name):
        return "a count of the steps (or epochs) done: the step axis again, not a measure"
    if PROGRESS.match(name):
        return "how far the run is through its plan: the step over the planned steps, not a measure"
    if BEST_SO_FAR.match(name):
        return "where the best evaluation so far was: the trainer's bookkeeping, not a measure"
    if GROUP_COUNT.match(name):
        return (
            "a count of the batch's prompt groups (sampled, used or skipped): the sampler's bookkeeping, not a measure"
        )
    return None


def _not_cumulative(values: np.ndarray) -> bool:
    """Whether ``values`` (a run's, in record order) are shown not to be a running count: two finite
    entries or more that go down somewhere or never rise (one value shows nothing)."""
    finite = values[np.isfinite(values)]
    return finite.shape[0] > 1 and not (bool(np.all(np.diff(finite) >= 0)) and bool(finite[-1] > finite[0]))


def setting_value(value: float) -> Any:
    """``value`` as the metadata keeps it (a whole number as an int)."""
    return int(value) if value.is_integer() else value


PERCENT_METRICS: Final = frozenset({"gpu_util"})
"""Canonical metrics in percent (0-100)."""


def _over_a_percentage(pieces: dict[str, list[Any]]) -> None:
    """A field mapped to a percentage (``gpu_util``, 0-100) whose values exceed 100 is no percentage (Megatron-Bridge's
    golden values print ``GPU utilization`` at 250-280, a throughput per GPU): it keeps the name it was logged under
    (round 24 f30b), so no page shows it as a utilisation of 281 %."""
    from ingest.formats.aliases import sanitise_name

    for name in PERCENT_METRICS & set(pieces):
        parts = pieces[name]
        values = np.concatenate([p.value for p in parts]) if parts else np.zeros(0)
        origin = next((p.origin for p in parts if p.origin), None)
        if origin is None or not bool(np.any(values[np.isfinite(values)] > 100.0)):
            continue
        own = sanitise_name(origin)
        if own != name and own not in pieces:
            pieces[own] = pieces.pop(name)


def move_fields(pieces: dict[str, list[Any]], meta: dict[str, Any], moved: dict[str, str]) -> None:
    """Move a run's fields that are no metric series out of ``pieces`` (stored name -> its pieces, each with
    a ``value`` array, in record order): a wide record's diagnostics (:func:`diagnostic_fields`) to
    ``meta['log_diagnostics']``, the fields :func:`moved_fields` names to ``meta['log_settings']``, each
    with the value kept; ``moved`` gets each one's reason, for the import report."""
    first_set_loss(pieces, meta)  # ingest.formats.eval_sets: several evaluation sets, the first is the val_loss
    _over_a_percentage(pieces)
    # a GAN's generator and discriminator terms are its losses (stab_core.metrics.gan_terms): never moved
    roles = {*(meta.get("proposed_map") or ()), *gan_terms(pieces)}
    printed = sum(1 for parts in pieces.values() if any(p.origin != DERIVED_ORIGIN for p in parts))
    for name in diagnostic_fields(sorted(pieces), roles, printed):
        meta.setdefault(DIAGNOSTICS_KEY, {})[name] = last_value([p.value for p in pieces.pop(name)])
        moved.setdefault(name, DIAGNOSTIC_WHY)
    # only the fields a rule may move are gathered: a long log's metric columns are not copied
    values_of = {
        name: np.concatenate([p.value for p in parts])
        for name, parts in pieces.items()
        if candidate(name, parts[0].value, roles)
    }
    for name, (why, value) in moved_fields(values_of).items():
        meta.setdefault(SETTINGS_KEY, {})[name] = setting_value(value)
        moved.setdefault(name, why)
        del pieces[name]
