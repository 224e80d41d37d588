"""Round 22 (f28b, issue #31): consoles of batch 21 that were refused, each read by its layout rule
(synthetic logs of the same shape, written from what the trainers print; no corpus file copied)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from ingest.formats import read_log
from ingest.formats.line_pairs import line_pairs
from stab_core.throughput import detect_throughput_drops, settled_level


def _write(tmp_path: Path, name: str, lines: list[str]) -> Path:
    path = tmp_path / name
    path.write_text("".join(lines))
    return path


def _pylog(n: int, message: str) -> str:
    """One line of Python logging's ``%(asctime)s %(name)s %(levelname)s: %(message)s``."""
    return f"2021-11-01 12:{n // 60 % 60:02d}:{n % 60:02d},166 semantic_segmentation INFO: {message}\n"


def _session(lines: list[str], iters: int, lr0: float) -> None:
    """A segmentation trainer's session: its banner, ``Iters: N/T`` lines every 10 iterations (a clock of
    the time spent and an ETA as ``H:MM:SS``) and per epoch a summary and a validation line whose pixel
    accuracy is a tensor's repr wrapped onto the next line."""
    lines.append(_pylog(len(lines), "Using 4 GPUs"))
    lines.append(_pylog(len(lines), f"Start training, Total Epochs: 4 = Total Iterations {iters}"))
    per_epoch = iters // 4
    for it in range(10, iters + 1, 10):
        epoch = (it - 1) // per_epoch + 1
        loss = 1.5 - it / iters + (0.05 if it % 30 == 0 else 0.0)
        lines.append(
            _pylog(
                len(lines),
                f"Epochs: {epoch}/4 || Iters: {it}/{iters} || Lr: {lr0 * (1 - it / iters):.6f} || Loss: {loss:.4f}"
                f" || mIoU: 0.{it % 97:02d} || Cost Time: 0:{it // 60:02d}:{it % 60:02d}"
                f" || Estimated Time: 1{it % 9}:49:10",
            )
        )
        if it % per_epoch == 0:
            lines.append(_pylog(len(lines), f"Epochs: {epoch}/4, Average loss: {loss:.4f}, Average pixAcc: Tensor("))
            lines.append(
                _pylog(
                    len(lines),
                    f"Validation: Average loss: {0.9 - epoch / 10:.4f}, Average mIoU: 0.34, Average pixAcc: "
                    "Tensor(shape=[1], dtype=float32, place=CUDAPlace(0), stop_gradient=True,",
                )
            )
            lines.append("       [0.85755765])\n")


def test_python_logging_console_with_iters_counter_and_two_sessions(tmp_path: Path) -> None:
    """``asctime name LEVEL: `` before each line is read through; ``Iters: N/T`` counts the steps (a counter's
    plural), ``Epochs`` is its axis, a ``H:MM:SS`` clock no value, a tensor's ``shape=[1]`` no metric; the
    validation lines give ``val_loss``; the second session's counter starts afresh: a second run."""
    lines: list[str] = []
    _session(lines, 800, 0.01)
    _session(lines, 400, 0.005)
    log = read_log([_write(tmp_path, "icnet_log.txt", lines)])
    assert {"loss", "lr", "val_loss"} <= set(log.metrics)
    assert not {"Epochs", "Time", "val_shape"} & set(log.metrics)
    assert log.series("loss")[0].tolist()[:2] == [10, 20]
    (second,) = log.segments  # the second session starts afresh: a run of its own
    assert second.series("loss")[0].tolist()[:1] + second.series("loss")[0].tolist()[-1:] == [10, 400]
    assert log.series("val_loss")[1].tolist()[:4] == pytest.approx([0.8, 0.7, 0.6, 0.5])


def test_clock_values_are_no_pairs() -> None:
    """``Cost Time: 0:00:07`` is an elapsed time: its hours are no value."""
    pairs = line_pairs("Iters: 10/85000 || Loss: 2.78 || Cost Time: 0:00:07 || Estimated Time: 16:49:10")
    assert [k for k, _, _ in pairs] == ["Iters", "Loss"]


def _meter(name: str, value: float, average: float) -> str:
    return f"{name}: {value:.4f} ({average:.4f})"


def test_metriclogger_console_behind_nohup(tmp_path: Path) -> None:
    """torchvision's ``MetricLogger`` (DETR, DeiT, MAE ...): ``Epoch: [E]  [ I/N]`` is step E*N+I;
    ``time``/``data`` are seconds per iteration (the step time); an evaluation's ``Test: [I/M]`` lines
    give ``val_loss`` as their global average (in brackets), not their batch counter or timers."""
    lines = [
        "nohup: ignoring input\n",
        "Namespace(batch_size=32, epochs=4, lr=0.0001, lr_drop=3)\n",
        "Start training\n",
    ]
    n = 20
    for epoch in range(4):
        for it in [*range(0, n, 5), n - 1]:
            loss = 10.0 - epoch - it / 100
            lines.append(
                f"Epoch: [{epoch}]  [{it:3d}/{n}]  eta: 0:0{epoch}:1{it % 10}  lr: 0.000100  class_error: 50.00  "
                f"{_meter('loss', loss, loss + 1)}  {_meter('loss_ce', 0.5, 0.6)}  time: {12 + epoch:.4f}"
                "  data: 0.0015\n"
            )
        lines.append(f"Epoch: [{epoch}] Total time: 0:04:00 (12.0000 s / it)\n")
        if epoch % 2 == 1:
            lines.append("\x1b[31mevaluate\x1b[0m\n")
            for it in (0, 5, 9):
                lines.append(
                    f"Test:  [{it:3d}/10]  eta: 0:00:10  class_error: 40.00  {_meter('loss', 7.0 + it, 6.0 + epoch)}"
                    f"  time: 10.9000  data: 0.0020\n"
                )
            lines.append("Test: Total time: 0:01:49 (10.9000 s / it)\n")
            lines.append(f"Averaged stats: class_error: 40.00  {_meter('loss', 7.0 + 9, 6.0 + epoch)}\n")
    lines.append("Training time 0:20:00\n")
    log = read_log([_write(tmp_path, "train.log", lines)])
    steps, values = log.series("loss")[:2]
    assert steps.tolist()[:5] == [0, 5, 10, 15, 19]
    assert steps.tolist()[-1] == 3 * n + n - 1
    assert values[0] == 10.0
    assert log.meta["mapping"]["step_time_s"] == "time_s"
    assert log.series("val_loss")[1].tolist() == [7.0, 9.0]
    assert not {"val_step", "val_time", "val_data"} & set(log.metrics)


def test_a_growing_elapsed_clock_is_no_throughput_loss() -> None:
    """A step time that only grows, sample after sample (the seconds since the run began), is a clock:
    no throughput drop and no settled level; a step time that slows down and wanders still is one."""
    steps = np.arange(1, 31, dtype=np.int64)
    clock = np.cumsum(np.r_[2.95, np.full(29, 3.0)]) + np.linspace(0, 5, 30)
    assert detect_throughput_drops(steps, clock, "step_time_s") == []
    assert settled_level(steps, clock, "step_time_s") is None
    rng = np.random.default_rng(0)
    slowed = np.r_[np.full(15, 1.0), np.full(15, 2.0)] * rng.uniform(0.97, 1.03, 30)
    assert detect_throughput_drops(steps, slowed, "step_time_s")
