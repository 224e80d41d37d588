"""Issue #32 (docs/diagnosis.md, "Lasting rises"): incidents missed early and lasting, one rule at a time.

Synthetic series in the shapes the rules are for (own numbers, no copied log)."""

from __future__ import annotations

import numpy as np

from stab_core.analysis import params_for
from stab_core.run_end_rises import end_climbs, rise_corroborated, run_end_rises
from stab_core.runview import FloatArray, IntArray, Series

Z = params_for("default").loss_spikes.z_threshold


def _drift_up(seed: int = 11) -> tuple[IntArray, FloatArray]:
    """600 samples every 20 steps: 2.2 held for 360, then a drift to 2.7 over 90 samples that stays,
    with 3% per-batch noise; no sample stands out of the few before it."""
    rng = np.random.default_rng(seed)
    i = np.arange(600)
    level = 2.2 + 0.5 * np.clip((i - 360) / 90, 0.0, 1.0)
    return i * 20, level * (1 + 0.03 * rng.standard_normal(i.size))


def test_a_slow_climb_to_the_end_with_the_val_loss_rising_is_a_run_end_rise() -> None:
    steps, x = _drift_up()
    val_steps = np.arange(0, 12001, 500)
    val = Series(val_steps, np.where(val_steps < 7200, 2.3, 2.75))
    events = run_end_rises(steps, x, Z, rise_corroborated(val, None))
    assert len(events) == 1
    event = events[0]
    assert 7200 <= event.start <= 9000 and not event.recovered and event.end == int(steps[-1])


def test_a_slow_climb_nothing_agrees_with_is_left_alone() -> None:
    """The same climb with a flat validation loss, or with no other signal at all: not said."""
    steps, x = _drift_up()
    val_steps = np.arange(0, 12001, 500)
    flat_val = Series(val_steps, np.full(val_steps.size, 2.3))
    assert run_end_rises(steps, x, Z, rise_corroborated(flat_val, None)) == []
    assert run_end_rises(steps, x, Z, None) == []


def test_a_flat_noisy_loss_or_a_short_wander_is_no_end_climb() -> None:
    """A loss that only wanders (5% noise around 2.2), or one whose rise lasts fewer samples than the
    detector's window at the end, holds no climb even with everything agreeing."""
    rng = np.random.default_rng(12)
    steps = np.arange(600) * 20
    flat = 2.2 * (1 + 0.05 * rng.standard_normal(600))
    assert end_climbs(steps, flat, lambda _step: True) == []
    short = flat.copy()
    short[-40:] *= 1.3
    assert end_climbs(steps, short, lambda _step: True) == []
