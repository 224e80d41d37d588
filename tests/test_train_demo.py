"""``stabscope demo-train``: the data source, the config, the CLI, and real 2-rank gloo runs — the
provoked spikes appear in the loss, the shards ingest with both ranks, and a run killed with SIGKILL
resumes from its checkpoint on the identical scheduler and ZClip trajectory."""

from __future__ import annotations

import importlib.util
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from ingest.cli import build_parser
from ingest.errors import StabScopeError
from ingest.services.run_analyses import open_analysed_store
from ingest.training.demo_trainer import (
    LR_JUMP_MIN_LR_RATIO,
    LR_JUMP_PEAK_LR,
    DemoConfig,
    MarkovSource,
    batch_tokens,
    checkpoint_path,
    cmd_demo_train,
    template_batch,
)
from stab_core.schedulers import lr_at

REPO = Path(__file__).resolve().parents[1]


def demo_train(*args: str, **popen: object) -> subprocess.Popen[str]:
    cmd = [sys.executable, "-m", "ingest", "demo-train", *args]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.Popen(  # type: ignore[call-overload, no-any-return]
        cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **popen
    )


def finish(proc: subprocess.Popen[str], timeout_s: float = 400) -> None:
    _, err = proc.communicate(timeout=timeout_s)
    assert proc.returncode == 0, err[-3000:]


# -------------------------------------------------------------------------------- data and config


@pytest.mark.parametrize("order", [1, 2])
def test_markov_source_emits_only_allowed_successors_at_their_probabilities(order: int) -> None:
    source = MarkovSource(vocab_size=8, branching=3, seed=1, order=order)
    tokens = source.sample(np.random.default_rng(0), batch=400, length=60)
    assert tokens.shape == (400, 60) and tokens.min() >= 0 and tokens.max() < 8
    context = tokens[:, order - 1 : -1] if order == 1 else tokens[:, :-2] * 8 + tokens[:, 1:-1]
    following = tokens[:, order:]
    allowed = source.successors[context]
    assert np.all((allowed == following[..., None]).any(axis=-1))  # never an unlisted successor
    # empirical frequencies of context 5's successors match its probabilities (~3,000+ draws at order 1)
    if order == 1:
        picks = following[context == 5]
        freq = np.array([(picks == s).mean() for s in source.successors[5]])
        np.testing.assert_allclose(freq, source.probs[5], atol=0.03)
    expected = np.mean([-(p * np.log(p)).sum() for p in source.probs])
    assert source.entropy_nats == pytest.approx(expected) and 0 < source.entropy_nats < np.log(3)


def test_batches_are_a_function_of_seed_rank_and_step() -> None:
    config = DemoConfig(out=Path("unused"), steps=100, provoke="outlier-batch").resolved()
    source = MarkovSource(config.vocab_size, config.markov_branching, config.seed)
    first = batch_tokens(config, source, 0, 7)
    np.testing.assert_array_equal(first, batch_tokens(config, source, 0, 7))  # a resumed run sees the same
    assert not np.array_equal(first, batch_tokens(config, source, 1, 7))
    assert first.shape == (config.per_rank_batch_size, config.seq_len + 1)
    start, end = config.outlier_steps
    assert (start, end) == (60, 65) and config.outlier_rank == 1
    template = template_batch(config, config.per_rank_batch_size)
    assert np.all(template == template[0])  # every row the same sequence
    for step in range(start - 1, end + 1):
        outlier = np.array_equal(batch_tokens(config, source, 1, step), template)
        assert outlier == (start <= step < end)
        assert not np.array_equal(batch_tokens(config, source, 0, step), template)


def test_config_defaults_per_provocation() -> None:
    jump = DemoConfig(out=Path("x"), steps=300, provoke="lr-jump").resolved()
    assert (jump.warmup_steps, jump.restart_warmup_steps) == (30, 0)
    assert (jump.peak_lr, jump.min_lr_ratio) == (LR_JUMP_PEAK_LR, LR_JUMP_MIN_LR_RATIO)
    assert jump.cycle_starts == [150]
    calm = DemoConfig(out=Path("x"), steps=300).resolved()
    assert (calm.warmup_steps, calm.restart_warmup_steps, calm.min_lr_ratio) == (30, 10, 0.1)
    with pytest.raises(StabScopeError, match="--provoke must be one of"):
        DemoConfig(out=Path("x"), provoke="nan-bomb").resolved()  # type: ignore[arg-type]
    with pytest.raises(StabScopeError, match="too short for 2 cycles"):
        DemoConfig(out=Path("x"), steps=30).resolved()


