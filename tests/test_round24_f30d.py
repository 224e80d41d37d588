"""Round 24, f30d (issue #32): what StabScope flags and says on noisy and diverged runs (docs/diagnosis.md,
"round 24: f30d"). Synthetic series of the shapes met in batch 23: a per-batch loss noisy in stretches (easy
batches for 60-150 rows amid a median of ~1, single batches at 4-7x), a learning-rate blow-up that swings for
thousands of steps, and a resumed run whose first logged interval is a tenth of the rest."""

from __future__ import annotations

import numpy as np

from stab_core.analysis import analyze_run, find_incidents
from stab_core.claims import incident_claims
from stab_core.incidents import Incident
from stab_core.routine_rises import routine_rise
from stab_core.runview import RunView, Series
from stab_core.spikes import SpikeEvent, build_event
from stab_core.within_incidents import within_earlier


def _stretchy_loss(seed: int, n: int = 6000) -> np.ndarray:
    """A heavy-tailed per-batch loss around ~1 with stretches of easy batches (0.03-0.1) every thousand rows or so."""
    rng = np.random.default_rng(seed)
    loss = np.exp(rng.normal(0.0, 0.5, n))
    at = 200
    while at < n - 200:
        width = int(rng.integers(60, 150))
        loss[at : at + width] = np.exp(rng.normal(np.log(0.08), 1.0, width))
        at += width + int(rng.integers(600, 1500))
    tail = rng.random(n) < 1 / 150  # single hard batches at 3-5x
    loss[tail] *= rng.uniform(3.0, 5.0, int(tail.sum()))
    return loss


def _shown(view: RunView) -> list[int]:
    return [i.primary.peak for i in find_incidents(view) if i.severity != "blip"]


def test_a_loss_noisy_in_stretches_shows_no_incident_for_its_own_scatter() -> None:
    # before round 24: 6-9 incidents per run, each easy stretch's end "a 30-100x spike" or "diverged"; now at
    # most one (a 3-row excursion at 7x no other rows reach, or one in the first few hundred rows)
    for seed in range(3):
        steps = 10 * np.arange(1, 6001, dtype=np.int64)
        view = RunView("fim", {"loss": Series(steps, _stretchy_loss(seed))}, {})
        shown = [i for i in find_incidents(view) if i.severity != "blip"]
        assert len(shown) <= 1, (seed, [(i.start, i.until, i.severity) for i in shown])
        assert all(i.severity != "divergence" for i in shown), seed


def test_a_blow_up_out_of_that_scatter_is_still_shown() -> None:
    # (a blow-up inside an incident measured from a window of easy batches that the older log-scatter rule makes a
    # blip, as main did before this round, is not covered here)
    for seed in range(2):
        loss = _stretchy_loss(seed)
        loss[3000:3012] = 60.0  # twelve rows at ~60x the median: nothing the series does on its own
        steps = 10 * np.arange(1, 6001, dtype=np.int64)
        shown = _shown(RunView("fim", {"loss": Series(steps, loss)}, {}))
        assert any(abs(peak - 30010) <= 200 for peak in shown), (seed, shown)


def test_a_lasting_rise_of_that_loss_is_no_routine_rise() -> None:
    loss = _stretchy_loss(0)
    loss[3000:3300] *= 3.0  # 300 rows at three times the level: longer than the noise ever stays up
    steps = 10 * np.arange(1, 6001, dtype=np.int64)
    assert routine_rise(Series(steps, loss), 30010, 33000) is False


def _event(metric: str, start: int, peak: int, end: int, back: int | None) -> SpikeEvent:
    steps = np.arange(0, 5010, 10, dtype=np.int64)
    values = np.full(steps.size, 6.0)
    values[(steps >= start) & (steps <= end)] = 50.0
    values[steps == peak] = 700.0
    index = {int(s): k for k, s in enumerate(steps)}
    recovery = index[back] if back is not None else None
    return build_event(metric, steps, values, index[start], index[end], recovery, 5.9, 0.1)


def test_excursions_inside_a_blow_up_not_yet_back_are_part_of_it() -> None:
    # a learning rate of 1.0: the loss blew up at 90, was near its level once at 270 (the member's return) and
    # swung for thousands of steps; its trend was back only at 4420. Two later swings the detector saw were shown
    # as new spikes that "recovered" (560: 29.7x, 1020: 119x)
    host = Incident("early_instability", (_event("loss", 90, 200, 260, 270),), loss_recovered_at=4420)
    swing = Incident("spike", (_event("loss", 490, 560, 570, 580),), loss_recovered_at=580)
    late = Incident("spike", (_event("loss", 750, 1020, 3980, 3990),), loss_recovered_at=3990)
    norm = Incident("spike", (_event("grad_norm", 800, 800, 800, 810),), loss_recovered_at=None)
    after = Incident("spike", (_event("loss", 4600, 4600, 4600, 4610),), loss_recovered_at=4610)
    out = within_earlier([host, swing, late, norm, after])
    assert [(i.kind, i.start, len(i.members)) for i in out] == [
        ("early_instability", 90, 3),
        ("spike", 800, 1),
        ("spike", 4600, 1),
    ]
    assert out[0].loss_recovered_at == 4420 and out[0].severity == "spike"
    # a divergence never back takes the later swings, and stays one
    diverged = Incident("spike", (_event("loss", 90, 200, 5000, None),), severity="divergence")
    (alone,) = within_earlier([diverged, swing, late])
    assert alone.severity == "divergence" and alone.loss_recovered_at is None


def _resumed(rising: bool) -> RunView:
    """One first logged sample a tenth of the rest (a resumed run's first interval), then ~14 for 960 rows."""
    rng = np.random.default_rng(2)
    steps = 47700 + 10 * np.arange(966, dtype=np.int64)
    loss = 14.1 - 0.5 * np.linspace(0, 1, 966) + rng.normal(0, 0.3, 966)
    if rising:
        loss = 14.0 * np.exp(np.linspace(0, 2.0, 966)) + rng.normal(0, 0.3, 966)
    loss[0] = 1.4684
    return RunView("resumed", {"loss": Series(steps, loss)}, {})


def test_a_rise_from_one_first_sample_that_then_holds_is_no_divergence() -> None:
    analysis = analyze_run(_resumed(rising=False))
    (item,) = [s for s in analysis.spikes if s.incident is not None and s.incident.severity != "blip"]
    assert item.incident is not None and item.incident.severity == "spike"
    assert item.spike.peak == item.spike.start == 47710  # the step up, not the noise of the level held after it
    claims = incident_claims(item.spike, item.diagnosis, item.incident.kind, *item.incident.said_recovery)
    said = " ".join(c.text for c in claims if c.holds is not False)
    assert "iverge" not in said and "rests on 1 logged sample" in said


def test_a_rise_from_one_first_sample_that_keeps_rising_stays_a_divergence() -> None:
    incidents = [i for i in find_incidents(_resumed(rising=True)) if i.severity != "blip"]
    assert [i.severity for i in incidents] == ["divergence"]


def test_a_rise_from_one_first_sample_that_freezes_stays_a_divergence() -> None:
    # an MSE already astronomical at epoch 1 (5.4e30) that jumps 5.9x at epoch 2 and stays flat to 1e-5: a dead run
    steps = np.arange(1, 623, dtype=np.int64)
    loss = 3.194e31 * (1.0 + 1e-6 * np.sin(steps))
    loss[0] = 5.396e30
    incidents = [i for i in find_incidents(RunView("painn", {"loss": Series(steps, loss)}, {})) if i.severity != "blip"]
    assert [i.severity for i in incidents] == ["divergence"]
