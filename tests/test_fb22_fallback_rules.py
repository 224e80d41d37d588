"""Issues #31/#32 (docs/diagnosis.md, "Import: the generic reader"): rules of the fallback readers for consoles no
format reader knows. Every input here is synthetic (own numbers in the layout)."""

from __future__ import annotations

from pathlib import Path

import pytest

from ingest.formats import FALLBACK_READERS, read_log
from ingest.formats.generic import line_pairs
from tests.conftest import metric_series, write_log_lines


def test_numpy_and_torch_scalar_reprs_are_their_numbers(tmp_path: Path) -> None:
    """A metrics dict printed with ``str()``: ``np.float64(x)``, ``np.int32(n)``, ``tensor(x, device=...)``."""
    assert line_pairs("it 4 | loss: tensor(2.5, device='cuda:0', grad_fn=<AddBackward0>) | lr: 0.1") == [
        ("it", 4.0, None),
        ("loss", 2.5, None),
        ("lr", 0.1, None),
    ]
    lines = ["launching the trainer"]
    for step in range(1, 31):
        lines.append(
            f"iteration={step} ; train_loss=np.float64({3.0 - step * 0.05:.4f}) ; "
            f"gnorm=np.float32({0.5 + step * 0.01:.3f}) ; tokens_seen=np.int64({step * 4096})"
        )
    parsed = read_log([write_log_lines(tmp_path, lines)], reader_set=FALLBACK_READERS)
    steps, values = metric_series(parsed, "loss")
    assert steps == list(range(1, 31))
    assert values[0] == pytest.approx(2.95) and values[-1] == pytest.approx(1.5)


def test_speed_in_steps_named_by_its_key_is_a_time_per_step() -> None:
    """``interval_steps_per_second: 4.0`` is 0.25 s a step; an evaluation's own speed is no step's."""
    pairs = line_pairs("loss: 0.9, global_step: 20, interval_steps_per_second: 4.0, epoch: 1.0")
    assert ("speed_step_time", 0.25, "s") in pairs
    assert ("eval_steps_per_second", 4.0, None) in line_pairs("eval_loss: 0.9, eval_steps_per_second: 4.0")


def test_columns_of_a_lone_duration_and_a_value_before_its_name(tmp_path: Path) -> None:
    """``step 3/90 | loss 2.1 | 412.5 ms | 31.2% bf16 MFU | 9000 tok/s``: the lone duration is the
    step's time and ``31.2% bf16 MFU`` the MFU; a spaced ``val loss`` line before the first step is
    the start's evaluation, one after a step line that step's."""
    lines = ["val loss 4.500000"]
    for step in range(1, 91):
        lines.append(
            f"step {step:4d}/90 | loss {4.4 - step * 0.01:.6f} | norm 0.9 | lr 3.0e-04 | "
            f"{400 + step % 5}.50 ms | 3{step % 3}.1% bf16 MFU | 9{step % 7}00 tok/s"
        )
        if step % 30 == 0:
            lines.append(f"val loss {4.4 - step * 0.01:.6f}")
    parsed = read_log([write_log_lines(tmp_path, lines)], reader_set=FALLBACK_READERS)
    steps, values = metric_series(parsed, "step_time_s")
    assert len(steps) == 90 and values[0] == pytest.approx(0.4015)
    steps, values = metric_series(parsed, "mfu")
    assert len(steps) == 90 and values[0] == pytest.approx(0.311)  # stored as a fraction
    steps, values = metric_series(parsed, "val_loss")
    assert steps == [0, 30, 60, 90] and values[0] == pytest.approx(4.5)


def test_trainer_totals_row_of_a_flattened_history_csv_is_no_step(tmp_path: Path) -> None:
    """A Trainer ``log_history`` flattened to CSV ends with its totals row (``train_runtime``,
    ``total_flos``, ``train_loss``, no ``loss``): kept as the run's summary, never a metric."""
    rows = ["loss,learning_rate,epoch,step,eval_loss,train_runtime,total_flos,train_loss"]
    rows += [f"{2.0 - s * 0.01:.3f},1e-05,{s / 100:.2f},{s},,,," for s in range(10, 101, 10)]
    rows += [",,1.0,100,1.5,,,", ",,1.0,100,,321.5,12345678.0,1.6"]
    path = tmp_path / "training_log.csv"
    path.write_text("\n".join(rows) + "\n")
    parsed = read_log([path], reader_set=FALLBACK_READERS)
    names = set(parsed.table["metric"].to_pylist())
    assert "loss" in names and "total_flos" not in names and "train_runtime" not in names
    assert parsed.meta["train_summary"]["total_flos"] == pytest.approx(12345678.0)
