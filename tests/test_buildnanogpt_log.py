"""build-nanogpt ``log.txt``: ``<step> train|val|hella <value>`` lines (issue #31; docs/diagnosis.md, "Import: format
readers")."""

from __future__ import annotations

from pathlib import Path

from ingest.formats import detect, read_log


def test_tagged_step_lines_are_loss_val_loss_and_hellaswag(tmp_path: Path) -> None:
    path = tmp_path / "log.txt"
    path.write_text(
        "0 val 11.0864\n0 hella 0.2498\n0 train 11.087302\n1 train 10.97\n2 train 10.75\n"
        "2 val 9.5\n2 hella 0.25\n3 train 9.4\n"
    )
    assert detect([path])[0][0] == "buildnanogpt_log"
    log = read_log([path])
    assert {"loss", "val_loss", "hellaswag_acc"} <= set(log.metrics)
    assert log.step_range == (0, 3)


def test_console_eval_lines_take_the_next_step_lines_step(tmp_path: Path) -> None:
    path = tmp_path / "slurm.out"
    step = "step {:5d} | loss: {} | lr 6.0000e-04 | norm: 0.5 | dt: 400.00ms | tok/sec: 1310000.0\n"
    path.write_text(
        "using fused AdamW: True\nvalidation loss: 10.95\nHellaSwag accuracy: 2497/10042=0.2487\n"
        + step.format(0, 10.9)
        + step.format(1, 10.0)
        + step.format(2, 9.3)
        + "validation loss: 6.26\nHellaSwag accuracy: 2458/10042=0.2448\n"
        + step.format(3, 9.0)
    )
    assert detect([path])[0][0] == "buildnanogpt_console"
    log = read_log([path])
    rows = log.table.to_pylist()
    val = [(r["step"], r["value"]) for r in rows if r["metric"] == "val_loss"]
    hella = [(r["step"], r["value"]) for r in rows if r["metric"] == "hellaswag_acc"]
    assert val == [(0, 10.95), (3, 6.26)]
    assert hella == [(0, 0.2487), (3, 0.2448)]
    assert {"loss", "grad_norm", "lr", "step_time_s", "throughput_tok_s"} <= set(log.metrics)


def test_parameter_golf_lr_mul_is_the_lr_series(tmp_path: Path) -> None:
    path = tmp_path / "train.log"
    path.write_text(
        "".join(
            f"step:{n}/100 train_loss:{3 - n / 100:.4f} lr_mul:{1 - n / 100:.4f} train_time:{n * 1000}ms\n"
            for n in range(20, 101, 20)
        )
    )
    log = read_log([path])
    assert "lr" in log.metrics and "lr_mul" not in log.metrics
    assert log.series("lr", -1)[1].tolist() == [0.8, 0.6, 0.4, 0.2, 0.0]
