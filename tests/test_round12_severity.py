"""Issue #32 (docs/diagnosis.md, "Severity"): a divergence needs no return *and* a level that lasts, judged against
the run's own noise. Each fixture is written here from the shape (seeded noise), not read from a log."""

from __future__ import annotations

import numpy as np

from stab_core.analysis import find_incidents
from stab_core.run_end_rises import cut_off_at_log_end, lasting_at_end, run_end_rises
from stab_core.runview import RunView, Series
from stab_core.spikes import build_event

Z = 6.0
"""The loss detector's modified z-score threshold (LOSS_SPIKE_PARAMS)."""


def noisy_per_batch_loss(n: int = 1200, seed: int = 3) -> tuple[np.ndarray, np.ndarray]:
    """A per-batch loss logged every step, busy around 0.04 (spread ~0.012), with a quiet dip to ~0.02
    for 100 steps and a return to ~0.055 for its last 120: the wander of a noisy run, not a divergence."""
    rng = np.random.default_rng(seed)
    level = np.full(n, 0.042)
    level[n - 220 : n - 120] = 0.021
    level[n - 120 :] = 0.056
    loss = np.abs(level + rng.normal(0.0, 0.3, n) * level)
    return np.arange(1, n + 1), loss


def test_a_noisy_loss_back_at_its_busy_level_at_the_end_is_no_run_end_rise() -> None:
    """Its last 120 samples stand 2.6x the quiet dip before them, but within the noise band of the run's
    last 256 samples: no rise, so no divergence (a gptlab diffusion run showed one at its last steps)."""
    steps, loss = noisy_per_batch_loss()
    assert run_end_rises(steps, loss, Z) == []
    assert not [
        i for i in find_incidents(RunView("noisy", {"loss": Series(steps, loss)}, {})) if i.severity == "divergence"
    ]


def test_a_lasting_rise_at_the_end_still_diverges() -> None:
    """The same run whose last 120 samples stand at 0.2 (5x its busy level): a lasting level, a divergence."""
    steps, loss = noisy_per_batch_loss()
    loss[-120:] = 0.2 + 0.01 * np.sin(np.arange(120))
    assert lasting_at_end(loss[:-120], loss[-120:])
    events = run_end_rises(steps, loss, Z)
    assert [(e.start, e.recovered, e.diverged) for e in events] == [(int(steps[-120]), False, True)]


def test_a_grad_norm_burst_at_the_last_steps_with_the_loss_unmoved_is_cut_off_not_diverged() -> None:
    """Grad-norm outliers on the last 5 steps of an SFT run (43, 6, 34, 37, 110 against ~5) while the
    per-step loss stays in its 1.0-1.3 band: the log ends before the norm is back, but the run lost
    nothing that lasts, so it did not diverge (neither recovered nor diverged: cut off)."""
    rng = np.random.default_rng(1)
    steps = np.arange(1, 301)
    grad = 5.0 + rng.normal(0.0, 1.0, 300)
    grad[-5:] = [43.0, 6.0, 34.0, 37.0, 110.0]
    loss = 1.15 + rng.normal(0.0, 0.08, 300)
    event = build_event("grad_norm", steps, grad, 295, 299, None, 5.0, 1.0)
    assert event.diverged and event.n_samples == 5
    (cut,) = cut_off_at_log_end([event], Series(steps, grad), Series(steps, loss))
    assert not cut.diverged and not cut.recovered
    # the loss does climb to a lasting level with it: a divergence stands
    loss[-5:] = 4.0
    (kept,) = cut_off_at_log_end([event], Series(steps, grad), Series(steps, loss))
    assert kept.diverged


def test_a_loss_event_whose_end_is_within_the_runs_noise_did_not_diverge() -> None:
    """A 19-sample loss event to the log's end on a noisy fine-tune (0.05-0.09 around 0.066), judged
    against a low recent level: its end is within the run's noise, so it is cut off, not diverged."""
    rng = np.random.default_rng(2)
    steps = np.arange(5, 605, 5)
    loss = 0.066 + rng.normal(0.0, 0.011, steps.size)
    event = build_event("loss", steps, loss, steps.size - 19, steps.size - 1, None, 0.045, 0.003)
    (cut,) = cut_off_at_log_end([event], Series(steps, loss))
    assert not cut.diverged


def near_zero_noisy_loss(n: int = 800, seed: int = 5, every: int = 60) -> tuple[np.ndarray, np.ndarray]:
    """A memorising run's loss logged every 10 steps: ~0.02 with per-batch spread, and a one-log jump to
    ~0.12-0.18 (6-9x its level) every ``every`` logs, back at the next log."""
    rng = np.random.default_rng(seed)
    loss = np.abs(0.02 + 0.008 * rng.standard_normal(n))
    loss[every::every] = 0.12 + 0.06 * rng.random(loss[every::every].size)
    return np.arange(0, 10 * n, 10), loss


def test_a_jump_the_noisy_run_shows_every_few_hundred_steps_is_a_blip() -> None:
    """One-log jumps of a near-zero loss that the run shows every 600 steps, back at the next log: each is
    the run's own noise, a blip (hidden by default), however sparsely logged or tall over its level."""
    steps, loss = near_zero_noisy_loss()
    incidents = [i for i in find_incidents(RunView("adder", {"loss": Series(steps, loss)}, {})) if i.start >= 3000]
    assert incidents and all(i.severity == "blip" for i in incidents)


def test_the_first_jumps_of_a_run_and_a_taller_one_stay_spikes() -> None:
    """The same run's early jumps have too little history to be its noise; and a jump twice as tall as any
    the run showed before is no recurring one: both lost more than a batch's progress (spikes)."""
    steps, loss = near_zero_noisy_loss()
    loss[700] = 0.6
    found = {i.start: i.severity for i in find_incidents(RunView("adder", {"loss": Series(steps, loss)}, {}))}
    assert found[int(steps[60])] == "spike" and found[int(steps[700])] == "spike"


def test_a_rise_over_several_logs_of_a_noisy_run_stays_a_spike() -> None:
    """The same noisy run with three consecutive logs at 4-5x its level (a rise that lasts, however often
    the run shows one-log jumps): not one batch, so no blip."""
    steps, loss = near_zero_noisy_loss()
    loss[700:703] = [0.09, 0.095, 0.1]
    found = {i.start: i.severity for i in find_incidents(RunView("noisy", {"loss": Series(steps, loss)}, {}))}
    assert [severity for start, severity in found.items() if 6990 <= start <= 7040] == ["spike"]