def test_cli_registers_demo_train() -> None:
    args = build_parser().parse_args(
        ["demo-train", "--ranks", "3", "--steps", "120", "--out", "d", "--provoke", "outlier-batch"]
    )
    assert args.fn is cmd_demo_train
    assert (args.ranks, args.steps, args.out, args.provoke, args.clip) == (3, 120, "d", "outlier-batch", "norm")


def test_demo_train_refuses_to_mix_two_runs_in_one_shard_directory(tmp_path: Path) -> None:
    from ingest.store.shards import ShardWriter

    with ShardWriter(tmp_path, 0) as writer:
        writer.write(0, {"loss": 1.0})
    args = build_parser().parse_args(["demo-train", "--out", str(tmp_path)])
    with pytest.raises(StabScopeError, match="already holds shards of a run: pass --resume"):
        cmd_demo_train(args)


# -------------------------------------------------------------------------------- real runs

JUMP_STEPS = 240


@pytest.mark.slow
def test_lr_jump_run_ingests_with_both_ranks_and_spikes_at_the_restart(tmp_path: Path) -> None:
    finish(
        demo_train(
            "--ranks", "2", "--steps", str(JUMP_STEPS), "--out", str(tmp_path / "shards"), "--provoke", "lr-jump"
        )
    )
    store = open_analysed_store(tmp_path / "store")
    report = store.compact("jump", tmp_path / "shards")
    assert report.rejected == 0
    info = store.run_info("jump")
    assert info.ranks == 2 and (info.first_step, info.last_step) == (0, JUMP_STEPS - 1)
    assert {"grad_norm_local", "step_time_s", "loss"} <= set(info.rank_metrics)
    meta = info.meta
    assert (meta["world_size"], meta["per_rank_batch_size"], meta["global_batch_size"]) == (2, 8, 16)
    assert meta["restart_warmup_steps"] == 0 and meta["transition_steps"] == [24, 120]
    events = {(e.step, e.kind) for e in store.events("jump")}
    assert {(24, "warmup_end"), (120, "cycle_restart")} <= events

    lr = store.read_series("jump", "lr")
    np.testing.assert_allclose(lr.values, lr_at(lr.steps, JUMP_STEPS, 24, 0, 2, LR_JUMP_MIN_LR_RATIO, LR_JUMP_PEAK_LR))
    assert lr.values[120] / lr.values[119] > 50  # the jump: floor to peak in one step

    loss = store.read_series("jump", "loss")
    assert loss.values[0] == pytest.approx(np.log(32), abs=0.3)  # an untrained model: ln(vocab)
    assert np.median(loss.values[100:120]) < 1.0  # it really learns
    baseline = float(np.median(loss.values[100:120]))
    after = loss.values[120:150]
    ratio = float(after.max()) / baseline
    assert ratio > SPIKE_RATIO, f"loss after the LR jump peaks at {ratio:.2f}x the pre-restart median"
    if importlib.util.find_spec("stab_core.analysis") is not None:  # the store materialises analyses
        loss_spikes = [s for s in store.spikes("jump") if s["metric"] == "loss"]
        near = [s for s in loss_spikes if 120 <= s["peak"] <= 150]
        assert near, f"no loss spike detected after the restart at step 120: {loss_spikes}"
        assert near[0]["cause"] == "lr_transition"  # what was provoked
        # per-rank grad_norm_local + global grad_norm + both batch sizes: the two-batch noise scale
        assert info.meta["analysis"]["snr_estimator"] == "two_batch"


SPIKE_RATIO = 2.0
"""Measured 6.7x, 4.4x and 2.6x for seeds 0-2 (the toy GPT of ingest.training.toy_model); a run without the
provocation reaches 1.04-1.10x in the same window."""


@pytest.mark.slow
def test_outlier_batches_raise_that_ranks_loss_and_local_grad_norm(tmp_path: Path) -> None:
    finish(demo_train("--ranks", "2", "--steps", "80", "--out", str(tmp_path), "--provoke", "outlier-batch"))
    store = open_analysed_store(tmp_path / "store")
    store.compact("outlier", tmp_path)
    start, end = DemoConfig(out=tmp_path, steps=80, provoke="outlier-batch").outlier_steps
    loss = {r: store.read_series("outlier", "loss", rank=r).values for r in (0, 1)}
    local = {r: store.read_series("outlier", "grad_norm_local", rank=r).values for r in (0, 1)}
    assert loss[1][start] > 2 * loss[0][start]  # the template is nothing the source produces
    assert loss[1][start] > 2 * np.median(loss[1][start - 10 : start])
    assert local[1][start] > 3 * local[0][start]
    assert np.median(loss[1][end + 5 :]) < 1.5 * np.median(loss[0][end + 5 :])  # over when the batches are
    run_loss = store.read_series("outlier", "loss").values
    assert run_loss[start] == pytest.approx((loss[0][start] + loss[1][start]) / 2, rel=1e-9)


