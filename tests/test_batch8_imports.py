"""Imports of the layouts of the corpus's batch 8 (issue #31: import fidelity), each on a few lines of
that shape written here (never the corpus file): minGPT's trainer callback pasted into markdown notes,
a wordplay/ezpz ``key=value`` console behind its logger header, the pytorch imagenet example's
``Epoch: [E][ i/N]`` meter lines. Each test fails on main at 43f701e.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from ingest.formats import read_log


def _write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


# --------------------------------------------------------------------------- minGPT in markdown notes

_MINGPT_CONFIG = """```
$ python chargpt.py
system:
    seed: 3407
    work_dir: ./out/chargpt
trainer:
    num_workers: 4
    batch_size: 64
    learning_rate: 0.0005
    grad_norm_clip: 1.0

data has 26724 characters, 29 unique.
number of parameters: 0.09M
running on device cpu
"""


def _mingpt_lines(first_loss: float, steps: range, dt_ms: float) -> str:
    out = []
    for i, step in enumerate(steps):
        dt = 0.0 if step == 0 else dt_ms + i
        out.append(f"iter_dt {dt:.2f}ms; iter {step}: train loss {first_loss * 0.99**i:.5f}")
        if step and step % 10 == 0:
            out.append("saving model")
            out.append("the sample text a model writes: 1+2=3")
    return "\n".join(out) + "\n```\n"


def test_mingpt_notes_with_two_pasted_runs_are_two_runs(tmp_path: Path) -> None:
    """minGPT's ``iter_dt X ms; iter N: train loss X`` pasted twice under two headings: two runs, the
    loss and the step time (ms -> s) read, the first iteration's 0.00 ms (no previous iteration)
    dropped; the config dump, samples and prose read nothing."""
    notes = (
        "# chargpt.py\n\n## exp.txt\n\n"
        + _MINGPT_CONFIG
        + _mingpt_lines(2.84515, range(0, 31, 2), 5000.0)
        + "\nSome prose about the run.\n\n## english.txt\n\n"
        + _MINGPT_CONFIG
        + _mingpt_lines(2.98566, range(0, 21, 2), 2100.0)
    )
    log = read_log([_write(tmp_path, "chargpt.md", notes)])
    assert log.format == "nanogpt"
    runs = [log, *log.segments]
    assert len(runs) == 2
    steps, loss = runs[0].series("loss")
    assert steps.tolist() == list(range(0, 31, 2))
    assert loss[0] == pytest.approx(2.84515) and loss[-1] == pytest.approx(round(2.84515 * 0.99**15, 5))
    dt_steps, dt = runs[0].series("step_time_s")
    assert dt_steps[0] == 2 and dt[0] == pytest.approx(5.001)  # iter 0's 0.00 ms is no measurement
    steps2, loss2 = runs[1].series("loss")
    assert steps2.tolist() == list(range(0, 21, 2)) and loss2[0] == pytest.approx(2.98566)
    for run in runs:
        assert set(run.metrics) == {"loss", "step_time_s"}


# --------------------------------------------------------------------------- wordplay / ezpz key=value console

_EZPZ_SETUP = "".join(
    f"[2024-04-02 01:59:23][INFO][distributed_c10d:442] - Added key: store_based_barrier_key:1 to store for rank: {r}\n"
    f"[2024-04-02 01:59:25][INFO][dist:290] - [device='cuda'][rank={r}/7][local_rank={r % 4}/3][node={r % 2}/1]\n"
    for r in range(8)
) + "".join(f"  (c_attn): Linear(in_features=384, out_features={n}, bias=False)\n" for n in (1152, 384, 1536))


def _ezpz_line(step: int, seconds: float, loss: float, dt: float, *, location: str, bar: bool) -> str:
    stamp = f"2024-04-02 02:{int(seconds) // 60:02d}:{seconds % 60:09.6f}"
    glued = f"{step - 1:3d}%|#   | {step - 1}/100 [00:04<01:12,  1.32it/s]" if bar else ""
    return (
        f"{glued}[{stamp}][INFO][{location}] - step={step} loss={loss:.4f} dt={dt:.4f} dtf=4.6110 "
        f"dtb={dt - 7:.4f} sps=73.9992 mfu={-100.0 if step == 5 else 4.3692:.4f} train_loss=4.2922 val_loss=4.2905\n"
    )


