"""Issue #32 (docs/diagnosis.md, "Recovery"): the recovery step a reader sees is where the loss came back to its level
before the rise and stayed there (docs/diagnosis.md, "Recovery")."""

from __future__ import annotations

import numpy as np

from stab_core.analysis import analyze_run, find_incidents, run_params
from stab_core.held_recovery import HELD_SAMPLES, held_back
from stab_core.runview import RunView, Series


def _falling_then_spike(settle: int) -> tuple[np.ndarray, np.ndarray]:
    """A loss falling steadily (0.30 -> ~0.09 over 200 steps, per-step noise 1 %) that jumps to 7x at step
    201 and decays back to its level over ``settle`` steps, then goes on at that level, flat: the trend
    fitted before the jump still falls, so its noise band lies under the level the loss came back to."""
    rng = np.random.default_rng(3)
    steps = np.arange(1, 401)
    base = np.where(steps <= 200, 0.09 + 0.21 * np.exp(-(steps - 1) / 60.0), 0.0)
    level = float(base[199])
    base[200:] = level
    bump = np.zeros(steps.size)
    decay = np.exp(-np.arange(settle) / (settle / 6.0))
    bump[200 : 200 + settle] = 6.0 * level * decay
    return steps, (base + bump) * (1.0 + rng.normal(0.0, 0.01, steps.size))


def test_recovery_is_where_the_loss_stays_back_at_its_level_not_where_its_falling_trend_is_met() -> None:
    """The loss is within 1.1x of its level before the jump from about 20 steps after it and stays
    there; the falling trend's band (which projects the fall on) is met much later or never: the
    incident says it recovered where the curve is back, and the claim says what that means."""
    steps, loss = _falling_then_spike(settle=30)
    view = RunView(name="rec", series={"loss": Series(steps, loss)}, meta={})
    incident = next(i for i in find_incidents(view, run_params(view)) if i.start <= 201 <= i.until)
    first = int(steps[200 + 15])
    level = float(np.median(loss[197:200]))
    back = next(
        int(steps[i])
        for i in range(201, steps.size - HELD_SAMPLES)
        if (loss[i : i + HELD_SAMPLES] <= 1.1 * level).all()
    )
    assert first <= back <= first + 20
    assert incident.loss_recovered_at == back
    assert incident.held is not None and incident.held[0] == back
    said = [
        claim["text"]
        for spike in analyze_run(view).spikes
        if spike.incident is not None and spike.incident.start <= 201 <= spike.incident.until
        for claim in spike.to_dict()["claims"]
        if claim["kind"] == "recovery"
    ]
    assert said and said[-1].startswith(f"Recovered at step {back}: from there the loss stayed within 1.1x")


def test_a_dip_under_the_level_that_does_not_last_is_no_recovery() -> None:
    """One or two samples under 1.1x between higher ones are a noisy dip: the recovery is the first
    sample from which HELD_SAMPLES samples in a row stay under it."""
    steps = np.arange(1, 41)
    values = np.full(40, 1.0)
    values[10:30] = [5, 3, 1.05, 2, 1.0, 1.08, 1.9, *([1.02] * 13)]
    assert held_back(steps, values, start=11, peak=11, band_step=40) == (18, 1.0)
    # never before the band's own step, never when the band saw no recovery, never on a signed level
    assert held_back(steps, values, start=11, peak=11, band_step=18) is None
    assert held_back(steps, values, start=11, peak=11, band_step=None) is None
    assert held_back(steps, -values, start=11, peak=11, band_step=40) is None
    # a loss already rising into the detected start (a lead-in) has no level from the samples before it
    lead_in = values.copy()
    lead_in[7:10] = [1.0, 1.3, 1.6]
    assert held_back(steps, lead_in, start=11, peak=11, band_step=40) is None
    # a level needs a few samples before the rise: a run's first samples are none
    assert held_back(steps, values, start=4, peak=4, band_step=40) is None
