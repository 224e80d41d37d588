"""Round 25, r25d (issue #32: every statement a checked claim; docs/diagnosis.md, "Rules added in round 25"):
sibling validation blow-ups are one incident; "early" needs the incident inside the warm-up where the log shows
one; "check the initialisation" needs a loss that did not fall from the first steps; a held-out loss that blew
up into NaN is dated from its blow-up; a loss printed under its resolution has no ratio and comes back to its
print's floor; one span formatter for the CLI and the Spikes page. Synthetic series, no corpus file."""

from __future__ import annotations

import numpy as np
import pytest

from stab_core.analysis import analyze_run, find_incidents
from stab_core.fell_from_start import fell_from_start
from stab_core.held_out import held_out_nonfinite
from stab_core.incident_headline import incident_headline, span_text
from stab_core.level_shifts import level_shifts
from stab_core.quantised_levels import back_at_most, floored_level, under_resolution
from stab_core.run_end_rises import lasting_at_end
from stab_core.runview import RunView, Series
from stab_core.warmup_end import warmup_end

EPOCHS = np.arange(0, 50, dtype=np.int64)


def _yolo_view(ramp_epochs: int | None = 5) -> RunView:
    """A YOLO results.csv run trained from scratch: every training loss falls; val/cls_loss blows up 7-13 (back at
    14), val/dfl_loss 7-10 (back at 11); ``ramp_epochs``: the weights' LR group rises to that epoch (None: no LR)."""
    train = 12.0 * np.exp(-EPOCHS / 25.0) + 2.0
    cls = 4.6 * np.exp(-EPOCHS / 30.0)
    cls[6:14] = [5.5, 640.0, 1070.0, 40.0, 190.0, 17.0, 17.0, 6.6]
    dfl = 4.1 * np.exp(-EPOCHS / 30.0)
    dfl[6:11] = [5.2, 20.0, 15.0, 9.0, 4.8]
    box = 3.7 * np.exp(-EPOCHS / 40.0)
    series = {
        "loss": Series(EPOCHS, train),
        "val/cls_loss": Series(EPOCHS, cls),
        "val/dfl_loss": Series(EPOCHS, dfl),
        "val/box_loss": Series(EPOCHS, box),
    }
    if ramp_epochs is not None:
        peak, epoch = 0.009, EPOCHS.astype(float)
        ramp = epoch <= ramp_epochs
        lr = np.where(ramp, 0.0018 + (peak - 0.0018) * epoch / ramp_epochs, peak * (1.0 - (epoch - ramp_epochs) / 50.0))
        series["lr/pg1"] = Series(EPOCHS, lr)
        series["lr"] = Series(EPOCHS, np.linspace(0.08, 0.0005, EPOCHS.size))  # the bias group: falls
    return RunView("yolo", series, {})


def _blowup(view: RunView) -> list:
    return [i for i in find_incidents(view) if any(m.metric.startswith("val/") for m in i.members)]


def test_sibling_validation_losses_that_blow_up_together_are_one_incident_back_when_the_last_is() -> None:
    [incident] = _blowup(_yolo_view())
    assert set(incident.metrics) == {"val/cls_loss", "val/dfl_loss"}
    assert incident.primary.metric == "val/cls_loss"  # the largest ratio first
    assert incident.start == 7 and incident.loss_recovered_at == 14 and incident.severity == "spike"


def test_a_blow_up_after_the_warm_up_is_no_early_instability_one_inside_it_is() -> None:
    assert warmup_end(_yolo_view().series) == 5  # the weights' group; the bias group falls
    assert _blowup(_yolo_view(5))[0].kind == "spike"
    assert _blowup(_yolo_view(10))[0].kind == "early_instability"  # the LR still ramping at epoch 7
    assert _blowup(_yolo_view(None))[0].kind == "early_instability"  # no warm-up shown: the first window


def test_check_the_initialisation_is_not_said_while_the_training_loss_falls_from_the_first_steps() -> None:
    [spike] = [s for s in analyze_run(_yolo_view(10)).spikes if s.incident and s.incident.start == 7]
    assert spike.incident.kind == "early_instability"
    assert not any("initialisation" in a for a in spike.diagnosis.actions)
    loss = Series(EPOCHS, 12.0 * np.exp(-EPOCHS / 25.0) + 2.0)
    assert fell_from_start(loss, 7, 14)[0] is True
    flat = Series(EPOCHS, np.full(EPOCHS.size, 3.0))
    assert fell_from_start(flat, 7, 14)[0] is False  # a loss that never fell: the premise may hold
    rose = Series(EPOCHS, np.where(EPOCHS == 9, 20.0, 12.0 * np.exp(-EPOCHS / 25.0) + 2.0))
    assert fell_from_start(rose, 7, 14)[0] is False  # the training loss rose in the incident
    assert fell_from_start(None, 7, 14)[0] is None


