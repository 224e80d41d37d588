"""Goal 4: analyses. Spike detection + classification (``stab_core.analysis.analyze_run``) over a
generated run of 10M steps, and the two-batch noise scale (``stab_core.snr.gradient_snr``) over 256
ranks x 200k steps, each at two sizes to show the cost grows linearly (the fitted exponent of time
against size must be near 1). The run generation is not timed. Detection quality on generated runs
(``evaluate_detection``) is reported alongside.

Each is also timed against a numpy floor on the same arrays, in the same process, interleaved with it
(floor, analysis, floor, analysis, ...), so that both see the same machine and the same warm caches:

- spike detection against one causal rolling median of the run's loss at the detector's own window
  and stride (``rolling_median_floor``). Any robust spike detector computes at least this (the
  detector computes a median and a MAD for the loss and the grad norm, then diagnoses what it finds),
  it is linear in the steps like the detector, and it is numpy's ``partition`` on the same windows,
  which no Python-level detector beats. The target bounds the analysis at a multiple of it.
- the noise scale against the mean over ranks of the squared local grad norms
  (``rank_mean_square_floor``): the one pass over the ranks x steps matrix that any two-batch
  estimate needs; the rest (the smoothing over steps) must stay small beside it.

The absolute times are printed beside the ratios, as information.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
from numpy.lib.stride_tricks import sliding_window_view

from bench import ChildRun, Figure, Sizes, Unavailable, log, median, repeat_child, speedup, timed

LINEAR_EXPONENT_MAX = 1.2
"""Above this, doubling the input more than doubles the time by a margin that is not noise."""
SPIKE_FLOOR_MULTIPLE_MAX = 15.0
"""Spike detection + classification may take at most this many rolling medians of the loss. It is
issue 8's budget for 10M steps expressed in floors of the machine where that budget was set, so it
scales with the machine."""
NOISE_FLOOR_MULTIPLE_MAX = 30.0
"""The noise scale may take at most this many passes of the rank mean square: its cost must stay
bound by reading the ranks x steps matrix, so that it grows with the ranks like the data does. Its
per-step smoothing weighs more beside fewer ranks: the quick size's 64 ranks sit nearest the bound."""
SPIKE_ROUNDS = 3
"""Interleaved (floor, analysis) pairs per child: the analysis of 10M steps is the costly one."""
NOISE_ROUNDS = 25
"""The noise scale's pairs take milliseconds at quick size: more of them for a stable median."""
FLOOR_BLOCK_WINDOWS = 65_536
"""Windows per ``np.median`` call in ``rolling_median_floor``: bounds the copy it partitions."""


def _analysis_module() -> Any:
    try:
        from stab_core import analysis
    except ImportError as exc:
        raise Unavailable(f"stab_core.analysis not available yet ({exc})") from exc
    return analysis


# ------------------------------------------------------------------------------- the numpy floors


def rolling_median_floor(values: npt.NDArray[np.float64], window: int, stride: int) -> npt.NDArray[np.float64]:
    """Median of each ``window`` consecutive values, one window every ``stride`` samples (plain numpy,
    a block of windows at a time so the partitioned copy stays small)."""
    windows = sliding_window_view(values, window)[::stride]
    out = np.empty(windows.shape[0])
    for first in range(0, windows.shape[0], FLOOR_BLOCK_WINDOWS):
        out[first : first + FLOOR_BLOCK_WINDOWS] = np.median(windows[first : first + FLOOR_BLOCK_WINDOWS], axis=1)
    return out


