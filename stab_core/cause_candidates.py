"""Causes the data is consistent with, where the tree confirms none (issue #32; docs/diagnosis.md, "Causes").

"Cause unknown" was false where the data shows a cause's signature without the signals that would
separate it from another: the LR still rising in its warmup at the onset (a ramp too steep, or a bad
batch that happened to fall in it), a loss-only jump over one logged step the run was back from within
a few samples (a bad batch's shape, with no grad norm to show the loss moved first), an fp16 loss scale
at its floor after it had been higher (an overflow). Each is said as "not confirmed: consistent with"
the candidates the data supports, with its evidence and what to log to tell them apart; never as one
cause the data cannot separate from another. Pure: no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Final

from stab_core.loss_origin import moving_target
from stab_core.spikes import SpikeEvent
from stab_core.tree_actions import Evidence

CAUSE_WORDS: Final[dict[str, str]] = {
    "lr_transition": "the LR's rise (an LR transition)",
    "data_outlier": "a bad batch (a data outlier)",
    "numerical": "a numerical fault (an fp16 overflow)",
}
"""How a candidate cause is named (the key: the causes' names of ``stab_core.causes`` and the golden facts)."""

CONSISTENT_PREFIX: Final = "Cause not confirmed: consistent with "
"""How every such statement begins (what a reader, or the corpus scorer, recognises it by)."""

BAD_BATCH_MAX_SAMPLES: Final = 3
"""A loss jump back in band within this many logged samples (its first the peak) has a bad batch's shape:
one batch's loss, gone with the batch; a transition or a numerical fault leaves a longer trace."""

BAD_BATCH_MAX_STEPS_PER_SAMPLE: Final = 20
"""A logged sample shows one batch's loss only where the log records (nearly) every step: consoles that print
the iteration's loss every 1-10 steps do (17 across an epoch's end, where an epoch of 47 iterations printed
every 10 leaves a gap of 17). A log that keeps one value per 25, 50, 100 or 500 steps (an HF
Trainer's ``logging_steps`` mean, a Lightning epoch mean, an evaluation cadence) averages or samples a span
of batches: one bad batch is diluted k-fold in a k-step mean, and a jump of one logged sample there is a
burst over the span as much as one batch, so the shape of one bad batch cannot be read (docs/diagnosis.md, "Causes")."""


REWARD_SERIES: Final = re.compile(r"(?:^|/)(?:train/)?rewards?(?:$|/|_(?:mean|std)$)", re.IGNORECASE)
"""A policy's reward logged beside its loss (``reward``, ``reward_std``, ``rewards/<fn>/mean``): a
policy-gradient run (PPO, GRPO), whose loss is an advantage-weighted objective over its own samples."""


def target_moves(meta: Mapping[str, object], metrics: Iterable[str]) -> bool:
    """Is the run's loss one whose target moves as it trains: an RL or GAN objective
    (:func:`stab_core.loss_origin.moving_target`), or a policy's loss logged beside its reward? There a
    loss that jumps and comes back is the policy or the opponent moving, not one bad batch: the shape of
    a bad batch (a jump over a fixed target's level) is read only on a loss with a fixed target (round
    18, act24)."""
    names = list(metrics)
    return moving_target(meta, names) or any(REWARD_SERIES.search(name) for name in names)


@dataclass(frozen=True)
class Candidates:
    """Causes the data is consistent with (``causes``: keys of :data:`CAUSE_WORDS`), why (``why``: the
    evidence in words), what to log to tell them apart (``to_log``) and the numbers (``evidence``)."""

    causes: tuple[str, ...]
    why: str
    to_log: str
    evidence: Evidence

    def text(self) -> str:
        names = " or ".join(CAUSE_WORDS[c] for c in self.causes)
        return f"{CONSISTENT_PREFIX}{names}: {self.why}."


def named_causes(text: str) -> list[str]:
    """The candidate causes a "consistent with" statement names (in :data:`CAUSE_WORDS`' order)."""
    if not text.startswith(CONSISTENT_PREFIX):
        return []
    head = text[len(CONSISTENT_PREFIX) :].split(": ", 1)[0]
    return [cause for cause, words in CAUSE_WORDS.items() if words in head]


def warmup_candidates(signature: Evidence) -> Candidates:
    """An early instability with the LR still rising in its warmup at the onset: the ramp, or a bad batch."""
    factor, window, group = signature.get("lr_rise_factor"), signature.get("window_steps"), signature.get("lr_group")
    rise = f" (x{factor:.3g} within {window} steps before the onset)" if isinstance(factor, float) else ""
    # the param group whose LR rose, when it is not the run's ``lr`` (stab_core.lr_groups)
    named = f" (param group {group})" if isinstance(group, str) else ""
    return Candidates(
        ("lr_transition", "data_outlier"),
        f"the LR{named} was still rising in its warmup{rise} when the loss blew up; the two look the same in this log",
        "the loss and the global grad norm at every step around the onset (a bad batch moves the loss first, a "
        "ramp too steep grows the grad norm with the LR), or re-run with a longer warmup",
        dict(signature),
    )


def steps_per_sample(spike: SpikeEvent) -> float | None:
    """Optimizer steps per logged sample across a recovered spike: from its first flagged sample to the first
    sample back in band, ``n_samples`` intervals (the log's own cadence where the jump sits, whatever its
    cadence elsewhere). None without a recovery step."""
    if spike.recovery_step is None or spike.n_samples < 1 or spike.recovery_step <= spike.start:
        return None
    return (spike.recovery_step - spike.start) / spike.n_samples


def bad_batch_shape(spike: SpikeEvent) -> Candidates | None:
    """A loss-only jump that peaked at its first flagged sample and was back in band within
    :data:`BAD_BATCH_MAX_SAMPLES` logged samples, all finite, with no grad-norm spike leading it, in a log
    that records at most :data:`BAD_BATCH_MAX_STEPS_PER_SAMPLE` steps per sample there: a bad batch's shape
    (None: not that shape, or a log too sparse to show one batch). The grad norm that would confirm the loss
    moved first is what to log."""
    if spike.metric != "loss" or spike.nonfinite or spike.diverged or not spike.recovered:
        return None
    if spike.peak != spike.start or spike.n_samples > BAD_BATCH_MAX_SAMPLES or spike.grad_norm_led is True:
        return None
    per_sample = steps_per_sample(spike)
    if per_sample is None or per_sample > BAD_BATCH_MAX_STEPS_PER_SAMPLE:
        return None
    return Candidates(
        ("data_outlier",),
        f"the loss jumped {spike.ratio:.3g}x its level in one logged step and was back within {spike.n_samples} "
        "logged sample(s), the shape of one bad batch",
        "the global grad norm before clipping (a bad batch moves the loss before the grad norm) and the indices of "
        f"the batches at step {spike.start}",
        {
            "peak_at_first_sample": True,
            "n_samples": spike.n_samples,
            "recovery_step": spike.recovery_step,
            "steps_per_sample": per_sample,
        },
    )


def loss_scale_at_floor(path_evidence: Sequence[Mapping[str, object]], floor: float) -> Candidates | None:
    """The fp16 loss scale at or below ``floor`` around the spike after it had been higher earlier in the
    run (``loss_scale_earlier_max``, node 1's evidence), where node 1 saw no fall within its window (a log
    that elides the steps between): consistent with an overflow the scaler could not absorb."""
    for evidence in path_evidence:
        low, earlier = evidence.get("loss_scale_min"), evidence.get("loss_scale_earlier_max")
        if isinstance(low, float | int) and isinstance(earlier, float | int) and low <= floor < earlier:
            return Candidates(
                ("numerical",),
                f"the fp16 loss scale was {low:g} around the spike, down from {earlier:g} earlier in the run",
                "the loss scale and the skipped (overflow) iterations at every step before the spike",
                {"loss_scale_min": low, "loss_scale_earlier_max": earlier},
            )
    return None
