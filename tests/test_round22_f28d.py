"""Round 22, f28d (issue #32): what StabScope states about an incident holds on the log.

The precision a log's dumped training script runs in (its autocast contexts) answers the precision
actions. Logs and series of each shape are written here, not read from the corpus."""

from __future__ import annotations

import pytest

from ingest.formats.stated_precision import stated_precision

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
