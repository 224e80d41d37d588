"""Round 18 (act24, issue #32): actions and causes whose premise the log supports.

- An action whose premise is the run's precision is said from the precision the log states: a banner
  naming the compute dtype in torch's spelling (LLaMA-Factory's ``compute dtype: torch.bfloat16``, a
  driver's ``COMPUTE_DTYPE: torch.bfloat16``) and torch's ``ComplexHalf support is experimental``
  warning (a complex half tensor: fp16 compute) answer "record the run's precision" and "log the fp16
  loss scale" (false on a bf16 run).

Logs of those shapes, written here."""

from __future__ import annotations

import pytest

from ingest.formats.stated_precision import stated_precision


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("[INFO] Process rank: 0, device: cuda:0, distributed training: True, compute dtype: torch.bfloat16", "bf16"),
        ("COMPUTE_DTYPE: torch.bfloat16 (auto-detected: CUDA SM 90 (bf16 supported))", "bf16"),
        ("COMPUTE_DTYPE: torch.float32 (auto-detected: CUDA SM 75 (bf16 not supported, using fp32))", "fp32"),
        (
            "epoch 0 loss 0.31\n/usr/lib/torch/autograd/__init__.py:197: UserWarning: ComplexHalf support is "
            "experimental and many operators don't support it yet. (Triggered internally at EmptyTensor.cpp:31.)",
            "fp16",
        ),
    ],
)
def test_a_stated_compute_dtype_or_complex_half_states_the_precision(text: str, expected: str) -> None:
    assert stated_precision(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        "BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_compute_dtype=torch.bfloat16)",  # a quantised layer's
        "x = t.to(dtype=torch.float16)",
        "compute dtype: torch.bfloat16\nCOMPUTE_DTYPE: torch.float32",  # two relaunches disagree
    ],
)
def test_no_compute_dtype_setting_states_nothing(text: str) -> None:
    assert stated_precision(text) is None


def test_a_setting_outranks_the_complex_half_warning() -> None:
    text = "Namespace(bf16=True, lr=0.001)\nUserWarning: ComplexHalf support is experimental"
    assert stated_precision(text) == "bf16"
