"""Known answers and invariants of the LR schedules, their torch schedulers and the schedule metrics."""

from __future__ import annotations

import io
import re
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch

from ingest.training.torch_schedulers import (
    InverseSqrtScheduler,
    WarmupCosineRestartScheduler,
    WarmupCosineScheduler,
    WSDScheduler,
)
from stab_core.schedulers import (
    Transition,
    cycle_boundaries,
    inverse_sqrt_lr,
    largest_lr_change,
    lr_at,
    schedule_transitions,
    scheduler_warnings,
    warmup_cosine_lr,
    wsd_lr,
)

T = 30000


def _optimizer(*peaks: float) -> torch.optim.Optimizer:
    groups = [{"params": [torch.nn.Parameter(torch.zeros(1))], "lr": peak} for peak in peaks]
    return torch.optim.SGD(groups, lr=peaks[0])


def _lrs_over(scheduler: torch.optim.lr_scheduler.LRScheduler, steps: int) -> list[list[float]]:
    """LR of every group at steps 0..steps-1 (the LR in force for that optimizer step)."""
    seen = []
    for _ in range(steps):
        seen.append([float(g["lr"]) for g in scheduler.optimizer.param_groups])
        scheduler.optimizer.step()
        scheduler.step()
    return seen


# ---------------------------------------------------------------- the warmup-cosine-restart formula


@pytest.mark.parametrize(
    ("step", "expected"),
    [
        (1000, 0.5),
        (2000, 1.0),
        (6000, 0.55),
        (10250, 0.55),
        (10500, 1.0),
        (15250, 0.55),
        (20500, 1.0),
        (25250, 0.55),
    ],
)
def test_lr_at_known_answers(step: int, expected: float) -> None:
    assert lr_at(step, T, 2000, 500, 3, 0.1) == pytest.approx(expected, abs=1e-12)


@pytest.mark.parametrize("step", [9999, 29999])
def test_lr_at_reaches_the_floor_at_each_cycle_end(step: int) -> None:
    assert abs(float(lr_at(step, T)) - 0.1) < 1e-6


def test_lr_at_scales_with_peak_and_holds_the_floor_after_total_steps() -> None:
    steps = np.array([0, 1000, 6000, 30000, 45000])
    np.testing.assert_allclose(lr_at(steps, T, peak_lr=3e-4), 3e-4 * lr_at(steps, T), rtol=1e-12)
    assert lr_at(steps, T)[0] == 0.0
    np.testing.assert_allclose(lr_at(steps[-2:], T), [0.1, 0.1])


def test_restart_warmup_means_the_lr_never_jumps() -> None:
    steps = np.arange(T)
    per_step = np.abs(np.diff(lr_at(steps, T)))
    # steepest ramp: a restart warmup of 500 steps from 0.1 to 1
    assert per_step.max() == pytest.approx(0.9 / 500, rel=1e-9)


def test_cycle_boundaries_floor_uneven_totals() -> None:
    np.testing.assert_array_equal(cycle_boundaries(10, 3), [0, 3, 6, 10])


def test_without_warmups_it_equals_torch_cosine_annealing_warm_restarts() -> None:
    total, cycles, peak = 600, 3, 0.02
    ours = WarmupCosineRestartScheduler(_optimizer(peak), total, 0, 0, cycles, 0.1)
    reference = torch.optim.lr_scheduler.CosineAnnealingWarmRestarts(
        _optimizer(peak), T_0=total // cycles, eta_min=0.1 * peak
    )
    ours_lr = np.array(_lrs_over(ours, total))[:, 0]
    reference_lr = np.array(_lrs_over(reference, total))[:, 0]
    np.testing.assert_allclose(ours_lr, reference_lr, rtol=0, atol=1e-9)
    np.testing.assert_allclose(lr_at(np.arange(total), total, 0, 0, cycles, 0.1, peak), reference_lr, atol=1e-9)


def test_scheduler_trains_exactly_the_previewed_curve_for_each_group() -> None:
    scheduler = WarmupCosineRestartScheduler(_optimizer(1e-3, 5e-4), 900, 60, 20, 3, 0.1)
    seen = np.array(_lrs_over(scheduler, 950))
    for group, peak in enumerate((1e-3, 5e-4)):
        assert np.array_equal(seen[:, group], lr_at(np.arange(950), 900, 60, 20, 3, 0.1, peak))


