"""Metric files read by the fallback readers alone (issue #31; docs/diagnosis.md, "Import: the generic reader"): a file
of long-form ``<step> <name> <value>`` records, and an evaluation's token counter in generic JSON records. Synthetic
files in each layout, our own numbers; read with only the readers a layout nobody wrote a reader for
meets (``FALLBACK_READERS``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ingest.formats import FALLBACK_READERS, FORMATS, detect, read_log
from ingest.formats.long_rows import long_key


def _long_file(path: Path) -> Path:
    lines = ["# metrics of a made-up run", "0 valid 6.25", "0 top1 0.031"]
    lines += [f"{s} train {6.2 - 0.1 * s:.4f}" for s in range(0, 40)]
    lines += ["", "20 valid 4.75", "20 top1 0.212", "39 valid 3.5"]
    path.write_text("\n".join(lines) + "\n")
    return path


def test_long_records_keep_each_series_at_its_own_steps(tmp_path: Path) -> None:
    path = _long_file(tmp_path / "history.txt")
    assert detect([path], reader_set=FALLBACK_READERS)[0][0] == "long_rows"
    log = read_log([path], reader_set=FALLBACK_READERS)
    steps, loss = log.series("loss")
    assert len(steps) == 40 and steps[0] == 0 and steps[-1] == 39
    assert loss[-1] == pytest.approx(2.3)  # the train record at 39, never the valid one at that step
    vsteps, val = log.series("val_loss")
    assert list(vsteps) == [0, 20, 39] and val[-1] == pytest.approx(3.5)
    assert list(log.series("top1")[0]) == [0, 20]
    assert not {"train", "valid"} & set(log.metrics)


def test_a_relaunch_appended_to_the_file_is_no_second_value_of_its_steps(tmp_path: Path) -> None:
    lines = [f"{s} train {5.0 - 0.01 * s:.4f}" for s in range(0, 120)]
    lines += ["# resumed from step 100"] + [f"{s} train {3.9 - 0.01 * (s - 100):.4f}" for s in range(100, 150)]
    path = tmp_path / "log.txt"
    path.write_text("\n".join(lines) + "\n")
    log = read_log([path], reader_set=FALLBACK_READERS)
    steps, loss = log.series("loss")
    assert len(steps) == len(set(steps.tolist())) == 150
    assert loss[-1] == pytest.approx(3.41)


def test_a_split_name_alone_is_that_splits_loss() -> None:
    assert long_key("train") == ("loss", None)
    assert long_key("Val") == ("val_loss", None)
    assert long_key("test") == ("test_loss", None)
    assert long_key("lr")[0] == "lr"


def test_a_console_with_a_few_such_lines_is_not_claimed(tmp_path: Path) -> None:
    lines = ["Epoch 1 starting", "3 steps done 0.5", "loss is falling", "checkpoint saved", "4 warmup 0.1"]
    path = tmp_path / "train.log"
    path.write_text("\n".join(lines * 5) + "\n")
    assert FORMATS["long_rows"].sniff_path(path, path.read_bytes()) == 0.0


def test_an_eval_token_counter_in_json_records_is_no_metric(tmp_path: Path) -> None:
    history = []
    for s in (50, 100, 150, 200):
        history.append({"step": s, "epoch": s / 400, "loss": 2.0 - s / 1000, "num_tokens": 512.0 * s})
        if s % 100 == 0:
            history.append({"step": s, "epoch": s / 400, "eval_loss": 1.9 - s / 1000, "eval_num_tokens": 512.0 * s})
    path = tmp_path / "state.json"
    path.write_text(json.dumps({"global_step": 200, "log_history": history}))
    log = read_log([path], reader_set=FALLBACK_READERS)
    assert log.format == "jsonl"
    assert "eval_num_tokens" not in log.metrics and "val_loss" in log.metrics
