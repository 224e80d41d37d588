"""Review fixes (issues #31, #32; docs/diagnosis.md, "Import: the generic reader"): each test is the reviewer's input,
or a close synthetic one, that the reader got wrong before the fix."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ingest.formats import read_log
from tests.log_text import series_by_metric, write_lines


def test_an_eval_line_at_a_logged_step_keeps_every_key(tmp_path: Path) -> None:
    """Review 12 item 3: a layout seen twice kept only ``val_loss``; ``val_ppl`` and ``val_acc`` vanished."""
    lines = []
    for s in range(10, 1001, 10):
        lines.append(f"step {s} | loss {3 - s / 1000:.3f} | lr 0.0001")
        if s in (500, 1000):
            lines.append(f"step {s} | val_loss 2.5 | val_ppl 12.1 | val_acc 0.41")
    series = series_by_metric(read_log([write_lines(tmp_path, "train.log", lines)]))
    assert {"val_loss", "val_ppl", "val_acc"} <= set(series)
    assert series["val_ppl"][0].tolist() == [500, 1000]


def test_a_seconds_clock_is_no_step_time(tmp_path: Path) -> None:
    """Review 12 item 8: ``seconds: 1.5 N`` (time since the start) was proposed as each step's time."""
    lines = [f"step {s} | loss {3 - s / 1000:.3f} | seconds: {s * 1.5:.1f}" for s in range(1, 201)]
    parsed = read_log([write_lines(tmp_path, "train.log", lines)])
    assert "step_time_s" not in parsed.meta.get("mapping", {})
    assert not parsed.meta.get("proposed_map")


def test_a_per_step_seconds_key_is_still_the_step_time(tmp_path: Path) -> None:
    lines = [f"step {s} | loss {3 - s / 1000:.3f} | seconds: {1.5 + 0.1 * (s % 3):.2f}" for s in range(1, 201)]
    parsed = read_log([write_lines(tmp_path, "train.log", lines)])
    assert parsed.meta["proposed_map"] == {"seconds_s": "step_time_s"}


def test_a_plural_s_is_no_seconds_unit() -> None:
    """Review 12 item 9: ``sample(s): 512`` was a 512-second time."""
    from ingest.formats.generic import line_pairs

    assert line_pairs("step 10 | loss 2.31 | processed sample(s): 512")[-1] == ("processed sample", 512.0, None)
    assert line_pairs("iter_time(ms): 12.5") == [("iter_time", 12.5, "ms")]
    assert line_pairs("step 3 | time (s): 1.5")[-1] == ("time", 1.5, "s")


def _golden(tmp_path: Path, metrics: dict[str, list]) -> Path:
    import json

    spec = {m: {"start_step": 1, "end_step": len(v), "step_interval": 1, "values": v} for m, v in metrics.items()}
    path = tmp_path / "golden_values_dev.json"
    path.write_text(json.dumps(spec))
    return path


def test_a_golden_divergence_without_machine_metrics_is_kept(tmp_path: Path) -> None:
    """Review 12 item 4: an older golden file of ``lm loss`` and ``num-zeros`` only, both ``"nan"`` from
    step 60 (a real divergence), ended its table at 59 with no non-finite row."""
    loss = [2.0] * 59 + ["nan"] * 41
    parsed = read_log([_golden(tmp_path, {"lm loss": loss, "num-zeros": list(loss)})])
    steps, values = series_by_metric(parsed)["loss"]
    assert steps.max() == 100
    assert np.count_nonzero(~np.isfinite(values)) == 41


def test_golden_steps_nan_in_memory_too_are_unrecorded(tmp_path: Path) -> None:
    loss = [2.0] * 59 + ["nan"] * 41
    metrics = {"lm loss": loss, "num-zeros": list(loss), "mem-allocated-bytes": [1e9] * 59 + ["nan"] * 41}
    steps, _ = series_by_metric(read_log([_golden(tmp_path, metrics)]))["loss"]
    assert steps.max() == 59