@pytest.mark.parametrize("stop_at", [1, 30, 60, 299, 300, 301, 500, 899, 900, 920])
def test_resumed_scheduler_continues_on_the_identical_curve(stop_at: int) -> None:
    settings = (900, 60, 20, 3, 0.1)
    uninterrupted = np.array(_lrs_over(WarmupCosineRestartScheduler(_optimizer(1e-3), *settings), 950))

    first = WarmupCosineRestartScheduler(_optimizer(1e-3), *settings)
    _lrs_over(first, stop_at)
    # a checkpoint: written with torch.save, read back with torch.load's safe default
    buffer = io.BytesIO()
    torch.save({"scheduler": first.state_dict(), "optimizer": first.optimizer.state_dict()}, buffer)
    buffer.seek(0)
    checkpoint = torch.load(buffer, weights_only=True)
    scheduler_state, optimizer_state = checkpoint["scheduler"], checkpoint["optimizer"]

    # restore in the order torch recommends
    optimizer = _optimizer(1e-3)
    resumed = WarmupCosineRestartScheduler(optimizer, *settings)
    optimizer.load_state_dict(optimizer_state)
    resumed.load_state_dict(scheduler_state)
    rest = np.array(_lrs_over(resumed, 950 - stop_at))
    assert np.array_equal(rest, uninterrupted[stop_at:])


def test_resume_in_the_other_order_also_restores_the_lr() -> None:
    first = WarmupCosineRestartScheduler(_optimizer(1e-3), 900, 60, 20, 3, 0.1)
    _lrs_over(first, 310)
    optimizer = _optimizer(1e-3)
    optimizer.load_state_dict(first.optimizer.state_dict())
    resumed = WarmupCosineRestartScheduler(optimizer, 900, 60, 20, 3, 0.1)  # resets the LR to step 0
    resumed.load_state_dict(first.state_dict())
    assert optimizer.param_groups[0]["lr"] == float(lr_at(310, 900, 60, 20, 3, 0.1, 1e-3))


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"warmup_steps": 10000}, "warmup_steps"),
        ({"restart_warmup_steps": 10000}, "restart_warmup_steps"),
        ({"num_cycles": 0}, "num_cycles"),
        ({"min_lr_ratio": 1.5}, "min_lr_ratio"),
        ({"min_lr_ratio": -0.1}, "min_lr_ratio"),
        ({"warmup_steps": -1}, "warmup_steps"),
    ],
)
def test_invalid_settings_raise_a_clear_value_error(kwargs: dict[str, float], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        lr_at(0, T, **kwargs)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=message):
        WarmupCosineRestartScheduler(_optimizer(1.0), T, **kwargs)  # type: ignore[arg-type]


def test_negative_steps_are_rejected() -> None:
    with pytest.raises(ValueError, match="steps"):
        lr_at([-1], T)


def test_defaults_have_no_pitfalls() -> None:
    assert scheduler_warnings(T) == []
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert WarmupCosineRestartScheduler(_optimizer(1.0), T).advice == []


@pytest.mark.parametrize(
    ("kwargs", "fragment"),
    [
        ({"restart_warmup_steps": 100}, "1/4-1/3"),
        ({"restart_warmup_steps": 1000}, "1/4-1/3"),
        ({"num_cycles": 6}, "num_cycles = 6"),
        ({"min_lr_ratio": 0.0}, "min_lr_ratio = 0"),
    ],
)
def test_pitfalls_are_returned_and_warned(kwargs: dict[str, float], fragment: str) -> None:
    advice = scheduler_warnings(T, **kwargs)  # type: ignore[arg-type]
    assert len(advice) == 1 and fragment in advice[0]
    with pytest.warns(UserWarning, match=fragment.replace("/", "/")):
        WarmupCosineRestartScheduler(_optimizer(1.0), T, **kwargs)  # type: ignore[arg-type]


def test_transition_steps_of_the_scheduler() -> None:
    scheduler = WarmupCosineRestartScheduler(_optimizer(1.0), T)
    assert scheduler.transition_steps() == {"cycle_restart": [10000, 20000], "warmup_end": [2000, 10500, 20500]}


# ---------------------------------------------------------------- baselines


def test_warmup_cosine_known_answers() -> None:
    lr = warmup_cosine_lr([0, 1000, 2000, 16000, 30000, 40000], T, 2000, 0.1)
    np.testing.assert_allclose(lr, [0.0, 0.5, 1.0, 0.55, 0.1, 0.1], atol=1e-12)


