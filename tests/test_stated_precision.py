"""The precision a log's own settings dump states is the run's (issue #32; docs/diagnosis.md, "Actions and claims"): an
argparse ``Namespace``, a JSON/YAML/dict config, ``key: value`` banners, a hydra print; a tensor's or code's dtype
is no setting, and a contradiction says nothing. Logs of those shapes, written here."""

from __future__ import annotations

from pathlib import Path

import pytest

from ingest.formats import FALLBACK_READERS, read_log
from ingest.formats.raw_text import holds_match
from ingest.formats.stated_precision import _KEYWORD, _KEYWORD_RE2, stated_precision


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Namespace(batch_size=8, ctx=[gpu(0)], dtype='float32', epochs=40, lr=0.01)", "fp32"),
        ("Namespace(batch_size=8, fp16=False, lr=0.01, seed=3)", "fp32"),
        ("Namespace(batch_size=8, fp16=True, lr=0.01)", "fp16"),
        ('{"train": {"mixed_precision": "bf16", "dtype": "float32"}}', "bf16"),
        ("trainer:\n  precision: 16-mixed\n  max_steps: 900", "fp16"),
        ("amp: true\nbatch: 64", "fp16"),
        ("use_amp=True, amp_dtype='bfloat16'", "bf16"),
        ("  bf16: true\n  fp16: false\n", "bf16"),
        ("python train.py --fp16=True --lr=3e-4", "fp16"),
        ("model:\n  dtype: bfloat16\n", "bf16"),
    ],
)
def test_a_dump_states_the_precision(text: str, expected: str) -> None:
    assert stated_precision(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        "loss tensor(2.31, device='cuda:0', dtype=torch.float16)",
        "('critic', <tf.Tensor 'add_3:0' shape=() dtype=float32>)",
        "    with torch.autocast(device_type='cuda', dtype=torch.bfloat16):",
        '{"torch_dtype": "bfloat16", "num_hidden_layers": 4}',
        "eval precision: 32.5 recall: 16",
        "Namespace(dtype='float16')\nNamespace(dtype='bfloat16')",  # relaunched with another setting
        "Training on 8 GPUs in mixed precision",
    ],
)
def test_no_setting_states_nothing(text: str) -> None:
    assert stated_precision(text) is None


def test_the_fallback_reader_carries_the_namespace_precision(tmp_path: Path) -> None:
    path = tmp_path / "train.log"
    lines = ["Namespace(backbone='resnet18', batch_size=4, dtype='float32', epochs=3, lr=0.002)"]
    lines += [f"Epoch 0 iteration {i:04d}/0100 training loss {3.0 - 0.02 * i:.3f}" for i in range(1, 40)]
    path.write_text("\n".join(lines) + "\n")
    parsed = read_log([path], reader_set=FALLBACK_READERS)
    assert parsed.meta["precision"] == "fp32"


def test_only_lines_naming_a_setting_are_searched_and_a_wrapped_value_still_counts() -> None:
    # metric lines ('consumed samples' holds 'amp' inside a word) are skipped; a YAML value on the line
    # under its key is still read, and a dump under many metric lines too
    metrics = [f" iteration {i}/ 1000 | consumed samples: {8 * i} | lm loss: 2.5E+00 |" for i in range(5000)]
    assert stated_precision("\n".join([*metrics, "mixed_precision:", "  bf16"])) == "bf16"
    assert stated_precision("\n".join(metrics)) is None
    assert stated_precision("\n".join(["Namespace(fp16=False, lr=0.1)", *metrics])) == "fp32"


@pytest.mark.parametrize(
    "text",
    [
        "",
        " iteration 3/ 100 | consumed samples: 24 | lm loss: 2.5E+00 |",
        "amp: true",
        "Samples: 9\nuse_amp=True",
        "x\namp",
        "\u00e9amp=1",  # a non-ASCII letter before 'amp' is no ASCII letter: the word starts there
        "lamp\nCamp",
        "torch_dtype: bfloat16",
        "Half",
        "hal f precisio n",
    ],
)
def test_the_one_scan_that_skips_a_head_finds_a_keyword_where_the_line_search_does(text: str) -> None:
    # the RE2 scan (one pass, no look-behind) must say "none" exactly where the regex finds none, or a
    # dump would be skipped
    assert holds_match(text, _KEYWORD_RE2) == bool(_KEYWORD.search(text))
