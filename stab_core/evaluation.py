"""How well the analyses find and classify spikes: detection precision and recall and classification
accuracy of :func:`stab_core.analysis.analyze_run` on runs of the signature model
(:func:`stab_core.simulate.synthetic_run`), whose injected spikes are known (``docs/diagnosis.md``
quotes the figures; ``bench/`` reports them)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from stab_core.analysis import DiagnosedSpike, analyze_run
from stab_core.causes import DATA_OUTLIER
from stab_core.simulate import SPIKE_CLASSES, InjectedSpike, random_spec, synthetic_run


def match_detections(
    injected: Sequence[InjectedSpike], detected: Sequence[DiagnosedSpike], tolerance_steps: int
) -> list[tuple[InjectedSpike, DiagnosedSpike | None]]:
    """Pair each injected spike with the detected one whose start lies within ``tolerance_steps``
    of it (the nearest; each detection is used once)."""
    used: set[int] = set()
    pairs: list[tuple[InjectedSpike, DiagnosedSpike | None]] = []
    for truth in injected:
        best: tuple[int, int] | None = None
        for index, item in enumerate(detected):
            distance = abs(item.spike.start - truth.onset)
            if index not in used and distance <= tolerance_steps and (best is None or distance < best[0]):
                best = (distance, index)
        if best is None:
            pairs.append((truth, None))
        else:
            used.add(best[1])
            pairs.append((truth, detected[best[1]]))
    return pairs


def evaluate_detection(n_runs: int, seed: int) -> dict[str, Any]:
    """Detection and classification of loss spikes on ``n_runs`` generated runs (:func:`random_spec`).

    Returns ``runs``, ``injected``, ``detected``, ``true_positives``, ``precision`` (matched detections
    / detections), ``recall`` (matched injected / injected), ``classification_accuracy`` (right cause
    among matched), ``recovery_accuracy`` (recovered flag right among matched data outliers), and
    ``per_class`` {class: {injected, detected, correct}} and ``confusion`` {true cause: {cause: n}}.
    """
    if n_runs < 1:
        raise ValueError(f"n_runs must be >= 1, got {n_runs}")
    rng = np.random.default_rng(seed)
    per_class = {c: {"injected": 0, "detected": 0, "correct": 0} for c in SPIKE_CLASSES}
    confusion: dict[str, dict[str, int]] = {}
    detected_total = matched_total = correct_total = 0
    recovery_checked = recovery_right = 0
    injected_total = 0
    for run_index in range(n_runs):
        spec = random_spec(rng)
        run = synthetic_run(spec, seed=int(rng.integers(2**31)), name=f"eval-{run_index}")
        analysis = analyze_run(run.to_view())
        loss_spikes = [item for item in analysis.spikes if item.spike.metric == "loss"]
        detected_total += len(loss_spikes)
        for truth, found in match_detections(run.truth.spikes, loss_spikes, 10 + 2 * spec.log_every):
            injected_total += 1
            per_class[truth.spike_class]["injected"] += 1
            if found is None:
                continue
            matched_total += 1
            per_class[truth.spike_class]["detected"] += 1
            cause = found.diagnosis.cause
            confusion.setdefault(truth.cause, {}).setdefault(cause, 0)
            confusion[truth.cause][cause] += 1
            if cause == truth.cause:
                correct_total += 1
                per_class[truth.spike_class]["correct"] += 1
            if truth.cause == DATA_OUTLIER:
                recovery_checked += 1
                recovery_right += found.spike.recovered == truth.recovered
    return {
        "runs": n_runs,
        "injected": injected_total,
        "detected": detected_total,
        "true_positives": matched_total,
        "precision": matched_total / detected_total if detected_total else math.nan,
        "recall": matched_total / injected_total if injected_total else math.nan,
        "classification_accuracy": correct_total / matched_total if matched_total else math.nan,
        "recovery_accuracy": recovery_right / recovery_checked if recovery_checked else math.nan,
        "per_class": per_class,
        "confusion": confusion,
    }
