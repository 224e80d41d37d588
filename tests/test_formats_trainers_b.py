"""Readers for MaxText, Composer / llm-foundry, GPT-NeoX, torchtune and DeepSpeed's own console, each on
a small log written in the exact shape the trainer's source prints (tests/fixtures/logs/; the shapes
are quoted in each reader's docstring with the source file)."""

from __future__ import annotations

from pathlib import Path

import pytest

from ingest.formats import AMBIGUITY_MARGIN, detect, read_log
from ingest.formats._common import ParsedLog

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "logs"
TRAINERS = ("maxtext", "composer", "gpt_neox", "torchtune", "deepspeed_stdout")


def _series(parsed: ParsedLog, metric: str, rank: int = -1) -> dict[int, float]:
    steps, values = parsed.series(metric, rank)
    return dict(zip(steps.tolist(), values.tolist(), strict=True))


@pytest.mark.parametrize("fmt", TRAINERS)
def test_detection_picks_the_trainer_alone(fmt: str) -> None:
    candidates = detect([FIXTURES / f"{fmt}.log"])
    assert candidates[0][0] == fmt
    # no other reader comes close enough to make the import ask which one
    assert all(score < candidates[0][1] - AMBIGUITY_MARGIN for _, score in candidates[1:])
    assert read_log([FIXTURES / f"{fmt}.log"]).format == fmt


def test_maxtext_completed_step_lines() -> None:
    parsed = read_log([FIXTURES / "maxtext.log"])
    # the profiler boundary step (3) prints no timing but its loss
    assert _series(parsed, "loss") == {0: 12.038, 1: 11.905, 2: 11.689, 3: 11.379, 4: 10.984, 5: 10.611}
    assert _series(parsed, "step_time_s", 0) == {0: 44.923, 1: 0.319, 2: 5.658, 4: 5.402, 5: 5.391}
    assert _series(parsed, "throughput_tok_s", 0)[4] == 9098.189  # per device: the printing rank's
    assert _series(parsed, "tflops", 0)[1] == 2400.734
    # the same on every step: a setting of the run (ingest.formats.field_roles), not a series
    assert "total_weights" not in parsed.metrics and parsed.meta["log_settings"]["total_weights"] == 196608
    assert _series(parsed, "perplexity")[2] == 119047.156
    assert _series(parsed, "val_loss") == {4: 10.912}
    assert _series(parsed, "eval_perplexity") == {4: 54745.105}
    assert parsed.meta["planned_steps"] == 100  # Config param steps: 100


def test_composer_progress_then_indented_lines() -> None:
    parsed = read_log([FIXTURES / "composer.log"])
    assert _series(parsed, "loss") == {1: 11.9876, 2: 10.4321, 3: 9.8765}
    assert _series(parsed, "lr") == {1: 0.0, 2: 0.0001, 3: 0.0002}  # group0 only
    assert _series(parsed, "lr-DecoupledAdamW/group1") == {2: 0.0002}
    assert _series(parsed, "grad_norm") == {1: 8.1234, 2: 5.5, 3: 3.25}
    # counted at the batch's start: one batch short of the canonical cumulative tokens, so kept apart
    assert _series(parsed, "time/token") == {1: 0.0, 2: 524288.0, 3: 1048576.0}
    assert "tokens" not in parsed.metrics
    assert _series(parsed, "throughput_tok_s") == {1: 0.0, 2: 81234.5678, 3: 90123.4}
    assert _series(parsed, "mfu") == {2: 0.4123}
    assert _series(parsed, "time/batch") == {1: 0.0, 2: 1.0, 3: 2.0}
    # the eval summary after batch 2 belongs to step 2
    assert _series(parsed, "val_loss") == {2: 10.25}
    assert _series(parsed, "metrics/eval/LanguagePerplexity") == {2: 28282.541}
    assert parsed.meta["planned_steps"] == 100


def test_gpt_neox_iteration_lines() -> None:
    # the log also holds a DeeperSpeed engine line ([Rank 0] step=10, ...): still GPT-NeoX's log
    assert [name for name, _ in detect([FIXTURES / "gpt_neox.log"])][:1] == ["gpt_neox"]
    parsed = read_log([FIXTURES / "gpt_neox.log"])
    assert _series(parsed, "loss") == {10: 7.123456, 20: 6.5, 30: 6.0}
    assert _series(parsed, "lr") == {10: 1e-4, 20: 2e-4, 30: 3e-4}
    assert _series(parsed, "samples_per_s") == {10: 103.727, 20: 104.1, 30: 104.5}
    assert _series(parsed, "step_time_s") == {10: 1234.5 * 1e-3, 20: 1230.0 * 1e-3, 30: 1225.5 * 1e-3}
    assert _series(parsed, "loss_scale") == {10: 65536.0, 20: 32768.0, 30: 32768.0}
    assert _series(parsed, "skipped_iterations") == {10: 0.0, 20: 1.0, 30: 0.0}
    assert _series(parsed, "mfu") == {30: 0.45}
    assert _series(parsed, "hfu") == {30: 50.0}
    assert _series(parsed, "val_loss") == {20: 6.4}
    assert _series(parsed, "val_ppl") == {20: 601.845}
    # printed in TFLOPS or GFLOPS as it fits: one series would mix units
    assert not any(name.startswith("approx") for name in parsed.metrics)
    assert parsed.meta["planned_steps"] == 100


