"""Round 21 (f27d, issue #32): statements whose premise fails. Synthetic runs, one test per rule."""

from __future__ import annotations

import numpy as np

from stab_core.diagnosis import diagnose
from stab_core.runview import RunView, Series
from stab_core.spikes import SpikeEvent, detect_spikes
from stab_core.tree_nodes import overflowed_quantities

STEPS = np.arange(0, 2000, 10, dtype=np.int64)
ONSET = 1200


def _loss() -> Series:
    """A noisy falling loss that jumps 6x at :data:`ONSET` and stays up (finite throughout)."""
    rng = np.random.default_rng(0)
    values = 2.0 + np.exp(-STEPS / 400.0) + rng.normal(0.0, 0.02, STEPS.size)
    values[STEPS >= ONSET] *= 6.0
    return Series(STEPS, values)


def _spike(view: RunView) -> SpikeEvent:
    loss = view.series["loss"]
    return min(detect_spikes(loss.steps, loss.values, "loss"), key=lambda e: abs(e.start - ONSET))


def _with(extra: np.ndarray) -> RunView:
    return RunView("obs", series={"loss": _loss(), "obs_rms_mean": Series(STEPS, extra)})


def test_a_quantity_that_overflows_at_the_onset_and_stays_non_finite_is_a_numerical_fault() -> None:
    """An RL run's observation normaliser gone inf at the onset, every loss finite: node 1 says yes (a numerical
    fault's signature is in the log), where before "Cause unknown: no question ... found a cause" was said."""
    obs = np.full(STEPS.size, 0.45)
    obs[STEPS >= ONSET - 10] = np.inf
    view = _with(obs)
    spike = _spike(view)
    assert not spike.nonfinite
    diagnosis = diagnose(view, spike)
    assert diagnosis.path[0].answer == "yes" and diagnosis.cause == "numerical"
    assert diagnosis.path[0].evidence["overflowed"] == "obs_rms_mean"
    assert diagnosis.path[0].evidence["nonfinite_from_first_step"] is False
    # the premise of "skip any step whose values are non-finite" holds: non-finite values were logged
    skip = next(c for c in diagnosis.checks if c.premise == "nonfinite_seen")
    assert skip.holds is True


def test_placeholders_and_a_value_that_comes_back_are_no_overflow() -> None:
    """A column with a non-finite placeholder before (the logger fills it with nan), a value finite again
    after, one trailing nan (a summary row) or an overflow long before the incident: node 1 stays no."""
    early = np.full(STEPS.size, 0.45)
    early[1] = np.nan
    early[STEPS >= ONSET] = np.nan
    back = np.full(STEPS.size, 0.45)
    back[(STEPS >= ONSET) & (STEPS < ONSET + 100)] = np.inf
    last = np.full(STEPS.size, 0.45)
    last[-1] = np.nan
    before = np.full(STEPS.size, 0.45)
    before[STEPS >= 300] = np.nan
    for values in (early, back, last, before):
        view = _with(values)
        spike = _spike(view)
        assert overflowed_quantities(view, spike.onset - 20, spike.onset + 20, "loss") == []
        assert diagnose(view, spike).path[0].answer == "no"


def _evals() -> tuple[np.ndarray, np.ndarray]:
    """A val loss at its best at the 3rd of 30 evals, then rising to 2x and staying there."""
    steps = np.arange(100, 3100, 100, dtype=np.int64)
    values = np.where(steps <= 300, 5.0 - steps / 300.0, 4.0 + np.minimum(steps - 300, 1000) / 250.0)
    return steps, values


def test_a_val_rise_beside_training_losses_that_never_fell_is_no_overfitting() -> None:
    """No ``loss`` among the run's metrics, but its training losses under their own names (an adversarial
    adaptation's ``loss/encoder`` and ``loss/discrim``) flat or rising while the val loss rises: a held-out
    divergence, not a model learning its training set; "overfitting ... keep the best checkpoint" is not said.
    One of them falling, or a val loss logged alone, is overfitting as before."""
    from stab_core.findings import finding_metrics, run_findings

    steps, val = _evals()
    flat = (steps, np.full(steps.size, 0.95) + 0.001 * (steps / 100.0 % 3))
    rising = (steps, 1.05 + steps / 30_000.0)
    falling = (steps, 2.0 - steps / 2_000.0)
    series = {"val_loss": (steps, val), "loss/encoder": flat, "loss/discrim": rising}
    assert finding_metrics(series) == ["val_loss", "loss/encoder", "loss/discrim"]
    assert run_findings(series)["overfitting"] is None
    assert run_findings({**series, "loss/encoder": falling})["overfitting"] is not None
    assert run_findings({"val_loss": (steps, val)})["overfitting"] is not None
    assert finding_metrics(["loss", "val_loss", "loss/discrim"]) == ["val_loss", "loss"]
