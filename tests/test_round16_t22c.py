"""Issues #31/#32 (docs/diagnosis.md, "Import: step times and clocks"): nanoGPT-family consoles and epoch-summary
consoles."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

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


def _epoch_clock_console(epochs: int = 3, batches: int = 200, every: int = 10) -> list[str]:
    lines = []
    for epoch in range(1, epochs + 1):
        for batch in range(0, batches, every):
            loss = 5.0 - 0.2 * epoch - batch / 5000
            clock = 0.4 + 0.25 * batch + 0.01 * (batch % 30)
            lines.append(
                f"Epoch: {epoch:3d} | Batch: {batch:5d}/ {batches} | LR: 3.00e-04 |Loss: {loss:.4f}"
                f" | Time: {clock:5.1f}s"
            )
        lines.append(f"Epoch {epoch} done | loss {5.0 - 0.2 * epoch:.4f}")
    return lines


def test_a_clock_that_restarts_each_epoch_gives_step_times_not_a_step_time(tmp_path: Path) -> None:
    """`Time: 266.5s` that starts again at each epoch is the time since the epoch began: the step time
    is its difference between lines over the steps between them (none across a restart), never the
    reading itself (which a throughput detector would see fall 60% at each epoch's end)."""
    parsed = read_log([_write(tmp_path / "training_log.txt", _epoch_clock_console())])
    _steps, step_time = parsed.series("step_time_s")
    assert step_time.size > 0
    assert float(np.median(step_time)) == pytest.approx(0.25, abs=0.01)
    assert float(step_time.max()) < 1.0


def test_a_step_time_with_slow_steps_among_equal_ones_is_no_clock() -> None:
    """Equal step times with a slow step now and then also fall by half after each slow one; they do
    not advance between them, so they stay a step time."""
    from ingest.formats.generic_units import is_clock

    times = ([0.3] * 9 + [5.0]) * 6
    assert not is_clock(times, 3)
    assert is_clock([1.0, 2.0, 3.0, 4.0, 0.5, 1.5, 2.5, 3.5, 0.4, 1.4, 2.4], 3)


def test_an_epoch_summary_in_chinese_gives_the_epochs_validation_loss(tmp_path: Path) -> None:
    """`Epoch 2 完成 | 训练损失: x | 验证损失: y | 时间: 50.0s` (done, training loss, validation loss,
    time) after an epoch's step lines is the epoch's evaluation: its validation loss is stored at the
    step line above it; the epoch's mean training loss and its time are not the steps' series, and a
    best-model line that repeats the validation loss (`✓ 保存最佳模型，验证损失: y`) is no second one."""
    lines = _epoch_clock_console()
    out: list[str] = []
    epoch = 0
    for line in lines:
        if line.startswith("Epoch ") and " done " in line:
            epoch += 1
            out.append(f"✓ 保存最佳模型，验证损失: {6.0 - 0.1 * epoch:.4f}")
            out.append(f"Epoch {epoch} 完成 | 训练损失: 9.9000 | 验证损失: {6.0 - 0.1 * epoch:.4f} | 时间: 50.0s")
        else:
            out.append(line)
    parsed = read_log([_write(tmp_path / "training_log.txt", out)])
    steps, val = parsed.series("val_loss")
    np.testing.assert_allclose(val, [5.9, 5.8, 5.7])
    assert steps.size == 3
    assert float(parsed.series("loss")[1].max()) < 9.0
