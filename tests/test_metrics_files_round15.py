"""Metrics files of layouts no reader was written for (issue #31; docs/diagnosis.md, "Import: metrics files"), read by
the fallback readers alone (``FALLBACK_READERS``: what an unseen layout gets). Every input is synthetic."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from ingest.formats import FALLBACK_READERS, ParsedLog, read_log


def _fallback(path: Path) -> ParsedLog:
    return read_log([path], reader_set=FALLBACK_READERS)


def _values(log: ParsedLog, metric: str) -> tuple[list[int], list[float]]:
    rows = log.table.filter(np.asarray(log.table["metric"].to_pylist(), dtype=object) == metric)
    return rows["step"].to_pylist(), rows["value"].to_pylist()


def test_a_document_whose_record_list_is_any_key_is_read_by_the_fallback(tmp_path: Path) -> None:
    # a state file: settings at the top, the log as a list of per-step objects under some key, with
    # evaluation records and one end-of-training summary among them
    history: list[dict[str, float]] = []
    for step in range(10, 110, 10):
        history.append(
            {
                "epoch": step / 40,
                "grad_norm": 1.0 + step / 100,
                "learning_rate": 1e-4,
                "loss": 3 - step / 50,
                "step": step,
            }
        )
        if step % 50 == 0:
            history.append({"epoch": step / 40, "eval_loss": 2.5 - step / 100, "step": step})
    history.append({"epoch": 2.5, "step": 100, "total_flos": 1.5e15, "train_loss": 2.1, "train_runtime": 60.0})
    path = tmp_path / "state.json"
    path.write_text(json.dumps({"global_step": 100, "epoch": 2.5, "log_history": history, "max_steps": 100}, indent=2))
    log = _fallback(path)
    assert log.format == "jsonl"
    steps, losses = _values(log, "loss")
    assert steps == list(range(10, 110, 10)) and losses[0] == 2.8
    assert {"loss", "grad_norm", "lr", "val_loss"} <= set(log.metrics)
    # the fractional epoch is the step axis's companion and the summary describes the run: no metrics
    assert "epoch" not in log.metrics and "total_flos" not in log.metrics
    assert log.meta["train_summary"]["train_runtime"] == 60.0


def test_progress_records_take_current_steps_as_the_axis(tmp_path: Path) -> None:
    lines = [
        {
            "current_steps": s,
            "total_steps": 40,
            "loss": 2.0 - s / 100,
            "learning_rate": 1e-5,
            "epoch": s / 20,
            "percentage": s * 2.5,
        }
        for s in (10, 20, 30, 40)
    ]
    path = tmp_path / "progress_log.jsonl"
    path.write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    log = _fallback(path)
    assert log.step_range == (10, 40)
    assert not {"current_steps", "percentage", "epoch"} & set(log.metrics)
    assert {"loss", "lr"} <= set(log.metrics)


def test_a_document_of_per_metric_series_is_read_step_by_step(tmp_path: Path) -> None:
    steps = [1, 4, 7, 10]
    doc = {
        "train loss": {"first": 1, "every": 3, "values": {str(s): 5.0 - s / 4 for s in steps}},
        "step-time": {"first": 1, "every": 3, "values": {"1": "nan", "4": 0.25, "7": 0.26, "10": 0.24}},
        "mem-bytes": {"first": 1, "every": 3, "values": {"1": 1e9, "4": 1e9, "7": 1e9, "10": 1e9}},
    }
    doc["train loss"]["values"]["13"] = "nan"  # a step nothing recorded: every series is "nan"
    doc["step-time"]["values"]["13"] = "nan"
    doc["mem-bytes"]["values"]["13"] = "nan"
    path = tmp_path / "series.json"
    path.write_text(json.dumps(doc, indent=4))
    log = _fallback(path)
    got_steps, losses = _values(log, "loss")
    assert got_steps == steps and losses == [5.0 - s / 4 for s in steps]
    assert log.step_range == (1, 10)


def test_a_label_map_is_no_series(tmp_path: Path) -> None:
    path = tmp_path / "labels.json"
    path.write_text(json.dumps({"id2label": {"0": "neg", "1": "pos"}, "label2id": {"neg": 0, "pos": 1}}, indent=2))
    try:
        log = _fallback(path)
    except Exception:  # refused: right
        return
    assert "id2label" not in log.metrics


def test_event_typed_records_are_kept_apart(tmp_path: Path) -> None:
    lines: list[dict[str, object]] = []
    for step in range(1, 41):
        lines.append(
            {
                "event": "train_step",
                "step": step,
                "train_loss": 4 - step / 20,
                "learning_rate": 3e-4,
                "tokens_seen": step * 512,
            }
        )
        if step % 10 == 0:
            lines.append({"event": "eval", "step": step, "loss": 3.9 - step / 25, "tokens_seen": step * 512})
            lines.append({"event": "checkpoint", "step": step, "bytes": 123456789, "path": "ckpt.pt"})
    lines.append({"event": "stop", "step": 40, "reason": "max_steps"})
    path = tmp_path / "events.jsonl"
    path.write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    log = _fallback(path)
    steps, losses = _values(log, "loss")
    # train_loss on every train record is the loss (no end-of-training summary), the eval record's
    # loss is the validation loss, and a checkpoint record is an event, never a metric
    assert steps == list(range(1, 41)) and losses[0] == 4 - 1 / 20
    val_steps, _ = _values(log, "val_loss")
    assert val_steps == [10, 20, 30, 40]
    assert "bytes" not in log.metrics
    assert [e.step for e in log.events if e.kind == "checkpoint"] == [10, 20, 30, 40]


def test_grouped_csv_columns_take_their_roles(tmp_path: Path) -> None:
    header = "step,train/loss,eval/loss,eval/num_batches,model/total_parameters,performance/tokens_per_second,"
    header += "train/grad_norm_before_clip,train/grad_norm_after_clip,timing/total_ms,timing/forward_ms"
    rows = [header, ",,,,1000000,,,,,"]
    for step in (0, 10, 20, 30):
        rows.append(f"{step},{3 - step / 20},,,,{1000 + step},{2 + step / 10},1.0,{400 + step},{100 + step}")
        if step % 20 == 0:
            rows.append(f"{step},,{2.9 - step / 30},8,,,,,,")
    path = tmp_path / "history.csv"
    path.write_text("\n".join(rows) + "\n")
    log = _fallback(path)
    assert {"loss", "val_loss", "throughput_tok_s", "grad_norm", "grad_norm_clipped", "step_time_s"} <= set(log.metrics)
    assert not {"eval/num_batches", "model/total_parameters"} & set(log.metrics)
    _, times = _values(log, "step_time_s")
    assert times[0] == 0.4  # milliseconds, as the name says
    _, norms = _values(log, "grad_norm")
    assert norms[0] == 2.0  # before clipping


def test_a_steps_done_counter_is_the_axis_and_the_episode_index_no_metric(tmp_path: Path) -> None:
    rows = ["episode,episode time,episode_reward,steps_done"]
    total = 0
    for episode in range(6):
        total += 200 + 10 * episode
        rows.append(f"{episode},{0.5 + episode / 10},{20.0 + episode},{total}")
    path = tmp_path / "progress.csv"
    path.write_text("\n".join(rows) + "\n")
    log = _fallback(path)
    assert log.step_range == (200, total)
    assert "episode_reward" in log.metrics
    assert not {"episode", "steps_done"} & set(log.metrics)
