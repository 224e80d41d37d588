"""Issue #32 (docs/diagnosis.md, "Spike detector"): a value gone non-finite that the series comes back from is no
divergence.

Weights that went non-finite never give a finite loss or grad norm again, so a lone NaN loss (one batch's
loss term overflowed) followed by finite values back within the series' band is one bad sample: its
incident is not diverged, its severity is no ``divergence`` and "roll back to the last checkpoint whose
loss and weights are finite" (premise: not recovered) is not said. A series that stays non-finite, or comes
back finite but never into its band, still diverged (docs/diagnosis.md, "Spike detector")."""

from __future__ import annotations

import numpy as np

from stab_core.analysis import analyze_run
from stab_core.level_shifts import level_shifts
from stab_core.runview import RunView, Series
from stab_core.spikes import detect_spikes


def _loss_with_nan(tail: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(3)
    loss = np.array([*(1.0 + rng.uniform(-0.03, 0.03, 60)), np.nan, *tail])
    return np.arange(10, 10 * loss.size + 1, 10), loss


def test_a_lone_nan_loss_back_at_its_level_is_not_diverged() -> None:
    """A loss at 1.0 (+-3 %), NaN at one logged step (610), then back at 1.0: recovered at the next log."""
    steps, loss = _loss_with_nan(1.0 + np.random.default_rng(4).uniform(-0.03, 0.03, 40))
    (event,) = detect_spikes(steps, loss, "loss")
    assert event.nonfinite and event.start == 610
    assert event.recovered and event.recovery_step == 620
    assert not event.diverged
    (item,) = analyze_run(RunView("lone_nan", {"loss": Series(steps, loss)})).spike_dicts()
    assert item["severity"] != "divergence"
    rollback = "Roll back to the last checkpoint whose loss and weights are finite."
    assert rollback not in item["actions"]
    assert all(c["holds"] is False for c in item["claims"] if c["text"] == rollback)


def test_a_loss_that_stays_nan_or_never_returns_to_its_band_still_diverged() -> None:
    """The same run NaN to its end, or finite again but at 5x its level: diverged, as before."""
    steps, loss = _loss_with_nan(np.full(40, np.nan))
    (event,) = detect_spikes(steps, loss, "loss")
    assert event.nonfinite and event.diverged and not event.recovered
    steps, loss = _loss_with_nan(5.0 + np.random.default_rng(5).uniform(-0.03, 0.03, 40))
    events = detect_spikes(steps, loss, "loss")
    assert events[0].nonfinite and events[0].diverged


def test_a_loss_that_falls_to_exact_zeros_after_a_lasting_rise_is_not_back() -> None:
    """A loss at 0.030 (+-10 %) per step, up to 0.045 for 1,100 steps, then exactly 0.0 to the log's end
    (a trainer that drops non-finite step losses from the logged mean logs 0.0 once every step is
    non-finite): the zeros are under its level but are no return to it: the lasting rise and the spike
    detectors find no recovery, and "Recovered at" is not said."""
    rng = np.random.default_rng(7)
    loss = np.concatenate(
        [0.030 * (1 + rng.uniform(-0.1, 0.1, 2000)), 0.045 * (1 + rng.uniform(-0.1, 0.1, 1100)), np.zeros(2000)]
    )
    steps = np.arange(1, loss.size + 1)
    (shift,) = level_shifts(steps, loss)
    assert shift.recovery_step is None and shift.diverged
    assert all(e.recovery_step is None for e in detect_spikes(steps, loss, "loss") if e.start > 1900)
    items = analyze_run(RunView("zeros", {"loss": Series(steps, loss)})).spike_dicts()
    rise = [i for i in items if 1900 <= int(i["start"]) <= 2300]
    assert rise, [(i["start"], i["end"]) for i in items]
    for item in rise:
        texts = [str(c["text"]) for c in item["claims"] if c["kind"] == "recovery"]
        assert not any(t.startswith("Recovered") for t in texts), texts
