"""Vision consoles the readers refused (issues #31/#32; docs/diagnosis.md, "Import: the generic reader"): a console with
a banner, warnings or a config dump first, whose step lines print ``key:value`` columns after ``||`` (a step counter's
name there is no logger location), ``Epoch: [e/E] Iter:[i/N]`` counters with a colon before the bracket,
or a bracketed ``[N/M]`` step heading the line; a time left in minutes is no metric."""

from __future__ import annotations

from pathlib import Path

from ingest.formats import read_log
from ingest.formats.generic import line_pairs
from tests.log_text import series_by_metric, write_lines


def test_double_bar_columns_keep_the_step_counter() -> None:
    pairs = line_pairs("epoch:2 || iter:30 || Loss:12.5")
    assert pairs == [("epoch", 2.0, None), ("iter", 30.0, None), ("Loss", 12.5, None)]


def test_counters_with_a_colon_before_the_bracket(tmp_path: Path) -> None:
    lines = ["nohup: ignoring input", "MODEL:", "  NAME: segnet", "TRAIN:", "  LR: 0.01", "  EPOCHS: 30"]
    for e in range(3):
        for i in range(0, 60, 20):
            loss = 5.0 - 0.1 * (e * 3 + i / 20)
            lines.append(f"Epoch: [{e}/30] Iter:[{i}/60], Time: 0.50, lr: [0.01], Loss: {loss:.4f}, Acc:0.5")
    parsed = read_log([write_lines(tmp_path, "train.log", lines)])
    steps, values = series_by_metric(parsed)["loss"][:2]
    assert len(steps) == 9 and list(steps) == sorted(steps) and len(set(steps)) == 9
    assert values[0] == 5.0


def test_bracketed_step_of_total_heads_the_line(tmp_path: Path) -> None:
    lines = ["=" * 40, "Some Training", "Device: CUDA", "=" * 40, "", "Batch=8 | LR=1e-4", "-" * 40]
    for n in range(0, 4000, 250):
        lines.append(f"[{n:06d}/9000] SETA   | loss {0.09 - n * 1e-5:.4f} | 2.50 it/s | batch 8")
    parsed = read_log([write_lines(tmp_path, "train.log", lines)])
    steps = series_by_metric(parsed)["loss"][0]
    assert list(steps) == list(range(0, 4000, 250))


def test_time_left_in_minutes_is_no_metric() -> None:
    pairs = line_pairs("[000500/9000] SETA | loss 0.0488 | 3.04 it/s | ETA 271.3 min | batch 16")
    assert not any(key.lower().startswith("eta") for key, _, _ in pairs)
    assert ("loss", 0.0488, None) in pairs
