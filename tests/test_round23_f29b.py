"""Round 23, f29b (issue #31): metric files whose step, clip, step time or columns were read wrong, on synthetic logs
(own numbers, none from the corpus): a JSON record's per-epoch step beside a run-wide counter, a true/false clipped
flag beside the grad norm, a wall clock named with its unit, progress and bookkeeping fields that are no metrics, a
test evaluation after training that overwrote the last epoch's validation, and the scorer's prefix ban of a name
the golden requires (docs/diagnosis.md, "round 23: f29b")."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ingest.formats import read_log


def _write(path: Path, lines: list[str]) -> Path:
    path.write_text("\n".join(lines) + "\n")
    return path


def _jsonl(path: Path, records: list[dict[str, object]]) -> Path:
    return _write(path, [json.dumps(r) for r in records])


def _epoch_records(per_epoch: int = 12, epochs: int = 3, every: int = 8) -> list[dict[str, object]]:
    out: list[dict[str, object]] = []
    for epoch in range(epochs):
        for i in range(1, per_epoch + 1):
            step = i * every - 1
            run_step = epoch * per_epoch * every + step
            norm = 2.4 / (1 + run_step / 40) + 0.1 * (i % 2)
            out.append(
                {
                    "global_step": run_step,
                    "epoch": epoch,
                    "step": step,
                    "loss": 9.0 / (1 + run_step / 50),
                    "grad_norm": norm,
                    "lr": 1e-4,
                    "clipped": norm > 0.5,
                }
            )
    return out


def test_a_per_epoch_step_beside_a_run_wide_counter_gives_way_to_it(tmp_path: Path) -> None:
    records = _epoch_records()
    parsed = read_log([_jsonl(tmp_path / "training_log.jsonl", records)])
    steps, values = parsed.series("loss")
    assert steps.tolist() == [r["global_step"] for r in records]  # every record, on the run's steps
    assert values[0] == pytest.approx(9.0 / (1 + 7 / 50))  # the first epoch's first loss, not the last epoch's
    assert parsed.segments == []  # no restart: the per-epoch step going back is no rollback
    assert "'global_step'" in parsed.meta["step_source"] and "'step' restarts" in parsed.meta["step_source"]
    assert "step" not in parsed.metrics and "global_step" not in parsed.metrics


def test_a_relaunch_that_restarts_every_counter_keeps_the_first_counter(tmp_path: Path) -> None:
    first = _epoch_records(epochs=1)
    again = [dict(r, loss=float(str(r["loss"])) * 1.1) for r in first]  # both counters back at their start
    parsed = read_log([_jsonl(tmp_path / "training_log.jsonl", first + again)])
    assert "step_source" not in parsed.meta  # no counter kept rising: the relaunch is read as before
    assert parsed.series("loss")[0].tolist() == [r["step"] for r in first]


def test_a_clipped_flag_beside_the_grad_norm_gives_the_clip_threshold(tmp_path: Path) -> None:
    parsed = read_log([_jsonl(tmp_path / "training_log.jsonl", _epoch_records())])
    assert parsed.meta["max_norm"] == 0.5  # the roundest value between the unclipped and the clipped norms
    assert "'clipped'" in parsed.meta["max_norm_source"]


def test_clipped_flags_no_threshold_explains_give_none(tmp_path: Path) -> None:
    records = _epoch_records()
    for i, record in enumerate(records):
        record["clipped"] = i % 3 == 0  # set on small norms and large ones alike
    assert "max_norm" not in read_log([_jsonl(tmp_path / "training_log.jsonl", records)]).meta
