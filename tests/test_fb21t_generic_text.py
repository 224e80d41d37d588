"""The generic reader's rules (issues #31/#32; docs/diagnosis.md, "Import: the generic reader") for text consoles no
format reader knows: a learning rate printed as one value per optimizer parameter group, and the ``[Rank N]`` label of
the process that prints a line. Every input here is synthetic (own numbers in the layout)."""

from __future__ import annotations

from pathlib import Path

import pytest

from ingest.formats import FALLBACK_READERS, read_log
from ingest.formats.generic import line_pairs
from ingest.formats.group_values import group_values
from tests.conftest import metric_series, write_log_lines


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("step=3, lr=[0.0002, 0.0002]", "step=3, lr: 0.0002"),
        ("it 7 | LR [3e-4] | acc 0.5", "it 7 | LR: 3e-4 | acc 0.5"),
        ("learning_rate: [0.001, 0.0001, 0.0001] loss: 2.0", "learning_rate: 0.001 loss: 2.0"),
        ("epoch=2 mom=[0.95] loss=1.5", "epoch=2 mom=0.95 loss=1.5"),
        # several numbers under another name are no per-group value: left alone
        ("step=3 shape=[16, 512] loss=1.5", "step=3 shape=[16, 512] loss=1.5"),
        ("step=3 betas=[(0.9, 0.95), (0.9, 0.95)]", "step=3 betas=[(0.9, 0.95), (0.9, 0.95)]"),
    ],
)
def test_group_values(text: str, expected: str) -> None:
    assert group_values(text) == expected


def test_per_group_learning_rate_and_rank_label_are_read(tmp_path: Path) -> None:
    lines = ["launching 4 processes", "using fused optimizer"]
    for step in range(0, 90, 10):
        lr = 1e-4 * (1 - step / 200)
        lines.append(
            f"[2031-05-04 11:0{step // 10}:00,100] [INFO] [optim_log.py:51:report] [Rank 0] "
            f"step={step}, skipped=0, lr=[{lr:.6g}, {lr:.6g}], mom=[(0.9, 0.98), (0.9, 0.98)]"
        )
    pairs = line_pairs(lines[-1])
    assert [k for k, _, _ in pairs] == ["step", "skipped", "lr"]  # no 'Rank', no momentum tuple
    parsed = read_log([write_log_lines(tmp_path, lines)], reader_set=FALLBACK_READERS)
    assert parsed.format == "generic"
    steps, values = metric_series(parsed, "lr")
    assert steps == list(range(0, 90, 10))
    assert values[0] == pytest.approx(1e-4) and values[-1] == pytest.approx(1e-4 * (1 - 80 / 200))
    assert "Rank" not in set(parsed.table["metric"].to_pylist())


def _table(rows: list[tuple[str, str]]) -> list[str]:
    width = max(len(name) for name, _ in rows) + 2
    rule = "-" * (width + 14)
    return [rule, *(f"| {name:<{width}} | {value:<9} |" for name, value in rows), rule]


def _table_log() -> list[str]:
    lines = ["Logging to ./runs/agent_7", "Using cpu device"]
    for i in range(1, 7):
        rows = [
            ("env/", ""),
            ("   mean_return", f"{10 + 2 * i:.1f}"),
            ("counters/", ""),
            ("   episodes", str(3 * i)),
            ("   time_elapsed", str(5 * i)),
            ("   total_timesteps", str(512 * i)),
            ("optim/", ""),
            ("   learning_rate", "0.0005"),
            ("   loss", f"{0.9 - i / 10:.3f}"),
            ("   value_estimate_ab...", "1.5"),
        ]
        lines += _table(rows)
        lines.append(f"evaluated after update {i}")
    return lines


def test_framed_key_value_tables_are_records(tmp_path: Path) -> None:
    parsed = read_log([write_log_lines(tmp_path, _table_log())], reader_set=FALLBACK_READERS)
    assert parsed.format == "generic"
    assert parsed.meta["mapping"]["step"] == "total_timesteps"
    steps, values = metric_series(parsed, "loss")
    assert steps == [512 * i for i in range(1, 7)]
    assert values[0] == pytest.approx(0.8) and values[-1] == pytest.approx(0.3)
    assert metric_series(parsed, "lr")[1] == [0.0005] * 6
    assert metric_series(parsed, "mean_return")[1][-1] == pytest.approx(22.0)
    names = set(parsed.table["metric"].to_pylist())
    # the logger's other counters and a name cut short by the printer are no metrics
    assert not names & {"episodes", "time_elapsed", "value_estimate_ab..."}


def test_a_framed_banner_is_no_record(tmp_path: Path) -> None:
    lines = ["----------", "| seed | 3 |", "----------"]
    lines += [f"step {i} loss {1.0 / i:.3f} lr 0.001" for i in range(1, 6)]
    parsed = read_log([write_log_lines(tmp_path, lines)], reader_set=FALLBACK_READERS)
    assert parsed.meta["mapping"]["step"] == "step"
    assert "seed" not in set(parsed.table["metric"].to_pylist())
