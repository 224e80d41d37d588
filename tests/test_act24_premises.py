"""Issue #32 (docs/diagnosis.md, "Actions and claims"): actions and causes whose premise the log supports.

- An action whose premise is the run's precision is said from the precision the log states: a banner
  naming the compute dtype in torch's spelling (LLaMA-Factory's ``compute dtype: torch.bfloat16``, a
  driver's ``COMPUTE_DTYPE: torch.bfloat16``) and torch's ``ComplexHalf support is experimental``
  warning (a complex half tensor: fp16 compute) answer "record the run's precision" and "log the fp16
  loss scale" (false on a bf16 run).
- A bad batch's shape is read only on a loss with a fixed target (not an RL or GAN objective).

Logs of those shapes, written here."""

from __future__ import annotations

import numpy as np
import pytest

from ingest.formats.stated_precision import stated_precision
from stab_core.analysis import analyze_run
from stab_core.cause_candidates import target_moves
from stab_core.runview import RunView, Series
from tests.test_batch8_shapes import MEMORISING_SPIKES, memorising_run


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


def _cause_text(view: RunView, step: int) -> str:
    for item in analyze_run(view).spike_dicts():
        if item["start"] <= step <= item["until"]:
            return str(next(c for c in item["claims"] if c["kind"] == "cause")["text"])
    raise AssertionError(f"no incident covers step {step}")


def test_a_policy_or_gan_loss_jump_is_no_bad_batch() -> None:
    """The memorising run's dense console (a loss-only jump, back within a sample: a bad batch's shape on a
    supervised loss), its loss logged beside a policy's reward (GRPO, PPO) or a discriminator's loss (a
    GAN): there the loss's target moves with the policy or the opponent, so a jump that comes back is no
    bad batch's signature; the cause is said as unknown."""
    steps, loss = memorising_run(MEMORISING_SPIKES)
    supervised = RunView(name="sft", series={"loss": Series(steps, loss)}, meta={})
    assert _cause_text(supervised, 660).startswith("Cause not confirmed: consistent with a bad batch")
    flat = np.full(steps.size, 0.5)
    for name in ("reward", "rewards/math_reward_fn/mean", "disc_loss"):
        view = RunView(name="rl", series={"loss": Series(steps, loss), name: Series(steps, flat)}, meta={})
        assert target_moves(view.meta, view.series), name
        text = _cause_text(view, 660)
        assert text.startswith("Cause unknown"), (name, text)
        assert "bad batch (a data outlier)" not in text


def test_a_reward_free_run_keeps_a_fixed_target() -> None:
    assert not target_moves({}, ["loss", "grad_norm", "lr", "kl", "entropy", "reward_model_path_len"])
