"""Other trainers' spike rules, as baselines for StabScope's detector (``bench/baseline_eval.py``).

Each is written from its project's source (read, not copied) and applied to the logged samples of a
series in order, one sample standing for one training step as the trainer would see it:

- **llm.c** (``llmc/outlier_detector.h``, ``train_gpt2.cu``): a window of the last 128 values; once
  full, the new value enters the window (the oldest leaves) and its z-score against the window's mean
  and population std *including itself* is returned. An update is skipped at z > threshold (7 here,
  ``-sl``/``-sg``), and the skipped value is taken back out of the window unless it is the third in a
  row. Run on the loss and on the grad norm.
- **OLMo-core** (``StabilityMonitorCallback``): a spike when the value exceeds the mean of the
  previous 128 values plus 6 of their population stds (only with 128 values before it, std >= 1e-10);
  every value then joins the history. Run on the loss and on the grad norm.
- **Megatron-LM** (``RerunStateMachine.is_unexpectedly_large``, the spiky-loss check): the max |value|
  of the first 100 values; afterwards a value >= 10x that max is flagged. Run on the loss.

Non-finite values are left out before a rule runs (each source treats them elsewhere or not at all).
Flagged samples are grouped into incidents (:func:`incidents_from_flags`) so they can be scored as
StabScope's incidents are.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]

LLMC_WINDOW = 128
LLMC_THRESHOLD = 7.0
OLMO_WINDOW = 128
OLMO_SIGMAS = 6.0
MEGATRON_SAMPLES = 100
MEGATRON_FACTOR = 10.0
INCIDENT_GAP_SAMPLES = 3
"""Flagged samples at most this many samples apart belong to one incident."""


def llmc_zscores(values: FloatArray, window: int = LLMC_WINDOW, threshold: float = LLMC_THRESHOLD) -> FloatArray:
    """llm.c's outlier-detector z-score of each value (NaN while the window fills), with its
    skip-update rule at ``threshold`` (a skipped value leaves the window again, except the third
    skipped in a row)."""
    out = np.full(values.size, np.nan)
    buffer = np.zeros(window)
    count = index = skipped_in_a_row = 0
    total = total_sq = 0.0
    for i, value in enumerate(values.tolist()):
        if count < window:
            buffer[count] = value
            total += value
            total_sq += value * value
            count += 1
            continue
        old = float(buffer[index])
        buffer[index] = value
        total += value - old
        total_sq += value * value - old * old
        slot, index = index, (index + 1) % window
        mean = total / window
        std = float(np.sqrt(max(total_sq / window - mean * mean, 0.0)))
        z = 0.0 if std == 0.0 else (value - mean) / std
        out[i] = z
        if z > threshold:
            skipped_in_a_row += 1
            if skipped_in_a_row < 3:  # take it back out, as if never seen
                buffer[slot] = old
                total += old - value
                total_sq += old * old - value * value
                index = slot
        else:
            skipped_in_a_row = 0
    return out


def llmc_flags(values: FloatArray, window: int = LLMC_WINDOW, threshold: float = LLMC_THRESHOLD) -> BoolArray:
    """Samples llm.c would skip: z-score above ``threshold``."""
    z = llmc_zscores(values, window, threshold)
    return np.asarray(np.nan_to_num(z, nan=-np.inf) > threshold)


def olmo_flags(values: FloatArray, window: int = OLMO_WINDOW, sigmas: float = OLMO_SIGMAS) -> BoolArray:
    """Samples OLMo-core's stability monitor counts as spikes: above the mean + ``sigmas`` population
    stds of the ``window`` values before them (none until ``window`` values came before)."""
    out = np.zeros(values.size, bool)
    if values.size <= window:
        return out
    prior = np.lib.stride_tricks.sliding_window_view(values[:-1], window)
    mean, std = prior.mean(axis=1), prior.std(axis=1)
    current = values[window:]
    out[window:] = (std >= 1e-10) & (current > mean + sigmas * std)
    return out


def megatron_flags(values: FloatArray, samples: int = MEGATRON_SAMPLES, factor: float = MEGATRON_FACTOR) -> BoolArray:
    """Samples Megatron-LM's spiky-loss check rejects: |value| >= ``factor`` x the max |value| of the
    first ``samples`` values (none among those)."""
    out = np.zeros(values.size, bool)
    if values.size <= samples:
        return out
    ceiling = float(np.max(np.abs(values[:samples])))
    out[samples:] = np.abs(values[samples:]) >= factor * ceiling
    return out


BASELINES: Mapping[str, tuple[Callable[[FloatArray], BoolArray], tuple[str, ...]]] = {
    "llm.c (z > 7 over 128)": (llmc_flags, ("loss", "grad_norm")),
    "OLMo-core (mean + 6 sigma over 128)": (olmo_flags, ("loss", "grad_norm")),
    "Megatron-LM (10x max of first 100)": (megatron_flags, ("loss",)),
}
"""Each baseline's rule and the series its source applies it to."""


def incidents_from_flags(
    steps: IntArray, flags: BoolArray, metric: str, gap: int = INCIDENT_GAP_SAMPLES
) -> list[dict[str, Any]]:
    """Flagged samples as incidents: runs of flags at most ``gap`` samples apart become one, with
    ``start`` / ``end`` / ``peak`` (its first flagged step) and the fields the golden scorer reads
    (``cause`` "unknown", no actions)."""
    hits = np.flatnonzero(flags)
    out: list[dict[str, Any]] = []
    for i in hits.tolist():
        if out and i - out[-1]["_last"] <= gap:
            out[-1]["_last"] = i
            out[-1]["end"] = int(steps[i])
            continue
        out.append({"metric": metric, "metrics": [metric], "start": int(steps[i]), "end": int(steps[i]),
                    "peak": int(steps[i]), "cause": "unknown", "actions": [], "kind": "spike", "_last": i})  # fmt: skip
    for item in out:
        del item["_last"]
    return out


def baseline_incidents(
    rule: Callable[[FloatArray], BoolArray], metrics: Sequence[str], series: Mapping[str, tuple[IntArray, FloatArray]]
) -> list[dict[str, Any]]:
    """``rule``'s incidents on each of ``metrics`` that ``series`` ({metric: (steps, values)}) holds,
    non-finite samples left out, sorted by start."""
    out: list[dict[str, Any]] = []
    for metric in metrics:
        if metric not in series:
            continue
        steps, values = series[metric]
        finite = np.isfinite(values)
        kept_steps, kept = np.asarray(steps[finite], np.int64), np.asarray(values[finite], np.float64)
        out += incidents_from_flags(kept_steps, rule(kept), metric)
    return sorted(out, key=lambda item: (item["start"], item["metric"]))
