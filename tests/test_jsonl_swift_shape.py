"""JSON Lines that end with a run summary and a trainer-state dump (ms-swift ``logging.jsonl``):
read as JSON Lines, the step from the ``global_step/max_steps`` progress string (issue #31; docs/diagnosis.md, "Import:
steps, epochs and runs")."""

from __future__ import annotations

import json
from pathlib import Path

from ingest.formats import detect, read_log


def _swift_log(tmp_path: Path) -> Path:
    rows = [
        {
            "loss": 2.0 - i / 10,
            "grad_norm": 1.0 + i,
            "learning_rate": 1e-5,
            "epoch": i / 4,
            "global_step/max_steps": f"{i}/3",
            "memory(GiB)": 26.8,
        }
        for i in (1, 2, 3)
    ]
    summary = {
        "train_runtime": 10.0,
        "total_flos": 5e14,
        "train_loss": 1.8,
        "epoch": 0.75,
        "global_step/max_steps": "3/3",
    }
    dump = {"global_step": 3, "log_history": [dict(r, step=n) for n, r in enumerate(rows, 1)], "memory": 43.5}
    path = tmp_path / "logging.jsonl"
    path.write_text("".join(json.dumps(o) + "\n" for o in [*rows, summary, dump]))
    return path


def test_trailing_trainer_state_dump_is_not_a_trainer_state_file(tmp_path: Path) -> None:
    assert detect([_swift_log(tmp_path)])[0][0] == "jsonl"


def test_progress_string_is_the_step_and_summary_and_dump_are_not_steps(tmp_path: Path) -> None:
    log = read_log([_swift_log(tmp_path)])
    assert log.step_range == (1, 3)
    assert {"loss", "grad_norm", "lr"} <= set(log.metrics)
    assert "total_flos" not in log.metrics and "train_loss" not in log.metrics
    assert log.meta["total_steps"] == 3
    assert log.meta["train_summary"]["train_runtime"] == 10.0


def test_trainer_state_epoch_is_meta_not_a_metric(tmp_path: Path) -> None:
    history = [{"loss": 2.0 - s / 100, "learning_rate": 1e-5, "epoch": s / 40, "step": s} for s in (10, 20, 30)]
    path = tmp_path / "trainer_state.json"
    path.write_text(json.dumps({"global_step": 30, "max_steps": 40, "log_history": history}, indent=2))
    log = read_log([path])
    assert "epoch" not in log.metrics and "loss" in log.metrics
    assert log.meta["epochs_done"] == 0.75