def test_wsd_known_answers() -> None:
    lr = wsd_lr([1000, 2000, 27000, 28500, 30000], T, 2000, 0.0, decay_fraction=0.1)
    np.testing.assert_allclose(lr, [0.5, 1.0, 1.0, 0.5, 0.0], atol=1e-12)
    sqrt_shape = wsd_lr([28500], T, 2000, 0.0, decay_fraction=0.1, decay_shape="1-sqrt")
    np.testing.assert_allclose(sqrt_shape, [1 - np.sqrt(0.5)], atol=1e-12)
    with pytest.raises(ValueError, match="before warmup ends"):
        wsd_lr(0, T, 2000, decay_fraction=0.95)


def test_inverse_sqrt_known_answers() -> None:
    lr = inverse_sqrt_lr([500, 1000, 4000, 16000, 20000], 16000, 1000, 0.0, peak_lr=2.0)
    np.testing.assert_allclose(lr, [1.0, 2.0, 1.0, 0.5, 0.5], atol=1e-12)
    assert inverse_sqrt_lr(16000, 16000, 1000, 0.3)[()] == pytest.approx(0.3)
    with pytest.raises(ValueError, match="warmup_steps >= 1"):
        inverse_sqrt_lr(0, 100, 0)


@pytest.mark.parametrize(
    ("scheduler_type", "formula", "kwargs"),
    [
        (WarmupCosineScheduler, warmup_cosine_lr, {"warmup_steps": 50, "min_lr_ratio": 0.1}),
        (WSDScheduler, wsd_lr, {"warmup_steps": 50, "min_lr_ratio": 0.0, "decay_fraction": 0.2}),
        (InverseSqrtScheduler, inverse_sqrt_lr, {"warmup_steps": 50, "min_lr_ratio": 0.0}),
    ],
)
def test_baseline_schedulers_train_their_formula(
    scheduler_type: type, formula: object, kwargs: dict[str, float]
) -> None:
    scheduler = scheduler_type(_optimizer(3e-4), 400, **kwargs)
    seen = np.array(_lrs_over(scheduler, 420))[:, 0]
    assert callable(formula)
    np.testing.assert_array_equal(seen, formula(np.arange(420), 400, peak_lr=3e-4, **kwargs))


# ---------------------------------------------------------------- schedule metrics


def test_largest_lr_change_finds_a_restart_without_warmup() -> None:
    steps = np.arange(T)
    step, change = largest_lr_change(steps, lr_at(steps, T, restart_warmup_steps=0))
    assert step in (10000, 20000)
    assert change == pytest.approx(9.0, rel=1e-5)  # 0.1 -> 1.0 in one step


def test_largest_lr_change_of_a_restart_warmup_is_its_first_ramp_step() -> None:
    steps = np.arange(T)
    step, change = largest_lr_change(steps, lr_at(steps, T))
    # 0.9/500 per step on a base of 0.1; the initial warmup's 1/2000 per step is floored at 0.1 of peak
    assert step == 10001
    assert change == pytest.approx(0.018, rel=1e-9)


def test_largest_lr_change_on_a_sparse_log_is_per_step() -> None:
    steps = np.arange(0, 4001, 100)
    lr = np.where(steps < 2000, 1.0, 0.5)
    step, change = largest_lr_change(steps, lr)
    assert step == 2000
    assert change == pytest.approx(-0.5 / 100)


def test_largest_lr_change_input_errors() -> None:
    with pytest.raises(ValueError, match="strictly increasing"):
        largest_lr_change([0, 2, 2], [1.0, 1.0, 1.0])
    with pytest.raises(ValueError, match="at least 2"):
        largest_lr_change([0, 1], [1.0, np.nan])
    with pytest.raises(ValueError, match="same length"):
        largest_lr_change([0, 1, 2], [1.0, 1.0])


def _kinds(transitions: list[Transition]) -> list[tuple[int, str]]:
    return [(t.step, t.kind) for t in transitions]


def test_transitions_of_the_restart_schedule() -> None:
    steps = np.arange(T + 500)
    found = schedule_transitions(steps, lr_at(steps, T))
    assert _kinds(found) == [
        (2000, "warmup_end"),
        (10000, "cycle_restart"),
        (10500, "warmup_end"),
        (20000, "cycle_restart"),
        (20500, "warmup_end"),
    ]
    restart = found[1]
    assert restart.rel_change == pytest.approx(9.0) and restart.span_steps == 500
    assert restart.lr_before == pytest.approx(0.1)
    assert restart.lr_after == pytest.approx(1.0)


