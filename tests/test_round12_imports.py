"""Issue #31 (docs/diagnosis.md, "Import: step times and clocks"): fields whose shape says their role, and the jump of
an attempt a resume replaced dated at its first step over."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from ingest.formats import read_log
from ingest.formats.aliases import canonical_name, keep_apart
from stab_core.abandoned import abandoned_attempts, jump_onset
from stab_core.analysis import analyze_run
from stab_core.runview import RunView, Series


@pytest.mark.parametrize(
    ("key", "want"),
    [
        ("train_speed(s/it)", ("step_time_s", "s")),  # ms-swift's logging.jsonl
        ("ms/step", ("step_time_s", "ms")),
        ("sec per iter", ("step_time_s", "sec")),
        ("step_time_ms", ("step_time_s", "ms")),
        ("iter_time_s", ("step_time_s", "s")),
        ("time_per_step (ms)", ("step_time_s", "ms")),
        ("tokens_global_per_sec", ("throughput_tok_s", None)),  # ms-swift
        ("tokens_per_gpu_per_sec", ("throughput_tok_s", None)),
        ("tok/s/gpu", ("throughput_tok_s", None)),
        ("train/tokens_per_second", ("throughput_tok_s", None)),
    ],
)
def test_a_time_per_step_and_a_tokens_per_second_field_get_their_roles(key: str, want: tuple) -> None:
    assert canonical_name(key) == want


@pytest.mark.parametrize(
    "key", ["eval_speed(s/it)", "data_time", "tokens_this_step", "elapsed_time", "eval_tokens_per_second", "it/s"]
)
def test_other_times_and_token_counts_keep_their_names(key: str) -> None:
    assert canonical_name(key)[0] not in ("step_time_s", "throughput_tok_s")


def test_the_job_wide_tokens_per_second_wins_over_one_devices() -> None:
    keys = ["tokens_per_gpu_per_sec", "tokens_global_per_sec"]
    kept = keep_apart(keys, [canonical_name(k) for k in keys])
    assert kept[1] == ("throughput_tok_s", None) and kept[0] is not None and kept[0][0] == "tokens_per_gpu_per_sec"


def test_ms_swift_logging_jsonl_imports_step_time_and_tokens_per_second(tmp_path: Path) -> None:
    # ms-swift's trainer callback (swift/trainers, the ProgressCallbackNew / logging_jsonl writer) prints
    # one object per logging step with 'global_step/max_steps', 'train_speed(s/it)' (seconds per
    # iteration) and the token speeds of the whole job and of one GPU
    rows = [
        {
            "loss": 2.0 - 0.01 * s,
            "grad_norm": 1.0,
            "learning_rate": 1e-5,
            "global_step/max_steps": f"{s}/10",
            "elapsed_time": f"{s}m 0s",
            "tokens_per_gpu_per_sec": 100.0 + s,
            "tokens_global_per_sec": 800.0 + s,
            "memory(GiB)": 30.0 + s,
            "train_speed(s/it)": 60.0 + s,
        }
        for s in range(1, 11)
    ]
    path = tmp_path / "logging.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    parsed = read_log([path])
    steps, step_time = parsed.series("step_time_s")
    assert steps.tolist() == list(range(1, 11)) and step_time.tolist() == [60.0 + s for s in range(1, 11)]
    assert parsed.series("throughput_tok_s")[1].tolist() == [800.0 + s for s in range(1, 11)]
    assert parsed.series("tokens_per_gpu_per_sec")[1].tolist() == [100.0 + s for s in range(1, 11)]


def _line(step: int, loss: float) -> str:
    return f"step: {step:5d}  loss: {loss:.5f}  grad_norm:  0.3000  memory: 10.00GiB(20.00%)  tps: 1,000  mfu: 30.00%\n"


def _small_jump_log(path: Path) -> Path:
    """A torchtitan console wrapped by a retry script: an attempt from step 101 whose loss steps up
    1.22x right after the checkpoint at 500 and holds until it dies at 650; the next attempt resumes
    from 500 and the same steps are back at the old level."""
    rng = np.random.default_rng(1)
    lines = [_line(s, 1.18 + 0.05 * rng.standard_normal()) for s in range(1, 201)]
    lines.append("CUDA error: device-side assert triggered\n")
    lines += [_line(s, 1.18 + 0.05 * rng.standard_normal()) for s in range(101, 501)]
    lines += [_line(s, 1.18 * 1.22 + 0.05 * rng.standard_normal()) for s in range(501, 651)]
    lines.append("CUDA error: device-side assert triggered\n")
    lines += [_line(s, 1.18 + 0.05 * rng.standard_normal()) for s in range(501, 801)]
    path.write_text("".join(lines))
    return path


def test_a_small_lasting_jump_in_a_replaced_attempt_is_dated_at_its_first_step_over(tmp_path: Path) -> None:
    parsed = read_log([_small_jump_log(tmp_path / "train.log")])
    steps, values = parsed.series("loss")
    view = RunView(name="r", series={"loss": Series(steps, values)}, events=tuple(parsed.events))
    onsets = {a.resumed_from: a.onset for a in abandoned_attempts(view)}
    assert onsets[501] == 501  # the attempt that jumped
    assert all(onset is None for resumed, onset in onsets.items() if resumed != 501)  # the normal one
    found = [s for s in analyze_run(view).spike_dicts() if s.get("abandoned_attempt")]
    assert [s["start"] for s in found] == [501]  # the detector's rolling level saw it at 511


def test_no_onset_where_the_replay_is_as_high() -> None:
    # the attempt rose, but the same steps run again rose as much: the data, not the attempt
    steps = np.arange(1, 301)
    values = np.where(steps > 200, 1.4, 1.18) + 0.01 * np.sin(steps)
    replay = (steps[200:], values[200:].copy())
    assert jump_onset(steps, values, 101, 201, replay) is None
    assert jump_onset(steps, values, 101, 201, (steps[200:], np.full(100, 1.18))) == 201
