"""The passes over grouped incidents (stab_core/incident_passes.py): each reads a series beside the
loss; a run with none of those series keeps its incidents as they are (issue #32)."""

from __future__ import annotations

import numpy as np

from stab_core.incident_passes import after_grouping
from stab_core.incidents import Incident
from stab_core.runview import Series
from stab_core.spikes import detect_spikes


def _series(values: np.ndarray) -> Series:
    return Series(np.arange(1, values.size + 1, dtype=np.int64), values.astype(float))


def test_a_plain_loss_run_keeps_its_incidents_and_a_return_fall_is_added() -> None:
    rng = np.random.default_rng(5)
    loss = 2.0 + rng.normal(0, 0.01, 2000)
    loss[500:504] = 4.0  # before the return falls: an incident of its own
    events = detect_spikes(np.arange(1, 2001, dtype=np.int64), loss, metric="loss")
    incidents = [Incident("spike", (e,), {}) for e in events]
    assert incidents and after_grouping({"loss": _series(loss)}, incidents) == incidents
    ret = np.concatenate([np.full(1000, 50.0), np.full(1000, 5.0)]) + rng.normal(0, 1, 2000)
    passed = after_grouping({"loss": _series(loss), "episode_reward": _series(ret)}, incidents)
    assert [i.primary.metric for i in passed].count("episode_reward") == 1
    (fall,) = [i for i in passed if i.primary.metric == "episode_reward"]
    assert abs(fall.start - 1000) <= 40 and fall.severity == "divergence"
