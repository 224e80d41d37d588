"""Round 24, f30e (issue #32, speed; docs/performance.md goal 4): the sliding-median rules take exact medians only
of the windows a cheap bound leaves in doubt (``stab_core.window_medians``: ``median_floors``,
``window_medians_at``, ``lowest_window_median``), with the answers of the full sliding median.

Each helper is checked against ``np.median`` over every window on random and adversarial series (ties, NaN,
infinities, constant, shorter than the window), and each rule that uses them (lasting rises' level ratios, the
held rise and the slow climb at a run's end) against the full sliding median it replaced, written out here."""

from __future__ import annotations

import numpy as np
import pytest
from numpy.lib.stride_tricks import sliding_window_view

from stab_core.action_premises import run_facts
from stab_core.incidents import RECOVER_RATIO
from stab_core.lasting_rises import LEVEL_ROWS, RISE_RATIO, lasting_rises, level_ratios
from stab_core.run_end_rises import (
    END_CORROBORATED_RATIO,
    END_RECENT,
    HELD_END_LEVEL,
    HELD_END_RATIO,
    HELD_END_SAMPLES,
    LASTING_LEVEL,
    end_climbs,
    held_end_rises,
    lasting_at_end,
)
from stab_core.runview import RunView, Series
from stab_core.window_medians import lowest_window_median, median_floors, window_medians_at

WIDTHS = (3, 8, 16, 60, 63)