def test_ezpz_console_in_notes_reads_its_loss_and_step_time_in_ms(tmp_path: Path) -> None:
    """wordplay's April-2024 console pasted in a homework: each metric line glued after a tqdm bar,
    ``[trainer:837]`` (the logger's source location) before it, ``dt`` in ms with no unit (the lines'
    clock: 5 steps in ~0.5 s), 16 ranks' setup lines and a model repr around it. Before: refused as
    "format not recognised" (the setup lines decided the step key). The step's ``loss`` stays the loss
    (``train_loss``, the step-0 evaluation repeated, keeps its name), ``dt`` is the step time in
    seconds, MFU a fraction, its -100 sentinel dropped; ``trainer`` is no metric."""
    lines = [
        _ezpz_line(s, 46.0 + 0.1 * s, 3.6606 - 0.01 * s, 100.0 + (s % 3), location="trainer:837", bar=True)
        for s in range(5, 101, 5)
    ]
    text = "## HW-6 Log Files\n\nSome prose.\n\n" + _EZPZ_SETUP + "".join(lines) + "\nwandb: Run summary:\n"
    log = read_log([_write(tmp_path, "homework_6.md", text)])
    assert log.format == "generic"
    steps, loss = log.series("loss")
    assert steps.tolist() == list(range(5, 101, 5))
    assert loss[0] == pytest.approx(3.6606 - 0.05) and loss[-1] == pytest.approx(3.6606 - 1.0)
    assert log.series("train_loss")[1][0] == pytest.approx(4.2922)
    assert log.meta["proposed_map"] == {"dt_s": "step_time_s"}
    assert log.series("dt_s")[1][0] == pytest.approx((100.0 + 5 % 3) / 1000)  # ms -> s
    mfu_steps, mfu = log.series("mfu")
    assert mfu_steps[0] == 10 and mfu[0] == pytest.approx(0.043692)
    assert not {"trainer", "rank", "in_features", "distributed_c10d"} & set(log.metrics)


def test_ezpz_console_with_file_location_reads_dt_in_seconds(tmp_path: Path) -> None:
    """The November-2024 console: ``[trainer.py:892]`` before the line and ``dt`` in seconds (the clock:
    ~0.3 s a step). Before: ``trainer.py`` was stored as a metric and ``dt`` had no role (the step
    time "not in this run")."""
    lines = [
        _ezpz_line(s, 6.0 + 0.3 * s, 3.22 - 0.002 * s, 0.28 + 0.001 * (s % 7), location="trainer.py:892", bar=False)
        for s in range(10, 1001, 10)
    ]
    log = read_log([_write(tmp_path, "README.md", "# notes\n\n```\n" + "".join(lines) + "```\n")])
    assert "trainer.py" not in log.metrics and "trainer" not in log.metrics
    assert log.meta["proposed_map"] == {"dt_s": "step_time_s"}
    dt_steps, dt = log.series("dt_s")
    assert dt_steps[0] == 10 and dt[0] == pytest.approx(0.28 + 0.001 * 3)


def test_bare_dt_unit_known_answers() -> None:
    from ingest.formats.generic_units import bare_time_unit, line_time, mfu_unit

    stamps = [line_time(f"[2024-11-09 20:00:{s:02d}.500000][INFO] step={s}") for s in (0, 10, 20)]
    assert stamps[1] is not None and stamps[0] is not None and stamps[1] - stamps[0] == pytest.approx(10.0)
    # 10 s of wall clock over 10 steps: 1 s a step
    assert bare_time_unit([0.9, 1.1, 1.0], [0, 10, 20], stamps) == "s"
    assert bare_time_unit([950.0, 1100.0, 1000.0], [0, 10, 20], stamps) == "ms"
    assert bare_time_unit([40.0, 40.0, 40.0], [0, 10, 20], stamps) == "s"  # neither: no rescaling on a guess
    assert bare_time_unit([950.0, 1100.0], [0, 10], [None, None]) == "s"  # no clock: seconds
    assert mfu_unit([46.1, 45.8]) == "%" and mfu_unit([0.46, 0.45]) is None and mfu_unit([-100.0]) is None


# --------------------------------------------------------------------------- pytorch imagenet example's meters


