"""Round 22, f28d (issue #32): what StabScope states about an incident holds on the log.

The precision a log's dumped training script runs in (its autocast contexts) answers the precision
actions; a loss rise that fell back from its peak by most of it is a spike, not a divergence; a
validation loss that overflowed while training stayed finite is no training precision fault. Logs and
series of each shape are written here, not read from the corpus."""

from __future__ import annotations

import numpy as np
import pytest

from ingest.formats.stated_precision import stated_precision
from stab_core.analysis import analyze_run
from stab_core.fell_back import end_level
from stab_core.runview import RunView, Series

_SCRIPT_HEAD = "import os\nimport torch\nimport torch.nn.functional as F\n\n"


@pytest.mark.parametrize(
    ("code", "expected"),
    [
        # every context names bf16 (one of them enabled=True): the dumped code runs in bf16
        (
            "def eval_val(model):\n    with torch.autocast(device_type='cuda', dtype=torch.bfloat16, enabled=True):\n"
            "        loss = model(x)\n\nfor step in range(9):\n"
            '    with torch.autocast(device_type="cuda", dtype=torch.bfloat16):\n        loss = model(x)\n',
            "bf16",
        ),
        ("with torch.cuda.amp.autocast(dtype=torch.float16):\n    y = f(x)\n", "fp16"),
        # the code outranks an fp16 switch stated off: a bf16 autocast leaves that switch off
        ("Namespace(fp16=False)\nwith torch.autocast('cuda', dtype=torch.bfloat16):\n    y = f(x)\n", "bf16"),
        # a dtype chosen at run time names none; two contexts naming two dtypes contradict
        ("with torch.autocast('cuda', dtype=torch.bfloat16 if bf16 else torch.float16):\n    y = f(x)\n", None),
        (
            "with torch.autocast('cuda', dtype=torch.bfloat16):\n    y = f(x)\n"
            "with torch.autocast('cuda', dtype=torch.float16):\n    z = f(x)\n",
            None,
        ),
        # an autocast turned off by a literal states no mixed precision: the other context decides
        (
            "with torch.autocast('cuda', dtype=torch.float16, enabled=False):\n    y = f(x)\n"
            "with torch.autocast('cuda', dtype=torch.bfloat16):\n    z = f(x)\n",
            "bf16",
        ),
    ],
)
def test_a_dumped_script_states_the_precision_its_autocast_names(code: str, expected: str | None) -> None:
    # round 22 (f28d, issue #32): a log that prints its training script before its records (parameter-golf's
    # train_gpt.py) states the precision the code runs in; the settings dump says nothing of it
    records = "\n".join(f"step:{i}/500 train_loss:{6.9 - 0.01 * i:.4f} train_time:{700 * i}ms" for i in range(1, 30))
    assert stated_precision(_SCRIPT_HEAD + code + "=" * 40 + "\n" + records) == expected


def test_an_autocast_line_with_no_dumped_script_states_nothing() -> None:
    # a traceback quotes the frame's line, not the script: which contexts the run entered is unknown
    frame = 'File "train.py", line 88, in step\n    with torch.autocast(device_type="cuda", dtype=torch.bfloat16):'
    assert stated_precision("Traceback (most recent call last):\n  " + frame + "\nRuntimeError: CUDA OOM") is None


def _climb_then(after: np.ndarray, first: int = 2) -> RunView:
    """A loss that starts tiny (an untrained detection head) for ``first`` steps, climbs 20x over the next 75,
    then follows ``after`` (one value a step)."""
    rng = np.random.default_rng(7)
    start = 0.07 * (1.0 + 0.02 * rng.standard_normal(first))
    climb = np.linspace(0.08, 1.5, 75)
    values = np.concatenate([start, climb, after * (1.0 + 0.01 * rng.standard_normal(after.size))])
    return RunView("climb", {"loss": Series(np.arange(1, values.size + 1, dtype=np.int64), values)})


def _loss_incidents(view: RunView) -> list[dict[str, object]]:
    return [d for d in analyze_run(view).spike_dicts() if d["metric"] == "loss"]


def test_a_rise_whose_loss_fell_back_by_most_of_it_is_a_spike_not_a_divergence() -> None:
    # the loss falls from its peak 1.5 to 0.3 over the next 2000 steps: the run trains on, it did not diverge
    items = _loss_incidents(_climb_then(0.3 + 1.2 * np.exp(-np.arange(2000) / 300.0)))
    assert items, "the climb is an incident"
    first = items[0]
    assert first["severity"] == "spike"
    said = " ".join(str(c["text"]) for c in first["claims"])  # type: ignore[attr-defined]
    assert "Diverged" not in said and "divergence" not in said.lower()
    assert "Not back to its level before the rise" in said and "fell again from its peak" in said


def test_a_rise_that_stays_up_to_the_log_end_is_still_a_divergence() -> None:
    # from its peak 1.5 the loss only eases to 1.2: most of the rise stands at the log's end
    items = _loss_incidents(_climb_then(1.2 + 0.3 * np.exp(-np.arange(2000) / 300.0)))
    assert items and items[0]["severity"] == "divergence"


def test_a_rise_from_a_level_of_many_samples_that_fell_back_part_way_is_still_a_divergence() -> None:
    # the level before the rise rests on 40 samples: a trained level; the loss ends at 0.3, 4x above it
    items = _loss_incidents(_climb_then(0.3 + 1.2 * np.exp(-np.arange(2000) / 300.0), first=40))
    assert items and items[0]["severity"] == "divergence"
    assert end_level(Series(np.arange(3, dtype=np.int64), np.ones(3)), 0) is None  # too few samples after the peak


def test_a_validation_overflow_beside_finite_training_losses_is_no_training_precision_fault() -> None:
    # a training loss falling smoothly for 60 epochs; the validation loss, evaluated each epoch, is inf at
    # epoch 30 only (a validation pass in half precision overflowed): no training step was non-finite
    epochs = np.arange(1, 61, dtype=np.int64)
    train = 2.0 * np.exp(-epochs / 40.0) + 0.5
    val = train * 1.1
    val[29] = np.inf
    view = RunView("val_inf", {"loss": Series(epochs, train), "val_loss": Series(epochs, val)})
    items = [d for d in analyze_run(view).spike_dicts() if d["metric"] == "val_loss"]
    assert items, "the validation overflow is an incident"
    claims = items[0]["claims"]
    assert isinstance(claims, list)
    said = {str(c["text"]): c["holds"] for c in claims}
    cause = next(str(c["text"]) for c in claims if c["kind"] == "cause")
    assert cause.startswith("Non-finite in the validation loss only") and "Precision fault" not in cause
    # no batch to skip, no training loss scale that halved for it
    assert said.get("Skip the offending batch and any step whose gradients are non-finite.") is not True
    assert not any("loss scale" in text and holds is not False for text, holds in said.items())