def rank_mean_square_floor(local: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    """Mean over ranks (axis 0) of the squared values: one pass over the ranks x steps matrix."""
    return np.asarray(np.einsum("ij,ij->j", local, local) / local.shape[0], dtype=np.float64)


def interleaved(
    floor: Callable[[], Any], measured: Callable[[], Any], rounds: int
) -> tuple[list[float], list[float], Any]:
    """``rounds`` pairs of (floor, measured), timed one after the other: both lists of seconds and the
    last result of ``measured``."""
    floor_s, measured_s, result = [], [], None
    for _ in range(rounds):
        floor_s.append(timed(floor)[0])
        seconds, result = timed(measured)
        measured_s.append(seconds)
    return floor_s, measured_s, result


# ------------------------------------------------------------------------------- child targets


def spike_analysis(steps: int, rounds: int = SPIKE_ROUNDS) -> dict[str, Any]:
    """``analyze_run`` on a generated 4-rank run of about ``steps`` steps with 24 injected spikes,
    interleaved with ``rolling_median_floor`` of its loss (seconds of each, per round)."""
    from stab_core.simulate import SPIKE_CLASSES, SyntheticRunSpec, synthetic_run
    from stab_core.spike_params import LOSS_SPIKE_PARAMS

    analysis = _analysis_module()
    classes = tuple(c for c in SPIKE_CLASSES if c != "data_outlier_diverged") * 4
    spec = SyntheticRunSpec(classes=classes, segment_steps=max(800, (steps - 600) // len(classes)))
    run = synthetic_run(spec, seed=3)
    view = run.to_view()
    loss = np.ascontiguousarray(view.series["loss"].values, dtype=np.float64)
    floor_s, analysis_s, result = interleaved(
        lambda: rolling_median_floor(loss, LOSS_SPIKE_PARAMS.window, LOSS_SPIKE_PARAMS.stride),
        lambda: analysis.analyze_run(view),
        rounds,
    )
    found = {s.spike.peak for s in result.spikes if s.spike.metric == "loss"}
    return {
        "seconds": median(analysis_s),
        "samples": analysis_s,
        "floor_seconds": median(floor_s),
        "floor_samples": floor_s,
        "steps": int(loss.size),
        "injected": len(run.truth.spikes),
        "loss_spikes": len(found),
    }


def noise_scale(ranks: int, steps: int, rounds: int = NOISE_ROUNDS) -> dict[str, Any]:
    """``gradient_snr`` (two-batch estimator) on ``ranks`` per-rank local grad norms of ``steps`` steps,
    interleaved with ``rank_mean_square_floor`` of the same matrix (seconds of each, per round)."""
    from stab_core.runview import RankMatrix, RunView, Series
    from stab_core.snr import gradient_snr

    rng = np.random.default_rng(5)
    step_axis = np.arange(steps, dtype=np.int64)
    b_small, b_big = 8.0, 8.0 * ranks
    g_sq, trace = 1.0, 64.0
    local = np.sqrt(g_sq + trace / b_small) * np.exp(0.05 * rng.standard_normal((ranks, steps)))
    grad_norm = np.sqrt(g_sq + trace / b_big) * np.exp(0.05 * rng.standard_normal(steps))
    view = RunView(
        name="snr-bench",
        series={"grad_norm": Series(step_axis, grad_norm)},
        per_rank={
            "grad_norm_local": RankMatrix(
                np.arange(ranks, dtype=np.int64), step_axis, local, np.ones(local.shape, bool)
            )
        },
        meta={"per_rank_batch_size": b_small, "global_batch_size": b_big},
    )
    floor_s, snr_s, snr = interleaved(lambda: rank_mean_square_floor(local), lambda: gradient_snr(view), rounds)
    assert snr is not None and snr.estimator == "two_batch", "expected the two-batch estimator"
    b_simple = float(np.nanmedian(snr.b_simple)) if snr.b_simple is not None else float("nan")
    return {
        "seconds": median(snr_s),
        "samples": snr_s,
        "floor_seconds": median(floor_s),
        "floor_samples": floor_s,
        "b_simple": b_simple,
        "expected_b_simple": trace / g_sq,
    }


def detection_quality(n_runs: int, seed: int) -> dict[str, Any]:
    from stab_core.evaluation import evaluate_detection

    start = time.perf_counter()
    result = evaluate_detection(n_runs, seed)
    result = {k: v for k, v in result.items() if isinstance(v, int | float)}
    return {**result, "seconds": time.perf_counter() - start}


# ------------------------------------------------------------------------------- the goal


def exponent(size_small: float, t_small: float, size_big: float, t_big: float) -> float:
    """``k`` in ``t ~ size**k`` through two measurements (1 = linear)."""
    return math.log(t_big / t_small) / math.log(size_big / size_small)


def _pooled(children: list[ChildRun], key: str) -> float:
    """Median of every child's ``key`` samples together (seconds)."""
    return median([x for child in children for x in child.result[key]])


def against_floor(
    name: str,
    children: list[ChildRun],
    floor: str,
    multiple_max: float,
    size_exponent: float,
    *,
    unit: str = "s",
    **extra: Any,
) -> Figure:
    """An analysis's figure in ``unit`` (s or ms): its median beside its numpy floor's of the same
    processes; met when it takes at most ``multiple_max`` floors and grows linearly (``size_exponent``)."""
    seconds, floor_s = _pooled(children, "samples"), _pooled(children, "floor_samples")
    multiple = seconds / floor_s if floor_s > 0 else float("inf")
    per_second = {"s": 1.0, "ms": 1000.0}[unit]
    return Figure(
        "4",
        name,
        seconds * per_second,
        unit,
        floor,
        floor_s * per_second,
        speedup(seconds, floor_s),
        target=f"<= {multiple_max:g}x the floor (ratio >= {1 / multiple_max:.3f}x), "
        f"linear (exponent <= {LINEAR_EXPONENT_MAX})",
        met=multiple <= multiple_max and size_exponent <= LINEAR_EXPONENT_MAX,
        peak_rss_mb=median([c.peak_rss_mb for c in children]),
        repeats=sum(len(c.result["samples"]) for c in children),
        samples=[x * per_second for child in children for x in child.result["samples"]],
        **extra,
    )


def run(sizes: Sizes, workdir: Path) -> list[Figure]:
    del workdir
    log(f"goal 4: spike analysis at {sizes.spike_steps // 4:,} and {sizes.spike_steps:,} steps")
    small = repeat_child("bench.analyses:spike_analysis", sizes.repeats, {"steps": sizes.spike_steps // 4})
    big = repeat_child("bench.analyses:spike_analysis", sizes.repeats, {"steps": sizes.spike_steps})
    t_small, t_big = _pooled(small, "samples"), _pooled(big, "samples")
    n_small, n_big = small[0].result["steps"], big[0].result["steps"]
    k_spikes = exponent(n_small, t_small, n_big, t_big)
    log(f"goal 4: noise scale at {sizes.snr_ranks // 4} and {sizes.snr_ranks} ranks x {sizes.snr_steps:,}")
    snr_small = repeat_child(
        "bench.analyses:noise_scale", sizes.repeats, {"ranks": sizes.snr_ranks // 4, "steps": sizes.snr_steps}
    )
    snr_big = repeat_child(
        "bench.analyses:noise_scale", sizes.repeats, {"ranks": sizes.snr_ranks, "steps": sizes.snr_steps}
    )
    s_small, s_big = _pooled(snr_small, "samples"), _pooled(snr_big, "samples")
    k_snr = exponent(sizes.snr_ranks // 4, s_small, sizes.snr_ranks, s_big)
    b = snr_big[0].result
    figures = [
        against_floor(
            f"spike detection + classification, {n_big:,} steps",
            big,
            "numpy floor: one rolling median of the loss (the detector's window and stride)",
            SPIKE_FLOOR_MULTIPLE_MAX,
            k_spikes,
            note=f"{t_big / _pooled(big, 'floor_samples'):.1f} floors; time ~ size^{k_spikes:.2f} "
            f"({t_small:.2f} s at {n_small:,} steps); {big[0].result['loss_spikes']} loss spikes found, "
            f"{big[0].result['injected']} injected",
        ),
        against_floor(
            f"noise scale (two-batch), {sizes.snr_ranks} ranks x {sizes.snr_steps:,} steps",
            snr_big,
            "numpy floor: the mean over ranks of the squared local norms",
            NOISE_FLOOR_MULTIPLE_MAX,
            k_snr,
            unit="ms",  # milliseconds at quick size
            note=f"{s_big / _pooled(snr_big, 'floor_samples'):.1f} floors; time ~ size^{k_snr:.2f} "
            f"({s_small * 1000:.1f} ms at {sizes.snr_ranks // 4} ranks); median B_simple {b['b_simple']:.1f} "
            f"(generated with {b['expected_b_simple']:.0f})",
        ),
    ]
    n_runs = 40 if sizes.label == "full" else 8
    log(f"goal 4: detection quality on {n_runs} generated runs")
    quality = repeat_child("bench.analyses:detection_quality", 1, {"n_runs": n_runs, "seed": 1})[0].result
    figures.append(
        Figure(
            "4",
            f"spike detection quality, {n_runs} generated runs",
            float(quality.get("recall", float("nan"))),
            "recall",
            note=f"precision {quality.get('precision', float('nan')):.2f}, classification accuracy "
            f"{quality.get('classification_accuracy', float('nan')):.2f}, {quality.get('injected', 0)} spikes injected",
        )
    )
    return figures
