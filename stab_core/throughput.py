"""Throughput loss: tokens/s or step time changing level against the run's own norm or a sibling run's.

Two shapes a user expects to hear about (OLMo on AKS): a run whose tokens/s decays (16.2k -> 9.8k)
or drops for a span, and a run much slower than its siblings of the same config (~7.4k tokens/s/device
against ~45k). Neither a slow first steps' warm-up (compilation, first iterations) nor one slow step
(an eval, a checkpoint save) is a loss: the level is taken from bucket medians and a span must last.

Step time is turned into its rate (1/s) so that "higher is better" holds for both metrics.
Pure: steps and values in, :class:`ThroughputDrop` / :class:`SiblingGap` out.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from itertools import pairwise
from typing import Any

import numpy as np
import numpy.typing as npt

from stab_core.window_medians import window_medians

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

THROUGHPUT_METRICS = ("throughput_tok_s", "step_time_s")
"""The metrics judged, in order of preference: tokens/s when logged, else step time."""
MAX_BUCKETS = 400
"""Consecutive samples are grouped into at most this many buckets; a bucket's level is its median."""
SMOOTH_BUCKETS = 5
"""Rolling median over this many buckets: one or two slow samples never move the level."""
MIN_SAMPLES = 20
"""Fewer samples than this give no norm worth comparing with."""
DROP_FRACTION = 0.20
"""A level this much below the norm (20 % fewer tokens/s, or a step time 1/0.8 as long) is a loss: the
definition the corpus facts were written to (docs/diagnosis.md, "throughput_changes": a level change of
20 % or more), so a finding and a fact mean the same thing; a 16 % slowdown is not said."""
RECOVERED_FRACTION = DROP_FRACTION / 2
"""A span ends when the level is back within this fraction of the norm (10 %): a level hovering at the
threshold (0.78-0.81 of the norm) is one slow span, not a dozen each "back to its norm after it"."""
SHORT_SPAN_SAMPLES = 10
"""A short drop: the median of this many consecutive logged samples 20 % or more under the run's norm
(the facts' "lasting >= 10 logged steps"): a stall of a dozen steps on a 20,000-step run (llm.c: 7 of
12 steps at 5.6-27.8 s against 4.2 s) that bucket levels of 2 % of the run average away. A median of
10 is never moved by one slow step (an eval, a checkpoint save) nor by four."""
MIN_SPAN_SAMPLES = SHORT_SPAN_SAMPLES
"""A degraded span must hold at least this many logged samples (the facts' "lasting >= 10 logged
samples": a stall of 6 samples at a 5-step log interval is 30 steps but not a level)..."""
MIN_SPAN_SHARE = 0.02
"""... and this share of the run's samples (2 %)."""
WARMUP_SHARE = 0.2
"""A slow stretch that starts the run and ends within this share of its samples is warm-up."""
NORM_PERCENTILE = 75.0
"""The run's norm: this percentile of its smoothed bucket levels (rate), past warm-up; a run that
degrades for most of its length is still compared with the level it had when it ran well."""
MIN_PRIOR_SHARE = 0.05
"""A span is also compared with the norm of the levels before it (the same percentile) once that many
buckets (5 %, at least ``SMOOTH_BUCKETS``) precede it: a run that ran well for its first fifth and
slowly for the rest (GPT-NeoX 596 -> 759 ms a step from step 602 on) has a run-wide norm at its slow
level, and only the level before the change shows the loss."""
INTERMITTENT_SPANS = 3
"""A run with this many short slow spans or more that each came back to the norm is not changing level:
its step time switches between a fast and a slow state (a shared node, interleaved evals), so the spans
are its scatter, not a loss each; they are not reported. A span is short when it holds fewer than
``MIN_SPAN_SHARE`` of the run's samples (a stall only the short-span windows find, not a level the
buckets see): a span lasting that long is a level change of its own however many recur, and a span not
back by the last step is always reported."""
MAX_SAMPLES = 100_000
"""Longer series are judged on every k-th sample (a level over 2 % of the run does not need each
step, and a 10M-step run's step time is read in a fraction of the time)."""
NOISE_MULTIPLE = 2.5
"""A drop must also be this many times the run's sample-to-sample scatter (:func:`_jitter`): per-
iteration wall times on a shared CPU or a coarse timer (minGPT's ``iter_dt`` in 15.6 ms ticks, a
node-shared sweep's 87/133/178 s steps) wander 15-40 % from one sample to the next, so a window's
median dips 20 % under the fast-side norm by chance alone; a level change stands clear of that
scatter. A steady trainer's scatter is a few % and leaves the 20 % threshold in charge."""
STALL_FRACTION = 0.50
"""A short slow span the run came back from (fewer than ``MIN_SPAN_SHARE`` of its samples) is said only
when, taken as a whole, it ran this much below the norm: its steps over its summed time (the harmonic
mean of the rate) at most half the norm, i.e. the span took twice the time the norm gives it (as much
time lost as run). A dozen steps scattered 1-1.5x slower (checkpoint writes, evals, a shared node; a
window median 20-30 % under the norm, 22-24 % as a whole), or a stretch of such steps with one 22 s step
among them (43 % as a whole), cost seconds no one acts on; a stall whose slow steps take 2-7x the norm (a
hung data loader, a straggler: 56-70 % as a whole) costs more than the span's own duration. A span not
back by the last step, or one longer than that share, is a level change and keeps the 20 % threshold."""
SIBLING_GAP = 0.25
"""A run whose level is this much below the median of its siblings' levels (25 %) is flagged."""
CLOCK_RISES = 0.9
"""A step time that rises on this share of its samples or more, never falls and ends at twice its first
reading or more is a clock (:func:`is_elapsed_clock`)."""


