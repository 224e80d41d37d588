"""The signature model: runs in which each spike class is injected with the signature its node of the
decision tree looks for, one class per segment, for the detection measurement
(:func:`stab_core.evaluation.evaluate_detection`) and the tests of each node.

Simpler than the physical model (:mod:`stab_core.simulate.model`): a loss curve with heavy-tailed
noise, the two-batch norms of a fixed |G|^2 and tr(Sigma) with multiplicative noise, and per class a
precursor placed where its node looks (an LR jump, one rank's norm, the expert load, a swell of
gradient noise) followed by a loss bump. Its random stream (one generator, drawn in a fixed order) is
the one the published detection figures were measured on (``docs/diagnosis.md``); keep it. Its
``truth`` gives |G|^2 and tr(Sigma) before the classes' norm factors.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Final

import numpy as np
import numpy.typing as npt

from stab_core import causes
from stab_core.causes import Cause
from stab_core.runview import RunEvent
from stab_core.simulate.output import BoolArray, FloatArray, InjectedSpike, IntArray, SimTruth, SimulatedRun

SPIKE_CLASSES: Final[tuple[str, ...]] = (
    causes.NUMERICAL,
    causes.LR_TRANSITION,
    causes.RANK_FAULT,
    causes.ROUTER,
    f"{causes.DATA_OUTLIER}_recovered",
    f"{causes.DATA_OUTLIER}_diverged",
    causes.UNKNOWN,
)
"""Injectable spike classes (:attr:`InjectedSpike.spike_class`): the causes, with a data outlier split
by its outcome; both data-outlier classes have cause ``data_outlier``."""


def cause_of(spike_class: str) -> Cause:
    """The tree's cause for an injected class."""
    if spike_class.startswith(causes.DATA_OUTLIER):
        return causes.DATA_OUTLIER
    if spike_class not in causes.CAUSES:
        raise ValueError(f"unknown spike class {spike_class!r}; choose from {SPIKE_CLASSES}")
    return spike_class


@dataclass(frozen=True)
class SyntheticRunSpec:
    """How to generate a run: spike classes in order (``data_outlier_diverged`` only last), steps per
    spike segment, logging interval (steps), ranks (per-rank ``grad_norm_local`` logged when
    ``per_rank``), an MoE router series (``moe``), rounding of the logged values (``quantise``),
    a 200-step logging gap in each segment (``gaps``), LR transitions also logged as events
    (``lr_events``), numerical faults as a collapsing fp16 loss scale instead of NaN (``loss_scale``)."""

    classes: tuple[str, ...]
    segment_steps: int = 1500
    log_every: int = 1
    ranks: int = 4
    per_rank: bool = True
    moe: bool = True
    quantise: bool = False
    gaps: bool = False
    lr_events: bool = True
    loss_scale: bool = False

    def __post_init__(self) -> None:
        unknown = [c for c in self.classes if c not in SPIKE_CLASSES]
        if unknown:
            raise ValueError(f"unknown spike classes {unknown}; choose from {SPIKE_CLASSES}")
        if _DATA_OUTLIER_DIVERGED in self.classes[:-1]:
            raise ValueError("data_outlier_diverged never recovers: it must be the last class")
        if self.segment_steps < 800:
            raise ValueError(f"segment_steps must be >= 800 (precursor and recovery room), got {self.segment_steps}")
        if self.log_every < 1 or self.ranks < 2:
            raise ValueError("log_every must be >= 1 and ranks >= 2")


_DATA_OUTLIER_RECOVERED: Final = SPIKE_CLASSES[4]
_DATA_OUTLIER_DIVERGED: Final = SPIKE_CLASSES[5]
_MECHANISM: Final = "signature"
"""``InjectedSpike.mechanism`` of the spikes of this model."""
_WARMUP_STEPS: Final = 300
_FIRST_SEGMENT: Final = 600
_PRECURSOR_STEPS: Final = 150
_B_SMALL: Final = 8.0


@dataclass
class _Signals:
    """Per-step ground-truth signals being built (mutable while injecting)."""

    steps: IntArray
    loss: FloatArray
    loss_clean: FloatArray  # the loss without its step noise
    lr: FloatArray
    g_sq: FloatArray  # |G|^2
    trace: FloatArray  # S = tr(Sigma)
    norm_noise: FloatArray  # std of the step-level log-noise shared by the logged norms
    local_factor: FloatArray  # (ranks, steps) extra factor on each rank's local norm
    global_factor: FloatArray  # extra factor on the global norm
    load: FloatArray
    loss_scale: FloatArray
    nan_loss: BoolArray
    events: list[RunEvent]

    def scale_loss(self, where: slice, factor: npt.NDArray[np.floating[Any]] | float) -> None:
        """Multiply the loss, noisy and clean alike, by ``factor`` on the steps ``where``."""
        self.loss[where] *= factor
        self.loss_clean[where] *= factor


