"""The canonical metric names: the data contract every producer maps onto.

Units are part of the contract: losses in nats, norms are L2 norms, times in seconds,
memory in GB (GiB as torch reports it), power in W.
Namespaced extras such as ``grad_norm/layer.3`` are allowed and kept as they are.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Final

import numpy as np

RUN_RANK: Final = -1
"""Rank used for run-level series (loss reported once per step, global grad norm, LR)."""

CANONICAL_METRICS: Final[dict[str, str]] = {
    "loss": "training loss (nats/token)",
    "val_loss": "validation loss (nats/token)",
    "lr": "learning rate of the first param group",
    "grad_norm": "global gradient L2 norm, before clipping",
    "grad_norm_clipped": "global gradient L2 norm, after clipping",
    "clip_coef": "clip coefficient min(1, max_norm/(norm+1e-6))",
    "grad_norm_local": "this rank's gradient L2 norm before the all-reduce",
    "tokens": "tokens consumed so far (cumulative count)",
    "step_time_s": "wall time of one optimizer step (s)",
    "throughput_tok_s": "tokens per second",
    "loss_scale": "fp16 dynamic loss scale",
    "nonfinite_grads": "count of non-finite gradient values / skipped steps",
    "expert_load_max_over_mean": "MoE: max expert load over mean expert load",
    "router_z_loss": "MoE: router z-loss",
    "gpu_mem_gb": "GPU memory in use (GB)",
    # torch's memory_reserved: what the caching allocator holds from the device (in use plus cached);
    # Megatron's memory line, torchtune and torchtitan print it beside the allocated memory
    "gpu_mem_reserved_gb": "GPU memory reserved by the caching allocator (GB)",
    "gpu_util": "GPU utilisation (0-100 %)",
    "gpu_temp_c": "GPU temperature (deg C)",
    "gpu_power_w": "GPU power draw (W)",
    "mfu": "model FLOPs utilisation (0-1)",
    "skipped_iterations": "iterations skipped by the trainer (count per log interval)",
    "nan_iterations": "iterations with NaN (count per log interval)",
    "epoch": "epoch (fractional)",
}

PER_RANK_METRICS: Final[frozenset[str]] = frozenset(
    {"grad_norm_local", "step_time_s", "gpu_mem_gb", "gpu_util", "gpu_temp_c", "gpu_power_w"}
)
"""Metrics that are naturally per rank; the rest are normally run-level (rank -1)."""

_NAME_RE: Final = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_./:@%+\-]{0,199}$")


def is_valid_metric_name(name: str) -> bool:
    """True for a canonical or namespaced metric name (``grad_norm/layer.3``); no spaces."""
    return bool(_NAME_RE.match(name)) and ".." not in name


def unit_of(metric: str) -> str:
    """Short unit label for chart axes, from the canonical description ('' when unknown)."""
    base = metric.split("/", 1)[0]
    desc = CANONICAL_METRICS.get(base, "")
    m = re.search(r"\(([^()]*)\)\s*$", desc)
    return m.group(1) if m else ""


POLICY_LOSSES: Final[tuple[str, ...]] = ("act_loss", "actor_loss", "actor/pg_loss", "pg_loss", "policy_loss")
"""The loss of an RL fine-tune (PPO, GRPO: DeepSpeed-Chat's ``act_loss``, verl's ``actor/pg_loss``): the
objective of the policy, the model being trained, so the run's loss in the pages' words. It is no
language-model loss (an advantage-weighted ratio, often negative, noisy by design): it keeps its name
and the loss-spike detector does not read it. The critic's loss trains the value model beside it."""


POLICY_LOSS_NAME: Final = re.compile(
    r"^(?:[\w.-]+/)?(?:(?:policy|pg|actor)_loss|loss/(?:policy|pg|actor))(?:_(?:avg|mean))?$", re.IGNORECASE
)
"""A policy loss under a trainer's namespace (TRL's PPO ``loss/policy_avg``, ``train/policy_loss``): the
same quantity as :data:`POLICY_LOSSES` (docs/diagnosis.md, "Import: the loss")."""


