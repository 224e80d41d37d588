"""An RL run's return is its headline (issue #32; docs/diagnosis.md, "GANs and RL"), on our own synthetic returns."""

from __future__ import annotations

import numpy as np

from stab_core.analysis import find_incidents
from stab_core.return_falls import headline_return, return_falls
from stab_core.runview import RunView, Series


def _noisy_returns(levels: list[tuple[int, float]], seed: int = 0) -> np.ndarray:
    """Per-episode returns: ``(episodes, mean)`` stretches, Poisson-noisy like a game's score."""
    rng = np.random.default_rng(seed)
    return np.concatenate([rng.poisson(mean, n).astype(float) for n, mean in levels])


def test_a_lasting_fall_of_the_return_is_found_and_a_short_dip_is_not() -> None:
    x = _noisy_returns([(3000, 6.0), (40, 1.0), (900, 6.0), (3000, 2.0)])
    steps = np.arange(x.size, dtype=np.int64)
    events = return_falls(steps, x, "episode_reward")
    assert len(events) == 1  # the 40-episode dip is no lasting fall
    assert abs(events[0].start - 3940) <= 70 and events[0].diverged and events[0].baseline > 5


def test_a_rising_return_is_quiet_and_a_recovered_fall_is_no_divergence() -> None:
    rising = _noisy_returns([(500, 1.0 + k) for k in range(10)], seed=1)
    assert return_falls(np.arange(rising.size, dtype=np.int64), rising, "r") == []
    dip = _noisy_returns([(2000, 8.0), (800, 3.0), (2000, 8.0)], seed=2)
    (event,) = return_falls(np.arange(dip.size, dtype=np.int64), dip, "r")
    assert event.recovered and not event.diverged and 2750 <= (event.recovery_step or 0) <= 2950


def _view(series: dict[str, tuple[np.ndarray, np.ndarray]]) -> RunView:
    return RunView(
        name="rl", series={k: Series(np.asarray(s, np.int64), np.asarray(v, float)) for k, (s, v) in series.items()}
    )


def test_a_td_loss_spanning_decades_is_no_spike_series_the_return_is_the_incident() -> None:
    rng = np.random.default_rng(3)
    n = 1500
    steps = np.arange(1, n + 1, dtype=np.int64) * 250
    td_loss = 10 ** rng.uniform(-7, -2, n)  # a DQN's TD loss: jitter over five decades
    ret = np.concatenate([np.linspace(0, 0.3, 500), np.full(300, 0.3), np.full(700, 0.01)])
    ret = np.clip(ret + rng.normal(0, 0.02, n), 0, 1)
    view = _view({"loss": (steps, td_loss), "rollout/ep_rew_mean": (steps, ret)})
    assert headline_return(view.series) == "rollout/ep_rew_mean"
    incidents = find_incidents(view)
    assert [i.primary.metric for i in incidents] == ["rollout/ep_rew_mean"]
    assert abs(incidents[0].start - 800 * 250) <= 15 * 250 and incidents[0].severity == "divergence"


def test_a_fall_that_overlaps_a_loss_incident_is_that_incident() -> None:
    rng = np.random.default_rng(4)
    n = 1000
    steps = np.arange(1, n + 1, dtype=np.int64) * 100
    loss = np.full(n, 0.05) * rng.uniform(0.9, 1.1, n)
    loss[600:608] = 1.5  # the critic's loss spikes, and the return falls with it
    ret = np.concatenate([np.full(600, 100.0), np.full(400, 40.0)]) + rng.normal(0, 3, n)
    incidents = find_incidents(_view({"loss": (steps, loss), "ep_rew_mean": (steps, ret)}))
    assert [i.primary.metric for i in incidents] == ["loss"]
