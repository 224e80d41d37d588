"""Issue #32 (docs/diagnosis.md, "Early and short runs"): det23's early-rise rules 1 and 3, narrowed to what separates
their true hits (stab_core/outvoted_rises.py, stab_core/given_back.py). Synthetic first samples of a loss, own
numbers."""

from __future__ import annotations

import numpy as np

from stab_core.early_rise_rules import early_rise_events
from stab_core.given_back import progress_given_back
from stab_core.outvoted_rises import outvoted_early_rises

# --- an early rise seen past a one-row blip, kept only when it lasts (stab_core/outvoted_rises.py)

Z = 6.0
HISTORY = 16


def _early(values: list[float]) -> list[int]:
    steps = np.arange(len(values), dtype=np.int64)
    return [e.start for e in early_rise_events(steps, np.array(values), HISTORY, "loss", Z)]


def _tail(seed: int, level: float, n: int = 40) -> list[float]:
    rng = np.random.default_rng(seed)
    return list(level * (1 + rng.normal(0, 0.03, n)))


def test_a_lasting_early_rise_after_a_one_row_blip_is_found() -> None:
    for seed in range(3):
        values = [0.70, 0.63, 4.40, 0.60, 0.58, 1.75, 1.45, 1.05, *_tail(seed, 0.56)]
        assert 5 in _early(values), seed  # the blip at row 2 is a rise of its own


def test_a_one_row_early_jump_after_calm_rows_stays_unflagged() -> None:
    for seed in range(3):
        values = [0.70, 0.63, 4.40, 0.60, 0.58, 1.75, 0.59, 0.57, *_tail(seed, 0.56)]
        assert 5 not in _early(values), seed


# --- an early rise judged by the share of the early fall it gives back (stab_core/given_back.py)


def test_a_rise_giving_back_most_of_the_early_fall_is_found_under_the_ratio_rule() -> None:
    for seed in range(3):
        values = [11.0, 10.1, 9.4, 9.0, 8.8, 9.3, 9.9, 10.4, 10.2, 9.8, 9.3, 8.9, 8.7, *_tail(seed, 8.5, 30)]
        found = _early(values)
        assert len(found) == 1 and 5 <= found[0] <= 7, (seed, found)


def test_a_rise_over_the_ratio_rule_is_left_to_it() -> None:
    # a restart's loss falls 30x in its first logs; a stretch 12x its level gives back a third of that
    # fall: the ratio rule (with its noise tests) judges it, not the share given back
    rng = np.random.default_rng(0)
    after = list(0.002 * np.exp(rng.normal(0, 0.3, 40)))
    values = [0.06, 0.02, 0.006, 0.0025, 0.002, 0.0021, 0.024, 0.025, 0.023, *after]
    assert progress_given_back(np.arange(len(values)), np.array(values), HISTORY, Z, []) == []


def test_the_top_of_a_noisy_start_is_no_outlier_to_leave_out() -> None:
    # a per-batch loss swinging +-30%: its highest early sample is 1.5x the others' median, not a blip
    values = [1.30, 1.03, 0.87, 0.85, 1.42, 1.49, 1.27, 1.35, 1.22, 1.50, 1.41, 0.83, *_tail(0, 1.1)]
    steps = np.arange(len(values), dtype=np.int64)
    assert outvoted_early_rises(steps, np.array(values), HISTORY, Z, []) == []
