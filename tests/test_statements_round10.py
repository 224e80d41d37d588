"""Issue #32 (every statement a checked claim; docs/diagnosis.md, "Actions and claims"): the classes of statement still
false on the corpus, each on a small input of its shape written here. A run's plan is said only where the log states one
for that run; its last step is its loss's; a run that reached the last step it would log before its plan
finished; a run with no training signal says what the file is; "not in this run" only where no line the
import skipped may hold it; an action whose premise cannot be checked is not said; siblings compare only
where the model is stated; a cause the data is consistent with is said as such, not as "unknown"."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import numpy as np

from bench.run_statement_rules import no_training_verdict, run_status_verdict
from bench.statement_eval import logging_stopped_verdict, note_verdict
from bench.statement_rules import consistent_causes_verdict
from ingest.formats import read_log
from ingest.importing.importer import import_logs, store_parsed
from ingest.services.run_analyses import open_analysed_store
from ingest.services.run_cost import no_step_time_words, skipped_timing_lines
from ingest.services.run_findings import stored_findings
from ingest.services.run_status import run_status, status_text
from ingest.store.report_meta import suspect_lines
from stab_core.cause_candidates import bad_batch_shape, loss_scale_at_floor, named_causes
from stab_core.metrics import missing_reason, unread_line_naming
from stab_core.spikes import SpikeEvent
from tests.conftest import RunSpec, write_run

# ------------------------------------------------------------------ 1. the run's status


def _keras_fit(epochs: int, planned: int, first_loss: float) -> list[str]:
    lines = ["Train on 40000 samples, validate on 10000 samples", f"Epoch 1/{planned}"]
    for e in range(1, epochs + 1):
        if e > 1:
            lines.append(f"Epoch {e}/{planned}")
        lines.append(
            f"225s - loss: {first_loss / e:.4f} - acc: 0.5000 - val_loss: {first_loss / e:.4f} - val_acc: 0.5000"
        )
    return lines


def test_a_later_fit_call_of_a_file_does_not_inherit_the_first_calls_plan(tmp_path: Path) -> None:
    # Keras: a first fit() "Epoch x/50" early-stopped at 6, a second "Epoch x/4" ran its 4 epochs. Before:
    # "stopped at 4 of 50" for the second (the file's first total copied to every run of it)
    path = tmp_path / "model_training_log.txt"
    path.write_text("\n".join([*_keras_fit(6, 50, 3.5), "stopped after 6 epochs", *_keras_fit(4, 4, 0.4)]) + "\n")
    store = open_analysed_store(tmp_path / "s")
    report = import_logs(store, [path], run="kanji")[0]
    names = [report["run"]] + [s["run"] for s in report.get("segments") or []]
    assert len(names) == 2
    assert run_status(store, names[0]) == "stopped at 6 of 50"
    assert not run_status(store, names[1]).startswith("stopped at 4 of 50")
    assert run_status(store, names[1]) == "ended at step 4"


def test_a_timing_line_past_the_last_loss_is_no_training_step(tmp_path: Path) -> None:
    # nanoGPT-style: the loss every 100 iterations, the step time every 25 (a progress line): before,
    # "ended at step 475 (the last step_time_s; ...)" where the last loss, the run's last step, is 400
    lines = []
    for i in range(0, 500, 25):
        lines.append(
            f"iter {i}: loss {4.0 - i / 1000:.4f}, time 120.00ms" if i % 100 == 0 else f"iter {i}: time 120.00ms"
        )
    store = open_analysed_store(tmp_path / "s")
    path = tmp_path / "train.log"
    path.write_text("\n".join(lines) + "\n")
    store_parsed(store, "run", read_log([path]))
    assert store.run_info("run").last_step == 475
    assert run_status(store, "run").startswith("ended at step 400")


def test_a_run_whose_next_loss_row_would_pass_its_plan_finished(tmp_path: Path) -> None:
    # LLaMA-Factory's trainer_log.jsonl: the loss every 10 steps, the last at 60 of 66 planned; a summary
    # line at 65 without a loss. Before: "stopped at 65 of 66 (the last epoch ...)"
    rows = [
        {"current_steps": s, "total_steps": 66, "loss": 1.0 - s / 100, "lr": 1e-5, "epoch": s / 22}
        for s in range(10, 70, 10)
    ]
    rows.append({"current_steps": 65, "total_steps": 66, "epoch": 3.0})
    path = tmp_path / "trainer_log.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    store = open_analysed_store(tmp_path / "s")
    name = import_logs(store, [path], run="lf")[0]["run"]
    assert run_status(store, name) == "finished"
    # with nothing after the last loss row (a checkpoint's state at 60 of 66), whether the last steps ran
    # cannot be told: stopped, not finished
    path.write_text("\n".join(json.dumps(r) for r in rows[:-1]) + "\n")
    again = open_analysed_store(tmp_path / "s2")
    name = import_logs(again, [path], run="lf")[0]["run"]
    assert run_status(again, name) == "stopped at 60 of 66"


def test_status_text_on_interval_and_a_final_evaluation() -> None:
    assert status_text("finished", 6560, 6566, 10, interval=10) == "finished"
    assert status_text("finished", 6550, 6566, 10, interval=10) == "stopped at 6550 of 6566"
    assert status_text("finished", 4900, 5000, 0, interval=100) == "finished"  # 0..4999: the next row is 5000
    # the last record is an evaluation at the last step: stopped or ended by plan cannot be told
    said = status_text("finished", 45000, 115311, 12695, ended_on_eval=True)
    assert said == "ended at step 45000 (an evaluation at its last step; 115311 planned)"


def test_a_run_with_no_training_signal_says_what_the_file_is(tmp_path: Path) -> None:
    # a prediction loop: a counter at every step, no loss, no grad norm, no LR. Before: "ended at step 1999"
    store = write_run(
        open_analysed_store(tmp_path / "s"),
        RunSpec(name="predict", per_rank=False, run_level=("tokens",), loss_spike=None, grad_spike_step=None),
    )
    assert run_status(store, "predict").startswith("empty: no training steps (no loss or grad norm logged; only ")


def test_run_status_rules_of_the_scorer() -> None:
    facts = {"logged": {"loss": False, "grad_norm": False}}
    assert no_training_verdict(None, facts)[0] == "true"
    assert no_training_verdict(None, {"logged": {"loss": True, "grad_norm": False}})[0] == "false"
    assert run_status_verdict("empty: no training steps (x)", None, facts)[0] == "true"
    finished_early = {"steps": [10, 6560], "planned_steps": 6566, "ended": "finished"}
    assert run_status_verdict("finished", finished_early)[0] == "true"
    assert run_status_verdict("finished", {**finished_early, "ended": "stopped"})[0] == "false"


# ------------------------------------------------------------------ 2. "not in this run"


def _info(**ignored: int) -> SimpleNamespace:
    report = {"ignored": {kind: {"count": n, "first_lines": [1]} for kind, n in ignored.items()}}
    return SimpleNamespace(meta={"import_report": report})


def test_step_time_is_not_said_absent_where_skipped_lines_may_carry_it() -> None:
    # a console whose tqdm bars ("3.39s/it") were skipped: before, "step_time: not in this run"
    info = _info(prose=40, **{"progress bar": 38})
    assert skipped_timing_lines(info) == {"progress bar": 38}  # type: ignore[arg-type]
    assert "no step time read" in no_step_time_words(info)  # type: ignore[arg-type]
    assert "logs no step time" not in no_step_time_words(info)  # type: ignore[arg-type]
    plain = _info(prose=40, blank=3, **{"config dump": 10})
    assert skipped_timing_lines(plain) == {}  # type: ignore[arg-type]
    assert no_step_time_words(plain) == "logs no step time and no wall-clock times"  # type: ignore[arg-type]


def _suspect(*texts: str) -> dict[str, object]:
    examples = [{"file": "x.log", "line": 100 + i, "text": t} for i, t in enumerate(texts)]
    return {"import_report": {"suspect": {"count": len(texts), "lines": [], "examples": examples}}}


def test_a_loss_on_a_line_no_reader_read_is_unread_not_absent() -> None:
    # DeepSpeed-Chat's reward model: its only loss is "Epoch 1/1 with loss 0.575", a line no reader read.
    # Before: "loss: not in this run" and "Not run: loss spikes: the run logs no loss."
    meta = _suspect("Epoch 1/1 with loss 0.5754789632299672")
    assert unread_line_naming("loss", suspect_lines(meta)) == (100, "Epoch 1/1 with loss 0.5754789632299672")
    reason = missing_reason("loss", ["lr", "reward_accuracy"], suspect_lines(meta))
    assert reason.startswith("no loss series was read: the log names one on line 100")
    assert note_verdict(f"Not run: loss spikes: {reason}.", {"logged": {"loss": True}}, None)[0] == "true"
    # a setting in pasted source code ("lr=0.02") or a loss scale is no unread record
    setting = suspect_lines(_suspect("def __init__(self, params, lr=0.02, momentum=0.95):"))
    assert unread_line_naming("lr", setting) is None
    assert (
        unread_line_naming("loss", suspect_lines(_suspect("step 5: Reducing dynamic loss scale from 65536 to 32768")))
        is None
    )
    assert missing_reason("loss", ["lr"]) == "the run logs no loss"
    assert suspect_lines(None) == [] and suspect_lines({"import_report": None}) == []


# ------------------------------------------------------------------ 3. siblings only where the model is stated


def _excerpt(tokens_per_s: float, head: list[str]) -> list[str]:
    rows = [
        f"step {i}, loss: {10.0 - 0.05 * i:.4f}, time: {16384 / tokens_per_s * 1000:.2f} ms, "
        f"tokens/sec: {tokens_per_s * (1 + 0.001 * (i % 3)):.2f}"
        for i in range(40)
    ]
    return ["```", *head, *rows, "```", ""]


def _gaps(tmp_path: Path, text: str) -> list[dict | None]:
    path = tmp_path / "notes.md"
    path.write_text(text)
    store = open_analysed_store(tmp_path / "store")
    report = import_logs(store, [path], run="notes")[0]
    names = [report["run"]] + [s["run"] for s in report.get("segments") or []]
    return [stored_findings(store, store.run_info(n)).get("throughput_siblings") for n in names]


def test_runs_stating_only_batch_and_sequence_length_are_not_siblings(tmp_path: Path) -> None:
    # minGPT notes: two runs on two data sets (so two vocabularies, two models), each stating batch_size=64
    # and block_size=128 alone. Before: "-56% tokens per second against 1 sibling run(s)"
    lines = ["# chargpt", ""]
    lines += ["## exp.txt", "", *_excerpt(10_000, ["batch_size: 64", "block_size: 128"])]
    lines += ["## english.txt", "", *_excerpt(25_000, ["batch_size: 64", "block_size: 128"])]
    assert all(gap is None for gap in _gaps(tmp_path, "\n".join(lines) + "\n"))
    same = ["# chargpt", ""]
    same += ["## a", "", *_excerpt(10_000, ["batch_size: 64", "block_size: 128", "n_layer: 6"])]
    same += ["## b", "", *_excerpt(25_000, ["batch_size: 64", "block_size: 128", "n_layer: 6"])]
    (tmp_path / "same").mkdir()
    assert any(gap is not None for gap in _gaps(tmp_path / "same", "\n".join(same) + "\n"))


# ------------------------------------------------------------------ 4. causes the data is consistent with


def _spike(**over: object) -> SpikeEvent:
    fields: dict[str, object] = dict(
        metric="loss",
        start=600,
        peak=600,
        end=610,
        peak_value=6.0,
        baseline=1.0,
        ratio=6.0,
        z=20.0,
        duration=20,
        recovered=True,
        recovery_step=620,
        diverged=False,
        nonfinite=False,
        steps_lost=20,
        n_samples=2,
    )
    fields.update(over)
    return SpikeEvent(**fields)  # type: ignore[arg-type]


def test_a_one_step_loss_jump_back_at_once_has_a_bad_batchs_shape() -> None:
    found = bad_batch_shape(_spike())
    assert found is not None and found.causes == ("data_outlier",)
    assert named_causes(found.text()) == ["data_outlier"]
    assert "grad norm" in found.to_log
    assert bad_batch_shape(_spike(n_samples=8)) is None  # a long excursion is no one batch
    assert bad_batch_shape(_spike(peak=630)) is None  # it climbed to its peak: not one batch's jump
    assert bad_batch_shape(_spike(grad_norm_lead_steps=3, grad_norm_led=True)) is None  # the grad norm moved first
    assert bad_batch_shape(_spike(recovered=False, diverged=True)) is None


def test_a_loss_scale_at_its_floor_after_a_higher_level_is_consistent_with_a_numerical_fault() -> None:
    # a Megatron fp16 log that elides its middle: 32768 at steps 1-3, 1.0 at the spike; node 1's window sees 1.0
    found = loss_scale_at_floor([{"loss_scale_min": 1.0, "loss_scale_earlier_max": 32768.0}], 1.0)
    assert found is not None and found.causes == ("numerical",)
    # bf16 prints a constant scale of 1: no fall, no claim
    assert loss_scale_at_floor([{"loss_scale_min": 1.0, "loss_scale_earlier_max": 1.0}], 1.0) is None
    assert loss_scale_at_floor([{"loss_scale_min": 1.0, "loss_scale_earlier_max": None}], 1.0) is None


def test_consistent_causes_against_the_golden() -> None:
    truth = {"causes_consistent": ["lr_transition"], "causes_ruled_out": ["router"]}
    assert consistent_causes_verdict(truth, ["lr_transition", "data_outlier"])[0] == "true"
    assert consistent_causes_verdict({**truth, "causes_ruled_out": ["data_outlier"]}, ["data_outlier"])[0] == "false"
    assert consistent_causes_verdict({"causes_consistent": ["unknown"]}, ["numerical"])[0] == "unsupported"
    assert consistent_causes_verdict(truth, [])[0] == "false"


# ------------------------------------------------------------------ 5. notes checked against the goldens


def test_a_policy_loss_note_against_the_golden_run() -> None:
    note = "Not run: loss spikes: the run's loss is its policy loss (act_loss), not a language-model loss."
    assert note_verdict(note, {}, {"first": {"act_loss": 0.2}, "metrics": ["lr"]})[0] == "true"
    assert note_verdict(note, {}, {"metrics": ["lr"]})[0] == "unjudged"


def test_logging_stopped_against_the_golden_runs_end() -> None:
    assert logging_stopped_verdict(14915, {"steps": [200, 14732]})[0] == "true"
    assert logging_stopped_verdict(5, {"steps": [0, 8]})[0] == "unjudged"
    assert logging_stopped_verdict(5, None)[0] == "unjudged"


def test_the_spike_fixture_is_finite() -> None:
    assert np.isfinite(_spike().ratio)


def test_a_grad_norm_nan_then_zero_is_logged_not_a_placeholder() -> None:
    # Megatron-core, one GPU: grad norm nan at iteration 1, then 0.000 at every iteration (the weights froze).
    # Before: "no SNR: the run logs no gradient norm (0 at every step: a placeholder)"
    from stab_core.analysis import analyze_run
    from stab_core.runview import RunView, Series

    steps = np.arange(1, 16)
    loss = np.full(steps.size, 10.40111)
    grad = np.concatenate([[np.nan], np.zeros(steps.size - 1)])
    view = RunView(name="frozen", series={"loss": Series(steps, loss), "grad_norm": Series(steps, grad)})
    reason = str(analyze_run(view).snr_reason)
    assert "a placeholder" not in reason and "the run logs no gradient norm" not in reason
    # a placeholder sits beside a loss that falls (zeros beside a flat loss are a reading) (docs/diagnosis.md,
    # "Non-finite values")
    falling = np.linspace(10.4, 8.0, steps.size)
    zeros = RunView(
        name="ds", series={"loss": Series(steps, falling), "grad_norm": Series(steps, np.zeros(steps.size))}
    )
    assert "0 at every step: a placeholder" in str(analyze_run(zeros).snr_reason)


def test_a_run_logging_only_its_accuracy_still_trains(tmp_path: Path) -> None:
    store = write_run(
        open_analysed_store(tmp_path / "s"),
        RunSpec(name="acc", per_rank=False, run_level=("tokens",), loss_spike=None, grad_spike_step=None),
    )
    assert run_status(store, "acc").startswith("empty: no training steps")
    from ingest.services.run_status import _trains

    assert _trains(store, "acc", ["train_acc"]) and _trains(store, "acc", ["reward"])
    assert not _trains(store, "acc", ["elapsed_time_s", "val_acc"])


def test_a_span_at_the_runs_typical_level_between_fast_bursts_is_no_drop() -> None:
    # minGPT on a CPU: ~5 s steps, with three bursts of ~2.5 s (a fifth of the run each time). The norm
    # (the 75th percentile of the levels) sits at the bursts; before: "throughput loss: step time 3.19 ->
    # 4.96 (-36%) over steps 72-160, back to its norm after it" for a span at the run's typical level
    from stab_core.throughput import detect_throughput_drops

    rng = np.random.default_rng(3)
    step_time = 5.0 + 0.3 * rng.standard_normal(150)
    for a in (25, 80, 135):
        step_time[a : a + 12] = 2.6 + 0.2 * rng.standard_normal(12)
    steps = np.arange(0, 300, 2)
    assert detect_throughput_drops(steps, step_time, "step_time_s") == []
    # a span really slower than the run's typical level, and back after it, is still a drop
    slow = np.full(150, 2.0) + 0.02 * rng.standard_normal(150)
    slow[60:90] = 3.0
    drops = detect_throughput_drops(steps, slow, "step_time_s")
    assert len(drops) == 1 and drops[0].recovered and 110 <= drops[0].start <= 130
