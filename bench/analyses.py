"""Goal 4: analyses. Spike detection + classification (``stab_core.analysis.analyze_run``) over a
generated run of 10M steps, and the two-batch noise scale (``stab_core.snr.gradient_snr``) over 256
ranks x 200k steps, each at two sizes to show the cost grows linearly (the fitted exponent of time
against size must be near 1). The run generation is not timed. Detection quality on generated runs
(``evaluate_detection``) is reported alongside.
"""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any

import numpy as np

from bench import Figure, Sizes, Unavailable, log, median, repeat_child

LINEAR_EXPONENT_MAX = 1.2
"""Above this, doubling the input more than doubles the time by a margin that is not noise."""


def _analysis_module() -> Any:
    try:
        from stab_core import analysis
    except ImportError as exc:
        raise Unavailable(f"stab_core.analysis not available yet ({exc})") from exc
    return analysis


# ------------------------------------------------------------------------------- child targets


def spike_analysis(steps: int) -> dict[str, Any]:
    """``analyze_run`` on a generated 4-rank run of about ``steps`` steps with 24 injected spikes."""
    from stab_core.simulate import SPIKE_CLASSES, SyntheticRunSpec, synthetic_run

    analysis = _analysis_module()
    classes = tuple(c for c in SPIKE_CLASSES if c != "data_outlier_diverged") * 4
    spec = SyntheticRunSpec(classes=classes, segment_steps=max(800, (steps - 600) // len(classes)))
    run = synthetic_run(spec, seed=3)
    view = run.to_view()
    n = int(view.series["loss"].steps.size)
    start = time.perf_counter()
    result = analysis.analyze_run(view)
    seconds = time.perf_counter() - start
    found = {s.spike.peak for s in result.spikes if s.spike.metric == "loss"}
    return {"seconds": seconds, "steps": n, "injected": len(run.truth.spikes), "loss_spikes": len(found)}


def noise_scale(ranks: int, steps: int) -> dict[str, Any]:
    """``gradient_snr`` (two-batch estimator) on ``ranks`` per-rank local grad norms of ``steps`` steps."""
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
    start = time.perf_counter()
    snr = gradient_snr(view)
    seconds = time.perf_counter() - start
    assert snr is not None and snr.estimator == "two_batch", "expected the two-batch estimator"
    b_simple = float(np.nanmedian(snr.b_simple)) if snr.b_simple is not None else float("nan")
    return {"seconds": seconds, "b_simple": b_simple, "expected_b_simple": trace / g_sq}


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


def run(sizes: Sizes, workdir: Path) -> list[Figure]:
    del workdir
    log(f"goal 4: spike analysis at {sizes.spike_steps // 4:,} and {sizes.spike_steps:,} steps")
    small = repeat_child("bench.analyses:spike_analysis", sizes.repeats, {"steps": sizes.spike_steps // 4})
    big = repeat_child("bench.analyses:spike_analysis", sizes.repeats, {"steps": sizes.spike_steps})
    t_small, t_big = median([c.result["seconds"] for c in small]), median([c.result["seconds"] for c in big])
    n_small, n_big = small[0].result["steps"], big[0].result["steps"]
    k_spikes = exponent(n_small, t_small, n_big, t_big)
    log(f"goal 4: noise scale at {sizes.snr_ranks // 4} and {sizes.snr_ranks} ranks x {sizes.snr_steps:,}")
    snr_small = repeat_child(
        "bench.analyses:noise_scale", sizes.repeats, {"ranks": sizes.snr_ranks // 4, "steps": sizes.snr_steps}
    )
    snr_big = repeat_child(
        "bench.analyses:noise_scale", sizes.repeats, {"ranks": sizes.snr_ranks, "steps": sizes.snr_steps}
    )
    s_small, s_big = median([c.result["seconds"] for c in snr_small]), median([c.result["seconds"] for c in snr_big])
    k_snr = exponent(sizes.snr_ranks // 4, s_small, sizes.snr_ranks, s_big)
    b = snr_big[0].result
    figures = [
        Figure(
            "4",
            f"spike detection + classification, {n_big:,} steps",
            t_big,
            "s",
            f"same at {n_small:,} steps",
            t_small,
            None,
            "< 3 s, linear (exponent <= 1.2)",
            t_big < 3.0 and k_spikes <= LINEAR_EXPONENT_MAX,
            median([c.peak_rss_mb for c in big]),
            sizes.repeats,
            f"time ~ size^{k_spikes:.2f}; {big[0].result['loss_spikes']} loss spikes found, "
            f"{big[0].result['injected']} injected",
            samples=[c.result["seconds"] for c in big],
        ),
        Figure(
            "4",
            f"noise scale (two-batch), {sizes.snr_ranks} ranks x {sizes.snr_steps:,} steps",
            s_big,
            "s",
            f"same at {sizes.snr_ranks // 4} ranks",
            s_small,
            None,
            "< 3 s, linear (exponent <= 1.2)",
            s_big < 3.0 and k_snr <= LINEAR_EXPONENT_MAX,
            median([c.peak_rss_mb for c in snr_big]),
            sizes.repeats,
            f"time ~ size^{k_snr:.2f}; median B_simple {b['b_simple']:.1f} "
            f"(generated with {b['expected_b_simple']:.0f})",
            samples=[c.result["seconds"] for c in snr_big],
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
