"""The generic reader's step rules (issue #31; docs/diagnosis.md, "Import: steps, epochs and runs"): metric lines with
no step counter count in file order (a counter on a header line of its own before them is theirs), a counter may repeat
its value on lines of different layouts, and a duration heading a line of pairs is its time. Every
input here is synthetic (own numbers in the layout)."""

from __future__ import annotations

from pathlib import Path

import pytest

from ingest.formats import FALLBACK_READERS, read_log
from ingest.formats.generic import line_pairs, propose
from ingest.formats.generic_lines import lead_duration
from ingest.formats.generic_steps import ORDER_KEY
from tests.conftest import metric_series, write_log_lines


def _dict_log() -> list[str]:
    lines = ["Loading model...", "trainable params: 4,194,304 || all params: 1,000,000,000"]
    for i in range(1, 9):
        lines.append(
            f"{{'loss': {2.5 - i * 0.1:.4f}, 'grad_norm': {0.4 + i / 100:.3f}, "
            f"'learning_rate': {i}e-05, 'epoch': {i / 4}}}"
        )
        if i % 4 == 0:
            lines.append(f"{{'eval_loss': {2.0 - i / 40:.4f}, 'eval_runtime': 3.2, 'epoch': {i / 4}}}")
    lines.append("{'train_runtime': 812.5, 'train_samples_per_second': 3.1, 'train_loss': 2.02, 'epoch': 2.0}")
    return lines


def test_dict_lines_without_a_step_count_in_file_order(tmp_path: Path) -> None:
    parsed = read_log([write_log_lines(tmp_path, _dict_log())], reader_set=FALLBACK_READERS)
    assert parsed.format == "generic"
    assert parsed.meta["mapping"]["step"] == ORDER_KEY
    steps, values = metric_series(parsed, "loss")
    assert steps == list(range(1, 9))
    assert values[0] == 2.4 and values[-1] == 1.7
    assert metric_series(parsed, "grad_norm")[0] == list(range(1, 9))
    # the evaluation dict is the step of the training line before it; the summary is no step
    assert metric_series(parsed, "val_loss") == ([4, 8], [1.9, 1.8])


def test_string_valued_dicts_count_too(tmp_path: Path) -> None:
    lines = [
        f"{{'loss': '{0.05 + i / 1000:.4g}', 'grad_norm': '0.2{i}', 'reward': '0.{i}', 'kl': '0'}}" for i in range(1, 7)
    ]
    parsed = read_log([write_log_lines(tmp_path, lines)], reader_set=FALLBACK_READERS)
    assert metric_series(parsed, "loss")[0] == [1, 2, 3, 4, 5, 6]


def test_a_key_alone_is_no_record_count() -> None:
    # one pair a line, or lines that never repeat a training key, give no line order
    assert propose(["loss: 3.2", "loss: 3.1", "loss: 3.0"]) is None
    assert propose(["accuracy 0.5 recall 0.4", "precision 0.2 f1 0.3", "auc 0.9 ap 0.1"]) is None


def test_a_counter_may_repeat_on_a_line_of_another_layout() -> None:
    lines = []
    for s in range(0, 12):
        if s % 4 == 0:
            lines.append(f"s:{s} tel:{9.0 - s / 10:.4f}")
        lines.append(f"s:{s} trl:{9.1 - s / 10:.4f} lr:0.0006 norm:{1.0 + s / 100:.2f}")
    proposal = propose(lines)
    assert proposal is not None and proposal.step == "s"
    assert proposal.roles["loss"] == "trl" and proposal.roles["grad_norm"] == "norm"
    # a counter that repeats within one layout is no step counter (the lines count in file order)
    repeated = propose([f"n:{s // 2} trl:{9.0 - s / 10:.2f} lr:0.1" for s in range(8)])
    assert repeated is not None and repeated.step == ORDER_KEY


