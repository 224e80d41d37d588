"""Round 14 (det17, issue #32): grad-norm outliers a few samples apart that the detector merges, each back
in the grad norm's band at the next sample and unfelt by the loss, are as many one-sample blips."""

from __future__ import annotations

import numpy as np

from stab_core.analysis import analyze_run
from stab_core.runview import RunView, Series
from stab_core.spikes import detect_spikes


def _shown(view: RunView) -> list[tuple[str, int, str]]:
    return [(d["metric"], d["start"], d["severity"]) for d in analyze_run(view).spike_dicts()]


def _sft_run(outliers: dict[int, float]) -> RunView:
    """A per-step SFT log: a noisy per-batch loss (0.8-1.5 around 1.1) and a grad norm ~7 whose
    one-step outliers are ``outliers`` (index -> times its level)."""
    rng = np.random.default_rng(11)
    n = 400
    steps = np.arange(1, n + 1)
    loss = 1.1 * (1.0 + rng.uniform(-0.25, 0.25, n))
    grad = 7.0 * (1.0 + rng.uniform(-0.1, 0.1, n))
    for at, times in outliers.items():
        grad[at] *= times
    return RunView("sft", {"loss": Series(steps, loss), "grad_norm": Series(steps, grad)})


def test_merged_one_sample_grad_norm_outliers_count_their_longest_stretch_out() -> None:
    """Outliers at 300, 302 and 305, each back in the band at the next sample: one event (the detector
    joins detections within ``merge_gap`` samples of a return) of 6 samples whose longest stretch out is 1."""
    view = _sft_run({300: 50.0, 302: 4.0, 305: 8.0})
    grad = view.series["grad_norm"]
    events = [e for e in detect_spikes(grad.steps, grad.values, "grad_norm") if e.start == 301]
    assert [(e.n_samples, e.longest_out) for e in events] == [(6, 1)]


def test_grad_norm_outliers_the_loss_never_felt_are_blips_though_merged() -> None:
    """A 50x grad-norm outlier, then 4x and 8x ones two and five samples later, each back at the next
    sample, the per-batch loss inside its band: grouped, six samples from the first to the last return
    (more than a blip's three samples and five steps) but each outlier lasted one sample: blips."""
    shown = [s for s in _shown(_sft_run({300: 50.0, 302: 4.0, 305: 8.0})) if s[2] != "blip"]
    assert shown == []