def is_elapsed_clock(values: FloatArray) -> bool:
    """Whether a step time's samples (seconds, in step order) are the time elapsed since the run began,
    not each step's: they never go down, rise on ``CLOCK_RISES`` of the samples or more and end at twice
    their first reading or more over ``MIN_SAMPLES`` samples at least. A step's own time wanders both
    ways around its level, even while it slows down; a clock only grows (an ``Epoch 5, Loss 2.7, Time
    28.7s`` console whose time is the seconds since the start; round 22: f28b). A clock holds no
    throughput finding: its growth is the run going on, not the steps slowing."""
    arr = values[np.isfinite(values)]
    if arr.size < MIN_SAMPLES or arr[0] <= 0:
        return False
    d = np.diff(arr)
    return bool(np.all(d >= 0) and np.count_nonzero(d > 0) >= CLOCK_RISES * d.size and arr[-1] >= 2 * arr[0])


def _what(metric: str) -> tuple[str, str]:
    """The measured series' name and the rate its change is given in: a run that logs only its step time
    says steps per second (tokens are not a GAN's, a detector's or an RL agent's unit)."""
    if metric == "throughput_tok_s":
        return "tokens/s", "tokens per second"
    return "step time (s)", "steps per second"


@dataclass(frozen=True)
class ThroughputDrop:
    """A span where the run ran slower than its own norm.

    ``metric``: ``throughput_tok_s`` (tokens/s) or ``step_time_s`` (s); ``start`` / ``end``: the
    span's first and last step (``end`` is the run's last step when it never came back);
    ``norm`` / ``level``: the norm and the median inside the span, in the metric's unit;
    ``change_pct``: the rate's change against the norm (negative: slower), %; ``recovered``: the
    level came back after the span; ``warmup_end``: the first step past warm-up (None when none).
    """

    metric: str
    start: int
    end: int
    norm: float
    level: float
    change_pct: float
    recovered: bool
    warmup_end: int | None

    def message(self) -> str:
        """One sentence for the CLI, the pages and the alert."""
        what, rate = _what(self.metric)
        back = "back to its norm after it" if self.recovered else "not back by the last step"
        return (
            f"throughput loss: {what} {_shown(self.norm)} -> {_shown(self.level)} "
            f"({self.change_pct:+.0f}% {rate}) over steps {self.start}-{self.end}, {back}"
        )

    def to_json(self) -> dict[str, Any]:
        """JSON-ready fields (``stabscope spikes --json``'s ``throughput``, the stored analyses)."""
        return {"kind": "own_norm", "metric": self.metric, "start": self.start, "end": self.end,
                "norm": self.norm, "level": self.level, "change_pct": self.change_pct,
                "recovered": self.recovered, "warmup_end": self.warmup_end, "message": self.message()}  # fmt: skip


