"""Round 14 (#31, #32): key-value training consoles read fully (synthetic logs of each shape)."""

from __future__ import annotations

from pathlib import Path

from ingest.formats import read_log


def test_short_t_clock_beside_step_avg_is_train_time(tmp_path: Path) -> None:
    path = tmp_path / "train.log"
    lines = [
        f"step:{n}/4000 loss:{4 - n / 2000:.4f} ce:{3.9 - n / 2000:.4f} t:{n * 50}ms step_avg:50.0ms\n"
        for n in range(500, 4001, 500)
    ]
    lines.insert(4, "step:2000/4000 val_loss:3.1 val_bpb:1.3 train_time:100000ms\n")
    path.write_text("".join(lines))
    log = read_log([path])
    assert "t_s" not in log.metrics
    steps, values = log.series("step_time_s", 0)
    assert steps.tolist() == list(range(1000, 4001, 500))
    assert values.round(6).tolist() == [0.05] * 7
