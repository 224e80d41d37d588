"""Issue #31 (docs/diagnosis.md, "Import: steps, epochs and runs"): consoles whose steps, times or axes were misread.
Every input here is synthetic (own numbers in the layout of the shape each rule is about); none reads a corpus file."""

from __future__ import annotations

from pathlib import Path

import pytest

from ingest.formats import FALLBACK_READERS, read_log
from ingest.formats.aliases import canonical_name
from ingest.formats.generic_units import is_countdown
from tests.conftest import metric_series, write_log_lines


def _names(parsed: object) -> set[str]:
    return set(parsed.table["metric"].to_pylist())  # type: ignore[attr-defined]


def _epoch_paren_console(epochs: int, per_epoch: int, every: int) -> list[str]:
    """``Epoch:[E/M](S/N), loss: x, lr: y, epoch_time: Tmin``: the step of the epoch in parentheses, the
    epoch's remaining minutes counting down to 0."""
    lines = ["Model Params: 12.50M", "Trainable Params: 12.5M"]
    for e in range(1, epochs + 1):
        steps = [*range(every, per_epoch, every), per_epoch]
        for s in steps:
            left = (per_epoch - s) / per_epoch * 80.0
            lines.append(
                f"Epoch:[{e}/{epochs}]({s}/{per_epoch}), loss: {6.0 - e * 0.5 - s / per_epoch:.4f}, "
                f"aux_loss: 0.0000, lr: {0.0005 / e:.8f}, epoch_time: {left:.1f}min"
            )
    return lines


@pytest.mark.parametrize("readers", [None, FALLBACK_READERS])
def test_epoch_then_parenthesised_step_counts_the_epochs_steps(tmp_path: Path, readers: object) -> None:
    parsed = read_log([write_log_lines(tmp_path, _epoch_paren_console(2, 200, 10))], reader_set=readers)  # type: ignore[arg-type]
    steps, losses = metric_series(parsed, "loss")
    assert len(steps) == 40 and steps == sorted(steps)
    assert steps[0] == 10 and steps[19] == 200 and steps[20] > 200  # the second epoch continues the axis
    assert losses[0] == pytest.approx(6.0 - 0.5 - 0.05)
    assert len(metric_series(parsed, "lr")[0]) == 40
    # the epoch's time left is no step time and no metric
    assert "step_time_s" not in _names(parsed) and "step_time_s" not in parsed.meta["mapping"]
    assert not any(n.startswith("epoch_time") for n in _names(parsed))


def test_a_time_counting_down_to_zero_is_a_time_left() -> None:
    assert is_countdown([130.0, 112.0, 105.0, 102.0, 101.0, 99.0, 99.0, 40.0, 3.0, 0.0], 3)
    assert is_countdown([50.0, 40.0, 41.0, 30.0, 20.0, 10.0, 9.0, 8.0, 5.0, 4.0, 2.0, 1.0, 0.5], 3)
    assert not is_countdown([1.2, 1.1, 1.3, 1.2, 1.1, 1.2], 3)  # a step time wanders around its level
    assert not is_countdown([10.0, 9.0, 8.0, 7.0, 6.0, 5.5], 3)  # speeding up, never near nothing
    assert not is_countdown([3.0, 0.0], 3)  # too few lines


def test_an_epoch_time_on_step_lines_is_no_step_time(tmp_path: Path) -> None:
    lines = [
        f"epoch 1 step {s} | loss: {3.0 - s / 1000:.3f} | epoch_time: {60.0 + (s % 3):.1f}s" for s in range(10, 310, 10)
    ]
    parsed = read_log([write_log_lines(tmp_path, lines)])
    assert "step_time_s" not in _names(parsed)
    assert "step_time_s" not in parsed.meta.get("proposed_map", {}).values()  # the import applies it
    assert "step_time_s" not in parsed.meta["mapping"]