def test_imagenet_meter_lines_in_a_deepspeed_log(tmp_path: Path) -> None:
    """A DeepSpeed example's console with pytorch's imagenet-example meters: ``Epoch: [E][  0/N]`` once
    per epoch (step E*N), ``val[ 0/40]`` after it (the epoch's end), random-LTD's ``iter N | LR [x]|
    val_acc`` and DeepSpeed's old micro-step timer. Before: loss, accuracy and throughput not read
    (the step time and loss "not in this run")."""
    n = 391
    lines = []
    for epoch in range(3):
        loss = 3.436 / (epoch + 1)
        lines.append(
            f"Epoch: [{epoch}][  0/{n}]\tTime  {1.5 + epoch:.3f} ({1.5 + epoch:6.3f})\t"
            f"Loss {loss:.4e} ({loss:.4e})\tAcc@1  {7.81 * (epoch + 1):5.2f} ({7.81 * (epoch + 1):6.2f})\t"
            f"Acc@5  53.12 ( 53.12)"
        )
        for step in range(epoch * n + 200 - epoch * n % 200 if epoch else 0, (epoch + 1) * n, 200):
            lines.append(
                f"[2022-11-22 10:03:37,041] [INFO] [logging.py:68:log_dist] [Rank 0] step={step}, skipped=0, "
                "lr=[0.0001], mom=[0.9]"
            )
            if step:
                lines.append(
                    f"[2022-11-22 10:03:37,042] [INFO] [timer.py:198:stop] 0/{step}, "
                    f"RunningAvgSamplesPerSec={90 - step / 100}, CurrSamplesPerSec={80 - step / 100}, "
                    "MemAllocated=0.72GB, MaxMemAllocated=7.0GB"
                )
        lines.append(
            f"val[ 0/40]\tTime  2.986 ( 2.986)\tLoss {loss * 1.05:.4e} ({loss * 1.05:.4e})\tAcc@1   8.98 (  8.98)"
        )
        lines.append(f"{epoch} epoch at time 185.19143652915955s | reserved_length 48")
        lines.append(f"iter {(epoch + 1) * n} | LR [0.0001]| val_acc {10.97 + epoch} | layer_token 9476288")
    log = read_log([_write(tmp_path, "training.log", "\n".join(lines) + "\n")])
    assert log.format == "deepspeed_stdout"
    steps, loss = log.series("loss")
    assert steps.tolist() == [0, n, 2 * n]
    assert loss.tolist() == pytest.approx([3.436, 1.718, 1.1453], rel=1e-4)
    assert log.series("step_time_s")[1].tolist() == pytest.approx([1.5, 2.5, 3.5])
    val_steps, val = log.series("val_loss")
    assert val_steps.tolist() == [n, 2 * n, 3 * n] and val[0] == pytest.approx(3.6078, rel=1e-4)
    assert log.series("Acc@1")[1][0] == pytest.approx(7.81)
    assert log.series("val_acc")[0].tolist() == [n, 2 * n, 3 * n]
    # the old timer's ``0/200`` counts micro-steps (forward passes), not optimizer steps: not read as a step
    assert "CurrSamplesPerSec" not in log.metrics


# --------------------------------------------------------------------------- notes pasting two trainers' consoles


def _cerebras(batch_loss: float) -> str:
    return "".join(
        f"2024-03-30 15:16:{s // 100:02d},873 INFO:   | Train Device=CSX, Step={s}, Loss={batch_loss - s / 500:.5f}, "
        f"Rate=2983.97 samples/sec, GlobalRate=2983.97 samples/sec\n"
        for s in range(100, 1001, 100)
    )


def _sambanova() -> str:
    lines = []
    for s in range(322, 342):
        lines.append(
            f"Iteration:  13%|#         | {s - 1}/2552 [05:02<32:00,  1.16it/s]2024-04-06 18:32:42,002 - apps.nlp."
            f"bert_mlperf_trainer - Process ID 1130816 - info     - epoch:0|local_step:{s}|global_step:{s}|"
            f"average_loss:{9.0 - s / 1000:.5f}|step_loss:{9.01663 - (s - 322) / 100:.5f}|step_ns_loss:0.62694|"
            f"step_mlm_loss:8.38970|learning_rate:{4.49e-06 + (s - 322) * 1e-8:.3g}|eval_step:0.00000|"
            "validation_average_loss:0.00000|validation_total_loss:0.00000\n"
        )
    return "".join(lines)


