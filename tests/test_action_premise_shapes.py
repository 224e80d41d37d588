"""Early-instability actions rest on premises read from the run (issue #32, "actions whose premise
fails"): "lower the peak LR or lengthen the warmup" needs a logged LR that rose before the onset (a
chronicle whose LR only decays has no warmup to lengthen); "check the initialisation and the first
batches" needs a log that starts at the run's first steps (a log starting at step 31,000 is a resumed
run: its initialisation is long past). Series of those shapes, diagnosed as the analysis does."""

from __future__ import annotations

import numpy as np

from stab_core.diagnosis import diagnose_early
from stab_core.early_rises import robust_early_rises
from stab_core.runview import RunView, Series

LOWER_LR = "Lower the peak LR or lengthen the warmup"
CHECK_INIT = "Check the initialisation scale"


def _early_rise_run(first_step: int, lr_shape: str) -> tuple[RunView, object]:
    """120 logged steps from ``first_step`` (interval 1): the loss holds ~2.0, then rises to ~4 from the
    10th sample on and stays there. ``lr_shape``: "warmup" (rising over the first 8 samples, then
    flat), "decay" (falling slowly throughout, as a chronicle excerpted mid-run) or "none" (no LR)."""
    rng = np.random.default_rng(3)
    steps = np.arange(first_step, first_step + 120)
    loss = 2.0 + 0.02 * rng.standard_normal(steps.size)
    loss[10:] = 4.0 + 0.02 * rng.standard_normal(steps.size - 10)
    series = {"loss": Series(steps, loss)}
    if lr_shape == "warmup":
        series["lr"] = Series(steps, np.minimum(1.0, (np.arange(steps.size) + 1) / 8) * 6e-4)
    elif lr_shape == "decay":
        series["lr"] = Series(steps, np.linspace(5.3e-5, 5.2e-5, steps.size))
    (event,) = robust_early_rises(steps, loss, 16)
    return RunView("run", series), event


def _actions(first_step: int, lr_shape: str) -> tuple[list[str], dict[str, bool | None]]:
    view, event = _early_rise_run(first_step, lr_shape)
    diagnosis = diagnose_early(view, event)  # type: ignore[arg-type]
    return diagnosis.actions, {c.premise or "": c.holds for c in diagnosis.checks}


def test_lower_the_lr_needs_an_lr_that_rose_before_the_onset() -> None:
    said, holds = _actions(0, "warmup")
    assert any(a.startswith(LOWER_LR) for a in said)
    assert holds["lr_rose_before"] is True
    said, holds = _actions(0, "decay")  # the LR only decays: no warmup to lengthen, not said
    assert not any(a.startswith(LOWER_LR) for a in said)
    assert holds["lr_rose_before"] is False


def test_without_an_lr_the_user_is_told_to_log_it() -> None:
    said, holds = _actions(0, "none")
    assert holds["lr_rose_before"] is None
    assert not any(a.startswith(LOWER_LR) for a in said)
    assert any(a.startswith("Log the LR") for a in said)


def test_check_the_initialisation_needs_a_log_from_the_run_start() -> None:
    said, holds = _actions(0, "warmup")
    assert any(a.startswith(CHECK_INIT) for a in said) and holds["onset_in_first_steps"] is True
    said, holds = _actions(31_190, "decay")  # an excerpt of a resumed run
    assert not any(a.startswith(CHECK_INIT) for a in said) and holds["onset_in_first_steps"] is False
    # a console that logs every 10 steps starts at step 10: still the run's beginning
    view, _ = _early_rise_run(0, "warmup")
    loss, lr = view.series["loss"], view.series["lr"]
    spaced = RunView(
        "run", {"loss": Series(loss.steps * 10 + 10, loss.values), "lr": Series(lr.steps * 10 + 10, lr.values)}
    )
    (spaced_event,) = robust_early_rises(spaced.series["loss"].steps, spaced.series["loss"].values, 16)
    checks = {c.premise: c.holds for c in diagnose_early(spaced, spaced_event).checks}
    assert checks["onset_in_first_steps"] is True


def test_check_the_initialisation_needs_an_onset_in_the_runs_first_steps() -> None:
    """A run evaluated every 500 of 5,000 planned steps: 6 loss estimates, all "early" for the detector
    (fewer than its window), the 5th jumping 1.44x at step 2,000. Before: "check the initialisation
    and the first batches" at 40 % of the run, where the corpus facts rule early instability out."""
    steps = np.arange(0, 2501, 500)
    loss = np.array([9.227, 6.954, 6.581, 6.651, 9.585, 6.642])
    lr = np.array([2e-6, 2e-5, 1.9e-5, 1.79e-5, 1.55e-5, 1.26e-5])
    view = RunView("evals", {"loss": Series(steps, loss), "lr": Series(steps, lr)}, meta={"planned_steps": 5000})
    events = robust_early_rises(steps, loss, 16)
    (event,) = [e for e in events if e.peak == 2000]
    diagnosis = diagnose_early(view, event)
    assert not any(a.startswith(CHECK_INIT) for a in diagnosis.actions)
    (check,) = [c for c in diagnosis.checks if c.premise == "onset_in_first_steps"]
    assert check.holds is False and check.evidence["onset_fraction"] == 0.4
    assert check.evidence["run_length"] == 5000 and check.evidence["run_length_from"] == "planned_steps"
    # the same run planned for 50,000 steps: the jump is in its first 4 %, and the advice holds
    longer = RunView("evals", view.series, meta={"planned_steps": 50_000})
    assert any(a.startswith(CHECK_INIT) for a in diagnose_early(longer, event).actions)


