"""Logs shaped as issue #32's batch 9 (tuned on this round): a run that ends above the level its loss
held, on too few samples for the spike or climb detectors. Each fixture is written here from the
shape, with numbers like the batch's logs show, not read from them."""

from __future__ import annotations

import numpy as np

from stab_core.analysis import find_incidents
from stab_core.run_end_rises import rise_corroborated, run_end_rises
from stab_core.runview import RunView, Series

Z = 6.0
"""The loss detector's modified z-score threshold (LOSS_SPIKE_PARAMS)."""


def _view(steps: np.ndarray, loss: np.ndarray, **series: tuple[np.ndarray, np.ndarray]) -> RunView:
    return RunView(
        name="shape",
        series={"loss": Series(steps, loss), **{k: Series(s, v) for k, (s, v) in series.items()}},
        meta={},
    )


def sparse_late_divergence(last: tuple[float, ...] = (2.87, 3.59)) -> tuple[np.ndarray, np.ndarray]:
    """A loss logged at 1-5, every 200 to 1000, then every 1000 (a wall-clock-capped console): a start-up
    transient (6.9 -> 18.4 -> 6.1), a fall to 2.24-2.47 over 5000-9000, then ``last`` at 10000, 11000."""
    steps = np.array([1, 2, 3, 4, 5, 200, 400, 600, 800, 1000, *range(2000, 10000, 1000)])
    loss = [6.94, 18.38, 10.18, 6.61, 6.15, 3.04, 2.68, 2.87, 2.63, 2.65, 2.49, 2.46, 2.36, 2.31, 2.47, 2.41]
    loss += [2.31, 2.24]
    steps = np.concatenate([steps, 10000 + 1000 * np.arange(len(last))])
    return steps, np.array(loss + list(last))


def test_a_sparse_run_that_ends_1_6x_its_held_level_diverged() -> None:
    """Two trailing samples every one out of the recent noise band, the last 1.55x the held level 2.31:
    a divergence from 10000, never recovered (the start-up transient is an early instability apart)."""
    steps, loss = sparse_late_divergence()
    events = run_end_rises(steps, loss, Z)
    assert [(e.start, e.peak, e.recovered) for e in events] == [(10000, 11000, False)]
    assert abs(events[0].baseline - 2.31) < 1e-9
    late = [i for i in find_incidents(_view(steps, loss)) if i.start >= 9000]
    assert [(i.start, i.severity, i.loss_recovered_at) for i in late] == [(10000, "divergence", None)]


def test_a_run_back_at_its_level_at_the_end_has_no_run_end_rise() -> None:
    """The same rise, but the last sample is back at 2.30: it recovered (or was noise), nothing to say here."""
    steps, loss = sparse_late_divergence((2.87, 3.59, 2.30))
    assert run_end_rises(steps, loss, Z) == []
    # one high last sample is one batch, not a trend
    steps, loss = sparse_late_divergence((3.59,))
    assert run_end_rises(steps, loss, Z) == []


def test_a_small_rise_needs_a_second_signal() -> None:
    """An elided console: 10.655/10.652/10.646 at 1-3, then 12.67/13.40/12.55 at 2498-2500 (1.26x, under
    the 1.3x a rise needs alone). A dynamic loss scale that fell from 32768 to 1 (no range left) or a
    validation loss above its earlier low says the run did get worse; a steady scale says nothing."""
    steps = np.array([1, 2, 3, 2498, 2499, 2500])
    loss = np.array([10.655, 10.652, 10.646, 12.675, 13.401, 12.550])
    assert run_end_rises(steps, loss, Z, rise_corroborated(None, None)) == []
    steady = (steps, np.full(6, 32768.0))
    assert run_end_rises(steps, loss, Z, rise_corroborated(None, Series(*steady))) == []
    collapsed = Series(steps, np.array([32768.0, 32768.0, 32768.0, 1.0, 1.0, 1.0]))
    events = run_end_rises(steps, loss, Z, rise_corroborated(None, collapsed))
    assert [(e.start, e.peak, round(e.ratio, 3)) for e in events] == [(2498, 2499, 1.258)]
    val = Series(np.array([1, 2500]), np.array([10.70, 13.60]))
    assert len(run_end_rises(steps, loss, Z, rise_corroborated(val, None))) == 1
    incidents = find_incidents(_view(steps, loss, loss_scale=(collapsed.steps, collapsed.values)))
    assert [(i.start, i.severity) for i in incidents] == [(2498, "divergence")]