def test_torchtune_plain_and_tensor_values() -> None:
    parsed = read_log([FIXTURES / "torchtune.log"])
    assert _series(parsed, "loss") == {1: 1.8765, 2: 1.75, 3: 1.6251}
    assert _series(parsed, "lr") == {1: 2e-5, 2: 1.9e-5, 3: 1.8e-5}
    assert _series(parsed, "grad_norm") == {1: 0.8113, 2: 0.75}
    assert _series(parsed, "throughput_tok_s", 0) == {1: 1523.4567, 2: 1600.0, 3: 1650.5}
    assert _series(parsed, "gpu_mem_max_gb", 0) == {1: 21.5, 2: 21.5}
    assert _series(parsed, "gpu_mem_max_reserved_gb", 0) == {1: 24.0, 2: 24.0}
    assert _series(parsed, "val_loss") == {2: 1.8}
    # tensor(..., device='cuda:0') is no 'cuda' metric
    assert not any("cuda" in name or "device" in name for name in parsed.metrics)


def test_deepspeed_engine_lines() -> None:
    parsed = read_log([FIXTURES / "deepspeed_stdout.log"])
    assert _series(parsed, "loss") == {10: 7.1, 20: 6.8}
    assert _series(parsed, "lr") == {10: 1e-4, 20: 9e-5}  # the first param group's
    assert _series(parsed, "ds_skipped_steps_total") == {10: 0.0, 20: 1.0}
    assert _series(parsed, "step_time_s") == {10: 1.234, 20: 1.23}
    assert _series(parsed, "samples_per_s") == {10: 103.727, 20: 104.065}
    assert _series(parsed, "CurrSamplesPerSec") == {10: 105.2, 20: 104.8}
    assert _series(parsed, "gpu_mem_gb", 0) == {10: 1.23, 20: 1.23}
    assert _series(parsed, "gpu_mem_max_gb", 0) == {10: 4.56, 20: 4.6}


def test_megatron_deepspeed_log_stays_with_its_reader() -> None:
    # the same engine lines next to Megatron's iteration lines are Megatron-DeepSpeed's
    assert detect([FIXTURES / "megatron_deepspeed.log"])[0][0] == "megatron_deepspeed"


@pytest.mark.parametrize("fmt", TRAINERS)
def test_metric_lines_indented_among_prose_are_found(fmt: str, tmp_path: Path) -> None:
    original = (FIXTURES / f"{fmt}.log").read_text()
    pasted = tmp_path / f"notes_{fmt}.md"
    body = "".join("    " + line + "\n" for line in original.splitlines())
    pasted.write_text(
        "# What happened on Tuesday\n\nThe run spiked after the restart; the log around it:\n\n"
        + body
        + "\nNext: lower the LR and rerun from the last checkpoint.\n"
    )
    assert detect([pasted])[0][0] == fmt
    got, want = read_log([pasted]), read_log([FIXTURES / f"{fmt}.log"])
    assert got.metrics == want.metrics
    for metric in want.metrics:
        for rank in (-1, 0):
            assert _series(got, metric, rank) == _series(want, metric, rank)


@pytest.mark.parametrize("fmt", TRAINERS)
@pytest.mark.parametrize("launcher", ["[rank0]:", "[default0]:", "node017: "])
def test_launcher_prefixed_lines_read_alike(fmt: str, launcher: str, tmp_path: Path) -> None:
    # the prefix layer of the text engine (not the readers) sees through torchrun's and pdsh's prefixes
    original = (FIXTURES / f"{fmt}.log").read_text()
    prefixed = tmp_path / f"{fmt}.log"
    prefixed.write_text("".join(launcher + line + "\n" for line in original.splitlines()))
    assert detect([prefixed])[0][0] == fmt
    got, want = read_log([prefixed]), read_log([FIXTURES / f"{fmt}.log"])
    assert got.metrics == want.metrics
    for metric in want.metrics:
        assert _series(got, metric) == _series(want, metric)
        assert _series(got, metric, 0) == _series(want, metric, 0)
    assert got.meta.get("planned_steps") == want.meta.get("planned_steps")


def test_composer_epoch_progress_is_not_claimed(tmp_path: Path) -> None:
    # [epoch=E][batch=b/T] counts b within the epoch: no global step to put the values at
    log = tmp_path / "epochs.log"
    log.write_text("[epoch=1][batch=10/50]:\n\t Train loss/train/total: 7.1000\n\t Train time/batch: 9\n")
    assert "composer" not in dict(detect([log]))