def test_a_held_out_loss_that_blew_up_into_nan_is_dated_from_its_blow_up() -> None:
    steps = np.arange(1, 21, dtype=np.int64)
    cls = np.linspace(56.0, 1.5, steps.size)
    cls[2:5] = [706.0, np.nan, np.inf]  # epoch 3 x19, NaN at 4, inf at 5, back at 6
    box = np.linspace(2.0, 1.3, steps.size)
    box[2:4] = [5.8, np.nan]
    events = held_out_nonfinite({"val/cls_loss": Series(steps, cls), "val/box_loss": Series(steps, box)}, None)
    assert {(e.metric, e.start, e.peak, e.recovery_step) for e in events} == {
        ("val/box_loss", 3, 4, 5),
        ("val/cls_loss", 3, 4, 6),
    }
    steady = np.linspace(2.0, 1.3, steps.size)
    steady[3] = np.nan  # no rise before the NaN: dated from the NaN, as before
    [event] = held_out_nonfinite({"val_loss": Series(steps, steady)}, None)
    assert event.start == 4


def _quantised_loss() -> tuple[np.ndarray, np.ndarray]:
    """A loss printed with 4 decimals: 0.0000-0.0001 at its floor, up to 0.04 over ~450 samples, back to
    0.0001-0.0002 at the end."""
    rng = np.random.default_rng(0)
    steps = np.arange(1, 2501, dtype=np.int64)
    loss = np.round(0.00006 * rng.random(steps.size) + 0.00002, 4)
    loss[:800] = np.round(np.linspace(0.5, 0.0003, 800), 4)
    rise = np.arange(450)
    loss[1995:2445] = np.round(0.0004 + 0.03 * np.exp(-rise / 80.0) * rng.random(450), 4)
    loss[2445:] = np.round(0.0001 + 0.0001 * rng.integers(0, 2, 55), 4)
    return steps, loss


def test_a_level_under_the_print_s_resolution_is_floored_and_a_loss_back_near_it_came_back() -> None:
    assert floored_level(0.0, 1e-4) == 5e-05 and floored_level(0.3, 1e-4) == 0.3
    assert under_resolution(5e-05, 1e-4) and not under_resolution(1e-4, 1e-4) and not under_resolution(1e-9, 0.0)
    assert back_at_most(5e-05, 1e-4) > 2e-4 and back_at_most(1.0, 1e-4) == 1.1
    steps, loss = _quantised_loss()
    [event] = level_shifts(steps, loss)
    assert event.start >= 1951 and event.recovered and 2440 <= (event.recovery_step or 0) <= 2500
    # a level that lasts at the end is judged with a noise of at least one print step
    assert not lasting_at_end(loss[1700:1995], loss[1995:])
    floor = np.round(np.random.default_rng(1).random(300) * 0.0001, 4)  # printed 0.0000-0.0001
    assert lasting_at_end(floor, np.full(100, 0.002)) and not lasting_at_end(floor, np.full(100, 0.0002))


def test_no_ratio_is_said_against_a_level_under_the_print_s_resolution() -> None:
    steps, loss = _quantised_loss()
    spikes = analyze_run(RunView("q", {"loss": Series(steps, loss)}, {})).spikes
    [late] = [s for s in spikes if s.incident is not None and s.incident.start > 1900 and s.incident.severity != "blip"]
    assert late.incident.print_floor == pytest.approx(1e-4) and late.incident.severity != "divergence"
    item = late.to_dict()
    assert "print's floor" in incident_headline(item) and "x" not in incident_headline(item).split(":")[1]
    [status] = [c for c in item["claims"] if c["kind"] == "status"]
    assert "floor" in status["text"] and "x its level" not in status["text"]


def test_the_cli_and_the_page_say_one_span() -> None:
    item = {"start": 4, "end": 5, "until": 6, "peak": 4, "metric": "val/box_loss", "ratio": None}
    assert span_text(item) == "4-6" and "(4-6)" in incident_headline(item)
    assert span_text({"start": 4, "end": 5}) == "4-5"  # an old record without ``until``
    members = [{"metric": "loss", "start": 4, "end": 5, "ratio": 3.0}, {"metric": "grad_norm", "start": 2, "end": 2}]
    led = {**item, "metric": "loss", "members": members}  # a grad-norm spike led it
    assert span_text(led) == "2-6" and "(2-6)" in incident_headline(led)


def test_a_launch_that_stops_on_its_early_rise_ended_during_it_and_did_not_diverge() -> None:
    steps = np.arange(0, 2, dtype=np.int64)
    view = RunView(
        "two_epochs",
        {"loss": Series(steps, np.array([15.18, 22.58])), "lr": Series(steps, np.array([1e-6, 1e-5]))},
        {},
    )
    [spike] = analyze_run(view).spikes
    assert spike.incident is not None and spike.incident.severity != "divergence"
    item = spike.to_dict()
    said = " ".join(c["text"] for c in item["claims"] if c["holds"] is not False)
    assert "Diverged" not in said and "has not come back" not in said
    assert not any("Restart from the beginning" in a for a in spike.diagnosis.actions)
