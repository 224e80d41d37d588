"""Issues #31/#32 (docs/diagnosis.md, "Import: steps, epochs and runs"): consoles the fallback refused outright. A
fine-tune console after a shell trace whose in-epoch update counter restarts beside a ``total update`` counter, its
``Eval after N updates:`` lines behind python logging's ``date | INFO | module |``, and a sweep's console holding one
run per arm (the step counter starts afresh at each arm). Every input here is synthetic (own numbers
in the layout)."""

from __future__ import annotations

from pathlib import Path

from ingest.formats import FALLBACK_READERS, read_log
from ingest.formats.eval_lines import eval_pairs
from ingest.formats.generic import line_pairs
from ingest.formats.generic_steps import step_key_of
from ingest.formats.raw_text import clean_text
from tests.conftest import metric_series, write_log_lines

_LEAD = "2024-03-01 10:00:00 | INFO | mt.trainer | "


def _finetune_console() -> list[str]:
    lines = [
        "+ python -m mt.finetune --src_lang xx --learning_rate 2e-4 --warmup_steps 500 --log_steps 40",
        "2024-03-01 10:00:00 | INFO | __main__ | Namespace(learning_rate=0.0002, warmup_steps=500, seed=7)",
        _LEAD + "Eval after 0 updates: loss=6.1000 best_loss=6.1000 patience_steps_left=5",
    ]
    total = 0
    for epoch in (1, 2, 3):
        for in_epoch in (40, 80, 120):
            total += 40
            lines.append(
                _LEAD + f"Epoch {epoch:03d} (130 steps) / update {in_epoch - 30 * (epoch - 1)} total update "
                f"{total:05d}: train_loss={6 - total / 200:.4f} last_lr={total * 1e-6:.2E} peak_cuda_mem=20.5GB"
            )
        lines += [_LEAD + "Evaluation Step 1...", _LEAD + f"Eval after {total} updates: loss={5.5 - epoch / 10:.4f}"]
    return lines


def test_a_total_counter_beside_a_restarting_one_is_the_step(tmp_path: Path) -> None:
    parsed = read_log([write_log_lines(tmp_path, _finetune_console())], reader_set=FALLBACK_READERS)
    assert parsed.format == "generic"
    assert parsed.meta["mapping"]["step"] == "total_update"
    steps, values = metric_series(parsed, "loss")
    assert steps == list(range(40, 361, 40))
    assert values[0] == 5.8
    # each evaluation is the step line's above it; the one before any step line is the start's
    val_steps, val_values = metric_series(parsed, "val_loss")
    assert val_steps[1:] == [120, 240, 360] and val_values[0] == 6.1
    names = set(parsed.table["metric"].to_pylist())
    assert not any("patience" in name or "best" in name for name in names)


def test_an_eval_line_after_n_updates_behind_a_logging_prefix() -> None:
    assert eval_pairs(_LEAD + "Eval after 250 updates: loss=4.2 best_loss=4.2 patience_steps_left=3", line_pairs) == [
        ("val_loss", 4.2, None)
    ]
    assert eval_pairs(_LEAD + "Epoch 001 / update 50 total update 00050: train_loss=4.8", line_pairs) == []


def _sweep_console(arms: int) -> list[str]:
    lines = ["Requested NPROC_PER_NODE=8, but only 1 GPU(s) visible. Capping."]
    for arm in range(arms):
        lines += [f"=== Experiment A{arm}_d4 ===", "+ torchrun --standalone --nproc_per_node=1 -m train --depth=4"]
        for step in (0, 100, 200, 250):
            lines.append(
                f"step {step:05d}/00250 ({step / 2.5:.2f}%) | loss: {9 - step / 50 - arm / 10:.6f} | lrm: 0.50 "
                f"| dt: 300.{arm}ms | tok/sec: 870,{step:03d} | total time: 0.{arm}m"
            )
        lines += [f"Step 00250 | Validation bpb: 1.1{arm} | val_loss: 3.{arm}"]
    return lines


def test_a_sweep_console_restarts_its_step_once_per_arm(tmp_path: Path) -> None:
    parsed = read_log([write_log_lines(tmp_path, _sweep_console(5))], reader_set=FALLBACK_READERS)
    assert parsed.format == "generic" and parsed.meta["mapping"]["step"] == "step"
    assert len(parsed.segments) == 4  # the first arm's run, then the others
    assert metric_series(parsed.segments[-1], "loss")[0] == [0, 100, 200, 250]


def test_a_counter_restarting_every_line_or_two_is_no_sweep() -> None:
    # restarts after fewer than MIN_UNNAMED_LINES lines: a batch counter's, or prose, not arms of a sweep
    records = [[("step", float(s), None), ("loss", 1.0, None)] for _ in range(6) for s in (0, 10)]
    assert step_key_of(records) is None


def test_an_in_epoch_counter_that_restarts_yields_to_a_global_one() -> None:
    records = [
        [("STEP", float(s), None), ("GLOBAL_STEP", float(1000 + 300 * e + s), None), ("loss", 1.0, None)]
        for e in range(4)
        for s in (99, 199, 299)
    ]
    assert step_key_of(records) == "GLOBAL_STEP"


def _coqui_markdown() -> list[str]:
    lines = ["# Training log", "", "## Output", "", "```", "> Training Environment:", "| > Precision: fp16"]
    for epoch in range(3):
        lines += [f"[4m[1m > EPOCH: {epoch}/3[0m", "[1m > TRAINING (2024-05-01 09:00:00) [0m"]
        for s in (49, 99, 149):
            step = 2000 + 150 * epoch + s + 1
            lines += [
                f"[1m --> TIME: 2024-05-01 09:0{epoch}:{s % 60:02d} -- STEP: {s}/150 -- GLOBAL_STEP: {step}[0m",
                f"| > loss_0: {3 - step / 10000:.4f} ({3.1 - step / 10000:.4f})",
                f"| > grad_norm_0: tensor({12 + s / 100:.4f}, device='cuda:0') (tensor(13.0, device='cuda:0'))",
                f"| > loss_1: {25 - step / 1000:.4f} ({25.5 - step / 1000:.4f})",
                f"| > grad_norm_1: tensor({140 + s / 10:.4f}, device='cuda:0') (tensor(150.0, device='cuda:0'))",
                "| > current_lr_0: 0.0002",
                "| > current_lr_1: 0.0002",
                f"| > step_time: 0.{s} (0.7)",
            ]
    return [*lines, "```"]


def test_a_coqui_console_pasted_in_markdown_with_literal_colour_codes(tmp_path: Path) -> None:
    parsed = read_log([write_log_lines(tmp_path, _coqui_markdown(), name="log.md")])
    assert parsed.format == "coqui_trainer"
    steps, _ = metric_series(parsed, "loss")
    assert steps[0] == 2050 and len(steps) == 9
    assert len(metric_series(parsed, "grad_norm")[0]) == 9  # printed as tensor(15.61, device=...)


def test_literal_colour_codes_at_a_line_s_ends_are_removed() -> None:
    text = b"[4m[1m > EPOCH: 0/50[0m\nloss [1] 2.5\n[1m --> STEP: 9[0m\n"
    assert clean_text(text) == b" > EPOCH: 0/50\nloss [1] 2.5\n --> STEP: 9\n"