def test_notes_with_two_trainers_consoles_keep_three_runs(tmp_path: Path) -> None:
    """A homework pasting two Cerebras runs (``Step=100, Loss=x``, steps 100-1000 twice) and a SambaNova
    excerpt (``global_step:322|...|step_loss:x|...``, tqdm bar and process id before it), each in its
    own fenced block. Before: one run of the SambaNova lines only, no loss, ``ID`` and the
    ``validation_*`` placeholders (0 on every line: no evaluation ran) stored as metrics."""
    notes = (
        "# HW 7\n## 1. Cerebras\n\n```\n"
        + _cerebras(9.39062)
        + "```\n\nBatch 2048:\n\n```\n"
        + _cerebras(9.48438)
        + "```\n\n## 4. Sambanova\n\n```"
        + _sambanova()
        + "```\n"
    )
    log = read_log([_write(tmp_path, "homework_7.md", notes)])
    runs = [log, *log.segments]
    assert len(runs) == 3
    for run, first in zip(runs[:2], (9.39062, 9.48438), strict=True):
        steps, loss = run.series("loss")
        assert steps.tolist() == list(range(100, 1001, 100)) and loss[0] == pytest.approx(first - 0.2)
    steps, loss = runs[2].series("loss")  # the step's own loss, not the running average
    assert steps[0] == 322 and loss[0] == pytest.approx(9.01663) and loss[-1] == pytest.approx(9.01663 - 0.19)
    assert runs[2].series("lr")[1][0] == pytest.approx(4.49e-06)
    metrics = {m for run in runs for m in run.metrics}
    assert not {"ID", "Iteration", "eval_step", "validation_average_loss", "validation_total_loss"} & metrics
    assert {"average_loss", "step_mlm_loss"} <= metrics


# --------------------------------------------------------------------------- an RL (PPO) console's loss and step time


def test_ds_chat_compact_ppo_console_reads_its_step_time(tmp_path: Path) -> None:
    """DeepSpeed-Chat's step-3 PPO console in its compact form: ``epoch: 0|step: N|ppo_ep: 1|act_loss:
    x|...``, ``average reward score: x`` and the step's timing ``|E2E latency=3.73s |Generate time=2.78s
    (74.61%) |...``. Before: the timing line was skipped and the step time was "not in this run"."""
    lines = []
    for step in range(12):
        lines.append(f"epoch: 0|step: {step}|ppo_ep: 1|act_loss: {0.21 - step / 100}|cri_loss: 0.12|unsuper_loss: 0.0")
        lines.append(f"average reward score: {-0.68 + step / 10}")
        lines.append(
            f"|E2E latency={3.7 + step / 100:.2f}s |Gather latency=0.00s (0.00%) |Generate time=2.78s (74.61%) "
            f"|Training time=0.74s (19.84%) |Others=0.21 (5.55%)|CurSamplesPerSec={17.17 - step / 10:.2f} "
            "|AvgSamplesPerSec=10.92"
        )
    log = read_log([_write(tmp_path, "actor.log", "\n".join(lines) + "\n")], format="deepspeed_stdout")
    steps, step_time = log.series("step_time_s")
    assert (
        steps.tolist() == list(range(12))
        and step_time[0] == pytest.approx(3.7)
        and step_time[-1] == pytest.approx(3.81)
    )
    assert log.series("generate_time_s")[1][0] == pytest.approx(2.78)
    assert log.series("samples_per_s")[1][-1] == pytest.approx(16.07)
    assert log.series("act_loss")[1][0] == pytest.approx(0.21)
    assert "loss" not in log.metrics  # a policy loss keeps its name: the LM-loss detector does not read it


