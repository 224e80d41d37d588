"""Round 23, f29e (issue #32): a one-step outlier the run is back from at the next logged step is a blip.

A per-batch loss logged every 10 steps (a segmentation console's) jumps 3-5x for one line and is back at the
level it had reached on the next: one batch, however tall (under the 100x of a blow-up) and however sparse
the log. One whose next line is back only near the top of the noise band, or whose trend rests on few
samples, stays a spike. Series of each shape are written here, not read from the corpus."""

from __future__ import annotations

import numpy as np

from stab_core.analysis import find_incidents
from stab_core.runview import RunView, Series
from stab_core.severity import classify

NOISE = np.array([0.0, 0.02, -0.015, 0.01, -0.02, 0.015, -0.01, 0.005])
"""A per-batch loss's spread around its level, as a repeating pattern (no outlier of its own)."""


def _one_line_jump(after: float) -> RunView:
    """A flat loss of 0.30 logged every 10 steps for 60 lines, 1.40 (4.7x) at step 610, ``after`` at 620,
    then 0.30 again."""
    steps = 10 * np.arange(1, 101)
    loss = 0.30 + np.resize(NOISE, steps.size)
    loss[60], loss[61] = 1.40, after
    return RunView(name="shape", series={"loss": Series(steps, loss)}, meta={})


def _severity_at(view: RunView, step: int) -> list[str]:
    return [i.severity for i in find_incidents(view) if i.start == step]


def test_a_sparse_one_line_outlier_back_at_its_level_at_the_next_line_is_a_blip() -> None:
    """4.7x for one line of a log every 10 steps, the next line 0.30 (the level): one batch, hidden."""
    assert _severity_at(_one_line_jump(0.30), 610) == ["blip"]


def test_the_next_line_back_only_near_the_top_of_the_band_leaves_it_a_spike() -> None:
    """The same jump, but the next line 0.34 (inside the band, about 2.5 sigmas over the level): the unlogged
    steps around it may have stood high too, so it stays shown."""
    assert _severity_at(_one_line_jump(0.34), 610) == ["spike"]


def test_one_batch_clears_only_a_settled_one_sample_outlier_under_a_blow_up() -> None:
    """``one_batch`` lifts the 2x bound of a sparse one-sample blip and nothing else: an unsettled trend, a
    second sample out, a validation loss that rose with it or 100x its level keep it a spike."""
    one = dict(diverged=False, loss_samples=1, member_samples=1, blip_samples=3, steps_lost=10, settled=True)
    assert classify(**one, peak_ratio=4.7, one_batch=True) == "blip"
    assert classify(**one, peak_ratio=4.7, one_batch=False) == "spike"
    assert classify(**one, peak_ratio=float("inf"), one_batch=True) == "blip"  # one NaN line, back at the level
    assert classify(**{**one, "settled": False}, peak_ratio=4.7, one_batch=True) == "spike"
    assert classify(**{**one, "loss_samples": 2}, peak_ratio=4.7, one_batch=True) == "spike"
    assert classify(**one, peak_ratio=4.7, one_batch=True, held_out_rose=True) == "spike"
    assert classify(**one, peak_ratio=150.0, one_batch=True) == "spike"
