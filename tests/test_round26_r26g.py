"""Round 26, r26g (issue #32). Synthetic series of each shape: exact-zero grad norms among positive ones are
placeholders, not measurements (stab_core/zero_grad_norms.py: a LoRA fine-tune logged every 10 steps whose grad
norm is 0.0 on about half of its logs and 3-7 elsewhere, the loss noisy, no incident); a training loss that fell
from its first epochs and rose less than an early instability (1.3x) in the incident was trained by its
initialisation (stab_core/fell_from_start.py)."""

from __future__ import annotations

import numpy as np

from stab_core.analysis import analyze_run
from stab_core.fell_from_start import fell_from_start
from stab_core.runview import RunView, Series
from stab_core.zero_grad_norms import placeholder_zeros, without_placeholder_grad_norms


def _lora_run(seed: int = 3) -> RunView:
    rng = np.random.default_rng(seed)
    steps = np.arange(10, 3010, 10, dtype=np.int64)
    loss = 0.2 * np.exp(rng.normal(0.0, 0.15, steps.size)) + np.linspace(0.1, 0.0, steps.size)
    grad = rng.uniform(3.0, 7.0, steps.size)
    grad[rng.random(steps.size) < 0.55] = 0.0  # the trainer's placeholder on more than half of the logs
    grad[0] = 0.0
    return RunView("lora", series={"loss": Series(steps, loss), "grad_norm": Series(steps, grad)})


def test_zero_grad_norms_among_positive_ones_raise_no_grad_norm_incident() -> None:
    view = _lora_run()
    items = [i for i in analyze_run(view).spike_dicts() if i["metric"] == "grad_norm"]
    assert items == []


def test_only_zeros_beside_a_moved_loss_with_a_positive_norm_after_them_are_dropped() -> None:
    steps = np.arange(1, 9, dtype=np.int64)
    grad = Series(steps, np.array([0.0, 2.0, 0.0, 3.0, 0.0, 2.5, 0.0, 0.0]))
    loss = Series(steps, np.array([1.0, 0.9, 0.0, 0.8, np.nan, 0.7, 0.6, 0.5]))
    # step 3: the loss is 0 (nothing moved it); step 5: no finite loss; 7-8: nothing positive after them
    assert placeholder_zeros(grad, loss).tolist() == [True, False, False, False, False, False, False, False]
    assert not placeholder_zeros(grad, None).any()
    only_zero = Series(steps, np.zeros(steps.size))
    assert not placeholder_zeros(only_zero, loss).any()  # all 0: detectors_not_run reads it


def test_a_view_without_placeholders_is_returned_unchanged() -> None:
    steps = np.arange(1, 5, dtype=np.int64)
    view = RunView("r", series={"loss": Series(steps, np.ones(4)), "grad_norm": Series(steps, np.full(4, 2.0))})
    assert without_placeholder_grad_norms(view) is view
    placeholder = RunView(
        "r", series={"loss": view.series["loss"], "grad_norm": Series(steps, np.array([0.0, 2.0, 0.0, 2.0]))}
    )
    assert without_placeholder_grad_norms(placeholder).series["grad_norm"].steps.tolist() == [2, 4]


def test_a_loss_that_fell_from_its_start_and_rose_little_in_the_incident_fell_from_the_first_steps() -> None:
    epochs = np.arange(0, 40, dtype=np.int64)
    loss = 5.0 * np.exp(-epochs / 4.0) + 2.4
    rose = np.where((epochs >= 17) & (epochs <= 30), loss + 0.3, loss)  # up ~12 % while the LR warms up
    assert fell_from_start(Series(epochs, rose), 17, 30)[0] is True
    back = np.where(epochs == 20, 4.0, loss)  # 1.6x its level before: an early instability, the start in question
    assert fell_from_start(Series(epochs, back), 17, 30)[0] is False
