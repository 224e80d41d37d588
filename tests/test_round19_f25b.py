"""Issue #31 (docs/diagnosis.md, "Import: the generic reader"): text consoles whose records, runs or step time were
misread. Every input here is synthetic (own numbers in the layout of the shape each rule is about); none reads a corpus
file."""

from __future__ import annotations

from pathlib import Path

import pytest

from ingest.formats import FALLBACK_READERS, read_log
from ingest.formats.line_pairs import line_pairs
from tests.conftest import metric_series, write_log_lines


def _names(parsed: object) -> set[str]:
    return set(parsed.table["metric"].to_pylist())  # type: ignore[attr-defined]


def _sweep_arm(total: int, every: int) -> list[str]:
    """One arm of a research sweep: step lines every ``every`` steps and at the last, then the
    evaluation line ``Step N | Validation bpb: x | val_loss: y`` (the counter capitalised), the final
    line with the early stop's flag and the running minimum."""
    lines = [f"Starting arm with {total} steps", "Model config: depth=4"]
    steps = [*range(0, total, every), total - 1]
    for s in steps:
        lines.append(
            f"step {s:05d}/{total:05d} ({100 * s / total:.2f}%) | loss: {10.4 - s / total * 6:.6f} | lrm: 1.00 | "
            f"dt: {300 + s % 7:.2f}ms | tok/sec: 881,904 | bf16_mfu: 18.35 | epoch: 1 pq: {s // 90} rg: {s % 61} | "
            "total time: 0.94m"
        )
    lines.append(f"Step {total:05d} | Validation bpb: 1.154241 | val_loss: {3.7 + total / 10000:.6f}")
    lines.append(f"step {total:05d}/{total:05d} (final) | loss: 3.797483 | early_stop: 0")
    lines.append("Minimum validation bpb: 1.154241")
    return lines


@pytest.mark.parametrize("readers", [None, FALLBACK_READERS])
def test_sweep_console_reads_evaluation_without_position_counters(tmp_path: Path, readers: object) -> None:
    """The data loader's ``pq``/``rg`` beside the epoch and the early stop's flag are no metrics; the
    running minimum adds no second bpb series."""
    lines = [*_sweep_arm(465, 50), *_sweep_arm(463, 50)]
    parsed = read_log([write_log_lines(tmp_path, lines)], reader_set=readers)  # type: ignore[arg-type]
    runs = [parsed, *parsed.segments]
    assert len(runs) == 2
    for run in runs:
        names = _names(run)
        assert not names & {"pq", "rg", "early_stop"}
        assert len([n for n in names if "bpb" in n.lower()]) <= 1
        assert metric_series(run, "loss")[1][-1] == pytest.approx(3.797483)


def test_epoch_column_position_counters_are_no_pairs() -> None:
    keys = [k for k, _, _ in line_pairs("step 3/9 | loss: 2.5 | epoch: 2 pq: 4 rg: 17 | dt: 30ms")]
    assert "pq" not in keys and "rg" not in keys and "epoch" in keys and "loss" in keys
    # a column of the epoch and a measurement (not a whole number) is not a position
    assert "loss" in [k for k, _, _ in line_pairs("step 3/9 | epoch: 2 loss: 2.5 | lr: 0.1")]


@pytest.mark.parametrize("readers", [None, FALLBACK_READERS])
def test_step_time_line_without_unit_under_node_labels(tmp_path: Path, readers: object) -> None:
    """srun ``--label`` prefixes; each iteration line followed by a line of its own that holds the
    step's time under a name that says so (``Step_time: 1.94``, no unit: seconds)."""
    lines = ["0: Training with Sequence Length: 32768", "1: [Rank 5] Packed dataset: 158 chunks"]
    for i in range(12):
        lines += [f"0: Iteration {i}: loss={9.0 - i * 0.3:.4f}", f"0: Step_time: {1.7 + (i % 3) * 0.01:.16f}", "0: "]
    parsed = read_log([write_log_lines(tmp_path, lines)], reader_set=readers)  # type: ignore[arg-type]
    steps, values = metric_series(parsed, "step_time_s")
    assert steps == list(range(12))
    assert values[0] == pytest.approx(1.7) and values[1] == pytest.approx(1.71)
    assert metric_series(parsed, "loss")[0] == list(range(12))


