"""The overview's panels draw the attempts a resume replaced, not only the replay (issue #31)."""

from __future__ import annotations

import numpy as np

from ingest.store import SeriesData
from pages.parts.charts import Panel, panels_figure
from stab_core.runview import RunEvent


def _series(steps: np.ndarray, values: np.ndarray) -> SeriesData:
    return SeriesData("loss", steps, values, values, values, "run", bucketed=False)


def test_an_abandoned_attempt_is_drawn_grey_under_the_replay() -> None:
    steps = np.arange(1, 201)
    replay = np.full(200, 2.0)
    attempt = [[float(s) for s in range(101, 131)], [2.6] * 29 + [None]]
    rollback = RunEvent(100, "rollback", "resumed from 100", {"replayed_from": 101, "replayed_to": 130,
                                                               "abandoned": {"loss": [attempt]}})  # fmt: skip
    fig = panels_figure([Panel("loss", "loss", [("loss", _series(steps, replay))])], events=[rollback])
    grey = [t for t in fig.data if t.name == "loss: abandoned attempts"]
    assert len(grey) == 1
    assert list(grey[0].x) == attempt[0]
    assert grey[0].y[0] == 2.6 and np.isnan(grey[0].y[-1])  # a non-finite value is a gap, not a zero
    # drawn before (under) the run's own line
    names = [t.name for t in fig.data]
    assert names.index("loss: abandoned attempts") < names.index("loss")


def test_no_abandoned_line_without_kept_values() -> None:
    steps = np.arange(1, 51)
    events = [RunEvent(20, "rollback", "resumed", {"replayed_from": 21, "replayed_to": 30})]
    fig = panels_figure([Panel("loss", "loss", [("loss", _series(steps, np.ones(50)))])], events=events)
    assert not [t for t in fig.data if "abandoned" in (t.name or "")]
