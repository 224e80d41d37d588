"""Issue #31, round 26 (docs/diagnosis.md, "round 26: r26a"): text consoles read with a metric missing, a
placeholder or the wrong unit, each on a synthetic input: a nanoGPT line-search console whose LR is printed on a
line of its own, nanoGPT's not-yet-measured MFU, a queue of modded-nanogpt launches whose step time is derived from
``train_time``, and a wide GRPO record's rollout statistics."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from bench.corpus_eval import score_import
from bench.corpus_scores import LogScore
from ingest.formats import read_log
from ingest.formats._common import ParsedLog
from ingest.formats.field_roles import diagnostic_fields


def _runs(log: ParsedLog) -> list[ParsedLog]:
    return [log, *log.segments]


def _linesearch_console() -> str:
    """A nanoGPT console with an LR line search: 'LINESEARCH LR: x' (no step) before each 'step N:' eval line."""
    lines = []
    lr = 0.001
    for it in range(0, 400, 10):
        if it % 100 == 0:
            if it in (0, 200):
                lines += ["LINESEARCH!!!", f"LINESEARCH LR: {lr}"]
                lr *= 2
            lines.append(f"step {it}: train loss {4.0 - it / 1000:.4f}, val loss {4.01 - it / 1000:.4f}")
        mfu = -100.0 if it == 0 else 21.5
        lines.append(f"iter {it}: loss {4.0 - it / 1000:.4f}, time {3000.0 + it:.2f}ms, mfu {mfu:.2f}%")
    return "\n".join(lines) + "\n"


def test_a_lone_lr_line_is_stored_at_the_next_lines_step(tmp_path: Path) -> None:
    path = tmp_path / "output.log"
    path.write_text(_linesearch_console())
    log = read_log([path])
    assert log.format == "nanogpt"
    steps, lr = log.series("lr")
    assert steps.tolist() == [0, 200]  # the step of the 'step N:' line printed after each
    assert lr.tolist() == [0.001, 0.002]
    assert not any("LINESEARCH" in m for m in log.metrics)


def test_a_lone_line_of_an_unknown_key_stays_unread(tmp_path: Path) -> None:
    text = _linesearch_console().replace("LINESEARCH LR:", "LINESEARCH SCORE:")
    path = tmp_path / "output.log"
    path.write_text(text)
    log = read_log([path])
    assert "lr" not in log.metrics
    assert not any("SCORE" in m.upper() for m in log.metrics)


def test_a_config_dumps_single_lr_line_is_no_lr_series(tmp_path: Path) -> None:
    # nanoGPT's configurator prints `learning_rate = 1e-3` once before training: the run's setting, not its LR series
    text = _linesearch_console().replace("LINESEARCH!!!\n", "").replace("LINESEARCH LR: 0.002\n", "")
    text = text.replace("LINESEARCH LR: 0.001", "learning_rate = 1e-3")
    path = tmp_path / "output.log"
    path.write_text(text)
    log = read_log([path])
    assert log.format == "nanogpt" and "lr" not in log.metrics


def test_nanogpt_mfu_placeholder_is_no_record(tmp_path: Path) -> None:
    path = tmp_path / "output.log"
    path.write_text(_linesearch_console())
    steps, mfu = read_log([path]).series("mfu")
    assert steps[0] == 10  # iteration 0 printed -100.00%: not measured
    assert mfu.tolist() == [0.215] * len(mfu)  # canonical MFU is a fraction of the peak


def _queue_of_launches(n_launches: int) -> str:
    """A shell queue running a modded-nanogpt-style trainer ``n_launches`` times: each launch restarts its step at 1
    and its ``train_time`` at 0 (validation lines at 0 and 50)."""
    lines = []
    for launch in range(n_launches):
        per_step = 2400.0 + 100 * launch  # ms
        lines += [f"[19:1{launch}:53] STARTING experiment {launch + 1}: variant_{launch} (60 steps)"]
        lines += [f"warmup_step:{k}/5" for k in range(1, 6)]
        lines.append("step:0/60 val_loss:6.9357 val_bpb:4.1077 train_time:0ms step_avg:0.01ms")
        for s in [*range(1, 11), 20, 30, 40, 50, 60]:
            t = per_step * s
            lines.append(f"step:{s}/60 train_loss:{6.9 - s / 20:.4f} train_time:{t:.0f}ms step_avg:{t / s:.2f}ms")
            if s == 50:
                lines.append(f"step:50/60 val_loss:4.5 val_bpb:2.7 train_time:{t:.0f}ms step_avg:{t / s:.2f}ms")
    return "\n".join(lines) + "\n"


def test_every_launch_of_a_queue_has_its_step_time_and_no_resume(tmp_path: Path) -> None:
    path = tmp_path / "queue_runner.log"
    path.write_text(_queue_of_launches(3))
    log = read_log([path])
    runs = _runs(log)
    assert len(runs) == 3
    for launch, run in enumerate(runs):
        steps, step_time = run.series("step_time_s", rank=0)  # the printing rank's
        assert steps.tolist() == [*range(2, 11), 20, 30, 40, 50, 60]  # each launch's own steps, in its own run
        assert np.allclose(step_time, (2400.0 + 100 * launch) / 1000)
        assert not [e for e in run.events if e.kind == "rollback"]  # a launch's fresh start is no resume


def test_a_policy_trainers_rollout_statistics_stay_series() -> None:
    # a GRPO record with per-position rewards: wider than any trainer's summary of a step, its statistics are of the
    # rollouts (completion lengths, clip ratios, counts in the completions), not of the model's internals
    names = ["loss", "grad_norm", "lr", "reward", "reward_std", "kl", "entropy"]
    names += [f"rewards/pos_{i}/{s}" for i in range(1, 21) for s in ("mean", "std")]
    stats = ["completions/mean_length", "completions/min_length", "clip_ratio/low_mean", "items/detected_mean"]
    assert diagnostic_fields(names + stats) == []
    # the same statistics in a wide record without a reward are still the model's diagnostics
    internals = [f"hub_delta_{i}" for i in range(50)] + ["write_mag_mean"]
    assert diagnostic_fields(["loss", *internals]) == [*internals[:50], "write_mag_mean"]


def test_scorer_reads_a_printed_percentage_and_skips_a_placeholder() -> None:
    steps = np.arange(10, 40, 10)
    golden = {
        "import": {
            "known_fields": ["iter", "loss", "mfu"],
            "runs": [
                {
                    "records_metric": "loss",
                    "records": 3,
                    "metrics": ["loss"],
                    "metrics_like": ["mfu"],
                    "first": {"loss": 3.0, "mfu": -100.0},  # printed before MFU was measured: no record
                    "last": {"loss": 2.0, "mfu": 19.51},  # printed `mfu 19.51%`
                }
            ],
        }
    }
    stored = [{"run": "r", "series": {"loss": (steps, np.array([3.0, 2.5, 2.0])), "mfu": (steps, np.full(3, 0.1951))}}]
    result = LogScore("x")
    score_import(result, golden, stored)
    assert result.import_faults == {}
    stored[0]["series"]["mfu"] = (steps, np.full(3, 0.2))
    score_import(result, golden, stored)
    assert "values" in result.import_faults


def test_an_lr_multiplier_is_the_runs_lr_schedule(tmp_path: Path) -> None:
    # nanochat-style lines print only the schedule's multiplier of the base LR: it is the run's LR series
    lines = [
        f"step {i:06d} | loss {10.4 - i / 20:.6f} | lrm {min(1.0, 0.025 * (i + 1)):.4f} | dt_ms 7255.5"
        for i in range(60)
    ]
    path = tmp_path / "speedrun.log"
    path.write_text("\n".join(lines) + "\n")
    log = read_log([path])
    steps, lr = log.series("lr")
    assert steps.tolist() == list(range(60)) and lr[0] == 0.025 and lr[-1] == 1.0
    assert "lrm" not in log.metrics
    # beside an absolute 'lr' the multiplier keeps its own name: the key named 'lr' is the LR
    both = [line.replace("| lrm", "| lr 0.0003 | lrm") for line in lines]
    path.write_text("\n".join(both) + "\n")
    log = read_log([path])
    assert set(log.series("lr")[1].tolist()) == {0.0003}
    assert "lrm" in log.metrics