def test_a_repeated_step_is_no_new_abandoned_attempt() -> None:
    """Review 12 item 10(b): steps [11, 12, 12, 13] were two attempts."""
    from ingest.formats.log_rows import rollback_detail

    rows = {"loss": [(np.array([11, 12, 12, 13]), np.array([1.0, 2.0, 3.0, 4.0]))]}
    assert rollback_detail(rows, 0, 100)["abandoned"]["loss"] == [[[11.0, 12.0, 13.0], [1.0, 3.0, 4.0]]]
    two = {"loss": [(np.array([11, 12, 5, 6]), np.array([1.0, 2.0, 3.0, 4.0]))]}
    assert len(rollback_detail(two, 0, 100)["abandoned"]["loss"]) == 2


def test_training_words_are_whole_words() -> None:
    """Review 12 item 14: ``acc`` matched ``grad_accum``, ``loss`` matched ``loss_scale``."""
    from ingest.services.run_status import _names_training

    assert not any(_names_training(m) for m in ("grad_accum", "loss_scale", "accumulated_steps", "tokens"))
    assert all(_names_training(m) for m in ("train/acc", "train_accuracy", "rewards/chosen", "train/ZLoss", "kl_div"))


def test_the_cost_page_takes_the_import_accounts_kind_names() -> None:
    """Review 12 item 14: run_cost copied accounting's kind names as literals."""
    from ingest.formats.accounting import IGNORE_REASONS, VALUELESS_REASONS
    from ingest.services.run_cost import VALUELESS_LINE_KINDS

    assert VALUELESS_LINE_KINDS is VALUELESS_REASONS
    assert VALUELESS_REASONS - {"record without values"} <= set(IGNORE_REASONS)


def test_jsonl_imports_no_private_name_of_another_reader() -> None:
    """Review 12 item 14: jsonl imported hf_trainer_state's private ``_SUMMARY_KEYS``."""
    import ast

    import ingest.formats.jsonl as jsonl

    tree = ast.parse(Path(jsonl.__file__).read_text())
    private = [
        alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("ingest.")
        for alias in node.names
        if alias.name.startswith("_")
    ]
    assert private == []


def test_fractional_epochs_are_no_step_column(tmp_path: Path) -> None:
    """Review 12 item 6(a): ``epoch,loss`` with epochs 0.25 .. 2.0 stored 3 rows at steps 0, 1, 2."""
    import pytest

    from ingest.errors import StabScopeError

    rows = ["epoch,loss", *(f"{0.25 * i:.2f},{3 - 0.1 * i:.2f}" for i in range(1, 9))]
    with pytest.raises(StabScopeError, match="expected a step column"):
        read_log([write_lines(tmp_path, "metrics.csv", rows)], format="csv_wide")
    whole = ["epoch,loss", *(f"{i},{3 - 0.1 * i:.2f}" for i in range(1, 9))]
    steps, _ = series_by_metric(read_log([write_lines(tmp_path, "whole.csv", whole)], format="csv_wide"))["loss"]
    assert steps.tolist() == [*range(1, 9)]


def test_an_epoch_counter_logged_every_k_batches_has_the_epochs_length(tmp_path: Path) -> None:
    """Review 12 item 6(b): steps 0, 50 .. 950 of each 1000-batch epoch made a period of 951."""
    rows = ["epoch,step,loss", *(f"{e},{s},{3 - e * 0.1:.2f}" for e in range(3) for s in range(0, 1000, 50))]
    steps, _ = series_by_metric(read_log([write_lines(tmp_path, "metrics.csv", rows)], format="csv_wide"))["loss"]
    assert steps.tolist() == list(range(0, 3000, 50))


def test_an_eval_line_without_of_n_takes_its_epochs_global_step(tmp_path: Path) -> None:
    """Review 12 item 7: ``Epoch E | Step 100 | val_loss`` beside ``Epoch E | Step S/100`` lines made a false
    restart, and the three evals one row at step 100."""
    lines = []
    for e in range(1, 4):
        lines += [f"Epoch {e} | Step {s}/100 | loss 2.0" for s in range(10, 101, 10)]
        lines.append(f"Epoch {e} | Step 100 | val_loss 2.1")
    parsed = read_log([write_lines(tmp_path, "train.log", lines)])
    series = series_by_metric(parsed)
    assert series["val_loss"][0].tolist() == [100, 200, 300]
    assert series["loss"][0].tolist() == list(range(10, 301, 10))
    assert not [e for e in parsed.events if e.kind == "rollback"]
