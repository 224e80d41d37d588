"""Issue #32 (docs/diagnosis.md, "Severity"): grad-norm outliers a few samples apart that the detector merges, each back
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


def _gan(discriminator_end: float, generator_end: float = 1.6, with_discriminator: bool = True) -> RunView:
    """A GAN's log every 100 iterations: the generator loss (the run's loss) ~1.0 for 150 records, then
    drifting up to ``generator_end`` by the end (1,000 records); the discriminator loss 1.2 -> ``discriminator_end``."""
    rng = np.random.default_rng(7)
    n = 1000
    steps = np.arange(1, n + 1) * 100
    ramp = np.clip((np.arange(n) - 150) / (n - 150), 0.0, 1.0)
    gen = (1.0 + (generator_end - 1.0) * ramp) * (1.0 + rng.uniform(-0.05, 0.05, n))
    dis = (1.2 + (discriminator_end - 1.2) * ramp) * (1.0 + rng.uniform(-0.05, 0.05, n))
    series = {"loss": Series(steps, gen), "loss_gen": Series(steps, gen)}
    if with_discriminator:
        series["loss_dis"] = Series(steps, dis)
    return RunView("gan", series)


def _said(view: RunView) -> list[tuple[str, str, list[str]]]:
    return [
        (d["kind"], d["severity"], [c["text"] for c in d["claims"] if c["kind"] == "recovery"])
        for d in analyze_run(view).spike_dicts()
        if d["severity"] != "blip"
    ]


def test_a_generator_loss_drifting_up_beside_a_discriminator_that_holds_is_no_divergence() -> None:
    """An SN-GAN's generator loss creeping 1.0 -> 1.6 over the run while the discriminator loss goes
    1.2 -> 0.75 (it holds its own): the balance moved, nothing diverged; said as a drift not back by the end."""
    said = _said(_gan(0.75))
    assert said and all(severity != "divergence" for _, severity, _ in said)
    assert not any("diverged" in text.lower() for *_, texts in said for text in texts)
    assert any(text.startswith("Not back by the log's end") for *_, texts in said for text in texts)


def test_a_generator_climb_whose_discriminator_collapses_or_a_plain_climb_still_diverges() -> None:
    """The discriminator loss collapsing toward 0 (1.2 -> 0.05: the discriminator won), or the same climb
    with no discriminator loss beside it (no GAN), keeps the divergence."""
    assert any(severity == "divergence" for _, severity, _ in _said(_gan(0.05)))
    assert any(severity == "divergence" for _, severity, _ in _said(_gan(0.75, with_discriminator=False)))


def _epoch_rows(val_after: float) -> RunView:
    """A train loss logged every 300 steps at ~0.5 with one row 1.8x (index 60), its validation loss
    (logged on the same rows, ~1.09) 1.14x on that row and ``val_after`` times its level on the next."""
    rng = np.random.default_rng(3)
    n = 100
    steps = np.arange(1, n + 1) * 300
    loss = 0.5 * (1.0 + rng.uniform(-0.03, 0.03, n))
    val = 1.09 * (1.0 + rng.uniform(-0.01, 0.01, n))
    loss[60] *= 1.8
    val[60] *= 1.14
    val[61:] *= val_after
    return RunView("rows", {"loss": Series(steps, loss), "val_loss": Series(steps, val)})


def test_a_one_row_jump_whose_validation_loss_came_back_with_it_is_a_blip() -> None:
    """The validation loss shared the one bad row (1.14x) but was back at the next row, with the train
    loss: the model did not stay worse, a blip; a validation loss still 1.2x at that row keeps the spike."""
    assert [s for s in _shown(_epoch_rows(1.0)) if s[2] != "blip"] == []
    assert ("loss", 61 * 300, "spike") in _shown(_epoch_rows(1.2))
