"""Logs shaped as issue #32's batch 8 (tuned on this round): spikes late in a memorising run, blips
graded against the blip rule, recovery against the pre-incident trend, causes whose signature is in
the log, and what an incident's text says. Each fixture is written here from the shape, with the
numbers the batch's logs show, not read from them."""

from __future__ import annotations

import numpy as np

from stab_core.analysis import analyze_run, find_incidents
from stab_core.recent_level import recent_level_jumps
from stab_core.runview import RunView, Series
from stab_core.spike_params import LOSS_SPIKE_PARAMS

MEMORISING_SPIKES = {600: 1.9, 660: 6.2, 730: 3.3, 790: 6.7, 860: 5.2, 940: 6.0}
"""Step -> how many times the level before it the loss jumps to (a wordplay char-GPT memorising
shakespeare_char: 0.04-0.08 -> 0.15-0.35)."""


def memorising_run(spikes: dict[int, float] | None = None, seed: int = 3) -> tuple[np.ndarray, np.ndarray]:
    """A loss logged every 10 steps to 1,000 that falls smoothly 3.2 -> 0.08 by step 590 (x0.94 a sample
    for most of it, faster at the end, as a model memorising its data does), then on to ~0.035 with 5%
    batch noise; each spike of ``spikes`` lasts two samples (x and x/2.5) and is back at the third."""
    rng = np.random.default_rng(seed)
    steps = np.arange(10, 1001, 10)
    fall = 3.2 * np.exp(-np.linspace(0.0, 3.7, 59))  # 3.2 -> 0.079 at step 590
    late = 0.079 * (0.035 / 0.079) ** np.linspace(0.0, 1.0, steps.size - 59) ** 0.5
    loss = np.concatenate([fall, late]) * (1 + rng.normal(0, 0.05, steps.size))
    for step, ratio in (spikes or {}).items():
        i = int(np.searchsorted(steps, step))
        before = loss[i - 1]
        loss[i], loss[i + 1] = ratio * before, ratio * before / 2.5
    return steps, loss


def _view(steps: np.ndarray, loss: np.ndarray, **series: np.ndarray) -> RunView:
    return RunView(
        name="shape",
        series={"loss": Series(steps, loss), **{k: Series(steps, v) for k, v in series.items()}},
        meta={},
    )


# ------------------------------------------------------------------ item 1: spikes after a steep fall


def test_spikes_late_in_a_memorising_run_are_found() -> None:
    """The detector's 63-sample window still holds the fall 1.4 -> 0.08 (its median ~1.7, 20x the loss
    now): a jump to 6x what the run holds sat far below it and went unseen."""
    steps, loss = memorising_run(MEMORISING_SPIKES)
    incidents = find_incidents(_view(steps, loss))
    for step in MEMORISING_SPIKES:
        hits = [i for i in incidents if i.start - 10 <= step <= i.until + 10]
        assert hits, f"spike at {step} missed: {[(i.start, i.until) for i in incidents]}"
        assert hits[0].primary.metric == "loss"
        # two logged samples 10 steps apart are 20 steps lost: more than a blip's 5 steps
        assert hits[0].severity == "spike"
    assert len(incidents) == len(MEMORISING_SPIKES)


def test_the_same_memorising_run_without_spikes_is_quiet() -> None:
    """The rule is relative to the run's own level and noise: a smooth steep fall and 5% batch noise at
    a loss of 0.04 raise nothing, for any of several noise draws."""
    for seed in range(6):
        steps, loss = memorising_run(seed=seed)
        assert find_incidents(_view(steps, loss)) == [], seed


def test_recent_level_rule_is_scale_free() -> None:
    """The same run at 100x the loss (a level of 4 rather than 0.04) gets the same verdicts: the rule
    measures ratios against ratio noise."""
    steps, loss = memorising_run(MEMORISING_SPIKES)
    small = [e.start for e in recent_level_jumps(steps, loss, LOSS_SPIKE_PARAMS)]
    large = [e.start for e in recent_level_jumps(steps, 100.0 * loss, LOSS_SPIKE_PARAMS)]
    assert small == large and len(small) == len(MEMORISING_SPIKES)


def test_recent_level_rule_stays_off_where_the_window_is_the_level() -> None:
    """A flat noisy loss (the window median is the run's level): the rule does not look; the
    detector's own thresholds judge it."""
    rng = np.random.default_rng(0)
    steps = np.arange(1, 2001)
    loss = 2.5 * (1 + rng.normal(0, 0.08, steps.size))
    assert recent_level_jumps(steps, loss, LOSS_SPIKE_PARAMS) == []


def test_no_spike_is_judged_across_a_gap_in_the_steps() -> None:
    """A log pasting steps 1-50 (loss ~6) and 4,950-4,999 (loss ~0.015 with 10% noise) of a run: the
    first samples after the gap have no history at their level; a 1.24x wiggle there is no spike."""
    rng = np.random.default_rng(1)
    steps = np.concatenate([np.arange(1, 51), np.arange(4950, 5000)])
    loss = np.concatenate([6.0 + rng.normal(0, 0.1, 50), 0.015 * (1 + rng.normal(0, 0.1, 50))])
    loss[50:53] = (0.0175, 0.016, 0.0151)
    loss[53] = 0.0198
    assert [i for i in find_incidents(_view(steps, loss)) if i.start >= 4950] == []


# ------------------------------------------------------------------ item 5: what an incident's text says


def test_a_finite_run_s_incident_text_does_not_say_nan() -> None:
    """Every incident carries the tree's questions; on a run with no non-finite value, "NaN" in the
    numerical question read as if the run had one."""
    steps, loss = memorising_run(MEMORISING_SPIKES)
    analysis = analyze_run(_view(steps, loss))
    texts: list[str] = []
    for item in analysis.spike_dicts():
        texts += [visit["question"] for visit in item["path"]]
        texts += [claim["text"] for claim in item["claims"]]
        texts += list(item["actions"])
    assert texts and not [t for t in texts if "nan" in t.lower()]