def _series(rng: np.random.Generator, kind: str, n: int) -> np.ndarray:
    if kind == "lognormal":
        return rng.lognormal(0.0, 0.5, n)
    if kind == "ties":
        return np.round(rng.lognormal(0.0, 0.3, n), 1)
    if kind == "constant":
        return np.full(n, 2.5)
    if kind == "falling":
        return np.exp(-np.arange(n) / max(n, 1) * 3.0) + rng.normal(0.0, 0.02, n)
    if kind == "heavy":
        return np.abs(rng.standard_cauchy(n)) * np.where(rng.random(n) < 0.5, -1.0, 1.0)
    x = rng.lognormal(0.0, 0.3, n)  # infinities of both signs
    x[rng.integers(0, n, max(1, n // 50))] = np.inf
    x[rng.integers(0, n, max(1, n // 80))] = -np.inf
    return x


KINDS = ("lognormal", "ties", "constant", "falling", "heavy", "infinite")


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("width", WIDTHS)
def test_floors_are_at_or_under_every_window_median(kind: str, width: int) -> None:
    rng = np.random.default_rng(width)
    for n in (width - 1, width, width + 1, 3 * width + 5, 4000):
        x = _series(rng, kind, n)
        floors = median_floors(x, width)
        assert floors.shape == (max(0, n - width + 1),)
        if n >= width:
            medians = np.median(sliding_window_view(x, width), axis=1)
            assert np.all(floors[~np.isnan(medians)] <= medians[~np.isnan(medians)])


def test_a_nan_bounds_nothing_but_leaves_the_other_windows_bounded() -> None:
    rng = np.random.default_rng(5)
    for share in (0.01, 0.3, 0.9):
        x = rng.lognormal(size=500)
        x[rng.random(x.size) < share] = np.nan
        x[rng.integers(0, x.size, 5)] = -np.inf
        for width in WIDTHS:
            floors = median_floors(x, width)
            medians = np.median(sliding_window_view(x, width), axis=1)
            ok = ~np.isnan(medians)
            assert not np.isnan(floors).any() and np.all(floors[ok] <= medians[ok])


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("width", WIDTHS)
def test_medians_at_chosen_windows_equal_numpy_bit_for_bit(kind: str, width: int) -> None:
    rng = np.random.default_rng(100 + width)
    x = _series(rng, kind, 20_000)
    x[rng.integers(0, x.size, 5)] = np.nan
    starts = np.sort(rng.choice(x.size - width + 1, 9_000, replace=False))  # more than one block
    assert np.array_equal(
        window_medians_at(x, width, starts), np.median(sliding_window_view(x, width)[starts], axis=1), equal_nan=True
    )
    assert window_medians_at(x[: width - 1], width, np.array([], dtype=np.int64)).shape == (0,)


@pytest.mark.parametrize("kind", [k for k in KINDS if k not in ("heavy", "infinite")])
@pytest.mark.parametrize("width", WIDTHS)
def test_lowest_window_median_is_numpys_first_argmin(kind: str, width: int) -> None:
    rng = np.random.default_rng(200 + width)
    for n in (width, width + 1, 2 * width + 3, 50_000):
        x = _series(rng, kind, n)
        medians = np.median(sliding_window_view(x, width), axis=1)
        assert lowest_window_median(x, width) == (int(np.argmin(medians)), float(medians.min()))


def test_lowest_window_median_of_a_stationary_loss_takes_few_exact_medians() -> None:
    # the point of the bound: on a long noisy plateau only windows near the lowest level stay in doubt
    rng = np.random.default_rng(7)
    x = 2.5 + 0.05 * rng.standard_normal(200_000)
    floors = median_floors(x, LASTING_LEVEL)
    index, low = lowest_window_median(x, LASTING_LEVEL)
    assert np.count_nonzero(floors <= low) < 0.01 * floors.size
    assert low == float(np.median(x[index : index + LASTING_LEVEL]))


def _exact_level_ratios(values: np.ndarray) -> np.ndarray:
    """The level ratios as main computed them: every row over the full sliding median."""
    out = np.full(values.size, np.nan)
    for i in range(32, min(LEVEL_ROWS, values.size)):
        out[i] = values[i] / float(np.median(values[:i]))
    if values.size > LEVEL_ROWS:
        medians = np.median(sliding_window_view(values, LEVEL_ROWS)[:-1], axis=1)
        with np.errstate(divide="ignore", over="ignore"):
            out[LEVEL_ROWS:] = values[LEVEL_ROWS:] / medians
    return out


@pytest.mark.parametrize("seed", range(12))
def test_level_ratios_from_the_rise_ratio_keep_every_row_a_rule_judges(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = int(rng.choice([40, 61, 300, 5000]))
    values = [rng.lognormal(0.0, 0.6, n), np.round(rng.lognormal(0.0, 0.2, n), 1) + 0.1, rng.chisquare(1, n) + 1e-9]
    x = values[seed % 3]
    exact, judged = _exact_level_ratios(x), level_ratios(x, RISE_RATIO)
    assert np.array_equal(level_ratios(x), exact, equal_nan=True)  # no bound asked: every ratio exact
    assert np.array_equal(np.isfinite(judged), np.isfinite(exact))
    up = np.nan_to_num(exact, nan=0.0) >= RISE_RATIO
    assert np.array_equal(np.nan_to_num(judged, nan=0.0) >= RISE_RATIO, up)
    assert np.array_equal(judged[up], exact[up])
    lasting_rises(x)  # runs on the bounded ratios


def test_a_noisy_loss_with_a_lasting_rise_is_still_found() -> None:
    rng = np.random.default_rng(3)
    x = rng.lognormal(0.0, 0.35, 3000)
    x[2000:2006] *= 4.0  # six rows up together, four times the level
    rises = lasting_rises(x)
    assert any(r.first <= 2000 <= r.last for r in rises)


def _held_end_first(x: np.ndarray) -> int | None:
    """Main's held rise at the end: the first start over every full sliding median of HELD_END_LEVEL."""
    levels = np.median(sliding_window_view(x[:-1], HELD_END_LEVEL), axis=1)
    suffix_low = np.minimum.accumulate(x[::-1])[::-1]
    starts = np.arange(HELD_END_LEVEL, x.size - HELD_END_SAMPLES + 1)
    base = levels[starts - HELD_END_LEVEL]
    held = np.flatnonzero((base > 0) & (suffix_low[starts] >= HELD_END_RATIO * base))
    return int(starts[held[0]]) if held.size else None


def _end_climb_first(x: np.ndarray) -> int | None:
    """Main's slow climb at the end (corroborated from anywhere): its first sample over the full sliding medians."""
    held = np.median(sliding_window_view(x, LASTING_LEVEL), axis=1)
    best = int(np.argmin(held))
    level = float(held[best])
    if not (level > 0 and float(held[-1]) >= END_CORROBORATED_RATIO * level):
        return None
    recent = np.median(sliding_window_view(x, END_RECENT), axis=1)
    after = best + LASTING_LEVEL
    back = np.flatnonzero(recent[after:] <= RECOVER_RATIO * level)
    first = after + (int(back[-1]) + 1 if back.size else 0)
    if x.size - first < LASTING_LEVEL or not lasting_at_end(x[:first], x[first:]):
        return None
    return first


@pytest.mark.parametrize("seed", range(40))
def test_the_end_rises_start_where_the_full_sliding_medians_put_them(seed: int) -> None:
    rng = np.random.default_rng(1000 + seed)
    n = int(rng.choice([30, 200, 700, 4000]))
    base = np.exp(-np.arange(n) / n * 3.0) + 0.2
    shape = seed % 4
    if shape == 1:
        base = base + np.linspace(0.0, 1.0, n) ** 4  # a slow climb to the end
    elif shape == 2:
        base[-int(rng.integers(8, 40)) :] *= 2.0  # a held rise at the end
    elif shape == 3:
        base = np.round(base, 1)  # ties
    x = base * rng.lognormal(0.0, 0.05 if seed % 2 else 0.3, n)
    steps = np.arange(n, dtype=np.int64) * 10
    held = held_end_rises(steps, x)
    first = _held_end_first(x) if n >= HELD_END_LEVEL + HELD_END_SAMPLES else None
    assert [e.start for e in held] == ([int(steps[first])] if first is not None else [])
    climb = end_climbs(steps, x, lambda step: True)
    start = _end_climb_first(x) if n >= 3 * LASTING_LEVEL else None
    assert [e.start for e in climb] == ([int(steps[start])] if start is not None else [])


@pytest.mark.parametrize("n", [2, 3, 1000, 1001])
def test_the_logging_interval_of_a_log_start_is_the_median_gap(n: int) -> None:
    # the gaps' median is taken on floats (numpy partitions many equal int64 gaps slowly): the same number
    rng = np.random.default_rng(n)
    steps = np.cumsum(rng.choice([1, 1, 1, 4, 7], n)).astype(np.int64) + 2**40
    view = RunView(name="gaps", series={"loss": Series(steps, rng.lognormal(size=n))})
    facts = run_facts(view)
    assert facts.first_step == int(steps[0])
    assert facts.log_interval == float(np.median(np.diff(steps)))
