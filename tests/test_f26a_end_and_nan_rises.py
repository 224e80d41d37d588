"""Issue #32 (docs/diagnosis.md, "Lasting rises"): a rise from the first step that runs into NaN is dated from the rise
and diagnosed from the NaN (stab_core/incidents.py: _led_into_nonfinite, stab_core/analysis.py); a late climb of a noisy
fine-tune loss that never comes back is a divergence (stab_core/run_end_rises.py: held_end_rises).
Synthetic series of those shapes."""

from __future__ import annotations

import numpy as np

from stab_core.analysis import analyze_run, find_incidents
from stab_core.run_end_rises import held_end_rises
from stab_core.runview import RunView, Series


def test_an_early_rise_into_nan_is_one_incident_dated_from_the_rise_and_diagnosed_as_non_finite() -> None:
    steps = np.arange(1, 134, dtype=np.int64)
    loss = np.full(steps.size, np.nan)
    loss[:8] = [5.47, 7.25, 8.04, 8.47, 8.18, 9.55, 9.52, 8.99]  # 1.33x at step 2, NaN from step 9 on
    view = RunView("sft", {"loss": Series(steps, loss)}, {})
    [incident] = find_incidents(view)
    assert incident.severity == "divergence"
    assert incident.primary.start == 2 and not incident.primary.nonfinite
    assert any(m.nonfinite and m.start == 9 for m in incident.members)
    [item] = analyze_run(view).spikes
    assert item.spike.start == 2
    assert "unknown" not in item.diagnosis.cause.lower()  # the NaN's leaf, not an early rise's unknown cause


def _fine_tune(end_rise: bool) -> np.ndarray:
    rng = np.random.default_rng(3)
    n = 48
    loss = 2.0 * np.exp(-np.arange(n) / 4.0) + 0.037 * rng.lognormal(0.0, 0.25, n)
    if end_rise:
        loss[-10:] = 0.066 * rng.lognormal(0.0, 0.1, 10).clip(0.92, None)  # never back below 0.06
    return loss


def test_a_late_climb_that_never_comes_back_is_a_divergence() -> None:
    steps = np.arange(5, 245, 5, dtype=np.int64)
    [event] = held_end_rises(steps, _fine_tune(True))
    assert event.start == int(steps[-10]) and event.diverged
    view = RunView("lora", {"loss": Series(steps, _fine_tune(True))}, {})
    assert any(i.severity == "divergence" and i.start <= int(steps[-10]) for i in find_incidents(view))


def test_a_settled_noisy_end_holds_no_late_climb() -> None:
    steps = np.arange(5, 245, 5, dtype=np.int64)
    assert held_end_rises(steps, _fine_tune(False)) == []
