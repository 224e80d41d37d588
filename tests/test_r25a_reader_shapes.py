"""Issue #31, round 25 (docs/diagnosis.md, "round 25: r25a"): log shapes that were refused or read with junk
names, each on a synthetic input: a CSV numbered by pandas' unnamed index, a Python ``logging`` console appended by
several launches, an ``Epoch [e/E], Step [s/S]`` console resumed after a Chinese note, a Megatron field missing its
``|``, a W&B history's ``_runtime`` and a timer key that ends in its unit."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ingest.formats import read_log
from ingest.formats.csv_wide import INDEX_STEP_SOURCE


def test_pandas_index_column_is_the_step(tmp_path: Path) -> None:
    # a Trainer log_history saved with DataFrame.to_csv: the index column's header cell is empty, the epoch fractional
    rows = ["0,0.09,2025-05-14 14:26:00,2.79,0.24,0.0003", "1,0.18,-,2.43,0.20,0.0003"]
    rows += [
        f"{i},{0.09 * (i + 1):.2f},{f'2025-05-14 14:{26 + i // 11:02d}:00' if i % 11 == 0 else '-'},"
        f"{2.0 - i / 100:.3f},0.3,0.0003"
        for i in range(2, 60)
    ]
    path = tmp_path / "train_log.csv"
    path.write_text(",epoch,time,loss,grad_norm,learning_rate\n" + "\n".join(rows) + "\n")
    log = read_log([path])
    steps, _ = log.series("loss")
    assert steps.tolist() == list(range(60))
    assert log.meta.get("step_source") == INDEX_STEP_SOURCE
    assert "epoch" not in log.metrics and "" not in log.metrics
    # the wall-clock stamps on each epoch's first row time the steps between them (60 s over 11 steps)
    t_steps, per_step = log.series("step_time_s")
    assert t_steps.tolist() == [11, 22, 33, 44, 55]
    assert np.allclose(per_step, 60.0 / 11)


def test_an_index_that_goes_back_is_no_step(tmp_path: Path) -> None:
    path = tmp_path / "table.csv"
    path.write_text(",epoch,loss\n3,1,2.0\n1,2,1.9\n2,3,1.8\n")
    log = read_log([path])
    assert log.series("loss")[0].tolist() == [1, 2, 3]  # the whole epoch stays the axis


def test_pandas_index_beside_a_step_column_is_no_metric(tmp_path: Path) -> None:
    # a W&B run history saved with to_csv: the unnamed index beside '_step'; '_runtime' is W&B's elapsed clock
    rows = [f"{i},{i},{10.0 * i + 5.0:.1f},{1.0 - i / 100:.3f}" for i in range(30)]
    path = tmp_path / "wandb_history.csv"
    path.write_text(",_step,_runtime,train/loss\n" + "\n".join(rows) + "\n")
    log = read_log([path])
    assert "metric" not in log.metrics and "_runtime" not in log.metrics
    steps, per_step = log.series("step_time_s")
    assert steps.tolist() == list(range(1, 30))
    assert np.allclose(per_step, 10.0)
