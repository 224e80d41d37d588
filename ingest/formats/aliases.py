"""Foreign metric names -> canonical names (``stab_core.metrics``), and units -> canonical units.

Every reader funnels its raw keys through :func:`canonical_name`; values that carry a unit
(``8410ms``, ``160.86GiB``, ``3.63%``, a key such as ``elapsed time per iteration (ms)``) go
through :func:`to_canonical_unit` so that times end up in seconds, memory in GiB and MFU as a
fraction, as the canonical contract requires. Unknown names are kept, sanitised to a valid
metric name (no spaces).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Final

import numpy as np
import numpy.typing as npt

from stab_core.metrics import CANONICAL_METRICS, is_valid_metric_name

FloatArray = npt.NDArray[np.float64]

KeyMap = Callable[[str], "tuple[str, str | None] | None"]
"""A reader's own key mapping: raw key -> ``(metric, unit)`` as :func:`canonical_name` gives it, or
None to drop the key (the default everywhere is :func:`canonical_name`)."""


def normalise_key(raw: str) -> str:
    """Lower-case, with runs of spaces, ``_`` and ``-`` folded to one space: the alias lookup key."""
    return re.sub(r"[\s_\-]+", " ", raw.strip().lower()).strip()


_ALIASES: Final[dict[str, tuple[str, ...]]] = {
    # The trainers' own names, taken from their sources (TensorBoard tags, W&B keys, CSV columns):
    # torchtitan (metrics.py: MetricsProcessor.log / log_validation), Megatron-LM (training.py:
    # training_log), NeMo (reduced_train_loss, 'train_step_timing in s'), Hugging Face (integrations:
    # rewrite_logs adds train/ and eval/), Lightning (self.log names, '_step' of on_step+on_epoch),
    # Composer (loss/train/total), OLMo (trainer.py: train/CrossEntropyLoss, optim/...), MaxText
    # (train.py: learning/..., perf/...), Keras (epoch_loss of the train / validation writer, whose
    # folder or writer label the TensorBoard reader puts before the tag).
    # HF's 'train/train_loss' (the whole run's mean, logged once at the end) and Megatron's bare
    # 'throughput' tag (TFLOP/s/GPU, not tokens) are deliberately absent: they are kept as they are.
    "loss": (
        "loss",
        "lm loss",
        "train loss",
        "training loss",
        "step loss",  # the step's own loss beside its running 'average_loss' (SambaNova's BERT trainer)
        "trl",
        "train/loss",
        "train/lm loss",
        "training/loss",
        "loss/train",
        "train lm loss",
        "loss/lm loss",
        "loss metrics/global avg loss",  # torchtitan
        "reduced train loss",  # NeMo
        "train loss step",  # Lightning: on_step and on_epoch
        "loss/train/total",  # Composer
        "train/crossentropyloss",  # OLMo
        "learning/loss",  # MaxText
        "train/epoch loss",  # Keras, train writer
        "main/loss",  # Chainer's LogReport: the loss the model ('main') reports in training
    ),
    "val_loss": (
        "val loss",
        "tel",
        "eval loss",
        "eval/loss",
        "val/loss",
        "valid loss",
        "valid/loss",
        "validation loss",
        "validation/loss",
        "loss/val",
        "loss/validation",
        "lm loss validation",
        "validation/lm loss",
        "val lm loss",
        "eval/lm loss",
        "test/loss",
        "validation metrics/loss",  # torchtitan
        "validation/epoch loss",  # Keras, validation writer
        # Chainer's LogReport: an Evaluator extension reports under its name ('validation') the
        # observations of the model ('main'), so the model's loss on the validation set is this
        "validation/main/loss",
        # 'dev' names the held-out split in NLP trainers (the dev set): its loss is the validation loss
        "dev loss",
        "dev/loss",
        "loss/dev",
    ),
    "lr": (
        "lr",
        "learning rate",
        "learning rate/lr",
        "train/learning rate",
        "train/lr",
        "optimizer/lr",
        "lr/lr",
        "learning rate/learning rate",
        "optim/learning rate group0",  # OLMo: the first param group
        "learning/current learning rate",  # MaxText
        # nanochat's (and its forks') LR multiplier: the schedule's factor on each group's base LR, the only LR those
        # step lines print; its shape is what warmup, transition and restart checks read (a run that also logs an
        # absolute 'lr' keeps both apart: the key named 'lr' keeps the name)
        "lrm",
    ),
    "grad_norm": (
        "grad norm",
        "norm",
        "gradient norm",
        "grad norm/total",
        "train/grad norm",
        "global grad norm",
        "total grad norm",
        "gnorm",
        "grad",  # one scalar 'Grad: 0.28' on a step line can only be the gradient's norm
        "grad norm total",
        "grad norm/grad norm",
        "optim/total grad norm",  # OLMo
        "learning/raw grad norm",  # MaxText: before clipping
        # the norm named with its order, 2 (the L2 norm every clipper computes; round 26 r26b): a Lightning module's
        # own 'grad_2_norm' (logged on_step: 'grad_2_norm_step'), Lightning's grad_norm() total 'grad_2.0_norm_total'
        "grad 2 norm",
        "grad 2.0 norm",
        "grad 2 norm total",
        "grad 2.0 norm total",
        "grad l2 norm",
        "l2 grad norm",
    ),
    "grad_norm_clipped": (
        "grad norm clipped",
        "grad norm after clip",
        "clipped grad norm",
        "learning/grad norm",  # MaxText: the gradients applied, after clipping
    ),
    "clip_coef": ("clip coef", "clip coefficient"),
    "loss_scale": ("loss scale", "loss scaler", "train/loss scale", "loss scale/loss scale"),
    "skipped_iterations": ("number of skipped iterations", "skipped iterations", "skipped iters"),
    "nan_iterations": ("number of nan iterations", "nan iterations", "nan iters"),
    "tokens": (
        "tokens",
        "consumed tokens",
        "num tokens",
        "n tokens seen",  # torchtitan
        "throughput/total tokens",  # OLMo
        "num input tokens seen",
        "total tokens",
        "tokens seen",
        "train/num tokens",
        "train/tokens",
        "train/num input tokens seen",
    ),
    "throughput_tok_s": (
        "tok/s",
        "tokens/s",
        "tokens per second",
        "tokens per sec",
        "tps",
        "wps",
        "tokens/sec",
        "tok/sec",  # build-nanogpt's 'tok/sec: 5198.52'
        "throughput/tokens per second",
        "throughput(tps)",  # torchtitan, per device
        "throughput/device/tokens per second",  # OLMo, per device
        "throughput/tokens per sec",  # Composer, all devices
        "perf/per device tokens per sec",  # MaxText
    ),
    "step_time_s": (
        "step time",
        "step time s",
        "iteration time",
        "iter time",
        "time per iteration",
        "elapsed time per iteration",
        "batch time",
        "train/step time",
        "train/step time s",  # the canonical name under the train group ('train/step_time_s')
        "train step timing in s",  # NeMo
        "time metrics/end to end",  # torchtitan 'time_metrics/end_to_end(s)'
        "perf/step time seconds",  # MaxText
    ),
    "mfu": ("mfu", "bf16 mfu", "model flops utilization", "model flops utilisation"),
    "gpu_mem_gb": (
        "memory",
        "gpu memory",
        "mem",
        "mem allocated",
        "memory allocated",
        "memory/max reserved",  # torchtitan 'memory/max_reserved(GiB)', what its console calls memory
    ),
    "gpu_util": ("gpu util", "gpu utilization", "gpu utilisation"),
    "gpu_temp_c": ("gpu temp", "gpu temperature"),
    "gpu_power_w": ("gpu power", "gpu power draw"),
    "router_z_loss": ("router z loss", "z loss"),
    "epoch": ("epoch", "train/epoch"),
}

ALIASES: Final[dict[str, str]] = {
    normalise_key(alias): canonical for canonical, aliases in _ALIASES.items() for alias in aliases
}
"""Normalised foreign key -> canonical metric name."""


def _slash_folded(aliases: dict[str, str]) -> dict[str, str]:
    """The table with ``/`` read as a space, where that leaves one meaning: TensorBoard's CSV download
    names its file after the tag with ``/`` written as ``_`` (``loss_metrics_global_avg_loss``)."""
    folded: dict[str, set[str]] = {}
    for key, canonical in aliases.items():
        folded.setdefault(key.replace("/", " "), set()).add(canonical)
    return {key: next(iter(targets)) for key, targets in folded.items() if len(targets) == 1}


_SLASH_FOLDED: Final[dict[str, str]] = _slash_folded(ALIASES)

_LR_MONITOR: Final = re.compile(
    r"^lr [a-z0-9]*(?:adam|adamw|sgd|sgdw|lion|lionw|adafactor|adagrad|rmsprop|lamb|lars|muon|shampoo|adan|adamax)"
    r"[a-z0-9]*(?:/(?:pg1|group0))?$"
)
"""The learning rate of the first param group as the LR monitors name it after the optimizer class:
Lightning's ``lr-AdamW`` (``lr-AdamW/pg1`` with several groups, counted from 1), Composer's
``lr-DecoupledAdamW/group0`` (counted from 0); other groups, and Lightning's second optimizer of a
class (``lr-AdamW-1``), are kept as they are."""

_KEY_UNITS: Final[dict[str, tuple[str, str]]] = {
    # keys whose name says the unit; value: (canonical or kept name, unit)
    "mem allocated bytes": ("gpu_mem_gb", "B"),
    "mem max allocated bytes": ("gpu_mem_max_gb", "B"),
}

TIME_UNITS: Final[dict[str, float]] = {
    "ns": 1e-9,
    "us": 1e-6,
    "µs": 1e-6,
    "ms": 1e-3,
    "s": 1.0,
    "sec": 1.0,
    "secs": 1.0,
    "min": 60.0,
    "h": 3600.0,
}
"""Factor to seconds."""
MEMORY_UNITS: Final[dict[str, float]] = {
    "b": 2.0**-30,
    "bytes": 2.0**-30,
    "kb": 2.0**-20,
    "kib": 2.0**-20,
    "mb": 2.0**-10,
    "mib": 2.0**-10,
    "mb_si": 1e6 / 2.0**30,  # decimal megabytes, said by the reader (OLMo divides bytes by 1e6)
    "gb": 1.0,
    "gib": 1.0,
    "tb": 1024.0,
    "tib": 1024.0,
}
"""Factor to GiB (the canonical 'GB' is GiB as torch reports it)."""

_UNIT_IN_KEY: Final = re.compile(r"^(?P<base>.*?)\s*\((?P<unit>[A-Za-zµ%]+)\)\s*$")
_MEMORY_WORDS: Final = re.compile(r"mem|byte|alloc|reserv|cache|vram|\bram\b|rss")


def _is_unit(m: re.Match[str]) -> bool:
    """Whether a key's bracketed suffix is a unit: a time, memory or ``%`` unit, the bare letter ``B``
    (bytes) only on a name that speaks of memory; elsewhere ``(B)`` is a label (Ultralytics'
    ``metrics/mAP50(B)``: box), and scaling a precision as bytes would invent its values."""
    unit = m["unit"]
    if unit == "b":
        return bool(_MEMORY_WORDS.search(m["base"]))
    return unit in TIME_UNITS or unit in MEMORY_UNITS or unit == "%"


_INVALID_CHARS: Final = re.compile(r"[^A-Za-z0-9_./:@%+\-]+")


def sanitise_name(raw: str) -> str:
    """A valid metric name for an unknown key: spaces and odd characters become ``_``.

    >>> sanitise_name("eval mean token accuracy")
    'eval_mean_token_accuracy'
    """
    name = _INVALID_CHARS.sub("_", raw.strip())
    name = re.sub(r"_+", "_", name).strip("_")
    name = re.sub(r"\.{2,}", ".", name)
    name = name.lstrip(".:@%+-/")
    if not name:
        name = "metric"
    name = name[:200]
    if not is_valid_metric_name(name):  # pragma: no cover - the substitutions above guarantee it
        name = "metric_" + re.sub(r"[^A-Za-z0-9_]", "_", name)[:190]
    return name


_NOT_TRAINING: Final = r"(?!(?:eval|val|valid|validation|test|predict|data|dataloader|generation|rollout)\b)"
_SECONDS: Final = r"(?P<unit>ns|us|µs|ms|s|sec|secs|second|seconds|min)"
_STEP: Final = r"(?:it|its|iter|iters|iteration|step|batch)"
_STEP_TIME_SHAPES: Final = (
    # a time per step as a unit of its own: ms-swift's 'train_speed(s/it)', 'ms/step', 'sec per iter'
    re.compile(rf"^{_NOT_TRAINING}(?:[a-z/ ]*?[\s(/])?{_SECONDS}\s*(?:/|per)\s*{_STEP}\)?$"),
    # a step's time with its unit after the name: 'step_time_ms', 'iter_time_s', 'time_per_step (ms)'
    re.compile(
        rf"^(?:train |training )?(?:elapsed |wall )?(?:(?:step|iter|iteration|batch) ?time|time per {_STEP})"
        rf"(?: in)?(?: {_SECONDS})?$"
    ),
    # a step's time named by the step and its unit alone: 'step_ms', 'iter_sec' (docs/diagnosis.md, "Import: step times
    # and clocks"); a bare 's' is left out ('step_s' may count steps)
    re.compile(r"^(?:train |training )?(?:step|iter|iteration|batch) (?P<unit>ns|us|µs|ms|msec|sec|secs|seconds)$"),
    # nanoGPT's per-iteration delta time with its unit after it: 'dt_ms' (a speedrun console's 'dt_ms 7517.4',
    # issue #32); a bare 'dt' says no unit and is judged from the clock (ingest.formats.generic_units)
    re.compile(r"^dt (?P<unit>ms|msec|sec|secs|seconds)$"),
)
_DEVICE: Final = r"(?:gpu|device|dev|rank|chip|core|worker)"
_PER: Final = r"\s*(?:/|per)\s*"
_TOKENS_PER_S: Final = re.compile(
    rf"^(?:(?:train|training|perf|throughput|speed)[/ ])*(?:global |total |all )?(?:tokens?|toks?)(?: global| total)?"
    rf"(?:{_PER}{_DEVICE})?{_PER}(?:s|sec|second)(?:{_PER}{_DEVICE})?$"
)
"""A tokens-per-second field of any spelling: ms-swift's ``tokens_global_per_sec`` and
``tokens_per_gpu_per_sec``, ``tok/s/gpu``, ``train/tokens_per_second``."""
PER_DEVICE: Final = re.compile(rf"(?:^|[\s/(]){_DEVICE}(?:[\s/)]|$)")
"""A key that names one device's share (``tokens_per_gpu_per_sec``): where a line also has the whole
job's figure, the job's keeps the canonical name."""


def by_shape(key: str) -> tuple[str, str | None] | None:
    """``(canonical, unit)`` for a normalised key that no alias names but whose shape says its role
    (docs/diagnosis.md, "Import: step times and clocks"): a time per step in any unit is ``step_time_s``, a
    tokens-per-second field is ``throughput_tok_s``; an evaluation's or data loader's own timing is not."""
    for shape in _STEP_TIME_SHAPES:
        m = shape.match(key)
        if m:
            unit = m["unit"]
            return "step_time_s", None if unit is None else _SECONDS_SPELLED.get(unit, unit)
    if _TOKENS_PER_S.match(key):
        return "throughput_tok_s", None
    return None


_SECONDS_SPELLED: Final = {"second": "s", "seconds": "s", "msec": "ms"}


def canonical_name(raw: str) -> tuple[str, str | None]:
    """``(metric name, unit implied by the key or None)`` for a foreign key.

    ``lm loss`` -> ``('loss', None)``; ``elapsed time per iteration (ms)`` -> ``('step_time_s', 'ms')``;
    ``eval_mean_token_accuracy`` -> ``('eval_mean_token_accuracy', None)`` (kept, unknown).
    """
    key = normalise_key(raw)
    if key in _KEY_UNITS:
        return _KEY_UNITS[key]
    unit: str | None = None
    m = _UNIT_IN_KEY.match(key)
    if m and _is_unit(m):
        key, unit = m["base"], m["unit"]
    if key in ALIASES:
        return ALIASES[key], unit
    if _LR_MONITOR.match(key):
        return "lr", unit
    folded = key.replace("/", " ")
    if folded in _SLASH_FOLDED and folded not in CANONICAL_METRICS:
        return _SLASH_FOLDED[folded], unit
    if raw.strip() in CANONICAL_METRICS:
        return raw.strip(), unit
    shaped = by_shape(key)
    if shaped is not None:
        return shaped[0], shaped[1] or unit
    base = raw.strip()
    if m and unit is not None:
        base = re.sub(r"\s*\([^()]*\)\s*$", "", base)
    return sanitise_name(base), unit


def own_name(raw: str) -> tuple[str, str | None]:
    """``(metric name, unit)`` for ``raw`` under its own name, no alias applied: what a key keeps when
    the metric its alias names is already on the same line (``lm_loss`` beside ``loss``)."""
    key = normalise_key(raw)
    if key in _KEY_UNITS:
        return _KEY_UNITS[key]
    m = _UNIT_IN_KEY.match(key)
    if m and _is_unit(m):
        return sanitise_name(re.sub(r"\s*\([^()]*\)\s*$", "", raw.strip())), m["unit"]
    return sanitise_name(raw), None


def names_the_metric(raw: str, metric: str) -> bool:
    """Whether ``raw`` is ``metric``'s own name (``loss`` for ``loss``, ``step time (ms)`` for
    ``step_time_s``), not an alias of it (``lm_loss``)."""
    name, _ = own_name(raw)
    return normalise_key(name) in (normalise_key(metric), normalise_key(metric.removesuffix("_s")))


def keep_apart(
    keys: Sequence[str], mapped: Sequence[tuple[str, str | None] | None]
) -> list[tuple[str, str | None] | None]:
    """``mapped`` (each of ``keys``' ``(metric, unit)``, or None) with no two different keys of one
    line on one metric: where several map to it, the key that is the metric's own name keeps it (else
    the first), and the others keep their own names (:func:`own_name`, in the unit the mapping gave).
    An alias never replaces the canonical metric the same line also carries, and no value of the line
    is dropped for another. One key printed twice (two ranks' records run together on one line)
    stays one metric, as before."""
    out = list(mapped)
    by_name: dict[str, list[int]] = {}
    for i, found in enumerate(mapped):
        if found is not None:
            by_name.setdefault(found[0], []).append(i)
    taken = {found[0] for found in mapped if found is not None}
    for name, idx in by_name.items():
        distinct = list(dict.fromkeys(keys[i] for i in idx))
        if len(distinct) < 2:
            continue
        keeper = next(
            (key for key in distinct if names_the_metric(key, name)),
            next((key for key in distinct if not PER_DEVICE.search(normalise_key(key))), distinct[0]),
        )
        for i in idx:
            found = mapped[i]
            if keys[i] != keeper and found is not None:
                own, unit = own_name(keys[i])
                own = own if own not in taken else f"{own}_{i}"
                out[i] = (own, unit or found[1])
    return out


def to_canonical_unit(name: str, unit: str | None, values: FloatArray) -> tuple[str, FloatArray]:
    """Scale ``values`` logged in ``unit`` to the canonical unit of ``name``.

    Times become seconds and memory GiB (an unknown metric gets ``_s``/``_gb`` appended so the
    unit stays visible); ``%`` becomes a fraction for ``mfu`` (canonical 0-1) and is kept for the
    rest (``gpu_util`` is canonically 0-100).
    """
    if not unit:
        return name, values
    u = unit.strip()
    if u in TIME_UNITS:
        if name not in CANONICAL_METRICS and not name.endswith("_s"):
            name += "_s"
        return name, values * TIME_UNITS[u]
    if u.lower() in MEMORY_UNITS:
        if name not in CANONICAL_METRICS and not name.endswith("_gb"):
            name += "_gb"
        return name, values * MEMORY_UNITS[u.lower()]
    if u == "%" and name == "mfu":
        return name, values / 100.0
    return name, values
