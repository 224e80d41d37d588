"""The signature each cause must show in the data before it is said (issue #32): not only the absence of
the other causes. An LR-transition cause needs the LR to have risen before the spike and still be up; a
data-outlier cause needs the loss to have moved first. Each returns (holds, evidence): None when the data
cannot tell."""

from __future__ import annotations

import math
from typing import Final

import numpy as np

from stab_core.runview import FloatArray, Series
from stab_core.spikes import SpikeEvent
from stab_core.tree_actions import Evidence


def _window_values(series: Series, lo: int, hi: int) -> FloatArray:
    """Values with lo <= step <= hi."""
    a, b = np.searchsorted(series.steps, [lo, hi + 1])
    return series.values[a:b]


LR_ROSE: Final = 1e-3
"""A relative LR rise above this counts as a rise (a logged LR that only repeats its value does not)."""
LR_HELD_AFTER_RISE: Final = 0.75
"""... and the LR at the spike's onset must still be at least this fraction of its highest value in the
window: after a drop, the rise that came before it is not what the spike followed."""


def lr_rise_signature(lr: Series, onset: int, window: int) -> tuple[bool | None, Evidence]:
    """The signature of an LR-transition cause: the logged LR rose within ``window`` steps before
    ``onset`` (by more than :data:`LR_ROSE`, relative to its lowest value before the rise; the last
    sample before the window counts as the start) and at the onset it is still at least
    :data:`LR_HELD_AFTER_RISE` of its highest value there. None with fewer than 2 finite LR samples."""
    a, b = np.searchsorted(lr.steps, [onset - window, onset + 1])
    values = lr.values[max(0, a - 1) : b]
    values = values[np.isfinite(values)]
    if values.size < 2:
        return None, {"lr_rose": None}
    running_low = np.minimum.accumulate(values)
    with np.errstate(divide="ignore", invalid="ignore"):
        rises = np.where(running_low[:-1] > 0, values[1:] / running_low[:-1], np.inf)
    rise = float(rises.max())
    peak, at_onset = float(values.max()), float(values[-1])
    held = at_onset >= LR_HELD_AFTER_RISE * peak if peak > 0 else False
    rose = rise > 1.0 + LR_ROSE
    evidence: Evidence = {
        "lr_rose": rose,
        "lr_rise_factor": rise if math.isfinite(rise) else None,
        "lr_window_peak": peak,
        "lr_at_onset": at_onset,
    }
    return rose and held, evidence


GRAD_BLOWUP_RATIO: Final = 2.0
"""A grad norm that stays at least this many times its level from the start of its spike until the loss rises
is a blow-up in progress that led the loss (the grad-norm spike detector's own ratio)."""


def loss_led_signature(spike: SpikeEvent, grad: Series | None, interval: int) -> tuple[bool | None, Evidence]:
    """The signature of a data-outlier cause: the loss moved first. A bad batch raises the loss at the
    step it is seen. It fails when the grad norm rose with no loss spike at all, or when a grad-norm
    spike began more than one logging ``interval`` before the loss rose (``grad_norm_lead_steps``) and
    stayed at least :data:`GRAD_BLOWUP_RATIO` times its level (the median of the samples before it) at
    every sample until then: the optimizer blew up and the loss followed. A grad-norm swing that came
    back down before the loss rose is the precursor node 5 reads as the SNR collapse. None without a
    grad norm."""
    is_loss = "loss" in spike.metric.split("/")[-1]
    lead = spike.grad_norm_lead_steps
    evidence: Evidence = {"spike_metric": spike.metric, "grad_norm_lead_steps": lead}
    if not is_loss:
        evidence["loss_led"] = False
        return False, evidence
    if grad is None:
        return None, evidence
    if lead is None or lead <= interval:
        evidence["loss_led"] = True
        return True, evidence
    began = spike.start - lead
    between = _window_values(grad, began, spike.start - 1)
    before = _window_values(grad, began - 10 * max(lead, interval), began - 1)
    between, before = between[np.isfinite(between)], before[np.isfinite(before)]
    if not between.size or not before.size:
        return None, evidence
    level, lowest = float(np.median(before)), float(between.min())
    led = not (level > 0 and lowest >= GRAD_BLOWUP_RATIO * level)
    evidence.update(grad_norm_level=level, grad_norm_lowest_before_loss_rise=lowest, loss_led=led)
    return led, evidence


EARLY_JUMP_RATIO: Final = 1.3
"""An early rise is a jump (one batch), not a climb, when its first sample is already this many times the
level the loss held (``stab_core.incidents.EARLY_MIN_RATIO``, the early-instability threshold)."""


def early_jump_signature(spike: SpikeEvent, loss: Series, grad: Series | None) -> tuple[bool | None, Evidence]:
    """The data-outlier signature of an early instability: the loss jumped at once (its first sample in
    the incident is at least :data:`EARLY_JUMP_RATIO` times the level it held, ``spike.baseline``) and the
    grad norm had not jumped before that sample: at the last grad-norm sample before the loss's onset it
    was under :data:`GRAD_BLOWUP_RATIO` times the median of the samples before that one (with a single
    sample before the onset there is no earlier level it could have left). A climb over several samples
    is no single batch. None without a positive grad-norm sample before the onset (whether the loss led
    cannot be told)."""
    at = int(np.searchsorted(loss.steps, spike.start))
    first = float(loss.values[at]) if at < loss.steps.size else math.nan
    jump = first / spike.baseline if spike.baseline > 0 and math.isfinite(first) else math.nan
    evidence: Evidence = {"loss_jump_ratio": jump if math.isfinite(jump) else None, "loss_led": None}
    if not jump >= EARLY_JUMP_RATIO:
        evidence["abrupt"] = False
        return False, evidence
    if grad is None:
        return None, evidence
    before = _window_values(grad, -(2**62), spike.start - 1)
    before = before[np.isfinite(before)]
    if before.size == 0 or not (before > 0).any():
        # no grad norm before the onset, or only placeholders (Megatron prints 0.000 when DeepSpeed owns it)
        evidence["grad_norm_before_onset"] = None
        return None, evidence
    led = False
    if before.size >= 2:
        level, last = float(np.median(before[:-1])), float(before[-1])
        led = level > 0 and last >= GRAD_BLOWUP_RATIO * level
        evidence.update(grad_norm_level=level, grad_norm_before_onset=last)
    evidence["loss_led"] = not led
    return not led, evidence


def replayed_normally(spike: SpikeEvent, replay: Series | None) -> bool | None:
    """Did the kept run, resumed from a checkpoint and replaying the steps of an abandoned attempt, log a
    normal loss where the attempt spiked? Its highest finite loss over the spike's steps (start to peak)
    under half-way from the spike's level to its peak: the same batches gave a normal loss, so a bad batch
    is ruled out (the process state, not the data). None without a replayed loss at those steps."""
    if replay is None or not math.isfinite(spike.baseline) or not math.isfinite(spike.peak_value):
        return None
    values = _window_values(replay, spike.start, spike.peak)
    values = values[np.isfinite(values)]
    if not values.size:
        return None
    return float(values.max()) < spike.baseline + 0.5 * (spike.peak_value - spike.baseline)