RESUME_ARGS = ("--ranks", "2", "--steps", "120", "--clip", "zclip", "--checkpoint-every", "30", "--seed", "5")


@pytest.mark.slow
def test_a_killed_run_resumes_on_the_identical_schedule_and_clipper_trajectory(tmp_path: Path) -> None:
    straight, killed = tmp_path / "straight", tmp_path / "killed"
    reference = demo_train(*RESUME_ARGS, "--out", str(straight))
    victim = demo_train(*RESUME_ARGS, "--out", str(killed), start_new_session=True)
    first_checkpoint = checkpoint_path(killed, 29)
    deadline = time.monotonic() + 300
    while not first_checkpoint.exists():
        assert victim.poll() is None, victim.communicate()[1][-2000:]
        assert time.monotonic() < deadline, "no checkpoint after 300 s"
        time.sleep(0.05)
    os.killpg(victim.pid, signal.SIGKILL)  # every rank at once, mid-training, no clean-up
    victim.communicate()
    assert not checkpoint_path(killed, 89).exists()
    finish(reference)
    finish(demo_train(*RESUME_ARGS, "--out", str(killed), "--resume"))

    # Checkpoints written after the resume hold exactly the uninterrupted run's state.
    for step in (59, 89):
        a = torch.load(checkpoint_path(straight, step), weights_only=True)
        b = torch.load(checkpoint_path(killed, step), weights_only=True)
        assert a["scheduler"]["last_epoch"] == b["scheduler"]["last_epoch"] == step + 1
        assert a["scheduler"]["_last_lr"] == b["scheduler"]["_last_lr"]
        assert a["clipper"]["mean"] is not None  # ZClip finished its 25-step warm-up
        assert a["clipper"] == b["clipper"]
        for name, tensor in a["model"].items():
            torch.testing.assert_close(b["model"][name], tensor, rtol=1e-6, atol=1e-7, msg=name)

    # The shards of the killed-and-resumed run ingest into the same series (re-logged steps: last write wins).
    store = open_analysed_store(tmp_path / "store")
    store.compact("straight", straight)
    store.compact("resumed", killed)
    for metric in ("lr", "loss", "grad_norm", "clip_coef"):
        a_series, b_series = store.read_series("straight", metric), store.read_series("resumed", metric)
        np.testing.assert_array_equal(b_series.steps, np.arange(120))
        np.testing.assert_allclose(b_series.values, a_series.values, rtol=1e-6, err_msg=metric)
    rollbacks = [e for e in store.events("resumed") if e.kind == "rollback"]
    assert len(rollbacks) == 1 and rollbacks[0].detail["checkpoint_step"] in (29, 59)


def _slow_rank_one_worker(rank: int, out: str, seen_file: str) -> None:
    """Train 2 ranks with checkpoints, rank 1 flushing its metrics late; rank 0 notes, at each
    checkpoint it writes, the last step rank 1's shard already holds."""
    import ingest.training.demo_trainer as demo_trainer
    from ingest.store.shards import list_segments, read_segment
    from ingest.training.monitor import StabilityMonitor

    if rank == 1:
        flush = StabilityMonitor.flush

        def late_flush(self: StabilityMonitor) -> None:
            time.sleep(0.5)
            flush(self)

        StabilityMonitor.flush = late_flush  # type: ignore[method-assign]
    else:
        save = demo_trainer._save_checkpoint

        def noting_save(trainer: object, config: DemoConfig, step: int) -> Path:
            segments = [p for p in list_segments(out) if p.parent.name == "rank-00001"]
            logged = [int(s) for p in segments for t in read_segment(p).metrics for s in t.column("step").to_pylist()]
            with open(seen_file, "a") as f:
                f.write(f"{step} {max(logged, default=-1)}\n")
            return save(trainer, config, step)  # type: ignore[arg-type]

        demo_trainer._save_checkpoint = noting_save  # type: ignore[assignment]
    config = DemoConfig(out=Path(out), ranks=2, steps=40, checkpoint_every=20, seed=3)
    demo_trainer.train_rank(config, rank, 2)


@pytest.mark.slow
def test_every_rank_has_logged_a_step_before_its_checkpoint_exists(tmp_path: Path) -> None:
    from tests.gloo import run_on_gloo

    seen = tmp_path / "seen.txt"
    run_on_gloo(_slow_rank_one_worker, 2, tmp_path / "gloo", str(tmp_path / "out"), str(seen))
    rows = [tuple(map(int, line.split())) for line in seen.read_text().splitlines()]
    assert [step for step, _ in rows] == [19]  # checkpoints after steps 20 and 40: the last is the run's end
    assert all(rank1_last >= step for step, rank1_last in rows), rows
