"""A grad norm that jumps to several times its level and holds there is shown, whatever the loss did, and
bf16 is advised only where the incident hurt the loss (issue #32; docs/diagnosis.md, "Severity":
stab_core/grad_norm_surges.py, action_premises._precision_change_premise). Synthetic runs of the shape: an fp16
fine-tune whose grad norm surges when a frozen part is unfrozen, the dynamic loss scale halving three times, the loss
falling through it."""

from __future__ import annotations

from typing import Any

import numpy as np

from stab_core.analysis import analyze_run
from stab_core.grad_norm_surges import SURGE_RATIO, SURGE_SAMPLES, longest_surge
from stab_core.runview import RunView, Series


def _run(
    surge: int, height: float = 8.0, loss_jump: float = 1.0, halvings: tuple[int, ...] = (103, 109, 125), seed: int = 11
) -> RunView:
    """200 updates: a loss on a plateau (~2000, +-3%) that falls from update 110; a grad norm at ~450
    (+-5%) that stands ``height`` times higher for ``surge`` updates from 101; the fp16 loss scale halving
    16 -> 2 inside it (at ``halvings``); the loss ``loss_jump`` times higher over the surge's first 10 updates."""
    rng = np.random.default_rng(seed)
    steps = np.arange(1, 201, dtype=np.int64)
    loss = 2000.0 * (1 + 0.03 * rng.standard_normal(200))
    loss[109:] *= np.linspace(1.0, 0.15, 91)
    loss[100:110] *= loss_jump
    grad = 450.0 * (1 + 0.05 * rng.standard_normal(200))
    grad[100 : 100 + surge] *= height
    scale = np.full(200, 16.0)
    for step in halvings:
        scale[step - 1 :] /= 2
    series = {
        "loss": Series(steps, loss),
        "grad_norm": Series(steps, grad),
        "loss_scale": Series(steps, scale),
        "lr": Series(steps, np.linspace(5e-6, 5.4e-6, 200)),
    }
    return RunView("surge", series=series, meta={"precision": "fp16"})


def _grad_incidents(view: RunView) -> list[dict[str, Any]]:
    return [s for s in analyze_run(view).spike_dicts() if 95 <= int(s["start"]) <= 110]


def test_a_grad_norm_that_holds_4x_for_16_samples_is_a_spike_over_when_it_is_back() -> None:
    view = _run(surge=40)
    assert longest_surge(view.series["grad_norm"], 101, 145) == 40
    (item,) = _grad_incidents(view)
    # a blip without the surge rule: the loss never felt it (docs/diagnosis.md, "Severity")
    assert item["severity"] == "spike"
    recovery = [c["text"] for c in item["claims"] if c["kind"] == "recovery" and c["holds"] is not False]
    assert recovery and recovery[0].startswith("Recovered at step 14")  # the grad norm's return, not the loss's


def test_a_short_burst_or_a_lower_surge_stays_a_blip() -> None:
    for view in (_run(surge=SURGE_SAMPLES - 4), _run(surge=40, height=SURGE_RATIO * 0.7)):
        assert all(item["severity"] == "blip" for item in _grad_incidents(view))


def test_no_level_no_surge() -> None:
    steps = np.arange(1, 60, dtype=np.int64)
    grad = Series(steps, np.r_[np.full(10, 1.0), np.full(49, 10.0)])
    assert longest_surge(grad, 11, 59) is None  # 10 samples before: no level


def test_bf16_is_advised_only_where_the_incident_hurt_the_loss() -> None:
    def actions(view: RunView) -> list[dict[str, Any]]:
        items = [i for i in analyze_run(view).spike_dicts() if 95 <= int(i["start"]) <= 110]
        return [c for i in items for c in i["action_evidence"] if c["premise"] == "fp16_loss_felt"]

    unharmed = actions(_run(surge=40))
    assert unharmed and all(c["holds"] is False and c["evidence"]["loss_felt"] is False for c in unharmed)
    hurt = actions(_run(surge=40, loss_jump=1.6, halvings=(102, 104, 106)))
    assert hurt and any(c["holds"] is True for c in hurt)
