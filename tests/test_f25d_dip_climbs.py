"""Issue #32 (docs/diagnosis.md, "Early and short runs"): a climb is measured over the level the loss held, not over a
dip below it.

A per-batch loss that sits at ~2.87 (+-5 %) and dips for a few batches to ~2.2 (a run of easy batches)
sets the climb detector's lowest smoothed level at the dip; the loss back at 2.87 is 1.3x that floor and
was reported as a "climb", and the rest of the run as a divergence that never came back to 2.2. Known
answers from the synthetic series below (no corpus log)."""

from __future__ import annotations

import numpy as np

from stab_core.analysis import find_incidents
from stab_core.incidents import detect_climbs, return_from_dip
from stab_core.runview import RunView, Series


def _noisy_level(n: int, level: float, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return level * (1.0 + 0.04 * rng.standard_normal(n))


def _dipped(seed: int = 3) -> np.ndarray:
    x = _noisy_level(3000, 2.87, seed)
    x[1500:1508] = [2.51, 2.28, 2.13, 2.20, 2.54, 2.44, 2.18, 2.30]  # eight easy batches in a row
    return x


def test_the_loss_back_at_its_level_after_a_dip_is_no_climb() -> None:
    x = _dipped()
    steps = np.arange(x.size, dtype=np.int64)
    assert detect_climbs(steps, x) == []
    view = RunView(name="dip", series={"loss": Series(steps, x)})
    assert [i for i in find_incidents(view) if i.kind == "climb"] == []


def test_a_climb_over_the_level_held_before_a_dip_is_still_one() -> None:
    x = _dipped()
    x[2000:] *= 1.6  # a lasting rise to 1.6x the level held before the dip: a climb
    steps = np.arange(x.size, dtype=np.int64)
    (event,) = detect_climbs(steps, x)
    assert event.peak >= 2000 and not event.recovered


def test_a_loss_still_falling_before_its_lowest_point_holds_no_level() -> None:
    # falling 6 -> 2 over the 63 samples before its lowest one, then back at 3: the fall is progress, not a
    # level held, and 3 is a climb over 2 (1.5x)
    fall = np.linspace(6.0, 2.0, 63)
    assert not return_from_dip(np.concatenate([fall, [2.0]]), 63, np.full(20, 3.0))
    # held at 2.87 before the dip, back at 2.9: a return
    held = np.full(63, 2.87)
    assert return_from_dip(np.concatenate([held, [2.2]]), 63, np.full(20, 2.9))
    # held at 2.87, then at 3.4 (1.18x): more than a return
    assert not return_from_dip(np.concatenate([held, [2.2]]), 63, np.full(20, 3.4))
