"""Round 24, f30c (issue #32; docs/diagnosis.md, "round 24: f30c"): a non-finite validation loss is back where it is
back at its level, not where it is merely finite again; no precision advice on a validation-only overflow; an
early blow-up of a quiet loss past the early-rise window."""

from __future__ import annotations

from typing import Any

import numpy as np

from stab_core.analysis import analyze_run
from stab_core.early_blowups import early_blowup
from stab_core.held_out import HeldOutNonfinite, held_out_nonfinite
from stab_core.runview import RunView, Series

PRECISION = "Record the run's precision (fp16 or bf16): moving to bf16 helps only an fp16 run."

# a YOLO-like results.csv: per-epoch validation part that overflows once, then stands at 28x and 3.7x its level
VAL = [10.8, 10.6, 10.4, 10.2, 10.5, 15.5, np.inf, 292.0, 39.0, 10.5, 9.9, 10.5, 10.2, 10.1, 10.0, 9.9, 9.8]


def _series(values: list[float], first: int = 1) -> Series:
    return Series(np.arange(first, first + len(values), dtype=np.int64), np.asarray(values, dtype=np.float64))


def _yolo_view(val: list[float]) -> RunView:
    n = len(val)
    train = list(6.8 - 0.05 * np.arange(n))
    return RunView(
        "yolo",
        {
            "loss": _series(train),
            "train/cls_loss": _series([t + 5.0 for t in train]),
            "val/cls_loss": _series(val),
            "val/box_loss": _series([6.5 - 0.01 * i for i in range(n)]),
        },
    )


def _val_incident(view: RunView) -> dict[str, Any]:
    return next(d for d in analyze_run(view).spike_dicts() if d["metric"] == "val/cls_loss")


def _said(item: dict[str, Any], kind: str) -> list[str]:
    return [c["text"] for c in item["claims"] if c["kind"] == kind and c["holds"] is not False]


def test_a_nonfinite_validation_loss_is_back_at_its_level_not_when_finite_again() -> None:
    (event,) = held_out_nonfinite({"val/cls_loss": _series(VAL)}, None)
    assert isinstance(event, HeldOutNonfinite)
    # inf at 7, 292 at 8 and 39 at 9 are not back: 10.5 at 10 is, within 1.1x of the median 10.5 of 5-6's three
    assert (event.start, event.end, event.recovery_step, event.finite_again) == (7, 9, 10, 8)
    assert event.baseline == float(np.median([10.2, 10.5, 15.5]))
    item = _val_incident(_yolo_view(VAL))
    assert _said(item, "recovery") == [
        "Recovered at step 10: val/cls_loss back within 1.1x of its level before it went non-finite (10.5)."
    ]


def test_a_nonfinite_validation_loss_finite_again_but_not_at_its_level_is_said_so() -> None:
    never = [*VAL[:8], 40.0, 35.0, 38.0, 36.0]
    (event,) = held_out_nonfinite({"val/cls_loss": _series(never)}, None)
    assert (event.recovered, event.recovery_step, event.finite_again) == (False, None, 8)
    item = _val_incident(_yolo_view(never))
    (text,) = _said(item, "recovery")
    assert text.startswith("Finite again at step 8, but not back to its level before (10.5)")
    assert "Recovered" not in text


def test_a_second_nonfinite_value_inside_the_same_incident_is_that_incident() -> None:
    twice = [*VAL[:8], np.inf, 40.0, 10.4, 10.2, 10.1, 10.0]
    events = held_out_nonfinite({"val/cls_loss": _series(twice)}, None)
    assert [(e.start, e.recovery_step) for e in events] == [(7, 11)]


def test_no_precision_advice_on_a_validation_only_overflow() -> None:
    # validation steps no optimizer: the advice's premise (the incident hurt the loss trained on) fails
    item = _val_incident(_yolo_view(VAL))
    assert PRECISION not in _said(item, "action")
    check = next(a for a in item["action_evidence"] if a["premise"] == "fp16_loss_felt")
    assert check["holds"] is False


def _warming_loss(rise: list[float], at: int = 70, n: int = 1000) -> Series:
    rng = np.random.default_rng(3)
    values = 2.7 + 5.4 * np.exp(-np.arange(n) / 5.0) + rng.uniform(-0.08, 0.08, n)
    values[at : at + len(rise)] = rise
    return _series(list(values))


def test_an_early_blowup_past_the_early_window_is_a_spike() -> None:
    # steps 70-72 of 1000 at 1.24-1.46x the lowest level held so far, back at 73: an early blow-up
    loss = _warming_loss([4.3, 4.7, 4.0])
    assert early_blowup(loss, 71, 74, 1000)
    assert not early_blowup(_warming_loss([4.3, 4.7, 3.0]), 71, 74, 1000)  # two samples up: a noisy batch pair
    assert not early_blowup(_warming_loss([4.3, 4.7, 4.0], at=300), 301, 304, 1000)  # 30 % in: not early
    assert not early_blowup(loss, 71, 74, None)
    loss_incidents = [d for d in analyze_run(RunView("warm", {"loss": loss})).spike_dicts() if d["start"] <= 73]
    assert [d["severity"] for d in loss_incidents if d["start"] >= 70] == ["spike"]
