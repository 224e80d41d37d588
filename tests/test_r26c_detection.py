"""Round 26, r26c (issue #32): real incidents missed on batch 25. Synthetic runs of each shape: a short run whose
loss rises right after its warm-up fall and is still up at the next log (stab_core/early_rises.py); a short run whose
grad norm surges to a new level it never leaves (stab_core/short_run_surges.py); a long run's validation loss that
blows up for two evaluations after a start-up far above it (stab_core/held_out_blowups.py); a GAN whose
discriminators win outright while their generators sit at the LSGAN target (stab_core/discriminator_wins.py)."""

from __future__ import annotations

from typing import Any

import numpy as np

from stab_core.analysis import analyze_run
from stab_core.discriminator_wins import gan_pairs, won_outright
from stab_core.held_out_blowups import held_out_blowups
from stab_core.runview import RunView, Series
from stab_core.short_run_surges import short_run_surges
from stab_core.spike_params import GRAD_NORM_SPIKE_PARAMS


def _shown(view: RunView) -> list[dict[str, Any]]:
    return [i for i in analyze_run(view).spike_dicts() if i["severity"] != "blip"]


# an ORPO-like loss logged every 10 steps: a fall over warm-up, then a per-batch loss swinging 0.06-0.19
FALL = [1.05, 0.97, 0.63, 0.31, 0.125, 0.111]
LATER = [0.116, 0.167, 0.107, 0.141, 0.091, 0.141, 0.093, 0.123, 0.108, 0.133, 0.16, 0.187, 0.083, 0.163, 0.093]
LATER += [0.139, 0.132, 0.079, 0.11, 0.06, 0.071, 0.084, 0.074, 0.13, 0.135]


def _short(loss: list[float]) -> RunView:
    steps = np.arange(10, 10 * len(loss) + 1, 10, dtype=np.int64)
    return RunView("short", series={"loss": Series(steps, np.asarray(loss))})


def test_an_early_rise_still_up_at_the_next_log_and_over_every_later_sample_is_shown() -> None:
    (item,) = _shown(_short([*FALL, 0.251, 0.147, *LATER]))
    assert (item["start"], item["kind"]) == (70, "early_instability")


def test_an_early_rise_back_at_once_or_under_the_later_noise_is_not() -> None:
    # back under 1.3x its level at the next log: one batch
    assert _shown(_short([*FALL, 0.251, 0.13, *LATER])) == []
    # a later sample as high: the rise is a swing of the later per-batch noise
    assert _shown(_short([*FALL, 0.2, 0.147, *LATER[:8], 0.21, *LATER[8:]])) == []


def _lora(grad: list[float]) -> RunView:
    steps = np.arange(10, 10 * len(grad) + 1, 10, dtype=np.int64)
    loss = np.linspace(1.43, 0.23, steps.size)  # falling throughout: the surge is the grad norm's alone
    return RunView("lora", series={"loss": Series(steps, loss), "grad_norm": Series(steps, np.asarray(grad))})


HEAD = [0.69, 0.60, 0.89, 0.97, 0.86, 0.98, 1.11, 1.05]


def test_a_grad_norm_surge_that_becomes_its_new_level_is_a_spike_though_one_log_dips_under_the_ratio() -> None:
    level = [1.71, 1.45, 1.88, 1.59, 1.54, 2.52, 1.98, 2.09, 2.02, 2.08, 1.99, 2.07, 2.13, 2.57, 2.03, 2.63]
    view = _lora([*HEAD, *level])
    (item,) = [i for i in _shown(view) if i["metric"] == "grad_norm"]
    assert (item["start"], item["severity"]) == (90, "spike")
    # back at its first level a few logs later: one outlier and its tail, not a new level
    back = [1.71, 1.45, 1.2, 0.95, 1.0, 0.9, 1.05, 0.98, 1.0, 0.97]
    assert short_run_surges(_lora([*HEAD, *back]).series["grad_norm"], [], GRAD_NORM_SPIKE_PARAMS) == []


def _evals(values: list[float]) -> dict[str, Series]:
    steps = np.arange(len(values), dtype=np.int64)
    train = Series(steps, np.full(len(values), 1.8))  # flat: the blow-up is the validation loss's alone
    return {"loss": train, "val_loss": Series(steps, np.asarray(values))}


def test_a_long_runs_validation_blow_up_is_not_hidden_by_its_untrained_start() -> None:
    rng = np.random.default_rng(3)
    start = [13.7, 15.1, 4.6, 2.8, 2.9]
    level = list(1.5 + 0.25 * rng.random(70))
    level[20] = 3.1  # one scattered evaluation: the recent scatter a blow-up must top
    values = [*start, *level, 6.1, 4.0, 1.6, 1.62, 1.55, *list(1.5 + 0.2 * rng.random(20))]
    (event,) = held_out_blowups(_evals(values))
    assert (event.start, event.recovered) == (75, True)
    # the recent scatter reached as high: not a blow-up
    level[50] = 6.5
    scattered = [*start, *level, 6.1, 4.0, 1.6, 1.62, 1.55, *list(1.5 + 0.2 * rng.random(20))]
    assert held_out_blowups(_evals(scattered)) == []


