"""Round 23, f29d (issue #32): statements that hold on the log.

No words about a grad norm a run does not log, beyond that it is not logged; a non-finite grad norm on the log's
last sample, the loss finite, is neither diverged nor a reason to move to bf16; a throughput span half of
whose samples ran at the norm is no slower level; a validation incident is back only when every member
that went non-finite is finite again. Series of each shape are written here, not read from the corpus."""

from __future__ import annotations

from typing import Any

import numpy as np

from stab_core.analysis import analyze_run
from stab_core.runview import RunView, Series
from stab_core.skipped_steps import skipped_steps
from stab_core.spikes import SpikeEvent
from stab_core.throughput import detect_throughput_drops


def _said(item: dict[str, Any]) -> list[str]:
    """The texts an incident says (claims whose premise held or is unknown)."""
    return [str(c["text"]) for c in item["claims"] if c.get("holds") is not False]


def _early_jump(grad: bool) -> RunView:
    """A loss that falls for 12 samples, jumps 3x at one sample and is back at the next."""
    steps = np.arange(1, 61)
    loss = 6.0 * np.exp(-steps / 30.0) + 2.0
    loss[12] *= 3.0
    series = {"loss": Series(steps, loss)}
    if grad:  # a grad norm logged only from well after the jump
        series["grad_norm"] = Series(steps[30:], np.full(30, 1.0))
    return RunView(name="early", series=series, meta={})


def _early_cause(view: RunView) -> str:
    for item in analyze_run(view).spike_dicts():
        if item["kind"] == "early_instability":
            return next(str(c["text"]) for c in item["claims"] if c["kind"] == "cause")
    raise AssertionError("no early instability")


def test_an_early_jump_in_a_run_without_grad_norm_says_nothing_of_one_but_that_it_is_not_logged() -> None:
    # round 23 (f29d): "whether it moved before the grad norm cannot be told" said what a grad norm would do
    # on a run that logs none; the sentence now says only that it is not logged
    text = _early_cause(_early_jump(grad=False))
    assert text.startswith("Cause unknown") and "grad norm" not in text, text
    assert "gradient norm is not logged" in text, text
    # a grad norm logged, none before the onset: the lead cannot be told, as before
    assert "the log has no grad norm before it" in _early_cause(_early_jump(grad=True))


def _event(step: int, **over: object) -> SpikeEvent:
    fields: dict[str, object] = dict(
        metric="grad_norm", start=step, peak=step, end=step, peak_value=float("nan"), baseline=0.12,
        ratio=float("inf"), z=float("inf"), duration=0, recovered=False, recovery_step=None, diverged=True,
        nonfinite=True, steps_lost=0, n_samples=1,
    )  # fmt: skip
    fields.update(over)
    return SpikeEvent(**fields)  # type: ignore[arg-type]


def test_a_nonfinite_grad_norm_on_the_last_sample_with_the_loss_finite_is_cut_off_not_diverged() -> None:
    # round 23 (f29d): an fp16 GRPO run whose last logged grad norm is nan, its loss finite: no later sample
    # shows whether it went on, so neither "diverged" nor "recovered"
    steps = np.arange(1, 41)
    grad_values = 0.12 + 0.01 * np.sin(steps)
    grad_values[[2, 11, 39]] = np.nan
    grad, loss = Series(steps, grad_values), Series(steps, np.zeros(steps.size))
    (last,) = skipped_steps([_event(40)], grad, loss)
    assert not last.diverged and not last.recovered
    # a skipped step inside the run is still recovered at the next sample
    (inside,) = skipped_steps([_event(12)], grad, loss)
    assert inside.recovered and inside.recovery_step == 13
    # the loss non-finite with it: the detector's call stands
    broken = Series(steps, np.where(steps == 40, np.nan, 0.0))
    assert skipped_steps([_event(40)], grad, broken)[0].diverged


def test_an_fp16_grpo_runs_last_nan_grad_norm_advises_no_bf16_and_says_no_divergence() -> None:
    # the whole run: reward beside a policy loss printed 0.0 (a signed objective), fp16 stated, NaN grad norms
    # the run stepped over and one on its last sample
    steps = np.arange(1, 41)
    grad = 0.12 + 0.02 * np.sin(steps)
    grad[[2, 11, 18, 39]] = np.nan
    view = RunView(
        name="grpo",
        series={
            "loss": Series(steps, np.where(steps % 2 == 0, 0.0, -0.0)),
            "grad_norm": Series(steps, grad),
            "reward": Series(steps, 1.2 + 0.1 * np.cos(steps)),
        },
        meta={"precision": "fp16"},
    )
    items = [i for i in analyze_run(view).spike_dicts() if 40 in range(int(i["start"]), int(i["until"]) + 1)]
    assert items, "the last nan grad norm is an incident"
    said = _said(items[0])
    assert not any("bf16" in t or t.startswith("Diverged") for t in said), said
    assert items[0]["severity"] != "divergence"


def test_single_slow_steps_among_fast_ones_are_no_slower_level() -> None:
    # round 23 (f29d): mmdet's step time, 0.6 s with single 1.2 s steps; ten samples of which five are slow
    # have a window median of 0.9 s, 22 % under the norm, but no level: the run never ran slower
    rng = np.random.default_rng(3)
    values = 0.6 + 0.01 * rng.standard_normal(140)
    values[[10, 40, 90, 120]] = 1.2
    values[[100, 102, 105, 106, 109]] = 1.2
    steps = np.arange(140, dtype=np.int64) * 50
    assert detect_throughput_drops(steps, values, "step_time_s") == []
    # most of the ten slow: a slower level, said
    values[[101, 103, 104]] = 1.2
    drops = detect_throughput_drops(steps, values, "step_time_s")
    assert [(d.start, d.end) for d in drops] == [(5000, 5450)], drops


def test_a_validation_incident_is_back_when_every_nonfinite_member_is() -> None:
    # round 23 (f29d): YOLO's val/box_loss nan at one epoch and back at the next while val/cls_loss stays inf
    # for twelve: the incident is not back at the next epoch
    epochs = np.arange(1, 41)
    train = 5.0 * np.exp(-epochs / 20.0) + 1.0
    box = 3.5 - 0.02 * epochs
    cls = 4.0 - 0.05 * epochs
    box[3] = np.nan
    cls[3:15] = np.inf
    view = RunView(
        name="yolo",
        series={
            "loss": Series(epochs, train),
            "val/box_loss": Series(epochs, box),
            "val/cls_loss": Series(epochs, cls),
        },
        meta={},
    )
    items = [i for i in analyze_run(view).spike_dicts() if int(i["start"]) <= 4 <= int(i["until"])]
    assert items
    recovery = next(t for t in _said(items[0]) if t.startswith(("Back", "Recovered")))
    assert "step 16" in recovery, recovery