def test_a_header_counter_is_the_step_of_the_line_after_it(tmp_path: Path) -> None:
    lines = ["Train on 800 samples, validate on 200 samples"]
    for run, epochs in enumerate((5, 3)):
        for e in range(1, epochs + 1):
            lines += [
                f"Epoch {e}/{epochs}",
                f"{310 + e % 2}s - loss: {2.0 / e / (run + 1):.4f} - acc: 0.{e}1 - val_loss: 1.{e}",
            ]
        lines.append(f"Epoch {epochs:05d}: early stopping")
    parsed = read_log([write_log_lines(tmp_path, lines)], reader_set=FALLBACK_READERS)
    steps, _ = metric_series(parsed, "loss")
    assert steps == [1, 2, 3, 4, 5]  # the first fit; the second, restarting at epoch 1, is a new run
    assert len(parsed.segments) == 1
    assert metric_series(parsed.segments[0], "loss")[0] == [1, 2, 3]
    assert parsed.meta["proposed_map"] == {"time_s": "step_time_s"}
    assert metric_series(parsed, "time_s")[1] == [311.0, 310.0, 311.0, 310.0, 311.0]


def test_a_heading_duration_is_the_lines_time() -> None:
    assert lead_duration("224s - loss: 0.61 - acc: 0.82") == "loss: 0.61 - acc: 0.82 - time: 224s"
    assert lead_duration(" - 35ms - loss: 0.5") == "loss: 0.5 - time: 35ms"
    assert lead_duration("224 samples - loss: 0.6") == "224 samples - loss: 0.6"
    assert ("time", 224.0, "s") in line_pairs("224s - loss: 0.61 - acc: 0.82")


def _clock_log() -> list[str]:
    lines, clock = ["logfile: run.txt", "model_params:1234567"], 0
    for step in range(0, 60, 10):
        if step % 20 == 0:
            lines.append(
                f"step:{step}/60 val_loss:{7.0 - step / 20:.4f} val_bpb:{4.0 - step / 40:.4f} train_time:{clock}ms"
            )
        clock += 450 if step != 30 else 900  # 45 ms a step, 90 ms over steps 22-31
        lines.append(
            f"step:{step + 1}/60 train_loss:{6.9 - step / 20:.4f} train_time:{clock}ms"
            f" step_avg:{clock / (step + 1):.2f}ms"
        )
    lines.append("final_roundtrip val_loss:4.5000 val_bpb:2.7000 eval_time:1781ms")
    return lines


def test_a_training_clock_gives_the_step_time(tmp_path: Path) -> None:
    parsed = read_log([write_log_lines(tmp_path, _clock_log())], reader_set=FALLBACK_READERS)
    steps, seconds = metric_series(parsed, "step_time_s")
    assert steps == [11, 21, 31, 41, 51]
    assert seconds == pytest.approx([0.045, 0.045, 0.09, 0.045, 0.045])


def test_an_evaluations_cost_is_no_metric(tmp_path: Path) -> None:
    parsed = read_log([write_log_lines(tmp_path, _clock_log())], reader_set=FALLBACK_READERS)
    assert not any("eval_time" in m for m in parsed.metrics)
    assert metric_series(parsed, "val_loss")[1][-1] == 4.5


def test_lines_printing_a_counter_unread_are_not_counted_in_order() -> None:
    # a counter no step key was read from ('Epoch: 3, Loss: 1.2' beside counterless summary lines)
    pyg = []
    for e in range(5):
        pyg += [f"Epoch: {e}, Loss: 1.{e}", f"Train. Total Loss: 1.{e}, KL: 0.1{e}", f"Val. Total Loss: 1.{e}, KL: 0.2"]
    assert propose(pyg) is None
    # key-value lines that never repeat a layout (a config dump) are no log either
    dump = ["{'lr': 0.001, 'betas': 2}", "{'loss_scale': 0, 'lr': 0.1, 'window': 1000}", "{'x': 1, 'lr': 3e-4}"]
    assert propose(dump) is None
