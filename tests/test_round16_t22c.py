"""Round 16 (t22c, issues #31/#32): nanoGPT-family consoles and epoch-summary consoles."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ingest.formats import read_log
from tests.test_formats_prefixes import _write


def _bpc_console() -> list[str]:
    lines = [""]
    for step in range(0, 101, 10):
        if step % 50 == 0:
            lines.append(f"step {step}: train loss {5.0 - step / 40:.4f} BPC, val loss {5.1 - step / 50:.4f} BPC")
        lines.append(f"iter {step}: loss {5.0 - step / 41:.4f} BPC, time {300 + step:.2f}ms, mfu 8.50%")
    return lines


def test_nanogpt_eval_line_with_a_unit_word_keeps_val_loss(tmp_path: Path) -> None:
    """`step N: train loss x BPC, val loss y BPC`: the unit word after each loss names its unit (bits
    per character); the evaluation is still read, not dropped for the word before the comma."""
    parsed = read_log([_write(tmp_path / "output.log", _bpc_console())])
    assert parsed.format == "nanogpt"
    steps, val = parsed.series("val_loss")
    np.testing.assert_array_equal(steps, [0, 50, 100])
    np.testing.assert_allclose(val, [5.1, 4.1, 3.1])
    assert parsed.series("loss")[0].size == 11
    assert not any("bpc" in m.lower() for m in parsed.metrics)
