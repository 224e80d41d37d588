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
