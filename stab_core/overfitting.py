"""Overfitting: the validation loss rises for a sustained span while the training loss keeps falling.

A user training past the point of generalisation (nanoGPT's shakespeare-char: val loss 1.47 at step
1,750, 1.72 at 5,000, train loss down to 0.62) wants to hear it, and the step of the best checkpoint
(the argmin of the val loss). A healthy run's val loss wobbles around a plateau: the rule measures the
rise against the eval-to-eval noise of the val loss itself, so that wobble never fires.

Pure: steps and values in, an :class:`Overfitting` (or None) out.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

MIN_EVALS_AFTER_BEST = 3
"""Evaluations after the best one that a rise must span: one or two high evals are noise."""
RISE_NOISE_MULTIPLE = 4.0
"""The rise (end level minus best) must exceed this many noise sigmas of the val loss..."""
RISE_MIN_RELATIVE = 0.02
"""... and this fraction of the best val loss (2 %): a rise of a hair on a smooth curve is not one."""
SUSTAINED_SHARE = 0.75
"""Share of the evals after the best that must sit above best + 2 sigma (the rise is not one bump)."""
TRAIN_FALL_NOISE_MULTIPLE = RISE_NOISE_MULTIPLE
"""The train loss's fall (its median at the best eval minus at the last) must exceed this many noise
sigmas of the train loss over the span (:func:`eval_noise` of its samples there): a val loss rising
while a chaotic train loss wanders (a prompt-tuning run at too high an lr, 3-23 from one log to the
next, "falling" 16.2 -> 13.1 with a sigma of 2.8) is a run that never trains, not one that learns its
training set; overfitting's train fall stands clear of its noise (7-3,000 sigmas on the corpus's)."""
END_EVALS = 3
"""The end level is the median of this many last evals (one late outlier does not make or break it)."""


@dataclass(frozen=True)
class Overfitting:
    """Val loss rising since its best eval while the train loss falls.

    ``best_step`` / ``best_val_loss``: the argmin of the val loss (the checkpoint to keep, nats);
    ``end_step`` / ``end_val_loss``: the last eval and the median of the last ``END_EVALS`` evals;
    ``rise``: end minus best (nats); ``noise``: the val loss's eval-to-eval noise sigma (nats);
    ``evals_after_best``: evaluations in the span; ``train_at_best`` / ``train_at_end``: the train
    loss's median over the eval interval ending at the best step and at the last eval (None when the
    run logs no train loss).
    """

    best_step: int
    best_val_loss: float
    end_step: int
    end_val_loss: float
    rise: float
    noise: float
    evals_after_best: int
    train_at_best: float | None
    train_at_end: float | None

    @property
    def span(self) -> tuple[int, int]:
        """The steps over which the val loss rose: from the best eval to the last."""
        return (self.best_step, self.end_step)

    def message(self, metric: str = "val loss", train: str = "the train loss") -> str:
        """One sentence for the CLI, the pages and the alert; ``metric``: the held-out loss that rose,
        ``train``: the training loss that fell."""
        fell = ""
        if self.train_at_best is not None and self.train_at_end is not None:
            fell = f" while {train} fell {self.train_at_best:.3g} -> {self.train_at_end:.3g}"
        return (
            f"overfitting: {metric} rose {self.best_val_loss:.4g} (step {self.best_step}) -> "
            f"{self.end_val_loss:.4g} (step {self.end_step}){fell}; the best checkpoint is at step {self.best_step}"
        )

    def to_json(self) -> dict[str, Any]:
        """JSON-ready fields (``stabscope spikes --json``'s ``overfitting``, the stored analyses)."""
        return {
            "best_step": self.best_step,
            "best_val_loss": self.best_val_loss,
            "end_step": self.end_step,
            "end_val_loss": self.end_val_loss,
            "rise": self.rise,
            "noise": self.noise,
            "evals_after_best": self.evals_after_best,
            "train_at_best": self.train_at_best,
            "train_at_end": self.train_at_end,
            "span": list(self.span),
            "message": self.message(),
        }


def eval_noise(values: FloatArray) -> float:
    """Robust eval-to-eval noise sigma of a series (its unit): the MAD of its second differences
    (which are ~0 on a steady trend or a slow curve, so a descent or a linear rise does not count as
    noise), scaled to a normal sigma and divided by sqrt 6 (a second difference holds 1 + 4 + 1
    samples' variance). 0 with fewer than 4 values."""
    if values.size < 4:
        return 0.0
    second = np.diff(values, n=2)
    mad = float(np.median(np.abs(second - np.median(second))))
    return float(1.4826 * mad / np.sqrt(6.0))


def _median_between(steps: IntArray, values: FloatArray, lo: int, hi: int) -> float | None:
    """Median of the finite ``values`` at steps in (lo, hi]; None when there is none."""
    inside = (steps > lo) & (steps <= hi) & np.isfinite(values)
    return float(np.median(values[inside])) if inside.any() else None


def _train_near(steps: IntArray, values: FloatArray, lo: int, hi: int, after: int) -> float | None:
    """The train loss at the eval of step ``hi``: the median of the finite samples in (lo, hi], else
    the last finite one at or before ``hi`` and past step ``after`` (a trainer that logs its train loss
    no more often than it evaluates: parameter-golf logs both every 1,000 steps and evaluates once
    more at its wall-clock stop, 11,578, with no train line since 11,000); None when there is none."""
    found = _median_between(steps, values, lo, hi)
    if found is not None:
        return found
    inside = (steps > after) & (steps <= hi) & np.isfinite(values)
    return float(values[inside][-1]) if inside.any() else None


def detect_overfitting(
    val_steps: IntArray,
    val_values: FloatArray,
    train_steps: IntArray | None = None,
    train_values: FloatArray | None = None,
) -> Overfitting | None:
    """The overfitting of a run from its val loss (and train loss, when logged), or None.

    It fires when, after the val loss's best (lowest) eval, at least ``MIN_EVALS_AFTER_BEST`` evals
    follow; the median of the last ``END_EVALS`` is above the best by more than both
    ``RISE_NOISE_MULTIPLE`` noise sigmas (:func:`eval_noise` of all the evals)
    and ``RISE_MIN_RELATIVE`` of the best; at least ``SUSTAINED_SHARE`` of the evals after the best
    sit above best + 2 sigma; and, when a train loss is logged, its median over the last eval
    interval (or its last sample before the last eval, when none falls in that interval) is below its
    median over the interval ending at the best eval by more than ``TRAIN_FALL_NOISE_MULTIPLE`` noise
    sigmas of the train loss over the span (both falling is
    overfitting; both rising is a divergence, which the spike detectors report). Non-finite evals
    are left out.
    """
    finite = np.isfinite(val_values)
    steps, values = np.asarray(val_steps[finite], np.int64), np.asarray(val_values[finite], np.float64)
    if steps.size < MIN_EVALS_AFTER_BEST + 2:
        return None
    best = int(np.argmin(values))
    after = values[best + 1 :]
    if after.size < MIN_EVALS_AFTER_BEST:
        return None
    noise = eval_noise(values)
    best_value = float(values[best])
    end_value = float(np.median(values[-END_EVALS:]))
    rise = end_value - best_value
    if rise <= max(RISE_NOISE_MULTIPLE * noise, RISE_MIN_RELATIVE * abs(best_value)):
        return None
    if float(np.mean(after > best_value + 2 * noise)) < SUSTAINED_SHARE:
        return None
    train_at_best = train_at_end = None
    if train_steps is not None and train_values is not None and np.isfinite(train_values).any():
        previous = int(steps[best - 1]) if best > 0 else int(steps[best]) - 1
        train_at_best = _train_near(train_steps, train_values, previous, int(steps[best]), -(2**62))
        train_at_end = _train_near(train_steps, train_values, int(steps[-2]), int(steps[-1]), int(steps[best]))
        if train_at_best is not None and train_at_end is not None:
            if train_at_end >= train_at_best:
                return None
            span = (train_steps > steps[best]) & (train_steps <= steps[-1]) & np.isfinite(train_values)
            train_noise = eval_noise(np.asarray(train_values[span], np.float64))
            if train_at_best - train_at_end <= TRAIN_FALL_NOISE_MULTIPLE * train_noise:
                return None  # the train loss wanders, it does not fall
    return Overfitting(
        best_step=int(steps[best]),
        best_val_loss=best_value,
        end_step=int(steps[-1]),
        end_val_loss=end_value,
        rise=rise,
        noise=noise,
        evals_after_best=int(after.size),
        train_at_best=train_at_best,
        train_at_end=train_at_end,
    )


CO_RISE_WINDOW_SHARE = 0.1
"""The windows the val loss's steepest rise is measured over hold this share of the evals after its best (and at
least :data:`MIN_EVALS_AFTER_BEST`): ten windows across the span, wide enough that one eval's wobble is not a rise."""
TRAIN_ROSE_RELATIVE = 0.05
"""A training loss whose median over the later window is above its median over the earlier one by more than this
share of that level (5 %) rose with the val loss: a falling training loss wobbles window to window by a few percent
at most; a warm-up pushing the model off its minimum lifts it by 10-15 % (round 26 r26d)."""


def steepest_rise(steps: IntArray, values: FloatArray, first: int, last: int) -> tuple[int, int, int] | None:
    """Where the val loss (``steps``, ``values``) rose most between ``first`` and ``last`` (steps): over every pair
    of consecutive windows of ``w`` evals (:data:`CO_RISE_WINDOW_SHARE` of the evals in the span, at least
    :data:`MIN_EVALS_AFTER_BEST`), the pair whose later median is the most above the earlier one: (the earlier
    window's first step, the later window's first step, its last step). None with fewer than 2 windows of evals or
    no rise."""
    inside = (steps >= first) & (steps <= last) & np.isfinite(values)
    s, v = steps[inside], values[inside]
    w = max(MIN_EVALS_AFTER_BEST, round(CO_RISE_WINDOW_SHARE * s.size))
    if s.size < 2 * w:
        return None
    windows = np.lib.stride_tricks.sliding_window_view(v, w)
    medians = np.median(windows, axis=1)
    rises = medians[w:] - medians[: medians.size - w]
    i = int(np.argmax(rises))
    if not rises[i] > 0:
        return None
    return int(s[i]), int(s[i + w]), int(s[i + 2 * w - 1])


def rose_over(steps: IntArray, values: FloatArray, window: tuple[int, int, int]) -> bool:
    """Whether a training loss (``steps``, ``values``) rose over ``window`` (from :func:`steepest_rise`): its
    median over [later start, end] above its median over [earlier start, later start) by more than
    :data:`TRAIN_ROSE_RELATIVE` of that level. False where either window holds no finite sample."""
    a, m, b = window
    ok = np.isfinite(values)
    before = values[ok & (steps >= a) & (steps < m)]
    after = values[ok & (steps >= m) & (steps <= b)]
    if not before.size or not after.size:
        return False
    level = float(np.median(before))
    return float(np.median(after)) - level > TRAIN_ROSE_RELATIVE * abs(level)
