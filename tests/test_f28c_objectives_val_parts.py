"""Round 22 (issue #32, f28c): detection on a run's named objectives and on validation losses.

- A validation loss that blows up at its first evaluation after the first (step 0 at chance, then 2.6x),
  or from a recent level above its all-time lowest, or in a climb that holds five evaluations and comes
  back, is a blow-up (stab_core/held_out_blowups.py); each evaluation counts once where a trainer writes
  it on two rows.
- A run that logs its validation loss only as parts (``val/box_loss``, ``val/cls_loss``) is judged for
  overfitting on them, with the noise measured after an early blow-up came back (stab_core/findings.py).
- A GAN whose import named no ``loss`` is analysed on its generator's loss (stab_core/objectives.py).
Synthetic series throughout."""

from __future__ import annotations

import numpy as np

from stab_core.analysis import analyze_run, find_incidents
from stab_core.findings import run_findings
from stab_core.held_out_blowups import distinct_evaluations, held_out_blowups
from stab_core.objectives import with_objective
from stab_core.runview import RunView, Series


def _evals(n: int, seed: int, level: float = 1.66, scatter: float = 0.02) -> np.ndarray:
    return level * np.random.default_rng(seed).lognormal(0.0, scatter, n)


def test_a_validation_loss_blown_up_at_its_first_evaluation_after_step_0_is_found_and_back_where_it_settles() -> None:
    steps = np.arange(0, 6000, 200, dtype=np.int64)
    val = _evals(steps.size, 1)
    val[0] = 1.609  # chance at step 0
    val[1:3] = [4.23, 5.65]  # 2.6x, 3.5x
    val[4] = 1.80  # back at 600; a noisy level 1.12x the first one evaluation later is still back
    [event, *_] = held_out_blowups({"val_loss": Series(steps, val)})
    assert (event.start, event.recovery_step) == (200, 600)


def test_a_climb_that_holds_five_evaluations_above_a_swinging_level_and_comes_back_is_a_blow_up() -> None:
    steps = np.arange(0, 8000, 200, dtype=np.int64)
    val = _evals(steps.size, 2)
    val[0] = 1.2  # the all-time lowest, far before the climb
    val[7:10] = [1.98, 2.0, 2.18]  # the climb starts: no jump yet
    val[10:16] = [2.67, 3.9, 3.79, 3.84, 4.63, 5.7]  # 1.3x the evaluation before, then held
    val[16:20] = [3.1, 4.7, 3.0, 2.9]
    train = Series(steps, np.linspace(0.5, 0.05, steps.size))  # the training loss falls: no matter, it came back
    [event] = held_out_blowups({"val_loss": Series(steps, val), "loss": train})
    assert event.start == 2200 and event.recovered and event.recovery_step == 4000


def test_an_evaluation_written_on_two_rows_counts_once_and_its_blow_up_is_found() -> None:
    epochs = np.arange(1, 121, dtype=np.int64)
    distinct = _evals(60, 3, level=2.3, scatter=0.03)
    distinct[10] = 1.6  # the lowest, long before
    distinct[40:48] = [3.14, 5.96, 8.93, 10.43, 9.59, 8.67, 7.14, 4.94]
    rows = np.repeat(distinct, 2)  # each odd row repeats the evaluation of the row before
    steps, values = distinct_evaluations(epochs, rows)
    assert values.size == 60 and steps[1] == 3
    [event] = held_out_blowups({"val/cls_loss": Series(epochs, rows)})
    assert 81 <= event.start <= 85 and event.recovered


def test_a_noisy_validation_loss_with_restarts_under_the_blow_up_ratio_is_no_blow_up() -> None:
    steps = np.arange(0, 60, dtype=np.int64)
    cycle = 1.0 + 0.5 * (np.arange(60) % 10 == 0)  # a 1.5x bump at each restart, back the next evaluation
    for seed in range(10):
        val = _evals(60, seed, scatter=0.08) * cycle
        assert held_out_blowups({"val_loss": Series(steps, val)}) == []


def _yolo_parts(seed: int, early_blowup: bool, end: float = 0.70) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    rng = np.random.default_rng(seed)
    epochs = np.arange(1, 101, dtype=np.int64)
    train = 4.8 * np.exp(-epochs / 40.0) + 1.5
    cls = 0.62 + 0.45 * np.exp(-epochs / 20.0) + rng.normal(0.0, 0.025, 100)
    cls[72:] = np.linspace(0.56, end, 28) + rng.normal(0.0, 0.025, 28)  # the best near 73, then up
    if early_blowup:  # the swings of a warm-up blow-up, back at epoch 11
        cls[1:12] = [13.1, 35.3, 30.8, 113.9, 211.2, np.inf, 5.1, 11.2, 7.0, 3.18, 2.44]
    box = 1.05 + rng.normal(0.0, 0.02, 100)
    return {
        "loss": (epochs, train),
        "val/box_loss": (epochs, box),
        "val/cls_loss": (epochs, cls),
    }


def test_overfitting_is_found_on_the_validation_part_that_rose_when_no_val_loss_is_logged() -> None:
    found = run_findings(_yolo_parts(0, early_blowup=False))["overfitting"]
    assert found is not None and found["metric"] == "val/cls_loss" and 70 <= found["best_step"] <= 85
    assert "val/cls_loss rose" in found["message"]


