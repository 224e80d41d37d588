"""Import rules that generalize (issue #31; docs/diagnosis.md, "Import: readers and prefixes"): a ``key: number`` pair
at a line's start is no host prefix; the generic reader reads only the layouts a log repeats and a step's own timing
line; a field that never changes is a setting of the run and an evaluation pass's timing no metric, each said
in the import report; the readers' prefixes, pairs and units on synthetic lines of each shape."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from bench.corpus_eval import junk_metrics
from ingest.formats import read_log
from ingest.formats.accounting import import_report
from ingest.formats.field_roles import SETTINGS_KEY, moved_fields
from ingest.formats.generic import line_pairs
from ingest.formats.raw_text import LAUNCHER_LEAD
from tests.log_text import write_lines


def _series(parsed) -> dict[str, np.ndarray]:
    t = parsed.table
    metrics = np.asarray(t.column("metric").to_pylist())
    values = t.column("value").to_numpy()
    return {m: values[metrics == m] for m in np.unique(metrics)}


def _ppo_console(n: int = 24) -> list[str]:
    """A custom PPO console's shape: generated text full of numbers (with 'Step k:' in it), dict lines
    with tensor values, 'Step: N | Loss: x | KL: y', a timing line, a profiler block, a health line."""
    out = ["Print found 2000 lines of training data", "", "=== Epoch 1/10 ==="]
    for i in range(1, n + 1):
        out += [
            f"Question {i}: a car travels at {60 + i} km/h for {i % 5 + 1} hours. Please reason step-by-step.",
            f"**Step {i % 3 + 1}: Distance {i * 7} km in {i % 4 + 2} hours**",
            f"{i - 1}",
            f"{{'prompt_id_length': {90 + i}, 'steps_taken': {200 + i}, 'ratio_mean': tensor(1.0001), "
            f"'policy_loss': -0.00{i % 7}, 'value_loss': 0.03}}",
            "--- Gradient Check ---",
            f"Average LoRA Gradient Magnitude: 0.0000{i}",
            f"Step: {i} | Loss: {(-1) ** i * 0.001 * (i % 5 + 1):.4f} | KL: {0.0001 * i:.4f}",
            f"[timing] sample processed in {250 + 3 * i:.2f}s",
            "=== PROFILER ===",
            f"Sampling:          {120 + i:.2f}s",
            f"Backward:          {90 + i:.2f}s",
            f"\x1b[92m[System Health] RAM: {50 + i % 9}.3% | Swap Used: {i % 7 + 1}.67 GB\x1b[0m",
        ]
    return out


@pytest.mark.parametrize(
    ("line", "own"),
    [
        (b"Step: 1 | Loss: -0.0011 | KL: -0.0002", b"Step: 1 | Loss: -0.0011 | KL: -0.0002"),
        (b"Epoch: 3/10 loss 2.5", b"Epoch: 3/10 loss 2.5"),
        (b"RAM: 63.4% | Swap Used: 4.67 GB", b"RAM: 63.4% | Swap Used: 4.67 GB"),
        (b"node017: iteration 5", b"iteration 5"),
        (b"node1: 7: iteration 5", b"iteration 5"),
        (b"localhost: 2024-01-01 12:00:00 INFO step 3", b"step 3"),
        (b"localhost: [rank3]: step 2", b"step 2"),
        (b"192.168.205.202: [default0]: step 2", b"step 2"),
        (b"fe80::1: [rank1]: step 2", b"step 2"),
        (b"[2001:db8::1]: step 2", b"step 2"),
    ],
)
def test_a_key_number_pair_at_the_line_start_is_no_host(line: bytes, own: bytes) -> None:
    lead = LAUNCHER_LEAD.match(line)
    assert line[lead.end() if lead else 0 :] == own


def test_a_ppo_console_of_step_key_lines_imports_with_its_mapping(tmp_path: Path) -> None:
    """Refused as 'format not recognised' before: 'Step: 1' was read as a host prefix."""
    parsed = read_log([write_lines(tmp_path, "ppo.log", _ppo_console())])
    assert parsed.format == "generic"
    assert parsed.meta["mapping"]["step"] == "Step" and parsed.meta["mapping"]["loss"] == "Loss"
    series = _series(parsed)
    assert series["loss"].shape[0] == 24 and series["loss"][0] == pytest.approx(-0.002)
    assert series["KL"].shape[0] == 24
    # the step's own timing line, after its step line: the step time (s)
    assert series["step_time_s"].shape[0] == 24 and series["step_time_s"][0] == pytest.approx(253.0)
    # generated text that says 'Step 2: Distance 14 km in 3 hours' adds no series and starts no run
    assert set(series) == {"loss", "KL", "step_time_s"}
    assert parsed.segments == []
    report = import_report(parsed)
    assert report is not None
    assert (
        report["lines_read"]
        == report["parsed"]["lines"] + sum(t["count"] for t in report["ignored"].values()) + report["suspect"]["count"]
    )


def test_a_rare_layout_keeps_only_known_keys(tmp_path: Path) -> None:
    """An eval line that appears twice keeps its val_loss (a known metric); words of a sentence do not."""
    lines = [f"step {i} loss {3 - 0.01 * i:.3f} lr {1e-4 * i:.5f}" for i in range(1, 21)]
    lines.insert(10, "step 10 val_loss 2.95")
    lines.insert(18, "step 17 val_loss 2.90")
    lines.insert(5, "step 5 of the recipe: bake at 180 for 20 minutes")
    parsed = read_log([write_lines(tmp_path, "eval.log", lines)])
    series = _series(parsed)
    assert series["val_loss"].tolist() == [2.95, 2.90]
    assert set(series) == {"loss", "lr", "val_loss"}


def test_a_timing_line_is_not_read_where_the_step_lines_time_themselves(tmp_path: Path) -> None:
    lines = []
    for i in range(1, 11):
        lines += [f"step {i} loss {3 - 0.01 * i:.3f} step_time {0.5 + 0.01 * i:.2f}s", f"eval took {9 + i:.1f}s"]
    series = _series(read_log([write_lines(tmp_path, "timed.log", lines)]))
    assert series["step_time_s"][0] == pytest.approx(0.51)


def test_a_field_that_never_changes_is_a_setting_said_in_the_report(tmp_path: Path) -> None:
    lines = [
        f"step {i} loss {3 - 0.01 * i:.3f} loss_scale 65536 world_size 8 mem_budget_gb 40 tokens_seen {i * 4096}"
        for i in range(1, 21)
    ]
    parsed = read_log([write_lines(tmp_path, "const.log", lines)])
    series = _series(parsed)
    assert "world_size" not in series and "mem_budget_gb" not in series
    assert series["loss_scale"].shape[0] == 20  # canonical: a flat loss scale is a fact about training
    assert parsed.meta[SETTINGS_KEY] == {"world_size": 8, "mem_budget_gb": 40}
    moved = import_report(parsed)["moved"]
    assert set(moved) == {"world_size", "mem_budget_gb"} and "setting" in moved["world_size"]["why"]


def test_moved_fields_rules() -> None:
    flat = np.full(6, 3.0)
    got = moved_fields(
        {
            "eval_runtime": np.array([12.1, 12.4]),
            "eval_steps_per_second": np.array([1.2, 1.3]),
            "actual_seqlen": np.full(6, 2048.0),
            "lr": flat,
            "step_time_s": flat,
            "samples_per_s": flat,
            "ppl": np.array([3.0, 3.0]),  # too few records to say it never changes
            "kl": np.array([np.nan] * 6),  # non-finite is a signal, never a setting
            "acc": np.array([0.5, 0.6, 0.5, 0.5, 0.5, 0.5]),
        }
    )
    assert set(got) == {"eval_runtime", "eval_steps_per_second", "actual_seqlen"}
    assert got["eval_runtime"][1] == 12.4 and got["actual_seqlen"][1] == 2048.0


def test_hf_eval_timing_is_no_series(tmp_path: Path) -> None:
    lines = []
    for i in range(1, 11):
        lines.append(f"{{'loss': {2 - 0.1 * i:.3f}, 'grad_norm': 0.{i}, 'learning_rate': 2e-05, 'epoch': {i / 10}}}")
        if i % 5 == 0:
            lines.append(
                f"{{'eval_loss': {2 - 0.1 * i:.3f}, 'eval_runtime': {10 + i}.2, 'eval_samples_per_second': 3.{i}, "
                f"'eval_steps_per_second': 0.{i}, 'epoch': {i / 10}}}"
            )
    parsed = read_log([write_lines(tmp_path, "hf.log", lines)])
    series = _series(parsed)
    assert "val_loss" in series and not any("runtime" in m or "per_second" in m for m in series)
    assert "eval_runtime" in import_report(parsed)["moved"]


@pytest.mark.parametrize(
    ("lines", "metric", "first"),
    [
        ([f"step={i} loss={3 - i * 0.01:.4f} grad_norm={1 + 0.01 * i:.3f}" for i in range(1, 21)], "grad_norm", 1.01),
        ([f"iter {i} loss {3 - i * 0.01:.4f} time {500 + i}ms" for i in range(1, 21)], "time_s", 0.501),
        ([f"step {i} | loss: {3 - i * 0.01:.4f} | seconds: 1.{i:02d}" for i in range(1, 21)], "seconds_s", 1.01),
        ([f"step {i}, loss {3 - i * 0.01:.4f}, samples/s: {12 + i}.5" for i in range(1, 21)], "samples_per_s", 13.5),
        ([f"step {i} loss {3 - i * 0.01:.4f} tokens/sec: {5000 + i}" for i in range(1, 21)], "throughput_tok_s", 5001),
        ([f"step {i} loss {3 - i * 0.01:.4f} tok/s: {5000 + i}" for i in range(1, 21)], "throughput_tok_s", 5001),
        (
            [
                f"step:{i}/100 train_loss:{3 - i * 0.01:.4f} train_time:{i * 1706}ms step_avg:1706ms"
                for i in range(1, 21)
            ],
            "step_time_s",
            1.706,
        ),
        (
            [
                "\r 10%|#   | 3/30 [00:01<00:09]\r"
                + f"{{'loss': '{3 - i * 0.01:.4f}', 'grad_norm': '0.77', 'learning_rate': '2.262e-05', "
                + f"'epoch': '{i * 0.01:.3f}'}}"
                for i in range(1, 21)
            ],
            "lr",
            2.262e-05,
        ),
    ],
)
def test_pair_and_unit_shapes(tmp_path: Path, lines: list[str], metric: str, first: float) -> None:
    series = _series(read_log([write_lines(tmp_path, "shape.log", lines)]))
    assert series[metric][0] == pytest.approx(first)
    assert series["loss"].shape[0] == 20


@pytest.mark.parametrize(
    "prefix",
    ["node017: ", "localhost: ", "192.168.205.202: ", "fe80::1: ", "localhost: [rank3]: ", "10.0.0.2: [default1]: "],
)
def test_host_prefixes_on_generic_lines(tmp_path: Path, prefix: str) -> None:
    lines = [f"{prefix}step {i} loss {3 - i * 0.01:.4f} grad_norm {1 + i * 0.01:.3f}" for i in range(1, 21)]
    series = _series(read_log([write_lines(tmp_path, "prefixed.log", lines)]))
    assert series["loss"].shape[0] == 20 and series["grad_norm"][0] == pytest.approx(1.01)


@pytest.mark.parametrize(
    ("field", "value", "seconds"),
    [("elapsed time per iteration (ms): ", 4220.8, 4.2208), ("train_step_timing in s: ", 0.41, 0.41)],
)
def test_a_key_that_names_its_unit_is_a_step_time(tmp_path: Path, field: str, value: float, seconds: float) -> None:
    """Before, 'train_step_timing in s: 0.41' was read as a metric named 's' and the bracketed unit's
    key was not read at all."""
    lines = [f"step {i} | loss: {3 - i * 0.01:.4f} | {field}{value + i * 0.0}" for i in range(1, 21)]
    series = _series(read_log([write_lines(tmp_path, "timed.log", lines)]))
    assert set(series) == {"loss", "step_time_s"}
    assert series["step_time_s"][0] == pytest.approx(seconds)
    assert line_pairs(f"step 3 {field}{value}")[1][0] in ("elapsed time per iteration", "train_step_timing in s")


def test_scorer_reads_per_second_however_spelled() -> None:
    golden = {"known_fields": ["samples/sec", "samples per second"]}
    assert junk_metrics(["samples_per_s", "samples_per_s_deepspeed", "mystery"], golden, {}) == ["mystery"]


def test_a_signed_loss_is_not_read_by_the_ratio_tests() -> None:
    """A PPO objective around zero (0.0003 -> 0.0009 is '3x its level') is no incident: the ratio tests
    need a loss that is never negative, and the note says why they did not run."""
    from stab_core.analysis import analyze_run
    from stab_core.metrics import SIGNED_LOSS_REASON
    from stab_core.runview import RunView, Series

    steps = np.arange(1, 111, dtype=np.int64)
    values = 0.0005 * np.sin(steps * 1.7) + np.where(steps == 6, 0.002, 0.0)
    view = RunView(name="ppo", series={"loss": Series(steps, values)}, events=[])
    analysis = analyze_run(view)
    assert analysis.spikes == []
    assert ("loss spikes", SIGNED_LOSS_REASON) in analysis.not_run
    # the same shape shifted above zero (a cross-entropy) is read
    assert analyze_run(RunView(name="ce", series={"loss": Series(steps, values + 2.0)}, events=[])).not_run != [
        ("loss spikes", SIGNED_LOSS_REASON)
    ]


def test_the_signed_loss_note_is_judged_by_the_golden_values() -> None:
    from bench.run_statement_rules import signed_loss_verdict
    from bench.statement_rules import TRUE, UNJUDGED

    note = "Not run: loss spikes: the loss takes negative values (...)"
    assert signed_loss_verdict(note, {"first": {"loss": -0.0011}, "last": {"loss": 0.2}})[0] == TRUE
    assert signed_loss_verdict(note, {"first": {"loss": 0.07}, "last": {"loss": 0.01}})[0] == UNJUDGED
    assert signed_loss_verdict("Not run: snr: ...", {"first": {"loss": -1.0}}) is None


def test_import_says_what_was_moved(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from ingest.cli import main

    fixture = Path(__file__).resolve().parent / "fixtures" / "logs" / "hf_trainer_console.log"
    main(["import", str(fixture), "--run", "hf1", "--store", str(tmp_path / "store")])
    out = capsys.readouterr().out
    assert "eval_runtime: not a series (the timing of an evaluation" in out and "log_settings" in out
