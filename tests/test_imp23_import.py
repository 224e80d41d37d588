"""Issue #31 (docs/diagnosis.md, "Import: steps, epochs and runs"): a record printed over a fixed cycle of short lines,
only one of which holds the step counter; a grid script's Trainer runs told apart by their settings dict. Every input
here is synthetic (own numbers in the layout)."""

from __future__ import annotations

from pathlib import Path

import pytest

from ingest.formats import FALLBACK_READERS, read_log
from ingest.formats.cycle_records import find_cycle
from ingest.formats.generic import GenericReader, line_pairs
from tests.conftest import metric_series, write_log_lines


def _block_log(steps: int) -> list[str]:
    lines = ["Using the specified args:", "Namespace(batch_size=4, lr=0.002, momentum=0.8)"]
    for i in range(steps):
        loss = 9.0 / (1 + i)
        lines += [
            f"Clock: {0.41 + i % 3 / 100:.4f}",
            f"epoch:{i // 7} || iter:{i * 5} || Loss:{loss:.4f}",
            f"->> head1 cls loss:{loss / 3:.4f} || head1 box loss:{loss / 4:.4f}",
            f"->> head2 cls loss:{loss / 5:.4f} || head2 box loss:{loss / 6:.4f}",
            "->>lr:0.002",
        ]
    return lines


@pytest.mark.parametrize("readers", [None, FALLBACK_READERS])
def test_five_line_block_per_step_is_one_record(tmp_path: Path, readers: object) -> None:
    """The ``Clock`` line before the step line opens the block (the first block starts with it); the
    loss terms of the lines after it are the step's, each under its own name, and the lr too."""
    parsed = read_log([write_log_lines(tmp_path, _block_log(30))], reader_set=readers)  # type: ignore[arg-type]
    steps, values = metric_series(parsed, "loss")
    assert steps == [i * 5 for i in range(30)]
    assert values[0] == pytest.approx(9.0) and values[-1] == pytest.approx(9.0 / 30, abs=1e-4)
    steps, values = metric_series(parsed, "lr")
    assert steps == [i * 5 for i in range(30)] and values[0] == pytest.approx(0.002)
    names = set(parsed.table["metric"].to_pylist())
    assert {"head1_cls_loss", "head2_box_loss"} <= names, names


def test_cycle_needs_the_same_sequence_after_most_step_lines() -> None:
    """Step lines followed by differing lines (an evaluation every other step) make no cycle; a lone
    ``Step: N`` counter is left to the split-record rule."""
    reader = GenericReader()
    mixed = []
    for i in range(20):
        mixed += [f"iter:{i} || Loss:{1 / (1 + i):.3f}"] + ([f"val acc:{i}"] if i % 2 else [])
    assert find_cycle(mixed, line_pairs, reader._is_step) is None
    lone = [x for i in range(20) for x in (f"Step: {i}", f"Loss: {1 / (1 + i):.3f}")]
    assert find_cycle(lone, line_pairs, reader._is_step) is None
    cycle = find_cycle(_block_log(10), line_pairs, reader._is_step)
    assert cycle is not None and len(cycle[0]) == 5 and cycle[1] == 1


def test_grid_console_settings_dict_is_no_logs_dict(tmp_path: Path) -> None:
    """The run config dict (a quoted path and name beside its numbers) is no logs dict: its
    ``seed``, ``batch_size``, ``eval_steps`` are no metrics; the Trainer's dicts are read as before."""
    parsed = read_log([write_log_lines(tmp_path, _grid_console((7,), 60))])
    assert metric_series(parsed, "loss")[0] == list(range(1, 61))
    names = set(parsed.table["metric"].to_pylist())
    assert not {n for n in names if "seed" in n or "batch_size" in n or "run_number" in n}, names


def _grid_console(seeds: tuple[int, ...], steps: int) -> list[str]:
    lines = ["[/data/train.json]"]
    for run, seed in enumerate(seeds):
        lines += [
            f"(2e-05, {seed})",
            "['learning_rate', 'seed']",
            "----------",
            f"{{'config_name': '/cfg/grid.yaml', 'run_number': {run}, 'epochs': 2, 'batch_size': 8, "
            f"'learning_rate': 2e-05, 'seed': {seed}, 'eval_steps': 20, 'use_bf16': True, 'limit': None}}",
            "TrainingArguments(",
            "fsdp_config={'min_num_params': 0, 'xla': False},",
            ")",
        ]
        for i in range(steps):
            epoch = round(2 * (i + 1) / steps, 2)
            loss = 2.0 + run - i / steps
            lines.append(f"{{'loss': {loss:.4f}, 'grad_norm': 1.5, 'learning_rate': 1e-05, 'epoch': {epoch}}}")
            if (i + 1) % 20 == 0:
                lines.append(f"{{'eval_loss': {loss + 0.1:.4f}, 'eval_runtime': 3.2, 'epoch': {epoch}}}")
        lines += ["{'train_runtime': 99.5, 'train_loss': 1.5, 'epoch': 2.0}", "Training time:99.5"]
    return lines


def test_grid_console_settings_dict_with_a_changed_seed_opens_a_run(tmp_path: Path) -> None:
    """The run config dict (paths, flags, ``None``: no logs dict) repeats with the same keys and a new
    seed, and the next training dict's epoch goes back: each grid point is its own run, counted from
    1, and the config's numbers are no metrics."""
    parsed = read_log([write_log_lines(tmp_path, _grid_console((7, 70, 700), 60))])
    runs = [parsed, *parsed.segments]
    assert len(runs) == 3
    for run, part in enumerate(runs):
        steps, values = metric_series(part, "loss")
        assert steps == list(range(1, 61))
        assert values[0] == pytest.approx(2.0 + run)
    names = set(parsed.table["metric"].to_pylist())
    assert not {n for n in names if "seed" in n or "batch_size" in n or "run_number" in n}, names


def test_one_settings_dict_and_a_repeated_unchanged_one_split_nothing(tmp_path: Path) -> None:
    """One grid point, or the same settings printed twice (a relaunch of the same point with no step
    restart), is one run."""
    parsed = read_log([write_log_lines(tmp_path, _grid_console((7,), 60))])
    assert parsed.segments == []
    assert metric_series(parsed, "loss")[0] == list(range(1, 61))