def _gan(d_after: float, g_after: float, n: int = 400) -> dict[str, Series]:
    """A CycleGAN's per-100-image losses: D_A/D_B start ~0.3 and go to ``d_after`` from record 30,
    G_A/G_B start ~0.75 and go to ``g_after``."""
    rng = np.random.default_rng(7)
    steps = np.arange(100, 100 * (n + 1), 100, dtype=np.int64)
    out = {}
    for side in ("A", "B"):
        d = np.where(np.arange(n) < 30, 0.3, d_after) * (1 + 0.4 * rng.standard_normal(n)).clip(0.2)
        g = np.where(np.arange(n) < 30, 0.75, g_after) * (1 + 0.2 * rng.standard_normal(n)).clip(0.3)
        out[f"D_{side}"], out[f"G_{side}"] = Series(steps, d), Series(steps, g)
        out[f"cycle_{side}"] = Series(steps, np.linspace(1.0, 0.3, n))
    return out


def test_discriminators_that_win_outright_while_their_generators_sit_at_the_target_are_one_divergence() -> None:
    series = _gan(0.005, 1.0)
    assert sorted(gan_pairs(series)) == [("D_A", "G_A"), ("D_B", "G_B")]
    (item,) = won_outright(series, [])
    assert (item.severity, item.kind, item.primary.metric) == ("divergence", "climb", item.primary.metric)
    assert 3000 <= item.start <= 5000 and item.primary.metric in {"G_A", "G_B"}
    view = RunView("gan", series=series)
    assert [i["severity"] for i in _shown(view)] == ["divergence"]


def test_a_balanced_gan_or_one_whose_generator_gets_better_is_no_collapse() -> None:
    assert won_outright(_gan(0.25, 0.8), []) == []  # the discriminators hold their level
    assert won_outright(_gan(0.005, 0.4), []) == []  # the generators fell too: both learning
    one_side = {**_gan(0.005, 1.0), **{k: v for k, v in _gan(0.25, 0.8).items() if k.endswith("B")}}
    assert won_outright(one_side, []) == []  # D_B still holds its level: not every discriminator won


def _yolo(val: list[float], train: list[float]) -> dict[str, Series]:
    steps = np.arange(len(val), dtype=np.int64)
    return {"loss": Series(steps, np.asarray(train)), "val/box_loss": Series(steps, np.asarray(val))}


VAL_HEAD = [0.86, 0.83, 0.70, 0.57, 0.55, 0.54, 0.53, 0.52, 0.54, 0.61, 0.63, 0.64, 0.66, 0.67, 0.68, 0.61, 0.62]
VAL_UP = [0.81, 0.71, 0.81, 0.72, 0.71, 0.89, 0.92, 0.85, 1.17, 0.9, 0.96, 0.81, 0.96, 0.79, 0.96, 0.94]


def test_a_validation_loss_that_steps_up_and_stays_while_the_training_loss_rose_is_a_spike_never_back() -> None:
    rng = np.random.default_rng(5)
    val = [*VAL_HEAD, *VAL_UP, *list(0.8 + 0.08 * rng.random(40))]
    # the training loss falls over the first epochs, then rises with the validation loss at the warm-up's end
    train = [*list(np.linspace(7.3, 2.4, 8)), *[2.4] * 9, *list(2.6 + 0.1 * rng.random(len(val) - len(VAL_HEAD)))]
    (event,) = held_out_blowups(_yolo(val, train))
    assert (event.start, event.recovered, event.diverged) == (17, False, False)
    view = RunView("yolo", series=_yolo(val, train))
    (item,) = [i for i in _shown(view) if i["metric"] == "val/box_loss"]
    assert item["severity"] == "spike"


def test_a_validation_rise_while_the_training_loss_falls_or_one_that_comes_back_is_not() -> None:
    rng = np.random.default_rng(5)
    val = [*VAL_HEAD, *VAL_UP, *list(0.8 + 0.08 * rng.random(40))]
    falling = list(np.linspace(7.3, 0.5, len(val)))  # overfitting's shape: the training loss keeps falling
    assert held_out_blowups(_yolo(val, falling)) == []
    flat = [2.5] * len(val)
    back = [*VAL_HEAD, *VAL_UP, 0.55, *list(0.8 + 0.08 * rng.random(39))]  # back at its level once
    assert held_out_blowups(_yolo(back, flat)) == []
    assert held_out_blowups({"val/box_loss": _yolo(val, flat)["val/box_loss"]}) == []  # no training loss