def test_keras_bar_time_per_step_is_the_step_time(tmp_path: Path) -> None:
    lines = []
    for e in range(1, 6):
        lines += [
            f"Epoch {e}/5",
            f" 10/120 [==>...........................] - ETA: 5s - loss: {2.5 - e * 0.1:.4f} - acc: 0.3000",
            f"120/120 [==============================] - {4 + e % 2}s {30 + e}ms/step - loss: {2.0 - e * 0.1:.4f}"
            f" - acc: 0.5000 - val_loss: {2.1 - e * 0.1:.4f} - val_acc: 0.4000",
        ]
    parsed = read_log([write_log_lines(tmp_path, lines)])
    steps, times = metric_series(parsed, "step_time_s")
    assert steps == [1, 2, 3, 4, 5]
    assert times == pytest.approx([0.031, 0.032, 0.033, 0.034, 0.035])
    assert metric_series(parsed, "epoch_time_s")[1] == pytest.approx([5.0, 4.0, 5.0, 4.0, 5.0])


def test_keras_console_without_batch_time_keeps_the_epoch_seconds(tmp_path: Path) -> None:
    lines = []
    for e in range(1, 4):
        lines += [f"Epoch {e}/3", f"{200 + e}s - loss: {3.0 - e * 0.2:.4f} - acc: 0.3 - val_loss: 2.9 - val_acc: 0.3"]
    parsed = read_log([write_log_lines(tmp_path, lines)])
    assert metric_series(parsed, "step_time_s")[1] == pytest.approx([201.0, 202.0, 203.0])


def test_hf_console_epoch_is_an_axis_not_a_metric(tmp_path: Path) -> None:
    lines = [
        f"{{'loss': {2.0 - i * 0.05:.4f}, 'grad_norm': 1.{i}, 'learning_rate': 0.0005, 'epoch': {i * 0.25:.2f}}}"
        for i in range(1, 21)
    ]
    lines.append("{'eval_loss': 1.5, 'eval_runtime': 10.2, 'epoch': 5.0}")
    lines.append(
        "{'train_runtime': 100.0, 'train_samples_per_second': 2.3, 'train_loss': 1.6, 'epoch': 5.0}",
    )
    parsed = read_log([write_log_lines(tmp_path, lines)])
    assert parsed.format == "hf_console"
    assert "epoch" not in _names(parsed) and "eval_epoch" not in _names(parsed)
    assert len(metric_series(parsed, "loss")[0]) == 20


def _nanochat_like(total: int, lrm: float) -> list[str]:
    """Step lines ``step N (p%) | loss: x | lrm: m | dt: t ms | tok/sec: n``, an evaluation line of the
    split's measure only, capitalised (``Step 00000 | Validation bpb: x``) before the first and after
    the last step line."""
    lines = ["Starting training", f"Step 00000 | Validation bpb: {3.5:.4f}"]
    for s in range(1, total):
        lines.append(
            f"step {s:05d} ({100 * s / total:.2f}%) | loss: {6.0 - s * 0.01:.6f} | lrm: {lrm:.2f} | "
            f"dt: {40 + s % 5:.2f}ms | tok/sec: 12,{500 + s:03d} | mfu: 1.10 | total time: 0.01m"
        )
    lines.append(f"Step {total:05d} | Validation bpb: {2.9:.4f}")
    lines.append("Minimum validation bpb: 2.9000")
    return lines


def test_a_flat_learning_rate_multiplier_stays_a_series(tmp_path: Path) -> None:
    """A constant ``lrm`` is the LR schedule's (flat here), not a setting of the run: stored as the run's ``lr``
    (the multiplier is the only LR those lines print; round 26 r26a)."""
    parsed = read_log([write_log_lines(tmp_path, _nanochat_like(30, 1.0))])
    steps, values = metric_series(parsed, "lr")
    assert len(steps) == 29 and set(values) == {1.0}


def test_a_step_word_with_its_time_unit_is_the_step_time(tmp_path: Path) -> None:
    assert canonical_name("step_ms") == ("step_time_s", "ms")
    assert canonical_name("iter_msec") == ("step_time_s", "ms")
    assert canonical_name("steps_s")[0] != "step_time_s"  # a bare 's' may be a speed
    lines = ['{"compiled_memory": {"temp_size_in_bytes": 2048}}']
    lines += [
        f'{{"grad_norm": 1.{s}, "learning_rate": 0.001, "loss": {5.0 - s * 0.01}, "step": {s}, '
        f'"step_ms": {3700.0 + s}, "tokens_per_second": 566000.5}}'
        for s in range(1, 21)
    ]
    parsed = read_log([write_log_lines(tmp_path, lines, "metrics.jsonl")])
    steps, times = metric_series(parsed, "step_time_s")
    assert len(steps) == 20 and times[0] == pytest.approx(3.701)
    assert "step_ms" not in _names(parsed)


