"""On a loss noisy throughout, an excursion must stand out from the series' own scatter (issue #32; docs/diagnosis.md,
"Severity": stab_core/noisy_series.py). Synthetic runs of the shape an RL value loss per episode shows: a heavy-tailed
per-row loss whose 1.2x rises over the window median are ordinary (a squared error of one rollout's value
estimate: half its rows sit over 1.2x the window median), with or without one real blow-up."""

from __future__ import annotations

import numpy as np

from stab_core.analysis import find_incidents
from stab_core.noisy_series import MIN_LEVEL_SAMPLES, ORDINARY_SHARE, ordinary_share, stands_out
from stab_core.runview import RunView, Series

N = 3000
BLOW_UP = 1500


def _value_loss(seed: int, blow_up: bool = False) -> RunView:
    rng = np.random.default_rng(seed)
    steps = np.arange(N, dtype=np.int64) * 10  # one row every 10 episodes
    loss = 10.0 * rng.normal(0.0, 1.0, N) ** 2  # median ~4.5, 90th percentile ~27: a squared error per row
    if blow_up:
        loss[BLOW_UP : BLOW_UP + 6] = [800.0, 400.0, 750.0, 700.0, 15000.0, 1000.0]
    return RunView("ppo", {"loss": Series(steps, loss)}, {})


def _shown(view: RunView) -> list[int]:
    return [i.primary.peak for i in find_incidents(view) if i.severity != "blip"]


def test_a_loss_noisy_throughout_shows_no_incident_for_its_own_scatter() -> None:
    for seed in range(3):
        view = _value_loss(seed)
        share = ordinary_share(view.series["loss"].values)
        assert share is not None and share >= ORDINARY_SHARE, (seed, share)
        assert _shown(view) == [], seed


def test_a_blow_up_out_of_the_scatter_is_still_shown_once() -> None:
    for seed in range(3):
        shown = _shown(_value_loss(seed, blow_up=True))
        assert [peak for peak in shown if abs(peak - 10 * BLOW_UP) <= 100] != [], (seed, shown)
        assert len(shown) <= 2, (seed, shown)


def test_a_quiet_loss_keeps_its_spikes() -> None:
    # a training loss that falls with a little noise: a 1.2x rise is rare, the rule says nothing
    rng = np.random.default_rng(0)
    steps = np.arange(1, 2001, dtype=np.int64)
    loss = 2.0 + 3.0 * np.exp(-steps / 400) + rng.normal(0, 0.02, steps.size)
    loss[1200:1204] += 1.5
    view = RunView("lm", {"loss": Series(steps, loss)}, {})
    share = ordinary_share(loss)
    assert share is not None and share < ORDINARY_SHARE
    assert any(1195 <= peak <= 1210 for peak in _shown(view))


def test_the_stand_out_question() -> None:
    steps = np.arange(100, dtype=np.int64)
    noisy = Series(steps, np.tile([1.0, 10.0, 3.0, 30.0], 25))
    assert stands_out(noisy, 60, 61) is False  # 30 is its usual tail
    high = Series(steps, np.where(steps == 61, 3000.0, noisy.values))
    assert stands_out(high, 60, 62) is True
    nan = Series(steps, np.where(steps == 61, np.nan, noisy.values))
    assert stands_out(nan, 60, 62) is True
    # the run's first window: its first samples outside the incident are the scatter
    assert stands_out(noisy, 3, 3) is False
    assert stands_out(Series(steps[:MIN_LEVEL_SAMPLES], noisy.values[:MIN_LEVEL_SAMPLES]), 3, 3) is None