def policy_loss_of(names: Iterable[str]) -> str | None:
    """The policy loss among ``names`` (the first of :data:`POLICY_LOSSES` it holds, else the first named
    as one by :data:`POLICY_LOSS_NAME`), None without one."""
    held = list(names)
    listed = next((name for name in POLICY_LOSSES if name in held), None)
    return listed or next((name for name in held if POLICY_LOSS_NAME.match(name)), None)


GAN_SIDE: Final = re.compile(r"^(?:loss_?|err)?(?P<side>[GD])(?:_[A-Za-z0-9]+)?$", re.IGNORECASE)
"""A GAN's generator or discriminator term as pix2pix/CycleGAN and DCGAN scripts name it (``G_A``,
``D_real``, ``errG``, ``loss_D``)."""


def gan_terms(names: Iterable[str]) -> list[str]:
    """The names of ``names`` that are a GAN's generator and discriminator terms (:data:`GAN_SIDE`), where both
    sides are there (a lone ``D_model`` is no GAN's); empty otherwise. They are the run's losses whatever their
    names lack: a run logging them trains, and one stuck at a value (a discriminator at 0.000, its generator
    pinned at 1.000 after an adversarial collapse) is a fact about training, never a setting (round 26 r26b)."""
    sides = {n: m["side"].upper() for n in names if (m := GAN_SIDE.match(n))}
    return sorted(sides) if set(sides.values()) == {"G", "D"} else []


UNREAD_NAMES: Final[dict[str, re.Pattern[str]]] = {
    "loss": re.compile(r"\bloss\b(?!\s*scale)", re.IGNORECASE),
    "grad_norm": re.compile(r"\bgrad(?:ient)?[ _]norm\b", re.IGNORECASE),
    "lr": re.compile(r"\b(?:lr|learning[ _]rate)\b", re.IGNORECASE),
}
"""How a line names a quantity (a loss, not a loss scale): where a line the import flagged as suspect (it
holds values no reader read) names one, the log holds that quantity, unread."""


STEP_WORDS: Final = re.compile(r"\b(?:step|steps|iter|iteration|epoch|batch)\b", re.IGNORECASE)
"""A line that records a value per step names its step (``Epoch 1/1 with loss 0.57``); one that names a
quantity without it is a setting (``lr=0.02`` in pasted source code), not an unread record."""


SUSPECT_LINES: Final = "suspect_lines"
"""The ``RunView.meta`` key of the (line, text) pairs the import flagged as suspect (values no reader read);
the view's builder in ``ingest`` fills it from its import report, whose layout this module does not read."""


def unread_line_naming(metric: str, suspect: Iterable[tuple[int, str]]) -> tuple[int, str] | None:
    """(line, text) of the first of the ``suspect`` lines (line number, text: lines the import flagged as
    holding values no reader read) that names ``metric`` with a number and a step counter
    (:data:`STEP_WORDS`) on it; None when none does (or no pattern names it)."""
    pattern = UNREAD_NAMES.get(metric)
    if pattern is None:
        return None
    for line, text in suspect:
        if pattern.search(text) and re.search(r"\d", text) and STEP_WORDS.search(text):
            return int(line), text.strip()
    return None


METRIC_NAMES: Final[dict[str, re.Pattern[str]]] = {"loss": re.compile(r"loss(?!_?scale)", re.IGNORECASE)}
"""How a stored metric's name names a quantity that no reader took as the canonical one: ``mse_loss_mean``,
``TrainLoss``, ``loss_D``, ``mlm_loss`` name a loss. The loss only: a stored ``grad_norm_clipped`` is the
norm after clipping, not the one a "grad_norm" names, and an LR's names are too short to tell apart."""
HELD_OUT_WORDS: Final = frozenset({"val", "valid", "validation", "test", "eval", "dev"})
"""A word of a held-out quantity's name (``ValLoss``, ``test_loss``, ``dpo_eval_loss``): no training loss."""