def test_a_policy_loss_is_the_runs_loss_not_an_absent_one() -> None:
    """An RL run logs a policy loss: the analyses say so instead of "the run logs no loss" (false)."""
    from stab_core.analysis import analyze_run
    from stab_core.metrics import missing_reason, policy_loss_of
    from stab_core.runview import RunView, Series

    assert policy_loss_of(["reward", "cri_loss", "act_loss"]) == "act_loss"
    assert policy_loss_of(["loss", "reward"]) is None
    assert missing_reason("loss", ["grad_norm"]) == "the run logs no loss"
    assert missing_reason("grad_norm", ["act_loss"]) == "the run logs no grad_norm"
    steps = np.arange(100, dtype=np.int64)
    view = RunView("ppo", {"act_loss": Series(steps, 0.2 - steps / 1000), "reward": Series(steps, steps / 50.0)})
    not_run = dict(analyze_run(view).not_run)
    assert not_run["loss spikes"] == (
        "the run's loss is its policy loss (act_loss), not a language-model loss the detector reads"
    )


# --------------------------------------------------------------------------- a speed in steps is the step time


def _charlm_console(seconds_per_step: list[float]) -> str:
    """A from-scratch trainer's console: ``step N/5000 (P%): train loss x, val loss y | Ts (R steps/sec)``
    every 100 steps, ``step N/5000 (P%) | R steps/sec | ETA: 15.6m`` every 25; R is the average speed
    since the start (steps / elapsed seconds), as this trainer prints it."""
    lines = ["HYPERPARAMETERS", "batch_size = 32", "learning_rate = 0.0003"]
    elapsed = 0.0
    for step in range(0, 25 * len(seconds_per_step), 25):
        elapsed += 25 * seconds_per_step[step // 25] if step else 1.9
        rate = step / elapsed
        if step % 100 == 0:
            lines.append(
                f"step {step}/5000 ({step / 50:.1f}%): train loss {6.06 - step / 2000:.4f}, val loss "
                f"{6.05 - step / 3000:.4f} | {elapsed:.1f}s ({rate:.2f} steps/sec)"
            )
        else:
            lines.append(f"step {step}/5000 ({step / 50:.1f}%) | {rate:.2f} steps/sec | ETA: 15.6m")
    return "\n".join(lines) + "\n"


def test_a_running_average_speed_prices_the_run_and_is_no_step_time(tmp_path: Path) -> None:
    """Before: the speed was not read and the step time was "not in this run". A speed averaged since
    the start never leaves a slow stretch (a step-time series of it would show a lasting slowdown that
    is not there): it is kept as ``step_time_avg_s``, and its last value, the run's mean time per step,
    prices the run (``meta['step_time_s']``)."""
    per_step = [0.13] * 40 + [1.0] * 3 + [0.13] * 40  # a 75-step slow stretch, then back
    log = read_log([_write(tmp_path, "output.txt", _charlm_console(per_step))])
    assert log.series("loss")[0].tolist() == list(range(0, 25 * 83, 100))
    assert "step_time_s" not in log.metrics
    steps, avg = log.series("step_time_avg_s")
    assert steps[0] == 25  # step 0's 0.00 steps/sec is no speed
    mean = (1.9 + 25 * sum(per_step[1:])) / (25 * 82)
    assert log.meta["step_time_s"] == pytest.approx(mean, rel=0.01) and avg[-1] == log.meta["step_time_s"]


def test_a_moving_speed_is_the_step_time(tmp_path: Path) -> None:
    """tqdm's speed (a moving average) goes up and down with the steps: it is the step time."""
    rng = np.random.default_rng(0)
    speeds = 4.0 * (1 + 0.2 * rng.standard_normal(60)).clip(0.5, 2)
    lines = [f"step {s} loss {3 - s / 100:.3f} | {r:.2f}it/s" for s, r in zip(range(1, 61), speeds, strict=True)]
    log = read_log([_write(tmp_path, "console.txt", "\n".join(lines) + "\n")])
    steps, step_time = log.series("step_time_s")
    assert steps.tolist() == list(range(1, 61))
    assert step_time == pytest.approx(1 / np.round(speeds, 2))


def test_speed_spellings_known_answers() -> None:
    from ingest.formats.generic import line_pairs

    assert line_pairs("step 3 | 113.21s/it") == [("step", 3.0, None), ("speed_step_time", 113.21, "s")]
    assert line_pairs("step 3 | 4.00it/s") == [("step", 3.0, None), ("speed_step_time", 0.25, "s")]
    assert line_pairs("iter 3 loss 2.5 | 2.00 steps/sec")[-1] == ("speed_step_time", 0.5, "s")
