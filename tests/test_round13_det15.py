"""Issue #32 (docs/diagnosis.md, "Non-finite values"): a per-step loss's two-log jumps are its noise; a lone non-finite
grad norm the loss never felt is a skipped step."""

from __future__ import annotations

import numpy as np

from stab_core.analysis import analyze_run
from stab_core.runview import RunView, Series


def _shown(view: RunView) -> list[tuple[str, int, str]]:
    return [(d["metric"], d["start"], d["severity"]) for d in analyze_run(view).spike_dicts()]


def _noisy_per_step_loss(seed: int, n: int = 400) -> np.ndarray:
    """A loss logged every step, decaying 1.0 -> ~0.3, whose per-batch noise holds one- and two-log
    outliers 1.5-2.5x its level every few dozen steps (a fine-tune's per-step log)."""
    rng = np.random.default_rng(seed)
    steps = np.arange(n)
    loss = 0.3 + 0.7 * np.exp(-steps / 60.0)
    loss = loss * (1.0 + rng.uniform(-0.08, 0.08, n))
    for at in range(20, n - 2, 23):
        loss[at] *= 2.2
        if at % 2:
            loss[at + 1] *= 1.7
    return loss


def test_a_two_log_jump_of_a_per_step_loss_whose_noise_shows_many_is_a_blip() -> None:
    """A loss logged every step with a one-log outlier (2.2x) three steps before a jump to 3.5x that stands
    2.0x at the next log, back at the one after, in a run whose noise shows such one- and two-log jumps
    every few dozen steps: grouped, five logs and five steps from the outlier to the return, more than the
    trend's three-sample blip; but the jump itself is one more of the run's own (two logs, over within five
    steps): a blip, not a spike shown by default."""
    loss = _noisy_per_step_loss(3)
    loss[259] = loss[258] * 2.2
    loss[262] = loss[261] * 3.5
    loss[263] = loss[261] * 2.0
    steps = np.arange(1, loss.size + 1)
    shown = [s for s in _shown(RunView("per_step", {"loss": Series(steps, loss)})) if s[2] != "blip"]
    assert shown == []


def test_the_same_jump_logged_every_ten_steps_stays_a_spike() -> None:
    """The same shape logged every 10 steps lost 20 steps: more than a blip's few steps (a spike)."""
    loss = _noisy_per_step_loss(3)
    loss[262] = loss[261] * 3.5
    loss[263] = loss[261] * 2.0
    steps = np.arange(1, loss.size + 1) * 10
    shown = _shown(RunView("every_ten", {"loss": Series(steps, loss)}))
    assert ("loss", 2630, "spike") in shown


def _amp_run(nan_at: list[int]) -> RunView:
    rng = np.random.default_rng(5)
    n = 120
    steps = np.arange(1, n + 1) * 15
    loss = 2.5 * np.exp(-np.arange(n) / 40.0) + 0.5 + rng.uniform(-0.03, 0.03, n)
    grad = 6.0 + rng.uniform(-0.8, 0.8, n)
    for i in nan_at:
        grad[i] = np.nan
    return RunView("amp", {"loss": Series(steps, loss), "grad_norm": Series(steps, grad)})


def test_a_lone_nan_grad_norm_beside_a_finite_loss_is_a_skipped_step() -> None:
    """fp16 AMP with a dynamic loss scaler: the grad norm is nan at one logged step mid-run and finite at the
    next, the loss finite throughout: the scaler skipped that update. A blip, not a divergence; and nan at
    the first logged step only (the scaler's first-step overflow) is no incident."""
    shown = _shown(_amp_run([0, 60]))
    assert ("grad_norm", 15, "divergence") not in shown and all(s[1] != 15 for s in shown)
    assert [s for s in shown if s[1] == 61 * 15] == [("grad_norm", 915, "blip")]


def test_a_nan_grad_norm_that_stays_or_a_nan_loss_still_diverges() -> None:
    """Two nan grad norms in a row, or one beside a nan loss, is no skipped step; it diverges
    (docs/diagnosis.md, "Spike detector") only where the series never comes back: back finite in its band at the next
    log, it is not."""
    shown = _shown(_amp_run([60, 61]))
    assert ("grad_norm", 915, "divergence") not in shown
    assert ("grad_norm", 915, "divergence") in _shown(_amp_run(list(range(60, 120))))  # nan to the end
    view = _amp_run([60])
    loss = view.series["loss"]
    values = loss.values.copy()
    values[60] = np.nan
    view = RunView("amp_nan_loss", {"loss": Series(loss.steps, values), "grad_norm": view.series["grad_norm"]})
    assert not any(s[2] == "divergence" for s in _shown(view))


def test_an_early_rise_is_never_said_recovered_at_its_peak() -> None:
    """A loss logged every 20 iterations that falls on every record from 86 to 7.1, then rises to 1.7x and
    2.1x that foot and is back under it at the next record: its trend band, fitted on the steep fall, is
    wider than the rise and holds the peak itself; the loss is back at the record after the peak, not at it."""
    steps = np.arange(19, 19 + 20 * 40, 20)
    rng = np.random.default_rng(2)
    loss = np.array([86.5, 40.0, 20.0, 12.0, 9.0, 7.07, 11.9, 14.6, 4.3, *(3.0 * (1 + rng.uniform(-0.1, 0.1, 31)))])
    (item,) = [d for d in analyze_run(RunView("d2", {"loss": Series(steps, loss)})).spike_dicts() if d["start"] < 200]
    assert item["peak"] == 159
    (recovery,) = [c for c in item["claims"] if c["kind"] == "recovery"]
    assert "step 159" not in recovery["text"] and "179" in recovery["text"]