def _held_out_name(name: str) -> bool:
    """Does ``name`` hold a :data:`HELD_OUT_WORDS` word (split at ``_``, ``-``, ``/``, digits and camel case)?"""
    words = re.findall(r"[A-Z]?[a-z]+|[A-Z]+(?![a-z])", name)
    return any(w.lower() in HELD_OUT_WORDS for w in words)


def metrics_naming(metric: str, names: Iterable[str]) -> list[str]:
    """The stored metric ``names`` that name quantity ``metric`` (:data:`METRIC_NAMES`) though none is
    ``metric`` itself: a training quantity the log holds under its own name, which no reader took as the
    run's ``metric`` (held-out names, :data:`HELD_OUT_WORDS`, left out). Empty when none does."""
    pattern = METRIC_NAMES.get(metric)
    held = list(names)
    if pattern is None or metric in held:
        return []
    return [n for n in held if pattern.search(n) and not _held_out_name(n)]


def missing_reason(metric: str, names: Iterable[str], suspect: Iterable[tuple[int, str]] = ()) -> str:
    """Why a run whose metrics are ``names`` has no ``metric``, in the analyses' words: an RL run's loss
    is its policy loss (see :data:`POLICY_LOSSES`), not absent; a metric one of the ``suspect`` lines names
    (:func:`unread_line_naming`) is unread, not absent; so is one a stored metric's name names
    (:func:`metrics_naming`: ``mse_loss_mean``, ``TrainLoss``), which no reader took as the run's ``metric``."""
    held = list(names)
    policy = policy_loss_of(held) if metric == "loss" else None
    if policy is not None:
        return f"the run's loss is its policy loss ({policy}), not a language-model loss the detector reads"
    unread = unread_line_naming(metric, suspect)
    if unread is not None:
        line, text = unread
        return f'no {metric} series was read: the log names one on line {line} ("{text[:80]}"), a layout no reader read'
    named = metrics_naming(metric, held)
    if named:
        shown = ", ".join(named[:3]) + (f" and {len(named) - 3} more" if len(named) > 3 else "")
        return f"no {metric} series was read: the log names one ({shown}), which no reader took as the run's {metric}"
    return f"the run logs no {metric}"


SIGNED_LOSS_REASON: Final = (
    "the loss takes negative values (no cross-entropy alone: a policy objective, or a loss with negative "
    "auxiliary terms), so a ratio to its level means nothing; the ratio tests (spikes, early rises, climbs, "
    "run-end rises, level shifts, spikes past long incidents) were not run on it"
)

SIGNED_SHARE: Final = 0.01
"""A loss is signed when at least this share of its finite samples (1 %) is negative: one negative sample
among thousands is a sentinel ("-1: not computed"), not an objective that crosses zero, and must not switch
off every loss detector of the run."""


def signed_objective(values: object) -> bool:
    """Whether a loss series (numpy values) takes negative finite values, on :data:`SIGNED_SHARE` of its
    finite samples or more: no language-model loss (a cross-entropy is >= 0), so a rise 'to 3x its level'
    from 0.0003 to 0.0009 is noise around zero."""
    arr = np.asarray(values, dtype=np.float64)
    finite = arr[np.isfinite(arr)]
    return bool(finite.size) and float(np.mean(finite < 0)) >= SIGNED_SHARE


LOSS_FLAT_TOLERANCE: Final = 0.02
"""A loss whose last quarter's median is within this share of its first quarter's median did not fall: the
weights did not move (a run that never trains); any training run that learns falls by far more."""


def loss_falls(values: object) -> bool | None:
    """Did the loss fall over the log (its last quarter's median below its first quarter's by more than
    :data:`LOSS_FLAT_TOLERANCE`)? None with fewer than 4 finite samples (a fall cannot be told)."""
    array = np.asarray(values, dtype=float)
    finite = array[np.isfinite(array)]
    if finite.size < 4:
        return None
    quarter = finite.size // 4
    first, last = float(np.median(finite[:quarter])), float(np.median(finite[-quarter:]))
    return last < first - LOSS_FLAT_TOLERANCE * abs(first)