@dataclass(frozen=True)
class SiblingGap:
    """A run slower than its siblings (the other runs of the same config or log file).

    ``level``: this run's settled level; ``siblings_level``: the median of its siblings' levels
    (the metric's unit); ``change_pct``: this run's rate against theirs (negative: slower), %;
    ``siblings``: their names; ``relation``: what makes them siblings ("the same config", "the same log file").
    """

    metric: str
    level: float
    siblings_level: float
    change_pct: float
    siblings: tuple[str, ...]
    relation: str = "the same config"

    def message(self) -> str:
        """One sentence for the CLI, the pages and the alert."""
        what, rate = _what(self.metric)
        return (
            f"throughput loss: {what} {_shown(self.level)} against {_shown(self.siblings_level)} for "
            f"{len(self.siblings)} sibling run(s) of {self.relation} ({self.change_pct:+.0f}% {rate})"
        )

    def to_json(self) -> dict[str, Any]:
        """JSON-ready fields."""
        return {"kind": "siblings", "metric": self.metric, "level": self.level,
                "siblings_level": self.siblings_level, "change_pct": self.change_pct,
                "siblings": list(self.siblings), "relation": self.relation, "message": self.message()}  # fmt: skip


def _shown(value: float) -> str:
    """A level as a user reads it: 16,200 tokens/s, 0.16 s."""
    return f"{value:,.0f}" if abs(value) >= 1000 else f"{value:.3g}"


def _rate(values: FloatArray, metric: str) -> FloatArray:
    """Higher-is-better form: tokens/s as they are, a step time as its reciprocal (steps/s)."""
    if metric == "step_time_s":
        with np.errstate(divide="ignore"):
            return np.asarray(1.0 / values, np.float64)
    return values


def _unrate(rate: float, metric: str) -> float:
    return 1.0 / rate if metric == "step_time_s" else rate