@pytest.mark.parametrize("readers", [None, FALLBACK_READERS])
def test_columns_named_with_a_summary_word_and_a_percent_share(tmp_path: Path, readers: object) -> None:
    """``Loss (Avg)`` is the loss; ``Tokens per second`` is the throughput (every word its name);
    ``Training tokens per second (%)`` is a share in percent, never the throughput."""
    lines = ["Experiment args: Namespace(batch_size=1, learning_rate=5e-05, training_steps=100)"]
    for s in (1, *range(5, 101, 5)):
        lines.append(
            f"2025-12-17 22:20:22,653 - root - INFO - Step: {s} | Loss (Avg): {11.9 - s / 20:.2f} | "
            f"Reserved Memory 26.88 GB  | Tokens per second: {75000 + s:.2f} | Training tokens per second (%): "
            f"{3.1 + s / 100:.2f} | MFU (%): 11.6 | TFLOP/s/GPU: 115.12"
        )
    parsed = read_log([write_log_lines(tmp_path, lines)], reader_set=readers)  # type: ignore[arg-type]
    steps, values = metric_series(parsed, "loss")
    assert steps[0] == 1 and len(steps) == 21 and values[0] == pytest.approx(11.85)
    steps, values = metric_series(parsed, "throughput_tok_s")
    assert len(steps) == 21 and values[0] == pytest.approx(75001.0)
    assert not any(n.startswith("second") for n in _names(parsed))


def _ppo_launch(iters: int) -> list[str]:
    lines = [
        "2025-11-18 16:43:06.350 | INFO     | __main__:_load_config:6 - Loaded configuration from conf.yaml",
        "2025-11-18 16:43:06.361 | INFO     | __main__:<module>:75 - Config ready | seed=42 frames_per_batch=4096",
        "2025-11-18 16:43:09.163 | INFO     | __main__:<module>:22 - Starting PPO run",
    ]
    for i in range(iters):
        lines.append(
            f"2025-11-18 16:43:{15 + i:02d}.840 | INFO     | __main__:_log_metrics:20 - iter={i:04d} "
            f"reward={-217.5 + i * 3:.4f} clip_fraction=0.9453 loss_critic={1074.0 - i * 10:.4f} loss_objective=0.1051"
        )
    return lines


@pytest.mark.parametrize("readers", [None, FALLBACK_READERS])
def test_relaunch_after_a_one_step_launch_is_a_run(tmp_path: Path, readers: object) -> None:
    """Three launches appended to one loguru console, the middle one dead after its first iteration:
    the same first step twice with the start-up lines printed again between them is two runs; the
    loguru location ``__main__:_log_metrics:20`` is no metric."""
    lines = [*_ppo_launch(6), *_ppo_launch(1), *_ppo_launch(8)]
    parsed = read_log([write_log_lines(tmp_path, lines)], reader_set=readers)  # type: ignore[arg-type]
    runs = [parsed, *parsed.segments]
    assert [len(metric_series(r, "loss_critic")[0]) for r in runs] == [6, 1, 8]
    assert not any("log_metrics" in n for r in runs for n in _names(r))
    assert not any(e.kind == "rollback" for r in runs for e in r.events)


def test_a_line_printed_twice_stays_one_record(tmp_path: Path) -> None:
    """The first step printed twice in a row (two writers), no start-up line between: one run."""
    lines = _ppo_launch(5)
    lines.insert(4, lines[3])
    parsed = read_log([write_log_lines(tmp_path, lines)])
    assert not parsed.segments
    assert metric_series(parsed, "loss_critic")[0][-1] == 4
