"""A grad-norm outlier the loss never rose above its own recent scatter for is a blip (issue #32; docs/diagnosis.md,
"Severity": stab_core/unfelt_outliers.py). Synthetic runs of the shape a GPT pre-training console shows: a per-batch
loss whose few easy batches just before the outlier tilt the trend's fitted line down, so the loss's plain return
to its usual level reads as leaving the trend's band."""

from __future__ import annotations

import numpy as np

from stab_core.analysis import find_incidents
from stab_core.runview import RunView, Series
from stab_core.unfelt_outliers import LEVEL_SAMPLES, MIN_LEVEL_SAMPLES, loss_felt

N = 1500


def _run(seed: int, loss_rise: float = 0.0, rise_samples: int = 0) -> RunView:
    rng = np.random.default_rng(seed)
    steps = np.arange(1, N + 1, dtype=np.int64)
    loss = 3.35 + rng.normal(0, 0.04, N)
    loss[888:900] = 3.1 + rng.normal(0, 0.03, 12)  # a dozen easy batches just before the outlier
    loss[900 : 900 + rise_samples] += loss_rise
    grad = 0.3 + rng.normal(0, 0.015, N)
    grad[900], grad[901] = 0.65, 0.45
    return RunView("gpt", {"loss": Series(steps, loss), "grad_norm": Series(steps, grad)}, {})


def _at_outlier(view: RunView) -> list[tuple[str, str]]:
    return [(i.primary.metric, i.severity) for i in find_incidents(view) if 880 <= i.start <= 910]


def test_a_grad_norm_outlier_the_loss_never_felt_is_a_blip() -> None:
    for seed in range(4):
        assert _at_outlier(_run(seed)) == [("grad_norm", "blip")], seed


def test_a_grad_norm_outlier_the_loss_followed_is_still_shown() -> None:
    for seed in range(4):
        found = _at_outlier(_run(seed, loss_rise=0.8, rise_samples=6))
        assert found and all(severity != "blip" for _, severity in found), (seed, found)


def test_the_loss_felt_question_needs_a_level_and_a_sample_inside() -> None:
    steps = np.arange(1, 101, dtype=np.int64)
    flat = Series(steps, np.full(100, 2.0) + np.tile([0.0, 0.02], 50))
    assert loss_felt(flat, 60, 62) is False
    assert loss_felt(flat, MIN_LEVEL_SAMPLES - 1, MIN_LEVEL_SAMPLES + 2) is None  # too few samples before
    assert loss_felt(flat, MIN_LEVEL_SAMPLES + 1, MIN_LEVEL_SAMPLES + 2) is False
    assert loss_felt(Series(steps[::10], flat.values[::10]), 55, 58) is None  # no loss logged inside
    high = Series(steps, np.where(steps == 61, 2.5, flat.values))
    assert loss_felt(high, 60, 62) is True
    nan = Series(steps, np.where(steps == 61, np.nan, flat.values))
    assert loss_felt(nan, 60, 62) is True
    assert LEVEL_SAMPLES >= MIN_LEVEL_SAMPLES


def test_a_last_step_grad_norm_outlier_stays_what_the_severity_rules_call_it() -> None:
    # the log ends on the outlier: nothing says it was absorbed, whatever the loss did
    view = _run(1)
    cut = {m: Series(s.steps[:902], s.values[:902]) for m, s in view.series.items()}
    assert _at_outlier(RunView("gpt", cut, {})) == [("grad_norm", "spike")]