def test_a_restart_without_warmup_is_an_lr_jump() -> None:
    steps = np.arange(T)
    found = schedule_transitions(steps, lr_at(steps, T, restart_warmup_steps=0))
    assert _kinds(found) == [
        (2000, "warmup_end"),
        (10000, "cycle_restart"),
        (10000, "lr_jump"),
        (20000, "cycle_restart"),
        (20000, "lr_jump"),
    ]
    assert found[2].rel_change == pytest.approx(9.0, rel=1e-5) and found[2].span_steps == 1


def test_transitions_from_a_sparse_float32_log() -> None:
    steps = np.arange(0, T, 50)
    logged = lr_at(steps, T, peak_lr=3e-4).astype(np.float32)
    assert _kinds(schedule_transitions(steps, logged)) == [
        (2000, "warmup_end"),
        (10000, "cycle_restart"),
        (10500, "warmup_end"),
        (20000, "cycle_restart"),
        (20500, "warmup_end"),
    ]
    jumpy = lr_at(steps, T, restart_warmup_steps=0, peak_lr=3e-4).astype(np.float32)
    kinds = _kinds(schedule_transitions(steps, jumpy))
    assert (10000, "lr_jump") in kinds and (20000, "lr_jump") in kinds


def test_transitions_of_baselines() -> None:
    steps = np.arange(T)
    assert _kinds(schedule_transitions(steps, wsd_lr(steps, T))) == [(2000, "warmup_end"), (27000, "decay_start")]
    assert _kinds(schedule_transitions(steps, warmup_cosine_lr(steps, T))) == [(2000, "warmup_end")]
    assert _kinds(schedule_transitions(steps, inverse_sqrt_lr(steps, T))) == [(2000, "warmup_end")]


def test_a_step_decay_is_a_downward_lr_jump_and_small_changes_are_ignored() -> None:
    steps = np.arange(0, 3000, 10)
    lr = np.where(steps < 1000, 1.0, np.where(steps < 2000, 0.1, 0.098))
    found = schedule_transitions(steps, lr)
    assert _kinds(found) == [(1000, "lr_jump")]
    assert found[0].rel_change == pytest.approx(-0.9)


def test_transitions_ignore_unlogged_samples_and_short_series() -> None:
    assert schedule_transitions([0], [1.0]) == []
    steps = np.arange(0, 4000, 10).astype(float)
    lr = wsd_lr(steps, 4000, 200, decay_fraction=0.25)
    lr[5] = np.nan
    assert _kinds(schedule_transitions(steps, lr)) == [(200, "warmup_end"), (3000, "decay_start")]
    with pytest.raises(ValueError, match="rel_change"):
        schedule_transitions(steps, lr, rel_change=0.0)


def test_transitions_of_an_lr_logged_with_few_digits() -> None:
    steps = np.arange(T)
    for schedule in (lr_at(steps, T, peak_lr=1e-4), warmup_cosine_lr(steps, T, peak_lr=6e-4)):
        found = schedule_transitions(steps, np.round(schedule, 6))  # 1e-6 resolution, as llm.c writes it
        assert all(t.kind in ("warmup_end", "cycle_restart") for t in found)
        assert abs(found[0].step - 2000) <= 10


REAL_LOGS = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "real_logs"


def test_transitions_of_a_real_llmc_log() -> None:
    log = REAL_LOGS / "mng_llmc_gpt2_124m" / "main.log"
    if not log.exists():
        pytest.skip(f"../shared absent: {log}")
    rows = re.findall(r"s:(\d+) trl:\S+ lr:(\S+) norm:\S+", log.read_text())
    steps = np.array([int(step) for step, _ in rows])
    lr = np.array([float(value) for _, value in rows])
    # PROVENANCE: linear warmup over 700 steps to 6.0e-4, then a decay to 0, lr printed with 6 decimals
    assert _kinds(schedule_transitions(steps, lr)) == [(699, "warmup_end")]
    assert _kinds(schedule_transitions(steps[::50], lr[::50])) == [(700, "warmup_end")]


def test_formulas_and_metrics_cost_no_torch_import() -> None:
    probe = (
        "import sys, stab_core.schedulers as s, stab_core.clipping as c\n"
        "s.lr_at(5, 100, 10, 5, 2); s.schedule_transitions([0, 1, 2], [0.0, 1.0, 1.0])\n"
        "c.clipping_stats(s.lr_at([5, 6], 100, 10, 5, 2), 1.0)\n"
        "print('torch' in sys.modules)"
    )
    repo = Path(__file__).resolve().parents[1]
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=repo, check=True)
    assert result.stdout.strip() == "False"
    assert WarmupCosineRestartScheduler.__mro__[2] is torch.optim.lr_scheduler.LRScheduler