def _base_signals(spec: SyntheticRunSpec, n: int, rng: np.random.Generator) -> _Signals:
    steps = np.arange(n, dtype=np.int64)
    t = steps.astype(np.float64)
    clean = 2.5 + 6.0 * np.exp(-t / 400.0)
    # heavy-tailed (Student t, 4 dof) loss noise: honest about the tails real losses have
    loss = clean * (1.0 + 0.01 * rng.standard_t(4, n))
    peak = 3e-4
    decay = np.cos(0.5 * np.pi * np.clip((t - _WARMUP_STEPS) / (1.2 * n), 0.0, 1.0))
    lr = np.where(t < _WARMUP_STEPS, peak * (t + 1) / _WARMUP_STEPS, peak * np.maximum(decay, 0.1))
    g_sq = 0.05 * (1.0 + 20.0 * np.exp(-t / 100.0))
    return _Signals(
        steps=steps,
        loss=loss,
        loss_clean=clean,
        lr=lr,
        g_sq=g_sq,
        trace=np.full(n, 0.05 * 64.0),  # B_simple = 64 examples
        norm_noise=np.full(n, 0.05),
        local_factor=np.ones((spec.ranks, n)),
        global_factor=np.ones(n),
        load=1.3 * (1.0 + 0.02 * rng.standard_normal(n)),
        loss_scale=np.full(n, 65536.0),
        nan_loss=np.zeros(n, dtype=bool),
        events=[],
    )


def _bump(signals: _Signals, at: int, factor: float, length: int) -> None:
    """Multiply the loss from ``at`` by ``factor`` decaying back to 1 over ``length`` steps."""
    span = np.arange(length, dtype=np.float64)
    signals.scale_loss(slice(at, at + length), 1.0 + (factor - 1.0) * np.exp(-span / max(1.0, length / 3.0)))


def _inject(
    signals: _Signals, spike_class: str, at: int, spec: SyntheticRunSpec, rng: np.random.Generator
) -> int | None:
    """Inject one spike of ``spike_class`` whose loss rises at ``at``; returns the faulty rank of a
    rank fault (None for the other classes)."""
    if spike_class == causes.NUMERICAL:
        if spec.loss_scale:
            # fp16 overflow cascade: the scale halves every step from 5 steps before the spike
            halvings = np.clip(np.arange(signals.loss_scale.size) - (at - 5), 0, 12)
            signals.loss_scale[at - 5 :] = 65536.0 / 2.0 ** halvings[at - 5 :]
            signals.loss_scale[at + 8 :] = 65536.0 / 2.0**12
            _bump(signals, at, 2.5, 6)
        else:
            signals.nan_loss[at : at + 3] = True
            signals.global_factor[at] = np.inf
    elif spike_class == causes.LR_TRANSITION:
        jump = at - 10
        signals.lr[jump:] *= 4.0  # e.g. a cycle restart straight from a decayed LR to the peak
        if spec.lr_events:
            signals.events.append(RunEvent(step=jump, kind="cycle_restart", label="restart without warmup"))
        signals.global_factor[at - 5 : at + 5] *= 2.5
        signals.local_factor[:, at - 5 : at + 5] *= 2.5
        _bump(signals, at, 1.8, 8)
    elif spike_class == causes.RANK_FAULT:
        bad = int(rng.integers(spec.ranks))
        signals.local_factor[bad, at - 1 : at + 2] *= 15.0
        signals.global_factor[at - 1 : at + 2] *= 15.0 / spec.ranks
        _bump(signals, at, 1.6, 3)
        return bad
    elif spike_class == causes.ROUTER:
        ramp = np.linspace(1.0, 2.5, 20)
        signals.load[at - 20 : at] *= ramp
        signals.load[at : at + 20] *= 2.5
        signals.global_factor[at : at + 3] *= 2.0
        signals.local_factor[:, at : at + 3] *= 2.0
        _bump(signals, at, 1.6, 5)
    elif cause_of(spike_class) == causes.DATA_OUTLIER:
        # gradient noise swells before the spike: tr(Sigma) x10 and erratic logged norms
        signals.trace[at - _PRECURSOR_STEPS : at] *= 10.0
        signals.norm_noise[at - _PRECURSOR_STEPS : at] = 0.4
        signals.global_factor[at : at + 3] *= 3.0
        signals.local_factor[:, at : at + 3] *= 3.0
        if spike_class == _DATA_OUTLIER_RECOVERED:
            _bump(signals, at, 2.0, 6)
        else:
            signals.scale_loss(slice(at, None), 2.0 + 0.002 * np.arange(signals.loss.size - at))
            signals.global_factor[at:] *= 3.0
            signals.local_factor[:, at:] *= 3.0
    else:  # unknown: a spike with no precursor of any kind
        signals.global_factor[at : at + 2] *= 2.0
        signals.local_factor[:, at : at + 2] *= 2.0
        _bump(signals, at, 1.8, 2)
    return None


