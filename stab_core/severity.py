"""What an incident cost, judged against the loss's trend, and the one sensitivity setting.

An incident is ranked by harm, not by how tall it was:

* ``blip``: the loss is back within its noise band of the trend within ``blip_samples`` logged samples
  and every detected member recovered as fast (a one-batch outlier the run absorbed at once);
* ``spike``: steps were lost: the loss stayed above its trend's band for longer, or a member took
  longer to recover;
* ``divergence``: no return (the detector's event never recovered, or went non-finite).

The trend is taken from the loss samples logged *before* the incident (at most :data:`TREND_SAMPLES`
finite ones): the level it had reached (the median of the last :data:`LEVEL_SAMPLES`), falling from there
with the Theil-Sen slope of the samples (the median of pairwise slopes, robust to the outliers a loss
has; flat under :data:`MIN_TREND_SAMPLES` samples) for at most the span they cover. Its noise is the
spread of consecutive samples (second differences, as a standard deviation), floored at the relative and
logging-resolution floors the spike detector uses. The loss has recovered at the first sample after the
incident starts, and at or after its peak, that is at or below ``trend + RECOVER_SIGMAS * noise``, or at
or below the level it had reached (a falling loss is not required to keep falling at its old pace).

A fit on fewer than :data:`CERTAIN_SAMPLES` samples (the first steps of a run, a 20-step run) is
stated as ``certainty = "low"``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, Literal

import numpy as np

from stab_core.rolling_baseline import MAD_TO_Z, NOISE_MIN_SAMPLES, descends, logging_resolution, sample_noise
from stab_core.runview import FloatArray, IntArray
from stab_core.spike_params import GRAD_NORM_SPIKE_PARAMS, LOSS_SPIKE_PARAMS, SpikeParams

SeverityLevel = Literal["blip", "spike", "divergence"]
Certainty = Literal["high", "low"]

SEVERITIES: Final = ("blip", "spike", "divergence")
"""From least to most harm."""

TREND_SAMPLES: Final = 32
"""Finite loss samples before an incident that its trend is fitted on."""
MIN_TREND_SAMPLES: Final = 8
"""Below this many samples the trend is flat (a slope from 3 points is noise)."""
LEVEL_SAMPLES: Final = 3
"""Samples before an incident whose median is the level it had reached (one outlier batch outvoted)."""
CERTAIN_SAMPLES: Final = 16
"""A level from fewer samples than this (the spike detector's ``min_history``) is less certain."""
RECOVER_SIGMAS: Final = 3.0
"""The loss is back once within this many noise standard deviations above its trend."""
REL_NOISE_FLOOR: Final = LOSS_SPIKE_PARAMS.rel_mad_floor / MAD_TO_Z
"""Noise floor as a fraction of the trend level: the spike detector's MAD floor (1%) as a sigma."""


@dataclass(frozen=True)
class Sensitivity:
    """One setting of ``--sensitivity``: the spike detector's thresholds and how short a blip is.

    Attributes:
        name: ``low``, ``default`` or ``high``.
        loss: spike thresholds for losses; grad_norm: for gradient norms.
        blip_samples: an incident whose loss is back on its trend within this many logged samples
            (and whose members all recovered as fast) is a blip, hidden from the default views.
    """

    name: str
    loss: SpikeParams
    grad_norm: SpikeParams
    blip_samples: int


SENSITIVITIES: Final = {
    "low": Sensitivity(
        "low",
        SpikeParams(z_threshold=8.0, min_ratio=1.3, outlier_ratio=None),
        SpikeParams(z_threshold=8.0, min_ratio=3.0, recover_ratio=1.5, outlier_ratio=None),
        blip_samples=5,
    ),
    "default": Sensitivity("default", LOSS_SPIKE_PARAMS, GRAD_NORM_SPIKE_PARAMS, blip_samples=3),
    "high": Sensitivity(
        "high",
        SpikeParams(z_threshold=5.0, min_ratio=1.15),
        SpikeParams(z_threshold=5.0, min_ratio=1.8, recover_ratio=1.4, outlier_ratio=None),
        blip_samples=1,
    ),
}
"""The three settings. ``default`` keeps the detector's own defaults (the ones the golden answers on
../shared are scored with) and a blip of at most 3 logged samples: see docs/diagnosis.md for how it
was set from the real logs."""

DEFAULT_SENSITIVITY: Final = "default"


def sensitivity(name: object) -> Sensitivity:
    """The setting called ``name`` (None: the default); a clear ValueError for anything else."""
    if name is None:
        return SENSITIVITIES[DEFAULT_SENSITIVITY]
    if isinstance(name, str) and name in SENSITIVITIES:
        return SENSITIVITIES[name]
    raise ValueError(f"sensitivity {name!r} is not one of {', '.join(SENSITIVITIES)}")


@dataclass(frozen=True)
class TrendBand:
    """The loss's trend before an incident and its noise band (units of the loss).

    ``anchor``: the last step fitted; ``level``: the trend's value there; ``slope``: per step;
    ``horizon``: steps after ``anchor`` over which the line is extrapolated (flat after);
    ``sigma``: noise standard deviation of the residuals (floored); ``samples``: samples fitted."""

    anchor: int
    level: float
    slope: float
    horizon: int
    sigma: float
    samples: int

    def trend(self, steps: IntArray) -> FloatArray:
        ahead = np.clip(steps.astype(np.float64) - self.anchor, 0.0, float(self.horizon))
        return self.level + self.slope * ahead

    def upper(self, steps: IntArray) -> FloatArray:
        """The top of the noise band at ``steps``: never below the level reached before the incident (a
        loss back where it was has recovered, however fast it had been falling: a run's first fall slows,
        torchtitan on Aurora levelled off at 7 where its first 17 steps' slope pointed at 3.2)."""
        return np.maximum(self.trend(steps) + RECOVER_SIGMAS * self.sigma, self.level)

    @property
    def certainty(self) -> Certainty:
        return "high" if self.samples >= CERTAIN_SAMPLES else "low"


LEAD_IN_SAMPLES: Final = 3
"""At most this many samples just before an incident's detected start are its lead-in, left out of its
trend when each stood out of the band of the samples before it (see :func:`trend_before`)."""


def trend_before(steps: IntArray, values: FloatArray, index: int, samples: int = TREND_SAMPLES) -> TrendBand | None:
    """The trend of ``values`` before position ``index``, from up to ``samples`` finite samples before it
    (None with none).

    Its slope is the Theil-Sen slope of the samples (the median of pairwise slopes; flat under
    :data:`MIN_TREND_SAMPLES`, never rising). A falling loss is at the level it had reached, the median
    of its last :data:`LEVEL_SAMPLES` samples (one outlier outvoted), not at the value of a line fitted
    through all of them (on a memorising run's convex collapse such a line stood below zero, issue #32
    batch 8), and falls from there with the slope for at most the span fitted; a flat or rising one is at
    the median of all of them. Its noise is the spread of consecutive samples
    (:func:`stab_core.rolling_baseline.sample_noise`, second differences: a trend or a curve cancels,
    where the residuals of a straight line fitted to a curve measure the curve), or the MAD of those
    residuals where that is smaller (the second differences of a few samples overstate one outlier,
    which sits in three of them), the residuals alone under ``NOISE_MIN_SAMPLES`` samples; as a sigma,
    floored at the detector's relative and resolution floors. Under ``NOISE_MIN_SAMPLES`` samples there
    is no noise to take, nor a printing resolution (two or three samples in a run's first steps are its
    fall or the rise's own start: a band from 6.94 and 8.90 held 13.97, the peak, "back"): the loss is
    back at or below the level.

    The incident's **lead-in** is not its trend: up to :data:`LEAD_IN_SAMPLES` samples just before
    ``index``, each above the band of the samples before it, are left out (a detector that flags a rise
    at its third sample, 5.26 -> 5.52 -> 6.66 -> 7.55, would otherwise call the level 5.52 and the loss
    "back" at 5.65, 0.4 above where it was)."""
    lo = max(0, index - 4 * samples)  # room for non-finite samples in the way
    s, x = steps[lo:index], values[lo:index]
    keep = np.isfinite(x)
    s, x = s[keep][-(samples + LEAD_IN_SAMPLES) :], x[keep][-(samples + LEAD_IN_SAMPLES) :]
    if x.size < 1:
        return None
    for _ in range(LEAD_IN_SAMPLES):
        if x.size <= NOISE_MIN_SAMPLES:
            break
        before = _fit(s[:-1][-samples:], x[:-1][-samples:])
        if not x[-1] > before.trend(s[-1:])[0] + RECOVER_SIGMAS * before.sigma:
            break
        s, x = s[:-1], x[:-1]
    return _fit(s[-samples:], x[-samples:])


def _fit(s: IntArray, x: FloatArray) -> TrendBand:
    """The trend band of finite samples ``x`` at steps ``s`` (at least one): see :func:`trend_before`."""
    t = s.astype(np.float64)
    slope = 0.0
    if x.size >= MIN_TREND_SAMPLES:
        i, j = np.triu_indices(x.size, k=1)
        # a loss rising before an incident is the incident's lead-in, not a trend to come back to:
        # extrapolated, it would call a loss still far above its old level "back on trend"
        slope = min(float(np.median((x[j] - x[i]) / (t[j] - t[i]))), 0.0)
    # a falling loss has reached the level of its last samples; a flat or rising one (a lead-in to the
    # incident is no level to come back to) is at the median of them all
    level = float(np.median(x[-LEVEL_SAMPLES:] if slope < 0 else x))
    if x.size < NOISE_MIN_SAMPLES and descends(x):
        # too few for a slope, but a fall from the first sample has reached its foot (early_levels)
        level = float(x[-1])
    if x.size < NOISE_MIN_SAMPLES:
        # a level, no noise to take; nor a printing resolution (the gap between two or three values)
        sigma = 1e-12
    else:
        resolution = logging_resolution(x) / MAD_TO_Z
        residuals = x - (float(np.median(x - slope * t)) + slope * t)
        # the residuals of a line through a curve measure the curve; the second differences of a few
        # samples, one outlier (it sits in three of them): each overstates where the other does not
        noise = min(float(np.median(np.abs(residuals - np.median(residuals)))), sample_noise(x))
        sigma = max(noise / MAD_TO_Z, REL_NOISE_FLOOR * abs(level), resolution, 1e-12)
    return TrendBand(
        anchor=int(s[-1]), level=level, slope=slope, horizon=int(s[-1] - s[0]), sigma=sigma, samples=int(x.size)
    )


def back_on_trend(steps: IntArray, values: FloatArray, first: int, band: TrendBand) -> int | None:
    """Position of the first finite sample at or after ``first`` within ``band``; None if none. Scanned
    in growing chunks: a short incident costs a few samples, one that never returns stays linear."""
    position, chunk = first, 16
    while position < values.size:
        x = values[position : position + chunk]
        with np.errstate(invalid="ignore"):
            # an exact 0.0 under a positive level is a placeholder (a non-finite step dropped from the logged
            # mean) or a collapse, never the loss back on its trend (docs/diagnosis.md, "Spike detector")
            real = np.isfinite(x) & ((x != 0.0) | (band.level <= 0.0))
            hits = np.flatnonzero(real & (x <= band.upper(steps[position : position + chunk])))
        if hits.size:
            return position + int(hits[0])
        position += chunk
        chunk *= 4
    return None


@dataclass(frozen=True)
class LossCost:
    """What an incident cost the loss: ``recovered_at`` the step it was back within its trend's band
    (None: never, or no loss logged after it), ``samples_above`` logged samples from the incident's
    start until then, ``certainty`` of the trend (``low`` when fitted on few samples or none)."""

    recovered_at: int | None
    samples_above: int
    certainty: Certainty
    band: TrendBand | None
    left_band: bool = True
    """Some loss sample from the incident's start until ``recovered_at`` was above the noise band of the
    level it had reached (False: the loss never left it, so the incident cost it nothing)."""
    one_batch: bool = False
    """Exactly one loss sample from the incident's start until ``recovered_at`` was above the noise
    band of the level it had reached, and the sample after it was back within one sigma of that level:
    one batch, not a lasting loss."""
    at_level: bool = False
    """The sample it was back at is at or below the level the loss had reached before the incident (not
    only inside the noise band above it): the loss lost nothing it had gained."""
    recurring: int | None = None
    """When the loss's jump from the incident's start until it was back is one the run shows every few
    hundred steps (:func:`recurring_jump`, its own noise): logged samples from its highest sample until it
    was back (None: not such a jump)."""
    recurring_steps: int | None = None
    """Steps from the incident's start until such a jump was back (None: not such a jump)."""


def loss_cost(steps: IntArray, values: FloatArray, start: int, peak: int | None = None) -> LossCost | None:
    """The cost to the loss of an incident starting at step ``start`` and peaking at step ``peak``
    (None: at its start) (None without loss samples)."""
    if steps.size == 0:
        return None
    first = int(np.searchsorted(steps, start))
    band = trend_before(steps, values, first)
    if band is None:
        return LossCost(None, 0, "low", None)
    # the incident's own first sample may still be on the trend (a grad-norm spike leads the loss);
    # recovery is looked for from the sample after it, and never before the incident's peak: a loss
    # that dips back into its band on the way up to the peak has not recovered (word_language_model
    # RNN_TANH: "recovered at 4783" of an incident peaking at 5583)
    # nor at the peak itself: a band as wide as the rise (an early one's, fitted on a steep fall) holds the
    # highest sample too, and "recovered at" the step it peaked says nothing came back (issue #32 batch 13)
    from_peak = int(np.searchsorted(steps, peak, side="right")) if peak is not None else first
    back = back_on_trend(steps, values, max(first + 1, from_peak), band)
    if back is None:
        return LossCost(None, values.size - first, band.certainty, band)
    with np.errstate(invalid="ignore"):
        # felt by the loss: out of the band of the level it had reached (the falling trend is for when it
        # is back, not for whether a grad-norm outlier cost it anything)
        out = np.flatnonzero(~(values[first:back] <= band.level + RECOVER_SIGMAS * band.sigma)) + first
        one_batch = out.size == 1 and bool(values[out[0] + 1] <= band.level + band.sigma)
    at_level = bool(values[back] <= band.level)
    recurring = recurring_jump(steps, values, start, int(steps[back]))
    lasted = None
    if recurring is not None:
        # the jump's highest sample, as recurring_jump finds it, plus the samples it lasted
        top = first + int(np.argmax(values[first : back + 1]))
        lasted = int(steps[min(top + recurring, steps.size - 1)]) - start
    return LossCost(
        int(steps[back]), back - first, band.certainty, band, out.size > 0, one_batch, at_level, recurring, lasted
    )


def loss_left_band(cost: LossCost | None, loss_member: bool, loss_peak_ratio: float | None, spike_ratio: float) -> bool:
    """Did the loss feel an incident (``classify``'s ``loss_left_band``)? Yes when it has a detected
    loss member (``loss_member``), when its cost is unknown, or when the loss left its trend's noise
    band for more than one batch; a single loss sample out of the band, under the loss detector's own
    spike ratio of its level (``loss_peak_ratio`` < ``spike_ratio``), with the next sample back within
    a sigma of that level (``LossCost.one_batch``), is one batch: a grad-norm incident whose loss did
    only that cost the run no more than a blip does (a noisy loss at 1.10x for one sample beside three
    grad-norm outliers of a draft-model fine-tune); a loss that stays above its level after it (7.37 ->
    8.54 -> 8.11 -> 8.00 ..., still inside a wide early band) lost steps."""
    if cost is None or cost.band is None or loss_member:
        return True
    if not cost.left_band:
        return False
    return not (cost.one_batch and loss_peak_ratio is not None and loss_peak_ratio < spike_ratio)


BLIP_MAX_STEPS: Final = 5
"""A blip is over within a few *steps* (the issue's definition), not only a few logged samples: a run
logged every 10 steps whose loss rose 2-4x and came back two samples later lost 20 steps, which is a
spike. The held-out corpus showed such early blow-ups of Megatron runs hidden as blips when the rule
counted samples alone (docs/diagnosis.md); one- and two-step outliers of runs logged every step stay
blips."""
EARLY_BLIP_SAMPLES: Final = 1
"""The blip length of an early instability (a rise in a run's first samples) whose loss came back only
into the noise band of its level: that trend comes from a handful of samples and cannot vouch that
nothing lasting was lost, so only the one-sample outlier the run is back from at the next sample is a
blip (the golden rules' definition). One whose loss fell back *to or below* the level it held before the
rise (``LossCost.at_level``: a start-up overshoot, 6.94 -> 11.17 -> 9.06 -> 7.37 -> 6.81) within the
setting's blip length and :data:`BLIP_MAX_STEPS` steps lost nothing it had gained: a blip like any
other. A rise that stays longer is an early blow-up, at least a spike (torchtitan on Aurora: 10.86 ->
14.45 -> 15.20 -> 11.31 -> 11.12, under its start only at the 5th sample)."""


BLOWUP_RATIO: Final = 100.0
"""An incident whose loss left its band and whose primary stood this many times its level or more is no
blip however soon it was back: two orders of magnitude is a blow-up, the weights it hit need not be the
ones before it (a GRPO loss 40,610x its first log for one sample of a 20-sample run)."""
SPARSE_BLIP_MAX_RATIO: Final = 2.0
"""The one-sample blip of a sparsely logged run rose to at most this many times its level: a batch
outlier (1.5-1.6x on parameter-golf consoles logged every 10-100 steps). A near-zero loss jumping 4-9x
(minGPT's adder, logged every 10 iterations) lost more than that batch's progress: a spike."""


RECURRING_HISTORY: Final = 256
"""Finite loss samples before an incident whose jumps are the run's own noise (four spike-detector windows)."""
RECURRING_LOCAL: Final = 16
"""Samples before each of them whose median is the level it jumped from (the spike detector's ``min_history``)."""
RECURRING_JUMPS: Final = 3
"""A short incident is a blip when at least this many of those samples jumped at least half as far above their
level as its loss did above its own: a jump the run shows every few hundred steps (issue #32; docs/diagnosis.md,
"Severity")."""
RECURRING_RISE: Final = 3
"""Consecutive samples at half a jump's height or more (its highest among them) that make it a rise that
lasts, whatever the run's noise: a noisy loss 1.2-1.8x its median for 5 logs in a row (issue #32 batch 11)."""
RECURRING_SAMPLES: Final = 1
"""Such a jump is a blip when it is over (back within the run's noise band) at the next logged sample:
one batch. A jump that stays out two samples (x, then x/2.5 on a quiet memorising char-GPT: its repeated
spikes) cost more than a batch, however often the run shows it (issue #32 batch 8), unless it was over within the
blip's few steps (:data:`BLIP_MAX_STEPS`) and fewer than :data:`RECURRING_RISE` samples: a loss logged every step
whose noise holds thousands of one- and two-log outliers (issue #32 batch 13)."""


def recurring_jump(steps: IntArray, values: FloatArray, start: int, until: int) -> int | None:
    """How many logged samples the loss's jump from ``start`` to ``until`` lasted, when it is one the run
    shows every few hundred steps (None: it is not, or there is too little history to tell).

    The jump is the highest finite loss sample in ``start..until`` above the level it jumped from (the
    median of the :data:`RECURRING_LOCAL` finite samples before ``start``); each of the
    :data:`RECURRING_HISTORY` finite samples before has its own jump above the median of the
    :data:`RECURRING_LOCAL` before it (a falling loss's early, higher values are no jump: each is judged
    against its own level). At least :data:`RECURRING_JUMPS` of them reaching half the incident's jump: a
    noisy per-batch loss (a ViT fine-tune logged every 10 steps, 6-50x one-log jumps of a near-zero loss
    several times a thousand steps) shows such jumps as its noise. It lasted from its highest sample
    until the first sample back within the noise band of the level it jumped from (:data:`RECOVER_SIGMAS`
    times the MAD, as a sigma, of the history's jumps relative to their own levels: the run's ordinary
    spread, which a steep fall before it does not widen since it falls a steady fraction a sample; the
    trend band of such a run, fitted on its 32 last samples, is far narrower); or, when
    :data:`RECURRING_RISE` or more consecutive samples around the highest stood at half the jump or more,
    that many (a rise over 5 logs that peaks on the 4th lasted 5 samples, not 2). None with fewer
    than a detector window of history or no jump."""
    first = int(np.searchsorted(steps, start))
    x = values[:first][np.isfinite(values[:first])][-(RECURRING_HISTORY + RECURRING_LOCAL) :]
    during = values[first : int(np.searchsorted(steps, until, side="right"))]
    if x.size < RECURRING_HISTORY // 4 + RECURRING_LOCAL or not np.isfinite(during).all() or during.size == 0:
        return None
    level = float(np.median(x[-RECURRING_LOCAL:]))
    top = int(np.argmax(during))
    jump = float(during[top]) - level
    if not jump > 0:
        return None
    levels = np.median(np.lib.stride_tricks.sliding_window_view(x[:-1], RECURRING_LOCAL), axis=1)
    jumps = x[RECURRING_LOCAL:] - levels
    if int(np.count_nonzero(jumps >= jump / 2)) < RECURRING_JUMPS:
        return None
    # the run's ordinary spread relative to its level: a steep fall's samples sit a steady fraction under it
    with np.errstate(divide="ignore", invalid="ignore"):
        relative = jumps / levels
    relative = relative[np.isfinite(relative)]
    spread = float(np.median(np.abs(relative - np.median(relative)))) / MAD_TO_Z if relative.size else 0.0
    seq = np.concatenate([x[-RECURRING_LOCAL:], during])
    peak = RECURRING_LOCAL + top
    over = np.flatnonzero(seq[peak + 1 :] <= level * (1.0 + RECOVER_SIGMAS * spread))
    if not over.size:
        return None
    # a run of samples at half the jump or more around its highest one is a rise that lasts, not one batch
    high = seq >= level + jump / 2
    after = np.flatnonzero(~high[peak + 1 :])
    before = np.flatnonzero(~high[:peak])
    run = (
        (int(after[0]) if after.size else seq.size - peak - 1)
        + 1
        + (peak - 1 - int(before[-1]) if before.size else peak)
    )
    return run if run >= RECURRING_RISE else int(over[0]) + 1


def classify(
    *,
    diverged: bool,
    loss_samples: int | None,
    member_samples: int,
    blip_samples: int,
    steps_lost: int | None = None,
    loss_left_band: bool = True,
    settled: bool = False,
    peak_ratio: float = float("inf"),
    loss_unmoved: bool = False,
    held_out_rose: bool = False,
    recurring: int | None = None,
    recurring_steps: int | None = None,
    member_out: int | None = None,
) -> SeverityLevel:
    """The severity of an incident: ``divergence`` when it never came back (``diverged``); a ``blip``
    when the loss was back on its trend within ``blip_samples`` samples (``loss_samples``; None: the
    run logs no loss), the longest member took no longer (``member_samples``) and the whole of it lasted
    at most :data:`BLIP_MAX_STEPS` steps (``steps_lost``: from its start to the later of the loss's
    return and its members' recovery; None: unknown), or it was one logged sample back at the next
    (``loss_samples`` and ``member_samples`` 1, whatever the spacing) that the validation loss did not
    share (``held_out_rose`` False: one bad batch, not a model that got worse), when its trend was ``settled``
    (fitted on ``CERTAIN_SAMPLES`` or more) and the sample stood at most :data:`SPARSE_BLIP_MAX_RATIO`
    times its level (``peak_ratio``): on fewer samples (a loss logged only at six evals 500 steps apart)
    the level is too uncertain to vouch that nothing lasting was lost, and a higher sample may have
    stood that high for the unlogged steps around it; else ``spike``.

    An incident whose loss never left its trend's noise band (``loss_left_band`` False: a grad-norm
    outlier the loss did not feel) lost nothing: it is a blip once its members are back within
    ``blip_samples`` logged samples *or* within :data:`BLIP_MAX_STEPS` steps, however far apart the
    samples are logged, or however long its members took when the loss also stayed within its recovery
    ratio of its level throughout (``loss_unmoved``: grad-norm outliers the loss never followed, two of
    them 60 steps apart merged into one incident). Its members' length there is ``member_out`` (None:
    ``member_samples``): the most consecutive samples one stood out of its band, so grad-norm outliers a
    few samples apart that the detector merged, each back in its band within a blip's samples, are as many
    one-sample outliers, not one long one (issue #32; docs/diagnosis.md, "Severity").

    An incident whose loss jumped as the run jumps every few hundred steps (``recurring``: the samples from
    the loss's highest one until the jump was over, :attr:`LossCost.recurring`) for at most
    :data:`RECURRING_SAMPLES` logged sample, the validation loss unmoved, is a blip however sparsely the
    run is logged, however tall it stood over its level and whatever outliers of the same noise were
    grouped with it: judged against the run's own noise, it is one more of them; so is one over within
    ``blip_samples`` (fewer than :data:`RECURRING_RISE`) samples and :data:`BLIP_MAX_STEPS` steps
    (``recurring_steps``, from the incident's start). An incident whose loss
    left its band at :data:`BLOWUP_RATIO` times its level or more (``peak_ratio``, finite) is a spike at least."""
    if diverged:
        return "divergence"
    if recurring is not None and not held_out_rose:
        # one more of the run's own jumps: over at the next sample, or within a blip's steps and samples
        short_jump = recurring_steps is not None and recurring_steps <= BLIP_MAX_STEPS
        if recurring <= RECURRING_SAMPLES or (short_jump and recurring < RECURRING_RISE and recurring <= blip_samples):
            return "blip"
    if loss_left_band and BLOWUP_RATIO <= peak_ratio < float("inf"):  # inf: the ratio is unknown
        return "spike"
    if not loss_left_band and (
        loss_unmoved
        or (member_samples if member_out is None else member_out) <= blip_samples
        or (steps_lost is not None and steps_lost <= BLIP_MAX_STEPS)
    ):
        return "blip"
    if (
        settled
        and peak_ratio <= SPARSE_BLIP_MAX_RATIO
        and not held_out_rose
        and loss_samples is not None
        and loss_samples <= 1
        and member_samples <= 1
    ):
        # one logged sample out, back at the very next one, the validation loss unmoved: a one-batch
        # outlier however sparsely the run is logged (a loss logged every 100 steps cannot show more lost)
        return "blip"
    loss_ok = loss_samples is None or loss_samples <= blip_samples

    short = steps_lost is None or steps_lost <= BLIP_MAX_STEPS
    if loss_ok and member_samples <= blip_samples and short:
        return "blip"
    return "spike"


def severity_words(item: dict[str, object]) -> str | None:
    """An incident's severity (a ``stabscope spikes --json`` object) in a sentence, or None for a record
    without one: "Spike: not absorbed within a few logged steps; the loss was back within the noise band of
    its trend at step 104.". A spike is what a blip is not; it need not have cost steps (a grad-norm surge the
    loss fell through is one), so the words say no more than that."""
    severity = item.get("severity")
    if severity not in SEVERITIES:
        return None
    back = item.get("loss_recovered_at")
    where = f"; the loss was back within the noise band of its trend at step {back}" if back is not None else ""
    text = {
        "blip": "Blip: absorbed within a few logged steps",
        "spike": "Spike: not absorbed within a few logged steps",
        "divergence": "Divergence: no return before the log ends",
    }[str(severity)]
    certainty = (
        " Less certain: its level comes from few samples (the run's first steps)."
        if item.get("certainty") == "low"
        else ""
    )
    return f"{text}{where if severity != 'divergence' else ''}.{certainty}"


def shown_by_default(severity: object) -> bool:
    """Does the default view show an incident of this severity (an old record without one: yes)?"""
    return severity != "blip"


def blips_line(items: list[dict[str, object]]) -> str | None:
    """ "+ 113 blips absorbed within 3 steps (--all lists them)" for the blips among ``items``, or None."""
    blips = [item for item in items if item.get("severity") == "blip"]
    if not blips:
        return None
    longest = 0
    for item in blips:
        until, start = item.get("until", item.get("end")), item.get("start")
        if isinstance(until, int) and isinstance(start, int):
            longest = max(longest, until - start)
    noun = "blip" if len(blips) == 1 else "blips"
    return f"+ {len(blips)} {noun} absorbed within {longest} step{'s' if longest != 1 else ''}"