def test_a_negative_loss_scale_is_a_placeholder_not_a_collapse() -> None:
    """Megatron prints "loss scale: -1.0" on every line when DeepSpeed owns the optimizer: no loss scale
    is logged, so "check the loss scaling" has nothing to check and the cause is not a precision fault."""
    view, event = _early_rise_run(0, "warmup")
    view.series["loss_scale"] = Series(view.series["loss"].steps, np.full(view.series["loss"].steps.size, -1.0))
    diagnosis = diagnose_early(view, event)  # type: ignore[arg-type]
    assert diagnosis.cause != "numerical"
    assert not any(a.startswith("Check the loss scaling") for a in diagnosis.actions)
    numerical = next(v for v in diagnosis.path if v.node == "numerical")
    assert numerical.answer == "no" and numerical.evidence["loss_scale_drop"] is None


def test_a_logged_but_short_grad_norm_is_not_said_to_be_missing() -> None:
    """Megatron GPT-2 n8 logs the grad norm every 10 steps: 18 samples, too few for the SNR's window. Question 5
    is unknown for lack of samples, not for lack of the signal: "the log lacks the global gradient norm" and
    "Log ... the global gradient norm" are false there. Without a grad norm they are still said."""
    from stab_core.analysis import analyze_run

    rng = np.random.default_rng(0)
    steps = np.arange(1, 301)
    loss = 3.0 - 0.001 * steps + 0.02 * rng.standard_normal(steps.size)
    loss[200] = 6.0
    grad = Series(steps[::20], 1.0 + 0.05 * rng.standard_normal(steps[::20].size))

    def claims(series: dict[str, Series]) -> list[str]:
        (item,) = analyze_run(RunView("r", series)).spike_dicts()
        return [c["text"] for c in item["claims"] if c["holds"] is not False]

    said = claims({"loss": Series(steps, loss), "grad_norm": grad})
    question5 = [t for t in said if t.startswith("Question 5")]
    assert question5 and "too few samples" in question5[0] and "lacks" not in question5[0]
    assert not any(t.startswith("Log ") and "global gradient norm" in t for t in said)
    without = claims({"loss": Series(steps, loss)})
    assert any(t.startswith("Question 5") and "lacks the global gradient norm" in t for t in without)
    assert any(t.startswith("Log ") and "global gradient norm" in t for t in without)


def test_a_cumulative_clock_gives_the_step_time(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """LLaMA-Factory's trainer_log.jsonl logs ``elapsed_time`` ("H:MM:SS" since the start), no per-step time:
    its increase over the steps between two rows is the mean step time, so the Cost page does not say
    "logs no step time". 5 steps every 196.8 s (0:32:48 per 5 steps) -> 393.6 s per step."""
    import json

    from ingest.importing.importer import import_logs
    from ingest.services.run_cost import run_cost_inputs
    from tests.conftest import open_analysed_store

    rows = [
        {
            "current_steps": 5 * i,
            "total_steps": 100,
            "loss": 2.3 - 0.01 * i,
            "lr": 1e-5,
            "epoch": 0.01 * i,
            "percentage": 5.0 * i,
            "elapsed_time": f"{(1968 * i) // 3600}:{(1968 * i) % 3600 // 60:02d}:{1968 * i % 60:02d}",
            "remaining_time": "1:00:00",
        }
        for i in range(1, 21)
    ]
    log = tmp_path / "trainer_log.jsonl"
    log.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    store = open_analysed_store(tmp_path / "store")
    (report,) = import_logs(store, [log], run="lf")
    assert run_cost_inputs(store, store.run_info(report["run"])).step_time_s == 1968 / 5


def test_an_rl_or_gan_loss_is_not_told_to_check_its_initialisation_or_restart() -> None:
    """A loss with a moving target (an actor-critic's critic loss, a GAN generator's against its
    discriminator, an RL total loss beside value and policy losses) rises while the run is healthy: "a
    healthy loss falls from the first steps" and "it has not come back to its level" are a supervised
    loss's premises, not said of these (docs/diagnosis.md, "Actions and claims")."""
    restart = "Restart from the beginning"
    view, event = _early_rise_run(0, "warmup")
    said = diagnose_early(view, event).actions  # type: ignore[arg-type]
    assert any(a.startswith(CHECK_INIT) for a in said) and any(a.startswith(restart) for a in said)
    loss = view.series["loss"]
    moving = [
        RunView("ddpg", view.series, meta={"loss_source": {"name": "train/loss_critic", "kind": "critic"}}),
        RunView("gan", {**view.series, "loss_dis": Series(loss.steps, loss.values)}),
        RunView("ppo", {**view.series, "value_loss": loss, "policy_gradient_loss": loss}),
    ]
    for run in moving:
        diagnosis = diagnose_early(run, event)  # type: ignore[arg-type]
        assert not any(a.startswith((CHECK_INIT, restart)) for a in diagnosis.actions), run.name
        holds = {c.premise: c.holds for c in diagnosis.checks}
        assert holds["onset_in_first_steps"] is False and holds["not_recovered_level"] is False
