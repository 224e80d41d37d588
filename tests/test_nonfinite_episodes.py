"""A loss non-finite on consecutive logged samples, then finite again, is an episode to report; a lone
non-finite sample the run came straight back from stays a blip (issue #32; docs/diagnosis.md, "Non-finite values":
stab_core/nonfinite_episodes.py). Synthetic per-epoch results tables: a box loss falling with noise over
300 epochs, NaN on one or two consecutive rows mid-run."""

from __future__ import annotations

import numpy as np

from stab_core.analysis import find_incidents
from stab_core.nonfinite_episodes import longest_nonfinite
from stab_core.runview import RunView, Series


def _epochs(nan_rows: list[int]) -> RunView:
    rng = np.random.default_rng(0)
    epochs = np.arange(300, dtype=np.int64)
    loss = 0.107 - 0.05 * epochs / 300 + rng.normal(0.0, 0.002, epochs.size)
    loss[nan_rows] = np.nan
    return RunView("yolo", {"loss": Series(epochs, loss)}, {})


def _at(view: RunView, epoch: int) -> list[str]:
    return [i.severity for i in find_incidents(view) if i.start <= epoch <= i.until]


def test_two_consecutive_nan_epochs_are_shown() -> None:
    assert _at(_epochs([176, 177]), 176) == ["spike"]


def test_a_lone_nan_epoch_stays_a_blip() -> None:
    assert _at(_epochs([167]), 167) == ["blip"]


def test_longest_nonfinite() -> None:
    view = _epochs([10, 20, 21, 22, 40])
    loss = view.series["loss"]
    assert longest_nonfinite(loss, 0, 299) == 3
    assert longest_nonfinite(loss, 30, 299) == 1