def _logged(values: FloatArray, keep: BoolArray, decimals: int | None) -> FloatArray:
    out = values[keep]
    return np.round(out, decimals) if decimals is not None else out


def synthetic_run(spec: SyntheticRunSpec, seed: int = 0, name: str = "synthetic") -> SimulatedRun:
    """A generated run with one spike of each of ``spec.classes``, in order, one per segment; its
    ``truth.spikes`` in the same order.

    Ground truth follows the two-batch model (McCandlish et al. 2018): E|G_B|^2 = |G|^2 + tr(Sigma)/B
    with B = 8 examples per rank and 8 x ranks globally; logged norms carry multiplicative noise.
    """
    rng = np.random.default_rng(seed)
    n = _FIRST_SEGMENT + spec.segment_steps * len(spec.classes)
    signals = _base_signals(spec, n, rng)
    injected = []
    for index, spike_class in enumerate(spec.classes):
        segment = _FIRST_SEGMENT + index * spec.segment_steps
        # room for the precursor and a quiet level before it; on the logging grid
        at = segment + spec.segment_steps // 2
        at -= at % spec.log_every
        before = float(signals.loss_clean[at])
        rank = _inject(signals, spike_class, at, spec, rng)
        height = math.nan if signals.nan_loss[at] else float(signals.loss_clean[at]) - before
        recovered = spike_class != _DATA_OUTLIER_DIVERGED
        injected.append(
            InjectedSpike(cause_of(spike_class), at, at, height, recovered=recovered, rank=rank, mechanism=_MECHANISM)
        )

    b_big = _B_SMALL * spec.ranks
    # a step-level factor shared by every rank (how hard the step's data is) and 5 % per-rank noise
    shared = signals.norm_noise * rng.standard_normal(n)
    noise_global = np.exp(shared + 0.05 * rng.standard_normal(n))
    noise_local = np.exp(shared + 0.05 * rng.standard_normal((spec.ranks, n)))
    grad_norm = np.sqrt(signals.g_sq + signals.trace / b_big) * noise_global * signals.global_factor
    local = np.sqrt(signals.g_sq + signals.trace / _B_SMALL) * noise_local * signals.local_factor
    loss = np.where(signals.nan_loss, np.nan, signals.loss)

    keep = signals.steps % spec.log_every == 0
    if spec.gaps:
        for index in range(len(spec.classes)):
            gap_start = _FIRST_SEGMENT + index * spec.segment_steps + 50
            keep[gap_start : gap_start + 200] = False
    loss_decimals, norm_decimals = (3, 2) if spec.quantise else (None, None)
    run_level = {
        "loss": _logged(loss, keep, loss_decimals),
        "grad_norm": _logged(grad_norm, keep, norm_decimals),
        "lr": _logged(signals.lr, keep, None),
    }
    if spec.moe:
        run_level["expert_load_max_over_mean"] = _logged(signals.load, keep, None)
    if spec.loss_scale:
        run_level["loss_scale"] = _logged(signals.loss_scale, keep, None)
    per_rank = {}
    if spec.per_rank:
        values = local[:, keep]
        per_rank["grad_norm_local"] = np.round(values, 2) if spec.quantise else values
    meta: dict[str, Any] = {
        "per_rank_batch_size": _B_SMALL,
        "global_batch_size": b_big,
        "world_size": spec.ranks,
        "max_norm": 1.0,
    }
    if not spec.moe:
        meta["num_experts"] = 1
    truth = SimTruth(tuple(injected), signals.g_sq[keep], signals.trace[keep], signals.loss_clean[keep])
    return SimulatedRun(
        name=name,
        steps=signals.steps[keep],
        per_rank=per_rank,
        run_level=run_level,
        events=signals.events,
        meta=meta,
        truth=truth,
    )


def random_spec(rng: np.random.Generator) -> SyntheticRunSpec:
    """A random mix: 3-5 classes (rank faults only with per-rank data, router only on MoE), sometimes a diverged ending,
    every-step or every-5-steps logging, quantised values, logging gaps, MoE or dense."""
    per_rank = bool(rng.random() < 0.6)
    moe = bool(rng.random() < 0.5)
    needs = {causes.RANK_FAULT: per_rank, causes.ROUTER: moe, _DATA_OUTLIER_DIVERGED: False}
    pool = [c for c in SPIKE_CLASSES if needs.get(c, True)]
    count = int(rng.integers(3, 6))
    classes = [str(c) for c in rng.choice(pool, size=min(count, len(pool)), replace=False)]
    if rng.random() < 0.3:
        classes.append(_DATA_OUTLIER_DIVERGED)
    return SyntheticRunSpec(
        classes=tuple(classes),
        log_every=int(rng.choice([1, 1, 5])),
        per_rank=per_rank,
        moe=moe,
        quantise=bool(rng.random() < 0.3),
        gaps=bool(rng.random() < 0.3),
        lr_events=bool(rng.random() < 0.5),
        loss_scale=bool(rng.random() < 0.5),
    )
