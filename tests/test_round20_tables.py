"""Issue #31 (docs/diagnosis.md, "Import: steps, epochs and runs"): metric tables and JSON histories in layouts the
table readers read wrong, on synthetic files (own numbers): an epoch and batch-in-epoch pair as the step, launches
appended to one history that end with "no time left", counters of the data consumed and a time-left estimate as no
metrics, Chainer's and a bare step time's names."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from ingest.formats import read_log
from ingest.formats.aliases import canonical_name
from ingest.formats.field_roles import moved_fields


def _write(path: Path, lines: list[str], newline: str = "\n") -> Path:
    path.write_bytes((newline.join(lines) + newline).encode())
    return path


def _jsonl(path: Path, records: list[dict[str, object]], newline: str = "\n") -> Path:
    return _write(path, [json.dumps(r) for r in records], newline)


def test_an_epoch_and_batch_in_epoch_pair_is_the_step(tmp_path: Path) -> None:
    rows = ["Epoch,Batch,Gen Loss,Disc Loss"]
    rows += [f"{e},{b},{0.7 + e / 10 + b / 1000:.4f},{1.38 - e / 20:.4f}" for e in range(5) for b in range(7)]
    parsed = read_log([_write(tmp_path / "training_log.csv", rows)])
    assert "Batch" not in parsed.metrics and "Epoch" not in parsed.metrics
    steps, values = parsed.series("Gen_Loss")
    assert steps.tolist() == list(range(35))  # epoch * 7 + batch: every batch a record
    assert values[8] == pytest.approx(0.801)


def _d2_record(it: int, eta: float, loss: float) -> dict[str, object]:
    return {"data_time": 0.001, "eta_seconds": eta, "iteration": it, "lr": 1e-4, "time": 0.3, "total_loss": loss}


def test_launches_that_end_with_no_time_left_are_runs_of_their_own(tmp_path: Path) -> None:
    recs = [_d2_record(9, 0.0, 2.1), _d2_record(9, 0.0, 2.2)]  # two 10-iteration launches
    recs += [_d2_record(i, 90.0 - i / 10, 2.0 - i / 500) for i in range(19, 200, 20)]  # cut off at 179
    recs += [_d2_record(9, 0.0, 2.05)]  # below the first step the run logged: a fresh launch
    recs += [_d2_record(i, 50.0 - i / 10, 1.9 - i / 1000) for i in range(19, 300, 20)]
    recs[-1]["eta_seconds"] = 0.0  # finished at 299 ...
    recs += [_d2_record(i, 100.0 - i / 10, 1.5 - i / 10000) for i in range(319, 600, 20)]  # ... resumed on its grid
    recs += [{"iteration": 599, "bbox/AP": 40.0}]  # an evaluation at the last step ends nothing
    parsed = read_log([_jsonl(tmp_path / "metrics.json", recs, newline="\r\n")])
    runs = [parsed, *parsed.segments]
    assert [r.series("loss")[0].tolist()[:1] + r.series("loss")[0].tolist()[-1:] for r in runs] == [
        [9, 9],
        [9, 9],
        [19, 199],
        [9, 9],
        [19, 599],
    ]
    assert "eta_seconds" not in {m for r in runs for m in r.metrics}


def test_a_step_back_to_the_runs_first_step_is_still_a_resume(tmp_path: Path) -> None:
    recs = [{"step": s, "loss": 3.0 - s / 100} for s in (10, 20, 30, 40, 10, 20, 30, 40, 50)]
    parsed = read_log([_jsonl(tmp_path / "history.jsonl", recs)])
    assert parsed.segments == []


def test_counters_of_the_data_consumed_and_the_time_left_are_no_metrics() -> None:
    n = 8
    values = {
        "samples": np.arange(1, n + 1) * 48.0,
        "tokens_seen": np.arange(1, n + 1) * 4096.0,
        "tokens": np.full(n, 4096.0),  # a batch's size, not the cumulative count the canonical name means
        "effective_steps": np.arange(n) * 2 + 1.0,
        "eta_seconds": np.linspace(90, 0, n),
        "tokens_per_s": np.linspace(5e5, 6e5, n),
        "loss": np.linspace(3, 2, n),
    }
    moved = moved_fields(values)
    assert set(moved) == {"samples", "tokens_seen", "tokens", "effective_steps", "eta_seconds"}
    assert moved["tokens_seen"][1] == n * 4096.0  # the last value kept
    assert "tokens" not in moved_fields({"tokens": np.arange(1, n + 1) * 4096.0})  # cumulative: kept


def test_chainer_and_bare_step_time_names() -> None:
    assert canonical_name("validation/main/loss")[0] == "val_loss"
    assert canonical_name("main/loss")[0] == "loss"
    assert canonical_name("step_ms") == ("step_time_s", "ms")
    assert canonical_name("step_s")[0] == "step_s"  # a bare 's' may count steps