def _clean(steps: IntArray, values: FloatArray) -> tuple[IntArray, FloatArray]:
    """Finite, positive samples (a zero or negative step time or throughput is not a measurement)
    of every k-th sample past ``MAX_SAMPLES``."""
    stride = -(-values.size // MAX_SAMPLES)
    if stride > 1:
        steps, values = steps[::stride], values[::stride]
    ok = np.isfinite(values) & (values > 0)
    return np.asarray(steps[ok], np.int64), np.asarray(values[ok], np.float64)


def _jitter(rate: FloatArray) -> float:
    """The rate's sample-to-sample scatter as a fraction of its median: the robust sigma of
    consecutive differences (1.4826 x their median absolute value, over sqrt 2 for the two samples
    each difference holds). A level change moves the differences at its edges only, so it barely
    counts; jitter moves every one."""
    if rate.size < 3:
        return 0.0
    middle = float(np.median(rate))
    return float(1.4826 * np.median(np.abs(np.diff(rate))) / np.sqrt(2) / middle) if middle > 0 else 0.0


def _bucket_levels(rate: FloatArray) -> tuple[FloatArray, IntArray]:
    """(smoothed level per bucket, index of each bucket's first sample): bucket medians, then a
    rolling median over ``SMOOTH_BUCKETS`` buckets (shrunk at the ends)."""
    n_buckets = min(MAX_BUCKETS, rate.size)
    edges = np.linspace(0, rate.size, n_buckets + 1).astype(np.int64)
    medians = np.array([np.median(rate[a:b]) for a, b in pairwise(edges.tolist())])
    half = SMOOTH_BUCKETS // 2
    smooth = np.array([np.median(medians[max(0, i - half) : i + half + 1]) for i in range(n_buckets)])
    return smooth, edges[:-1]


def _step_percentile(levels: FloatArray, spans: FloatArray) -> float:
    """The ``NORM_PERCENTILE`` of ``levels`` with each bucket weighted by the steps it covers
    (``spans``): a run that logs every step for its first 10 steps and every 200 after has its norm
    from the 85,000 steps, not from the 10 start-up samples."""
    order = np.argsort(levels)
    weights = np.maximum(spans[order], 1.0)
    cumulative = np.cumsum(weights) / weights.sum()
    return float(levels[order][min(int(np.searchsorted(cumulative, NORM_PERCENTILE / 100)), levels.size - 1)])


def true_runs(mask: npt.NDArray[np.bool_]) -> list[tuple[int, int]]:
    """[first, last] index pairs of the True runs of ``mask`` (consecutive samples where it holds)."""
    padded = np.concatenate([[False], mask, [False]])
    change = np.flatnonzero(np.diff(padded.astype(np.int8)))
    return [(int(a), int(b) - 1) for a, b in zip(change[::2], change[1::2], strict=True)]


def _warmup_buckets(slow: npt.NDArray[np.bool_]) -> int:
    """How many leading buckets are warm-up: the slow stretch that opens the run, when it ends
    within ``WARMUP_SHARE`` of it (a run slow for longer than that is slow, not warming up)."""
    if slow.size == 0 or not slow[0]:
        return 0
    first_fast = int(np.argmin(slow)) if not slow.all() else slow.size
    return first_fast if first_fast <= WARMUP_SHARE * slow.size else 0


def settled_level(steps: IntArray, values: FloatArray, metric: str) -> float | None:
    """The run's typical level past its warm-up (the metric's unit): the median of the samples after
    the warm-up buckets; None with fewer than ``MIN_SAMPLES`` usable samples."""
    steps, values = _clean(steps, values)
    if values.size < MIN_SAMPLES or (metric == "step_time_s" and is_elapsed_clock(values)):
        return None
    rate = _rate(values, metric)
    levels, firsts = _bucket_levels(rate)
    norm = float(np.percentile(levels, NORM_PERCENTILE))
    warm = _warmup_buckets(levels < (1 - DROP_FRACTION) * norm)
    start = int(firsts[warm]) if warm < firsts.size else 0
    return _unrate(float(np.median(rate[start:])), metric)


def detect_throughput_drops(steps: IntArray, values: FloatArray, metric: str) -> list[ThroughputDrop]:
    """Spans where the run's rate sat ``DROP_FRACTION`` or more below its own norm.

    The samples (finite, positive) are grouped into at most ``MAX_BUCKETS`` buckets of consecutive
    samples whose medians are smoothed over ``SMOOTH_BUCKETS``; the norm is the ``NORM_PERCENTILE``
    of those levels past warm-up, or of the levels before a bucket where that is higher and at least
    ``MIN_PRIOR_SHARE`` of them precede it (the level the run fell from). A slow stretch opening the
    run is warm-up when it ends within ``WARMUP_SHARE`` of the run; any other stretch under the norm
    it fell from, of at least ``MIN_SPAN_SAMPLES`` samples and ``MIN_SPAN_SHARE`` of the run, is a
    drop. A drop smaller than ``NOISE_MULTIPLE`` times the run's sample-to-sample scatter is jitter
    and is not returned; nor are short recovered spans when ``INTERMITTENT_SPANS`` or more of them recur
    (intermittent stalls, not a level change). ``metric`` is ``throughput_tok_s`` or ``step_time_s``.
    """
    if metric not in THROUGHPUT_METRICS:
        raise ValueError(f"metric must be one of {THROUGHPUT_METRICS}, got {metric!r}")
    steps, values = _clean(steps, values)
    if values.size < MIN_SAMPLES or (metric == "step_time_s" and is_elapsed_clock(values)):
        return []  # too few samples for a norm, or a clock's growth, which is no slowdown
    rate = _rate(values, metric)
    levels, firsts = _bucket_levels(rate)
    lasts = np.append(firsts[1:], rate.size) - 1
    slow = levels < (1 - DROP_FRACTION) * float(np.percentile(levels, NORM_PERCENTILE))
    warm = _warmup_buckets(slow)
    # the norm again without the warm-up, which would pull a short run's percentile down
    overall = float(np.percentile(levels[warm:], NORM_PERCENTILE))
    min_samples = max(MIN_SPAN_SAMPLES, int(np.ceil(MIN_SPAN_SHARE * rate.size)))
    min_prior = max(SMOOTH_BUCKETS, int(np.ceil(MIN_PRIOR_SHARE * levels.size)))
    # ... and the level before must have held over that share of the run's steps too: the first logged
    # steps of a run that then logs every 200 (steps 2-10 of 85,200) are its start-up, not a norm
    prior_steps = MIN_PRIOR_SHARE * float(steps[-1] - steps[0])
    spans = np.diff(np.append(steps[firsts], steps[-1] + 1)).astype(np.float64)  # steps each bucket covers
    out = []
    i = warm
    while i < levels.size:
        before = levels[warm:i]
        held = before.size >= min_prior and steps[firsts[i]] - steps[firsts[warm]] >= prior_steps
        norm = max(overall, _step_percentile(before, spans[warm:i])) if held else overall
        if levels[i] >= (1 - DROP_FRACTION) * norm:
            i += 1
            continue
        j = i  # the span lasts until the level is back near the norm it fell from (RECOVERED_FRACTION)
        while j + 1 < levels.size and levels[j + 1] < (1 - RECOVERED_FRACTION) * norm:
            j += 1
        lo, hi = int(firsts[i]), int(lasts[j])
        if hi - lo + 1 >= min_samples:
            level = float(np.median(rate[lo : hi + 1]))
            out.append(
                ThroughputDrop(
                    metric=metric,
                    start=int(steps[lo]),
                    end=int(steps[hi]),
                    norm=_unrate(norm, metric),
                    level=_unrate(level, metric),
                    change_pct=100 * (level / norm - 1),
                    recovered=j < levels.size - 1,
                    warmup_end=int(steps[firsts[warm]]) if 0 < warm < firsts.size else None,
                )
            )
        i = j + 1
    start = int(firsts[warm]) if warm < firsts.size else rate.size
    out += _short_drops(steps, rate, start, overall, metric, [(d.start, d.end) for d in out])
    needed = 100 * max(DROP_FRACTION, NOISE_MULTIPLE * _jitter(rate))  # a level change, not jitter
    # a span the run came back from, at the run's own typical level, is no drop: the norm it was measured
    # against sat at fast bursts (minGPT on a CPU: ~5 s steps with bursts of ~2.5 s, the 75th percentile at
    # the bursts). A drop that lasts to the run's end moves the median itself: kept as before
    kept = [d for d in out if -d.change_pct >= needed and not _at_typical(d, steps, rate, start)]
    # a slow span that opens the run (no level held before it) and then comes back fell from nothing: the
    # rate rose at its end (a relaunch on other hardware or settings), which is no loss
    opening = int(steps[start]) if start < steps.size else int(steps[-1])
    kept = [d for d in kept if not (d.recovered and d.start <= opening)]
    short = [d for d in kept if d.recovered and _samples(d, steps) < MIN_SPAN_SHARE * rate.size]
    if len(short) >= INTERMITTENT_SPANS:  # intermittent: scatter, not a level change
        kept = [d for d in kept if d not in short]
    # a short span that came back must be a stall as a whole, not a dozen steps scattered a little slow
    kept = [d for d in kept if d not in short or _whole_span_change(d, steps, rate) >= STALL_FRACTION]
    return sorted(kept, key=lambda d: d.start)


def _samples(drop: ThroughputDrop, steps: IntArray) -> int:
    """How many of the (cleaned) samples at ``steps`` fall inside ``drop``'s span."""
    return int(np.count_nonzero((steps >= drop.start) & (steps <= drop.end)))


def _whole_span_change(drop: ThroughputDrop, steps: IntArray, rate: FloatArray) -> float:
    """How far below ``drop``'s norm the span ran as a whole (0.4 = 40 % slower): its samples' harmonic
    mean rate (the steps over the summed time), so a few long stalls weigh by the time they took."""
    inside = rate[(steps >= drop.start) & (steps <= drop.end)]
    norm = float(_rate(np.array([drop.norm]), drop.metric)[0])
    if inside.size == 0 or norm <= 0:
        return 0.0
    whole = inside.size / float(np.sum(1.0 / inside))
    return 1.0 - whole / norm


def _at_typical(drop: ThroughputDrop, steps: IntArray, rate: FloatArray, start: int) -> bool:
    """Is ``drop`` a recovered span whose rate is within ``RECOVERED_FRACTION`` of the run's typical rate:
    the median of the samples past warm-up (from sample ``start``) outside the span? Outside it: a slow
    span longer than half the run would otherwise be the median itself, and never under it."""
    outside = (steps < drop.start) | (steps > drop.end)
    outside[: min(start, rate.size)] = False
    if not outside.any():
        return False
    level = float(_rate(np.array([drop.level]), drop.metric)[0])
    return drop.recovered and level >= (1 - RECOVERED_FRACTION) * float(np.median(rate[outside]))


def _short_drops(
    steps: IntArray, rate: FloatArray, start: int, norm: float, metric: str, found: list[tuple[int, int]]
) -> list[ThroughputDrop]:
    """Spans where the median of ``SHORT_SPAN_SAMPLES`` consecutive samples (from sample ``start`` on,
    past warm-up) sits ``DROP_FRACTION`` or more under ``norm`` (a rate), outside the ``found`` spans."""
    n = SHORT_SPAN_SAMPLES
    if rate.size - start < 2 * n:
        return []
    windows = window_medians(np.lib.stride_tricks.sliding_window_view(rate[start:], n))
    out = []
    for a, b in true_runs(windows < (1 - DROP_FRACTION) * norm):
        lo, hi = start + a, start + b + n - 1  # the samples of the slow windows
        if a == 0 and hi < max(WARMUP_SHARE * rate.size, 2 * n):
            # a slow stretch that opens the run fell from no level that held: warm-up (compilation, autotuning,
            # data-loader prefetch), which takes a number of steps, not a share of the run. It ends within
            # WARMUP_SHARE of the run or within two windows: one of start-up samples, one to settle after it
            continue
        # the span from its first slow sample to its last; its level, the slow windows' median
        slow = lo + np.flatnonzero(rate[lo : hi + 1] < (1 - DROP_FRACTION) * norm)
        lo, hi = int(slow[0]), int(slow[-1])
        if hi - lo + 1 < n:
            continue  # fewer logged samples than a lasting level: 6 slow ones move a median of 10
        if 2 * slow.size <= hi - lo + 1:
            # no more than half its samples slow: a window median of 10 that averages a slow and a fast
            # sample is single slow steps among fast ones (a data loader's or a save's every few), not a
            # level the run held (round 23 f29d, issue #32: mmdet's 1.2 s steps among 0.6 s ones)
            continue
        first, last = int(steps[lo]), int(steps[hi])
        if any(first <= f_hi and last >= f_lo for f_lo, f_hi in found):
            continue
        level = float(np.median(windows[a : b + 1]))
        out.append(
            ThroughputDrop(
                metric=metric,
                start=first,
                end=last,
                norm=_unrate(norm, metric),
                level=_unrate(level, metric),
                change_pct=100 * (level / norm - 1),
                recovered=hi < rate.size - 1,
                warmup_end=None,
            )
        )
    return out


def compare_to_siblings(
    level: float | None, sibling_levels: Mapping[str, float], metric: str, relation: str = "the same config"
) -> SiblingGap | None:
    """This run's settled level (:func:`settled_level`) against the median of its siblings' levels:
    a :class:`SiblingGap` when its rate is ``SIBLING_GAP`` or more below theirs, else None (also
    when there is no level or no sibling)."""
    usable = {name: v for name, v in sibling_levels.items() if np.isfinite(v) and v > 0}
    if level is None or not np.isfinite(level) or level <= 0 or not usable:
        return None
    own = float(_rate(np.array([level]), metric)[0])
    theirs = float(np.median(_rate(np.array(list(usable.values()), np.float64), metric)))
    change = own / theirs - 1
    if change > -SIBLING_GAP:
        return None
    return SiblingGap(
        metric=metric,
        level=float(level),
        siblings_level=_unrate(theirs, metric),
        change_pct=100 * change,
        siblings=tuple(sorted(usable)),
        relation=relation,
    )