def _paddle_like(epochs: int, with_infer: bool) -> list[str]:
    """``epoch: E, batch_id: B, AUC:x, loss:y, avg_reader_cost: r sec, avg_batch_cost: c sec, avg_samples: n,
    ips: v ins/s`` every 400 batches (the batch restarting each epoch), ``epoch: E done, ..., epoch time: T s``
    after each epoch; then, optionally, a pasted inference run over saved checkpoints (no loss)."""
    lines = ["2024-01-01 10:00:00,000 - INFO - train_batch_size: 512, epochs: 4, print_interval: 400"]
    for e in range(epochs):
        for b in (0, 400, 800, 1200):
            lines.append(
                f"2024-01-01 10:{e:02d}:{b // 100:02d},000 - INFO - epoch: {e}, batch_id: {b}, "
                f"AUC:0.{80 + e}{b // 400}, ACC:0.70, loss:{0.5 - e * 0.05 - b / 40000:.5f}, "
                "avg_reader_cost: 0.00012 sec, avg_batch_cost:"
                f" {0.5 + b / 100000:.5f} sec, avg_samples: 512.00000, ips: {1000 + b:.3f} ins/s"
            )
        lines.append(
            f"2024-01-01 10:{e:02d}:59,000 - INFO - epoch: {e} done, AUC: 0.85,ACC: 0.70,loss:0.2, "
            f"epoch time: {900 + e:.2f} s"
        )
    if with_infer:
        lines.append("user@host:~$ python -u infer.py -m config.yaml")
        for k in range(1, epochs):
            lines.append(f"2024-01-01 11:00:0{k},000 - INFO - load model epoch {k}")
            lines.append(
                f"2024-01-01 11:00:0{k},500 - INFO - epoch: {k}, batch_id: 0, AUC: 0.9{k},ACC: 0.80, avg_reader_cost:"
                f" 0.0005 sec, avg_batch_cost: 0.002 sec, avg_samples: 512.00000, ips: 5000.{k} ins/s"
            )
            lines.append(
                f"2024-01-01 11:00:0{k},900 - INFO - epoch: {k} done, AUC: 0.9{k},ACC: 0.80, epoch time: 70.{k} s"
            )
    return lines


@pytest.mark.parametrize("readers", [None, FALLBACK_READERS])
def test_epoch_and_batch_id_console_counts_batches_across_epochs(tmp_path: Path, readers: object) -> None:
    parsed = read_log([write_log_lines(tmp_path, _paddle_like(4, False))], reader_set=readers)  # type: ignore[arg-type]
    steps, _ = metric_series(parsed, "loss")
    assert steps == [e * 1600 + b for e in range(4) for b in (0, 400, 800, 1200)]
    assert "batch_id" not in _names(parsed)
    assert metric_series(parsed, "samples_per_s")[1][:2] == pytest.approx([1000.0, 1400.0])  # 'ins/s'
    # the batch's cost is the step time (the reader's share is not)
    assert parsed.meta["proposed_map"].get("avg_batch_cost_s") == "step_time_s"
    # the epoch's closing line gives the epoch's time at its last step, and no second loss
    epoch_steps, epoch_times = metric_series(parsed, "epoch_time_s")
    assert epoch_steps == [1200, 2800, 4400, 6000] and epoch_times == pytest.approx([900.0, 901.0, 902.0, 903.0])


def test_a_pasted_checkpoint_evaluation_is_no_restart(tmp_path: Path) -> None:
    parsed = read_log([write_log_lines(tmp_path, _paddle_like(4, True))])
    assert not parsed.segments and not [e for e in parsed.events if e.kind == "rollback"]
    steps, _ = metric_series(parsed, "loss")
    assert len(steps) == 16 and steps[-1] == 6000
    auc_steps, auc = metric_series(parsed, "AUC")
    assert len(auc_steps) == 16 and auc_steps[-1] == 6000  # the training AUC ends with training
    assert "eval_AUC" in _names(parsed) and not {0.91, 0.92, 0.93} & set(auc)  # the checkpoints' AUC apart
