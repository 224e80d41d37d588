"""Shapes the held-out batches showed detection must hold on (issue #32; docs/diagnosis.md, "Severity"). Each fixture is
written from the shape, with numbers like such logs show, never read from a corpus file: what is
asserted is what a reader of that shape would say (found and shown, or not flagged)."""

from __future__ import annotations

import numpy as np
import pytest

from stab_core.analysis import analyze_run, find_incidents
from stab_core.incidents import Incident
from stab_core.overfitting import detect_overfitting
from stab_core.runview import RunView, Series


def _view(steps: np.ndarray, loss: np.ndarray, **series: tuple[np.ndarray, np.ndarray]) -> RunView:
    return RunView(
        name="shape",
        series={"loss": Series(steps, np.asarray(loss, float)), **{k: Series(s, v) for k, (s, v) in series.items()}},
        meta={},
    )


def _shown(incidents: list[Incident]) -> list[Incident]:
    return [i for i in incidents if i.severity != "blip"]


def _falling(n: int, start: float, end: float, noise: float, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return end + (start - end) * np.exp(-np.arange(n) / (n / 5)) + rng.normal(0.0, noise, n)


def test_late_divergence_on_a_loss_logged_every_1000_steps() -> None:
    """Logged every 1,000 steps: a fall to ~2.5, then 2.95, 3.5 and 4.2 at the last three logs. Three
    samples after the onset are all there is: a divergence from 28,000, never recovered."""
    steps = np.arange(1000, 31000, 1000)
    loss = np.r_[_falling(steps.size - 3, 6.0, 2.5, 0.02, 1), [2.95, 3.5, 4.2]]
    shown = _shown(find_incidents(_view(steps, loss)))
    late = [i for i in shown if i.start >= 20000]
    assert len(late) == 1
    assert 27000 <= late[0].start <= 28000 and late[0].severity == "divergence"
    assert late[0].loss_recovered_at is None


def test_an_elided_console_is_not_an_incident_across_its_gap() -> None:
    """Steps 1-50 logged, the middle elided, steps 9,951-10,000 logged lower: nothing happened that
    the log shows; the jump over the gap is down, not up."""
    head = _falling(50, 10.6, 7.0, 0.03, 2)
    tail = _falling(50, 3.1, 3.0, 0.02, 3)
    steps = np.r_[np.arange(1, 51), np.arange(9951, 10001)]
    assert _shown(find_incidents(_view(steps, np.r_[head, tail]))) == []


def test_an_elided_console_ending_above_its_level_is_found() -> None:
    """The same elided console, but its last 50 steps rise from 3.0 to 4.5 (1.5x): a late rise the
    tail shows by itself, found and shown."""
    head = _falling(50, 10.6, 7.0, 0.03, 2)
    rng = np.random.default_rng(4)
    tail = np.r_[np.full(20, 3.0), np.linspace(3.0, 4.5, 30)] + rng.normal(0.0, 0.02, 50)
    steps = np.r_[np.arange(1, 51), np.arange(9951, 10001)]
    shown = _shown(find_incidents(_view(steps, np.r_[head, tail])))
    assert any(i.start >= 9951 for i in shown)


def test_a_nan_that_starts_mid_run_and_persists_is_a_divergence() -> None:
    """Finite and falling for 1,200 steps, NaN at every step after: a divergence at 1,200 that never
    recovers, said without "recovered"."""
    steps = np.arange(1, 2001)
    loss = _falling(2000, 10.0, 3.0, 0.03, 5)
    loss[1199:] = np.nan
    grad = np.r_[np.full(1199, 1.0), np.full(801, np.nan)]
    analysis = analyze_run(_view(steps, loss, grad_norm=(steps, grad)))
    items = [d for d in analysis.spike_dicts() if d["severity"] != "blip"]
    assert len(items) == 1
    assert items[0]["severity"] == "divergence" and items[0]["start"] == 1200
    said = " ".join(c["text"] for c in items[0]["claims"] if c["holds"] is not False)
    assert "recovered at" not in said.lower()


def test_a_20_step_run_with_a_blow_up_is_found() -> None:
    """A 20-step run whose loss falls 10.9 -> 7.5, then jumps to 11.0 at step 14 and stays above 10:
    found, shown, low certainty."""
    steps = np.arange(1, 21)
    loss = np.r_[np.linspace(10.9, 7.5, 13), [11.0, 11.4, 10.9, 10.7, 10.6, 10.5, 10.4]]
    shown = _shown(find_incidents(_view(steps, loss)))
    assert len(shown) == 1 and 13 <= shown[0].start <= 14
    assert shown[0].certainty == "low"


def test_a_healthy_20_step_run_is_not_flagged() -> None:
    steps = np.arange(1, 21)
    assert _shown(find_incidents(_view(steps, _falling(20, 10.9, 7.0, 0.05, 6)))) == []


def test_an_early_blow_up_in_the_first_5_logged_steps_is_found() -> None:
    """10.8, 10.6, then 14, 18, 19 and above 15 for 20 steps before it falls back: an early blow-up,
    shown (at least a spike), starting by step 3."""
    steps = np.arange(1, 201)
    loss = np.r_[[10.8, 10.6, 14.0, 18.0, 19.0], np.linspace(18.0, 15.5, 20), _falling(175, 10.0, 6.0, 0.03, 7)]
    shown = _shown(find_incidents(_view(steps, loss)))
    assert shown and shown[0].kind == "early_instability" and shown[0].start <= 3


def test_a_start_up_overshoot_back_under_its_start_is_a_blip() -> None:
    """6.94 at step 1, 11.17 at 2, then 9.06, 7.37 and 6.81 (under the start at the 4th sample): the
    first update's overshoot, back below where it began within the blip length: listed, not shown; and
    its return is said against the one-sample level, not as a recovery to a trend."""
    steps = np.r_[np.arange(1, 11), np.arange(100, 20001, 100)]
    loss = np.r_[[6.94, 11.17, 9.06, 7.37, 6.81, 6.58, 6.48, 6.39, 6.32, 6.03], _falling(200, 4.0, 2.2, 0.02, 8)]
    incidents = find_incidents(_view(steps, loss))
    early = [i for i in incidents if i.start <= 3]
    assert len(early) == 1 and early[0].severity == "blip" and early[0].loss_recovered_at == 5
    assert _shown(incidents) == []
    claims = next(d for d in analyze_run(_view(steps, loss)).spike_dicts() if d["start"] <= 3)["claims"]
    recovery = [c["text"] for c in claims if c["kind"] == "recovery"]
    assert recovery and recovery[0].startswith("Back at or below its level before the rise (6.94) at step 5")


def test_an_overshoot_that_stays_over_its_start_for_4_samples_is_a_spike() -> None:
    """10.86, 14.45, 15.20, 11.31, 11.12, then 10.19 under the start: 4 samples above, a spike."""
    steps = np.arange(1, 61)
    loss = np.r_[[10.86, 14.45, 15.20, 11.31, 11.12, 10.19], np.linspace(10.0, 7.0, 54)]
    early = [i for i in find_incidents(_view(steps, loss)) if i.start <= 3]
    assert [(i.severity, i.loss_recovered_at) for i in early] == [("spike", 6)]


def test_a_rise_in_the_first_steps_is_not_back_at_its_own_peak() -> None:
    """6.94, 8.90, 13.71, 13.97, 11.69, 9.11, 8.22, 7.53: the detector starts at 13.71 (1.7x the level
    of the first two); a level from two samples has no noise band, so 13.97, the peak, is not "back"."""
    steps = np.r_[np.arange(1, 11), np.arange(200, 20001, 200)]
    loss = np.r_[[6.94, 8.90, 13.71, 13.97, 11.69, 9.11, 8.22, 7.53, 6.88, 6.7], _falling(100, 5.0, 2.9, 0.02, 9)]
    early = [i for i in find_incidents(_view(steps, loss)) if i.start <= 4]
    assert len(early) == 1 and early[0].loss_recovered_at is not None and early[0].loss_recovered_at >= 8


def test_a_spikes_lead_in_is_not_the_level_it_returns_to() -> None:
    """A loss falling slowly to ~5.2 (logged every 200), then 5.52, 6.66, 7.55, 7.64 and a slow fall:
    the detector's window median sits above the recent level, so it flags the rise at its third sample;
    the trend is the level before the lead-in (5.2), so 5.6 is not "back"; the return is under 5.45."""
    rng = np.random.default_rng(10)
    steps = np.arange(200, 200 * 100 + 1, 200)
    held = np.linspace(5.9, 5.2, 60) + rng.normal(0.0, 0.04, 60)
    fall = [5.52, 6.66, 7.55, 7.64, 6.64, 6.36, 6.23, 6.10, 5.92, 5.87, 5.70, 5.70, 5.69, 5.65]
    loss = np.r_[held, fall, np.linspace(5.6, 5.15, 26)]
    spikes = [i for i in find_incidents(_view(steps, loss)) if i.start > 200 * 60]
    assert spikes and spikes[0].loss_recovered_at is not None
    back = int(np.searchsorted(steps, spikes[0].loss_recovered_at))
    assert loss[back] < 5.45


def test_grad_norm_only_jumps_are_found() -> None:
    """The loss flat and quiet, the grad norm jumping 6x for one step at 400 and 4x for three steps at
    700: both found (from the grad norm alone), as incidents the loss did not feel."""
    rng = np.random.default_rng(11)
    steps = np.arange(1, 1001)
    loss = 3.0 + rng.normal(0.0, 0.01, 1000)
    grad = 1.0 + rng.normal(0.0, 0.03, 1000)
    grad[399] = 6.0
    grad[699:702] = 4.0
    incidents = find_incidents(_view(steps, loss, grad_norm=(steps, grad)))
    starts = sorted(i.start for i in incidents if "grad_norm" in i.metrics)
    assert any(abs(s - 400) <= 1 for s in starts) and any(abs(s - 700) <= 1 for s in starts)


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("every", [1, 10])
def test_a_noisy_fine_tune_is_not_flagged(seed: int, every: int) -> None:
    """A fine-tune whose per-batch loss swings +-30% around a slow fall (1.2 -> 0.9): its noise, not
    incidents. Nothing is shown."""
    rng = np.random.default_rng(seed)
    steps = np.arange(every, every * 600 + 1, every)
    level = 0.9 + 0.3 * np.exp(-np.arange(600) / 200)
    loss = level * (1.0 + rng.uniform(-0.3, 0.3, 600))
    assert _shown(find_incidents(_view(steps, loss))) == []


def test_validation_loss_only_overfitting() -> None:
    """Only the validation loss is logged (every 250 steps): 2.0 falling to 1.47 at 1,750, then rising
    steadily to 1.72 by 5,000: overfitting from the best eval, 1,750, with no train loss to compare."""
    steps = np.arange(250, 5001, 250)
    best = int(np.searchsorted(steps, 1750))
    val = np.r_[np.linspace(2.0, 1.47, best + 1), np.linspace(1.50, 1.72, steps.size - best - 1)]
    found = detect_overfitting(steps, val)
    assert found is not None and found.best_step == 1750 and found.train_at_end is None


def test_an_excerpts_blow_up_on_three_samples_stands() -> None:
    """A chronicle excerpted mid-run: 2.78, 2.77, 2.768, then 7.34, 8.72, 6.85 and back at 2.72, then
    ~2.7: a rise judged on three samples before it that clears the noise of the samples after its
    return many times over: found."""
    steps = np.r_[[29020, 29030, 29040, 29050, 29060, 29090], np.arange(33240, 33340, 10)]
    loss = np.r_[[2.78, 2.77, 2.768, 7.344, 8.716, 6.849], 2.72 + 0.01 * np.sin(np.arange(10))]
    assert [i.start for i in find_incidents(_view(steps, loss))] == [29050]


@pytest.mark.parametrize(("loss_samples_out", "severity"), [(1, "blip"), (2, "spike")])
def test_grad_norm_outliers_with_one_loss_sample_out_are_a_blip(loss_samples_out: int, severity: str) -> None:
    """Logged every 20 steps: three one-sample grad-norm outliers (2.2x, 3.4x, 3.4x) within 120 steps,
    one incident; the noisy loss (~4.1 +- 0.1) at 1.10x for the first one's sample only, back at the
    next: one batch, a blip. Out of its band for two samples, the loss lost more: a spike."""
    rng = np.random.default_rng(12)
    steps = np.arange(20, 2001, 20)
    loss = 4.1 + rng.normal(0.0, 0.1, steps.size)
    grad = 4.0 + rng.normal(0.0, 0.3, steps.size)
    loss[60 : 60 + loss_samples_out] = 4.1 * 1.10
    grad[[60, 64, 66]] = (8.8, 13.5, 13.5)
    (incident,) = find_incidents(_view(steps, loss, grad_norm=(steps, grad)))
    assert incident.metrics == ["grad_norm"] and incident.severity == severity


def test_a_start_up_rise_is_not_judged_against_a_later_blow_up() -> None:
    """19.87, 28.68, 32.90, then a fall to ~3.4 by step 200 (logged every 200), and a blow-up to
    146,981 at 1,200 that stays erratic: the start-up rise is judged against the quiet samples after its
    return, not the blow-up's swings: both are found."""
    steps = np.r_[np.arange(1, 11), np.arange(200, 10001, 200)]
    rng = np.random.default_rng(13)
    later = np.r_[[146981.0, 7803.0, 298.0], rng.uniform(170.0, 650.0, 42)]
    loss = np.r_[[19.87, 28.68, 32.90, 29.47, 28.75, 29.61, 27.37, 26.35, 24.97, 22.71], [3.88, 3.52, 3.44, 3.48, 3.28]]
    loss = np.r_[loss, later]
    starts = [i.start for i in find_incidents(_view(steps, loss))]
    assert starts[0] <= 3 and 1200 in starts