def test_an_early_blow_up_of_the_part_does_not_count_as_its_noise() -> None:
    found = run_findings(_yolo_parts(0, early_blowup=True, end=0.66))["overfitting"]  # a rise of ~4.4 sigmas
    assert found is not None and found["metric"] == "val/cls_loss"


def test_flat_validation_parts_are_no_overfitting() -> None:
    series = _yolo_parts(1, early_blowup=False)
    epochs, _ = series["val/cls_loss"]
    series["val/cls_loss"] = (epochs, 0.6 + np.random.default_rng(1).normal(0.0, 0.02, 100))
    assert run_findings(series)["overfitting"] is None


def test_a_validation_part_that_rose_while_its_training_part_did_not_fall_is_no_overfitting() -> None:
    series = _yolo_parts(0, early_blowup=False)
    epochs, _ = series["loss"]
    series["val/obj_loss"] = series.pop("val/cls_loss")
    series["train/obj_loss"] = (epochs, 0.5 + np.random.default_rng(2).normal(0.0, 0.01, 100))  # flat
    assert run_findings(series)["overfitting"] is None  # though the summed training loss fell
    series["train/obj_loss"] = (epochs, 0.5 * np.exp(-epochs / 30.0) + 0.1)  # the same part falls: overfitting
    found = run_findings(series)["overfitting"]
    assert found is not None and "while train/obj_loss fell" in found["message"]


def _gan(gen: np.ndarray, disc: np.ndarray) -> RunView:
    steps = np.arange(gen.size, dtype=np.int64)
    return RunView("gan", {"train_gen_loss": Series(steps, gen), "train_disc_loss": Series(steps, disc)}, {})


def test_a_gan_generator_loss_non_finite_from_its_first_row_is_a_divergence_at_step_0() -> None:
    disc = np.full(320, np.nan)
    disc[0] = 1.6e24
    view = _gan(np.full(320, np.nan), disc)
    assert with_objective(view).series["loss"] is view.series["train_gen_loss"]
    [spike] = analyze_run(view).spikes
    assert spike.incident is not None and spike.incident.start == 0 and spike.incident.severity == "divergence"


def test_a_gan_generator_loss_that_climbs_from_its_first_row_is_an_early_lasting_rise() -> None:
    rng = np.random.default_rng(4)
    gen = 1.11 + 4.06 * (1 - np.exp(-np.arange(320) / 80.0)) * rng.lognormal(0, 0.003, 320)
    disc = 11.7 - np.linspace(0.0, 0.2, 320)
    [incident] = find_incidents(with_objective(_gan(gen, disc)))
    assert incident.start <= 12 and incident.severity == "divergence"


def test_a_run_with_a_loss_or_without_a_discriminator_keeps_its_view() -> None:
    steps = np.arange(10, dtype=np.int64)
    plain = RunView("r", {"loss": Series(steps, np.ones(10)), "gen_loss": Series(steps, np.ones(10))}, {})
    alone = RunView("r", {"train_gen_loss": Series(steps, np.ones(10))}, {})
    assert with_objective(plain) is plain and with_objective(alone) is alone


def test_a_blow_up_from_a_swinging_start_that_never_comes_back_is_held_against_the_lowest_before_it() -> None:
    steps = np.arange(1, 31, dtype=np.int64) * 287
    val = np.concatenate([[7.25, 4.83, 6.82, 9.21], 9.5 * np.random.default_rng(5).lognormal(0, 0.05, 26)])
    train = Series(steps, 0.7 * np.random.default_rng(6).lognormal(0, 0.02, 30))  # the training loss holds
    [event] = held_out_blowups({"val_loss": Series(steps, val), "loss": train})
    assert event.start == steps[3] and event.diverged


def test_one_evaluation_bumps_on_a_noisy_late_plateau_are_no_blow_up() -> None:
    val = np.array([0.35, 0.43, 0.45, 1.04, 0.61, 0.46, 0.57, 1.12, 0.55, 0.48, 0.62, 0.62, 0.58, 1.03, 1.78])
    val = np.concatenate([val, [0.70, 0.47, 0.92, 0.58, 0.84, 0.69, 1.49, 0.33, 0.28, 0.58]])
    assert held_out_blowups({"val_loss": Series(np.arange(val.size, dtype=np.int64) * 200, val)}) == []


def test_the_pages_say_the_validation_parts_were_checked_not_unchecked() -> None:
    # overfitting is judged on each part where no total is logged: "Overfitting not checked" was false
    from pages.parts.findings_view import nothing_found

    yolo = ["loss", "val/box_loss", "val/cls_loss", "step_time_s"]
    assert nothing_found(yolo) == (
        "Nothing found: checked the parts of its validation loss (`val/box_loss`, `val/cls_loss`), `step_time_s`."
    )
    assert nothing_found(["loss", "val_loss", "val/cls_loss"]) == "Nothing found: checked `val_loss`."
    assert nothing_found(["loss"]) == "Nothing found: the run logs no val loss, and no tokens/s or step time, to check."