def test_noisy_tail_inside_the_runs_band_is_not_a_rise() -> None:
    """A reward-model-like loss swinging 0.4-1.3 around 0.7: two last samples at 1.0 and 1.1 are 1.5x the
    held level but inside the run's own noise band."""
    rng = np.random.default_rng(5)
    steps = np.arange(10, 410, 10)
    loss = 0.7 + rng.uniform(-0.3, 0.6, steps.size)
    loss[-2:] = (1.0, 1.1)
    assert run_end_rises(steps, loss, Z) == []


def test_a_noisy_runs_lowest_dip_is_not_a_fall_to_judge_spikes_against() -> None:
    """A batch-1 LoRA fine-tune whose loss swings +-10% around 1.03 (81 steps) with three samples near
    0.78 at 63-65: that held level is 1.3x below the window median (1.03), but so is the recent median:
    the run holds no fall, and an ordinary later batch is neither a spike nor a divergence. (Judged
    against the dip, 7 of these 12 noise draws ended in a false 'diverged'.)"""
    from stab_core.recent_level import recent_level_jumps
    from stab_core.spike_params import LOSS_SPIKE_PARAMS

    for seed in range(12):
        rng = np.random.default_rng(seed)
        steps = np.arange(1, 82)
        loss = 1.03 + rng.uniform(-0.1, 0.1, steps.size)
        loss[62:65] = (0.775, 0.786, 0.945)
        assert recent_level_jumps(steps, loss, LOSS_SPIKE_PARAMS) == [], seed
        assert [i.start for i in find_incidents(_view(steps, loss)) if i.severity == "divergence"] == [], seed


def test_one_logged_sample_back_at_the_next_is_a_blip_however_sparse_the_log() -> None:
    """A console logging every 100 steps, 2.1-2.3 with 2% noise: one line at 3.69 (1.6x) and the next back
    at 2.2 is a one-batch blip (absorbed); the same jump held for two lines lost steps: a spike."""
    rng = np.random.default_rng(2)
    steps = np.arange(100, 20100, 100)
    loss = 2.2 * (1 + rng.normal(0, 0.02, steps.size))
    one = loss.copy()
    one[120] = 3.69
    [incident] = find_incidents(_view(steps, one))
    assert (incident.start, incident.severity) == (12100, "blip")
    two = one.copy()
    two[121] = 3.4
    [incident] = find_incidents(_view(steps, two))
    assert (incident.start, incident.severity) == (12100, "spike")


def test_grad_norm_outliers_the_loss_never_follows_are_blips() -> None:
    """A draft-model run logged every 20 steps, loss 5.7 +- 2%, grad norm 6 +- 8%: two one-sample grad-norm
    outliers 60 steps apart (23 and 15) with the norm at 7 between them merge into one 4-sample incident;
    the loss stays within 1.1x its level throughout, so nothing was lost: a blip, not shown by default."""
    rng = np.random.default_rng(4)
    steps = np.arange(20, 12020, 20)
    loss = 5.7 * (1 + rng.normal(0, 0.02, steps.size))
    grad = 6.0 * (1 + rng.normal(0, 0.08, steps.size))
    i = int(np.searchsorted(steps, 9060))
    grad[i : i + 4] = (23.0, 7.0, 6.9, 15.0)
    incidents = [x for x in find_incidents(_view(steps, loss, grad_norm=(steps, grad))) if x.start >= 9000]
    assert [(x.start, x.primary.metric, x.severity) for x in incidents] == [(9060, "grad_norm", "blip")]


def test_one_logged_sample_the_validation_loss_shares_is_a_spike() -> None:
    """A console logging split-loss estimates every 500 steps: 6.6 -> 9.6 at one eval and back at the next
    is one sample, but the validation loss jumped with it (6.6 -> 9.6): the model got worse, a spike. Without
    the validation loss it stays a spike too: 1.45x its level, on a trend of 3 samples, is more than the
    log can vouch for as one bad batch (``SPARSE_BLIP_MAX_RATIO``, ``CERTAIN_SAMPLES``)."""
    steps = np.arange(500, 5500, 500)
    loss = np.array([7.2, 6.9, 6.65, 9.58, 6.64, 6.6, 6.55, 6.5, 6.48, 6.45])
    val = np.array([7.3, 7.0, 6.70, 9.62, 6.70, 6.66, 6.6, 6.56, 6.53, 6.5])
    spikes = [i for i in find_incidents(_view(steps, loss, val_loss=(steps, val))) if i.start == 2000]
    assert [i.severity for i in spikes] == ["spike"]
    alone = [i for i in find_incidents(_view(steps, loss)) if i.start == 2000]
    assert [i.severity for i in alone] == ["spike"]
