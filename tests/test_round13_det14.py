"""Round 13 (det14, issue #32): early rises from the foot of a fall, and early rises that last a few logs."""

from __future__ import annotations

import numpy as np

from stab_core.early_rises import robust_early_rises
from stab_core.spike_params import LOSS_SPIKE_PARAMS

Z = LOSS_SPIKE_PARAMS.z_threshold
HISTORY = LOSS_SPIKE_PARAMS.min_history


def _rises(loss: np.ndarray) -> list[tuple[int, float]]:
    steps = np.arange(1, loss.size + 1)
    return [(e.start, round(e.ratio, 2)) for e in robust_early_rises(steps, loss, HISTORY, "loss", Z)]


def test_a_rise_from_the_foot_of_a_fall_is_measured_from_that_foot() -> None:
    """A loss that fell four samples in a row (9.9 -> 8.8 -> 8.4 -> 7.8) has reached 7.8: a jump to 10.8
    that stays above 8.6 is 1.38x what it had reached, not 1.28x the lagging median of three (8.4)."""
    rng = np.random.default_rng(0)
    plateau = [11.0, 11.0, 10.1, 9.7, 9.9, 10.0, 9.9]
    after = 9.0 + rng.uniform(-0.4, 0.3, 13)
    loss = np.array([*plateau, 8.8, 8.4, 7.8, 10.8, 10.4, *after])
    assert _rises(loss) == [(11, 1.38)]
    # one lucky batch amid a level is no foot of a fall: the same jump after 9.9, 7.8 (no steady fall) is noise
    lucky = np.array([*plateau, 9.8, 9.9, 7.8, 10.8, 10.4, *after])
    assert _rises(lucky) == []


def test_an_early_rise_that_lasts_three_logs_after_a_fall_is_no_noise() -> None:
    """A loss falling from its first log (1.36 -> 0.16 over five logs) that then stands 2.1x, 1.6x, 1.4x
    that level for three logs in a row has a lasting early rise, though its later per-batch swings
    (0.12-0.24, a single log up to 1.5x) are wide; one log at 2.1x back at the next is that swing."""
    rng = np.random.default_rng(1)
    fall = [1.36, 0.47, 0.27, 0.20, 0.158]
    noise = 0.158 + rng.uniform(-0.04, 0.05, 100)
    noise[::9] = 0.24  # a single log at 1.5x every few logs: the run's own swing
    lasting = np.array([*fall, 0.33, 0.26, 0.22, 0.156, *noise])
    assert [start for start, _ in _rises(lasting)] == [6]
    once = np.array([*fall, 0.33, 0.156, 0.16, 0.156, *noise])
    assert _rises(once) == []


def test_a_loss_near_its_level_but_never_back_on_its_trend_is_not_said_recovered() -> None:
    """A loss that fell to 7.8, was knocked to 10.8 and then sat at 8.5-9.3 to the log's end came within the
    detector's recover ratio of 7.8 but never back into its trend's band: the progress is not regained, so
    "Recovered at step 22: back near its level" is not said (round 13)."""
    from stab_core.analysis import analyze_run
    from stab_core.runview import RunView, Series

    rng = np.random.default_rng(0)
    plateau = [11.0, 11.0, 10.1, 9.7, 9.9, 10.0, 9.9]
    after = 9.0 + rng.uniform(-0.45, 0.3, 13)
    loss = np.array([*plateau, 8.8, 8.4, 7.8, 10.8, 10.4, *after])
    steps = np.arange(1, loss.size + 1)
    (item,) = analyze_run(RunView("fall", {"loss": Series(steps, loss)})).spike_dicts()
    (recovery,) = [c for c in item["claims"] if c["kind"] == "recovery"]
    assert item["loss_recovered_at"] is None and recovery["holds"] is True
    assert recovery["text"].startswith("Not back: from step") and "Recovered" not in recovery["text"]
