"""StabilityMonitor: what it writes (through real shards and a real store), its schedule events and
metadata, and — on a real 2-rank gloo DDP job — local/global gradient norms checked against norms
computed by hand from the same parameters and batches."""

from __future__ import annotations

import json
import math
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from ingest.errors import StabScopeError
from ingest.services.run_analyses import open_analysed_store
from ingest.store.shards import list_segments, read_segment
from ingest.training.demo_trainer import DemoConfig, MarkovSource, batch_tokens
from ingest.training.monitor import StabilityMonitor
from ingest.training.run_metadata import clipping_metadata, schedule_events, scheduler_metadata
from ingest.training.torch_clipping import ZClip, clip_grad_norm
from ingest.training.torch_schedulers import WarmupCosineRestartScheduler
from ingest.training.toy_model import build_gpt, next_token_loss
from tests.gloo import run_on_gloo

PEAK_LR = 1e-3


def _restart_scheduler(restart_warmup: int = 10) -> WarmupCosineRestartScheduler:
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(2))], lr=PEAK_LR)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        return WarmupCosineRestartScheduler(optimizer, 300, 30, restart_warmup, 2, 0.1)


# -------------------------------------------------------------------------------- metadata and events


def test_schedule_events_are_the_scheduler_transitions() -> None:
    # T=300 in 2 cycles: restart at floor(300/2)=150; warmups end at 30 and 150+10.
    assert schedule_events(_restart_scheduler(10)) == [
        (30, "warmup_end", "warmup ends: LR at peak"),
        (150, "cycle_restart", "cycle restart"),
        (160, "warmup_end", "warmup ends: LR at peak"),
    ]


def test_a_restart_without_warmup_is_one_jump_event() -> None:
    events = schedule_events(_restart_scheduler(0))
    assert [(s, k) for s, k, _ in events] == [(30, "warmup_end"), (150, "cycle_restart")]
    assert "no restart warmup" in events[1][2]


def test_scheduler_metadata_uses_the_checklist_keys() -> None:
    meta = scheduler_metadata(_restart_scheduler(0))
    assert meta["scheduler"] == "WarmupCosineRestartScheduler" and meta["lr_decay_style"] == "cosine"
    assert meta["peak_lr"] == PEAK_LR and meta["min_lr"] == pytest.approx(0.1 * PEAK_LR)
    assert (meta["total_steps"], meta["warmup_steps"], meta["restart_warmup_steps"], meta["num_cycles"]) == (
        300,
        30,
        0,
        2,
    )
    assert meta["schedule_transitions"] == {"warmup_end": [30], "cycle_restart": [150]}
    assert meta["transition_steps"] == [30, 150]
    assert any("restart_warmup_steps = 0" in advice for advice in meta["scheduler_advice"])


def test_clipping_metadata() -> None:
    assert clipping_metadata(None, 1.0) == {"clipping": {"method": "global_norm", "max_norm": 1.0}, "max_norm": 1.0}
    assert clipping_metadata(None, None)["max_norm"] == 0.0
    zclip = clipping_metadata(ZClip(alpha=0.9, z_thresh=3.0, warmup_steps=10), None)
    assert zclip["clipping"]["method"] == "zclip" and zclip["clipping"]["z_thresh"] == 3.0
    assert zclip["clipping"]["alpha"] == 0.9 and zclip["max_norm"] == 0.0


# -------------------------------------------------------------------------------- single process


def _linear_model() -> torch.nn.Linear:
    torch.manual_seed(0)
    return torch.nn.Linear(4, 1)


def test_single_process_run_round_trips_through_the_store(tmp_path: Path) -> None:
    model = _linear_model()
    scheduler = _restart_scheduler(10)
    shards = tmp_path / "shards"
    logged: dict[int, dict[str, float]] = {}
    with StabilityMonitor(
        shards, per_rank_batch_size=4, seq_len=16, scheduler=scheduler, max_norm=0.5, meta={"tags": ["t"]}
    ) as monitor:
        assert (monitor.rank, monitor.world_size, monitor.hook) == (0, 1, None)
        for step in range(25, 36):
            model.zero_grad()
            loss = (model(torch.full((2, 4), float(step))) ** 2).mean()
            loss.backward()
            record = clip_grad_norm(model.parameters(), 0.5)
            out = monitor.log(step, loss=loss.detach(), lr=1e-3 * step, clip_stats=record)
            logged[step] = out.run_metrics
            if step == 30:
                assert out.events == (("warmup_end", "warmup ends: LR at peak"),)
        monitor.checkpoint(33)
    store = open_analysed_store(tmp_path / "store")
    store.compact("mon", shards)
    info = store.run_info("mon")
    assert (info.first_step, info.last_step, info.ranks) == (25, 35, 1)
    loss = store.read_series("mon", "loss")
    np.testing.assert_allclose(loss.values, [logged[s]["loss"] for s in range(25, 36)], rtol=1e-12)
    np.testing.assert_allclose(store.read_series("mon", "lr").values, 1e-3 * np.arange(25, 36), rtol=1e-12)
    grad = store.read_series("mon", "grad_norm").values
    coef = store.read_series("mon", "clip_coef").values
    np.testing.assert_allclose(coef, np.minimum(1.0, 0.5 / (grad + 1e-6)), rtol=1e-9)  # torch's coefficient
    # tokens: (step + 1) x global batch (4) x seq_len (16)
    np.testing.assert_allclose(store.read_series("mon", "tokens").values, (np.arange(25, 36) + 1) * 64.0)
    step_time = store.read_series("mon", "step_time_s", rank=0)
    assert step_time.steps[0] == 26 and np.all(step_time.values > 0)  # none on the first logged step
    assert {e.kind: e.step for e in store.events("mon")} == {"warmup_end": 30, "checkpoint": 33}
    meta = info.meta
    assert (meta["world_size"], meta["per_rank_batch_size"], meta["global_batch_size"], meta["seq_len"]) == (
        1,
        4,
        4,
        16,
    )
    assert meta["max_norm"] == 0.5 and meta["transition_steps"] == [30, 150, 160] and meta["tags"] == ["t"]
    if not torch.cuda.is_available():
        assert not {"gpu_mem_gb", "gpu_util", "gpu_temp_c", "gpu_power_w"} & set(info.metrics)


def test_a_resumed_monitor_does_not_repeat_passed_transitions(tmp_path: Path) -> None:
    with StabilityMonitor(tmp_path, scheduler=_restart_scheduler(10)) as monitor:
        assert monitor.log(151).events == ()  # 150 was passed before the restart
        assert [k for k, _ in monitor.log(165).events] == ["warmup_end"]  # 160 lies in (151, 165]


def test_rows_reach_the_segment_within_the_flush_interval(tmp_path: Path) -> None:
    monitor = StabilityMonitor(tmp_path, flush_interval_s=0.2)
    monitor.log(0, loss=3.0)
    time.sleep(0.25)
    monitor.log(1, loss=2.5)  # the interval has passed: this call writes a frame
    [segment] = [p for p in list_segments(tmp_path) if p.parent.name == "rank-00000"]
    tables = read_segment(segment).metrics
    steps = sorted({int(s) for t in tables for s in t.column("step").to_pylist() if s is not None})
    assert steps == [0, 1]
    monitor.close()


def test_bad_calls_get_specific_errors(tmp_path: Path) -> None:
    with StabilityMonitor(tmp_path) as monitor:
        monitor.log(5, loss=1.0)
        with pytest.raises(StabScopeError, match="does not follow the previous logged step 5"):
            monitor.log(5, loss=1.0)
        with pytest.raises(StabScopeError, match="not a canonical name"):
            monitor.log(6, extra={"my loss": 1.0})
        with pytest.raises(StabScopeError, match="loss must be a number"):
            monitor.log(7, loss="high")  # type: ignore[arg-type]
        with pytest.raises(StabScopeError, match="needs a DistributedDataParallel model"):
            StabilityMonitor(tmp_path, model=_linear_model(), world_size=1)


# -------------------------------------------------------------------------------- 2 ranks, gloo, DDP

NORM_STEPS = 3
NORM_CONFIG = dict(ranks=2, steps=100, per_rank_batch_size=4, seq_len=32, seed=3)


def _norm_worker(rank: int, out: str) -> None:
    """One rank: DDP (small buckets, so the norms add up over several) + the monitor; dumps each step's
    parameters (rank 0), the monitor's records and the clipper's norms."""
    from torch.nn.parallel import DistributedDataParallel

    config = DemoConfig(out=Path(out) / "shards", **NORM_CONFIG).resolved()  # type: ignore[arg-type]
    source = MarkovSource(config.vocab_size, config.markov_branching, config.seed, config.markov_order)
    model = DistributedDataParallel(build_gpt(config.model_shape, config.seed), bucket_cap_mb=0.05)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    records: list[dict[str, Any]] = []
    logged = []
    with StabilityMonitor(config.out, model=model, per_rank_batch_size=4) as monitor:
        for step in range(NORM_STEPS):
            if rank == 0:
                torch.save(model.module.state_dict(), f"{out}/params-{step}.pt")
            tokens = torch.from_numpy(batch_tokens(config, source, rank, step))
            loss = next_token_loss(model, tokens)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()  # type: ignore[no-untyped-call]
            clip = clip_grad_norm(model.parameters(), 0.05)
            optimizer.step()
            record = monitor.log(step, loss=loss.detach(), clip_stats=clip)
            records.append(
                {
                    "buckets": monitor.hook.last_bucket_count if monitor.hook is not None else 0,
                    "local": record.local_grad_norm,
                    "global": record.global_grad_norm,
                    "clip_total_norm": clip.total_norm,
                    "loss_local": record.rank_metrics["loss"],
                }
            )
            logged.append(record)
    for row, record in zip(records, logged, strict=True):
        row["loss_mean"] = record.run_metrics["loss"]  # sent with later steps' losses: all sent by close
    Path(f"{out}/records-{rank}.json").write_text(json.dumps(records))


def _hand_norms(out: Path, step: int) -> tuple[list[float], float, list[float]]:
    """Each rank's gradient norm without DDP, the norm of their average, and each rank's loss."""
    config = DemoConfig(out=out, **NORM_CONFIG).resolved()  # type: ignore[arg-type]
    source = MarkovSource(config.vocab_size, config.markov_branching, config.seed, config.markov_order)
    grads, losses = [], []
    for rank in range(2):
        model = build_gpt(config.model_shape, config.seed)
        model.load_state_dict(torch.load(out / f"params-{step}.pt", weights_only=True))
        loss = next_token_loss(model, torch.from_numpy(batch_tokens(config, source, rank, step)))
        loss.backward()  # type: ignore[no-untyped-call]
        grads.append(torch.cat([p.grad.double().flatten() for p in model.parameters() if p.grad is not None]))
        losses.append(float(loss.detach()))
    local = [float(g.norm()) for g in grads]
    return local, float(((grads[0] + grads[1]) / 2).norm()), losses


def test_hook_take_sums_bucket_norms_in_quadrature() -> None:
    """take() combines per-bucket norms as sqrt(sum of squares), keeps NaN/inf, and clears the record."""
    from ingest.training.ddp_hook import GradNormHook

    hook = GradNormHook.__new__(GradNormHook)  # the bookkeeping alone, without a DDP model
    cases = [
        ([3.0, 4.0], [0.0, 5.0], 5.0, 5.0),
        ([2.0, 3.0, 6.0], [1.0, 2.0, 2.0], 7.0, 3.0),
        ([1e-20, 1e-20], [3e30, 4e30], math.sqrt(2) * 1e-20, 5e30),
        ([1.0, math.inf], [math.nan, 1.0], math.inf, math.nan),
    ]
    for local, global_, want_local, want_global in cases:
        hook._local = [torch.tensor(x, dtype=torch.float32) for x in local]
        hook._global = [torch.tensor(x, dtype=torch.float32) for x in global_]
        hook._pass_complete = True
        got = hook.take()
        assert got is not None and hook.last_bucket_count == len(local)
        expected = [
            float(torch.tensor(v, dtype=torch.float32).double().square().sum().sqrt()) for v in (local, global_)
        ]
        for value, want, reference in zip(got, (want_local, want_global), expected, strict=True):
            if math.isnan(want):
                assert math.isnan(value) and math.isnan(reference)
            else:
                assert value == pytest.approx(want, rel=1e-6) and value == pytest.approx(reference, rel=1e-15)
        assert hook.take() is None  # cleared


@pytest.mark.slow
def test_two_rank_ddp_norms_match_norms_computed_by_hand(tmp_path: Path) -> None:
    run_on_gloo(_norm_worker, 2, tmp_path, str(tmp_path))
    records = [json.loads((tmp_path / f"records-{r}.json").read_text()) for r in range(2)]
    for step in range(NORM_STEPS):
        local, global_norm, losses = _hand_norms(tmp_path, step)
        assert local[0] != pytest.approx(local[1], rel=1e-3)  # different batches: the check has teeth
        for rank in range(2):
            got = records[rank][step]
            assert got["local"] == pytest.approx(local[rank], rel=1e-5)
            assert got["global"] == pytest.approx(global_norm, rel=1e-5)
            assert got["clip_total_norm"] == pytest.approx(got["global"], rel=1e-5)  # the clipper sees the same
            assert got["loss_local"] == pytest.approx(losses[rank], rel=1e-5)
            assert got["loss_mean"] == pytest.approx(sum(losses) / 2, rel=1e-5)
        # the global gradient averages two batches: shorter than either when they disagree
        assert global_norm < max(local)
    # DDP rebuilds its buckets after the first step: one bucket at step 0, several (0.05 MB each) after,
    # so the sums over buckets are checked too
    assert records[0][0]["buckets"] >= 1 and min(r["buckets"] for r in records[0][1:]) > 1
    store = open_analysed_store(tmp_path / "store")
    store.compact("ddp", tmp_path / "shards")
    info = store.run_info("ddp")
    assert info.ranks == 2 and info.meta["global_batch_size"] == 8 and info.meta["world_size"] == 2
    for rank in range(2):
        series = store.read_series("ddp", "grad_norm_local", rank=rank)
        np.testing.assert_allclose(series.values, [r["local"] for r in records[rank]], rtol=1e-12)
    np.testing.assert_allclose(
        store.read_series("ddp", "grad_norm").values, [r["clip_total_norm"] for r in records[0]], rtol=1e-12
    )
    assert math.isfinite(store.read_series("ddp", "loss").values.sum())


LATE_RANK_DELAY_S = 1.5
LOSS_STEPS = 4


def _late_rank_worker(rank: int, out: str) -> None:
    """Rank 1 logs each step 1.5 s after rank 0; rank 0 records how long its own ``log`` calls took
    and what its records say the cross-rank loss mean is."""
    losses = [[1.0, 2.0, 4.0, 8.0], [3.0, 5.0, 0.5, 0.25]][rank]
    took, means = [], []
    with StabilityMonitor(Path(out) / "shards") as monitor:
        records = []
        for step, loss in enumerate(losses):
            if rank == 1:
                time.sleep(LATE_RANK_DELAY_S)
            start = time.perf_counter()
            records.append(monitor.log(step, loss=loss))
            took.append(time.perf_counter() - start)
    means = [r.run_metrics["loss"] for r in records]  # close sent the last batch
    Path(f"{out}/late-{rank}.json").write_text(json.dumps({"took": took, "means": means}))


@pytest.mark.slow
def test_log_does_not_wait_for_the_other_ranks_loss(tmp_path: Path) -> None:
    """The cross-rank loss mean is all-reduced without blocking ``log``: a rank that is 1.5 s behind
    does not hold the others up there (a blocking all-reduce made every call wait for it), and every
    step's mean still reaches the run-level row, the last one when the monitor closes."""
    run_on_gloo(_late_rank_worker, 2, tmp_path, str(tmp_path))
    first = json.loads((tmp_path / "late-0.json").read_text())
    assert max(first["took"]) < LATE_RANK_DELAY_S / 3
    assert first["means"] == [2.0, 3.5, 2.25, 4.125]
    store = open_analysed_store(tmp_path / "store")
    store.compact("late", tmp_path / "shards")
    series = store.read_series("late", "loss")
    np.testing.assert_array_equal(series.steps, np.arange(LOSS_STEPS))
    np.testing.assert_array_equal(series.values, first["means"])
    rank_one = store.read_series("late", "loss", rank=1)
    np.testing.assert_array_equal(rank_one.values, [3.0, 5.0, 0.5, 0.25])


FAST_STEPS = 300


def _fast_steps_worker(rank: int, out: str) -> None:
    """Logs 300 steps as fast as it can (microseconds apart); rank 0 dumps what it saw."""
    with StabilityMonitor(Path(out) / "shards") as monitor:
        records = [monitor.log(step, loss=100.0 * rank + step, lr=0.5) for step in range(FAST_STEPS)]
        assert monitor._losses is not None
        try:
            _ = records[-1].run_metrics
            unsent_error = ""
        except StabScopeError as error:
            unsent_error = str(error)
    assert monitor._losses is not None
    if rank == 0:
        summary = {
            "reductions": monitor._losses.reductions,
            "means": [r.run_metrics["loss"] for r in records],
            "unsent_error": unsent_error,
        }
        Path(f"{out}/fast.json").write_text(json.dumps(summary))


@pytest.mark.slow
def test_fast_steps_share_one_loss_all_reduce(tmp_path: Path) -> None:
    """Fast steps send their losses in batches (a scalar all-reduce a step cost 4-7% of the 2-rank
    demo's step), and every step still gets its exact cross-rank mean, the last ones at close."""
    run_on_gloo(_fast_steps_worker, 2, tmp_path, str(tmp_path))
    got = json.loads((tmp_path / "fast.json").read_text())
    want = [50.0 + step for step in range(FAST_STEPS)]  # (step + (100 + step)) / 2
    assert got["means"] == want
    # 8 batches of one step before the first proposal applies, one more (rank 0 had no step time
    # yet), then up to 64 steps a batch: one all-reduce a step would be 300
    assert 9 + math.ceil((FAST_STEPS - 9) / 64) <= got["reductions"] <= 20
    assert "step 299" in got["unsent_error"] and "close()" in got["unsent_error"]
    store = open_analysed_store(tmp_path / "store")
    store.compact("fast", tmp_path / "shards")
    loss = store.read_series("fast", "loss")
    np.testing.assert_array_equal(loss.steps, np.arange(FAST_STEPS))
    np.testing.assert_array_equal(loss.values, want)


FAILED_AT = 12


def _failing_worker(rank: int, out: str) -> None:
    """Both ranks fail at step 12, rank 1 before logging it: their last batches (steps 9 on) hold
    different numbers of losses, so sending them at exit would pair mismatched collectives. The exit
    must keep the rows and send nothing."""
    try:
        with StabilityMonitor(Path(out) / "shards", flush_interval_s=60.0) as monitor:
            for step in range(20):
                if step == FAILED_AT and rank == 1:
                    raise RuntimeError("loss is NaN")
                monitor.log(step, loss=10.0 * rank + step, lr=0.25)
                if step == FAILED_AT:
                    raise RuntimeError("loss is NaN")
    except RuntimeError:
        pass
    assert monitor._losses is not None
    Path(f"{out}/failed-{rank}.json").write_text(json.dumps({"reductions": monitor._losses.reductions}))


@pytest.mark.slow
def test_a_failed_step_exits_without_a_collective_and_keeps_the_rows(tmp_path: Path) -> None:
    run_on_gloo(_failing_worker, 2, tmp_path, str(tmp_path))
    # steps 0-8 went one a batch (the first proposals), the batch from step 9 on was never sent
    assert [json.loads((tmp_path / f"failed-{r}.json").read_text())["reductions"] for r in range(2)] == [9, 9]
    store = open_analysed_store(tmp_path / "store")
    store.compact("failed", tmp_path / "shards")
    lr = store.read_series("failed", "lr")
    np.testing.assert_array_equal(lr.steps, np.arange(FAILED_AT + 1))  # every run-level row rank 0 logged
    loss = store.read_series("failed", "loss")  # the means both ranks sent
    np.testing.assert_array_equal(loss.steps, np.arange(9))
    np.testing.assert_array_equal(loss.values, 5.0 + np.arange(9))
    rank_one = store.read_series("failed", "loss", rank=1)
    np.testing.assert_array_equal(rank_one.values, 10.0 + np.arange(FAILED_AT))


@pytest.mark.parametrize("bucket_view", [False, True])
def test_one_rank_ddp_hook_norms_equal_the_gradient_norm(tmp_path: Path, bucket_view: bool) -> None:
    """On one rank the hook hands DDP its bucket back without a collective: local and global norms
    are both the gradient's norm, and DDP's gradients (copied out of the bucket, or views of it) are
    the plain model's."""
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    config = DemoConfig(out=tmp_path / "shards", ranks=1, steps=40).resolved()
    source = MarkovSource(config.vocab_size, config.markov_branching, config.seed, config.markov_order)
    tokens = torch.from_numpy(batch_tokens(config, source, 0, 0))
    dist.init_process_group("gloo", init_method=f"file://{tmp_path}/rdzv", rank=0, world_size=1)
    try:
        plain = build_gpt(config.model_shape, config.seed)
        ddp = DistributedDataParallel(build_gpt(config.model_shape, config.seed), gradient_as_bucket_view=bucket_view)
        ddp.module.load_state_dict(plain.state_dict())
        monitor = StabilityMonitor(config.out, model=ddp)
        next_token_loss(plain, tokens).backward()  # type: ignore[no-untyped-call]
        next_token_loss(ddp, tokens).backward()  # type: ignore[no-untyped-call]
        assert monitor.hook is not None
        local, global_norm = monitor.hook.take()  # type: ignore[misc]
        monitor.close()
    finally:
        dist.destroy_process_group()
    by_hand = float(torch.cat([p.grad.double().flatten() for p in plain.parameters() if p.grad is not None]).norm())
    assert local == global_norm == pytest.approx(by_hand, rel=1e-5)
    for a, b in zip(plain.parameters(), ddp.module.parameters(), strict=True):
        assert a.grad is not None and b.grad is not None and torch.equal(a.grad, b.grad)


README = Path(__file__).resolve().parents[1] / "README.md"


def test_the_readme_training_loop_runs_and_its_shards_hold_every_step(tmp_path: Path) -> None:
    """The README's StabilityMonitor snippet, run as written on one gloo rank with DDP: users copy it."""
    import itertools
    import re

    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)
    snippet = next(b for b in blocks if "StabilityMonitor(" in b)
    assert '"/shards/job42"' in snippet
    config = DemoConfig(out=tmp_path, ranks=1, steps=40).resolved()
    source = MarkovSource(config.vocab_size, config.markov_branching, config.seed, config.markov_order)
    tokens = torch.from_numpy(batch_tokens(config, source, 0, 0))
    model = build_gpt(config.model_shape, config.seed)
    optimizer = torch.optim.AdamW(model.parameters(), lr=PEAK_LR)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        sched = WarmupCosineRestartScheduler(optimizer, 300, 30, 3, 2, 0.1)
    target = tokens[:, 1:].reshape(-1)
    scope: dict[str, Any] = {
        "DistributedDataParallel": DistributedDataParallel,
        "model": model,
        "optimizer": optimizer,
        "sched": sched,
        "loss_fn": lambda logits: torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), target),
        "batches": itertools.repeat(tokens[:, :-1]),
        "total_steps": 12,
    }
    dist.init_process_group("gloo", init_method=f"file://{tmp_path}/rdzv", rank=0, world_size=1)
    try:
        exec(snippet.replace('"/shards/job42"', repr(str(tmp_path / "shards"))), scope)
    finally:
        dist.destroy_process_group()
    store = open_analysed_store(tmp_path / "store")
    store.compact("readme", tmp_path / "shards")
    for metric in ("loss", "lr", "grad_norm", "clip_coef"):
        np.testing.assert_array_equal(store.read_series("readme", metric).steps, np.arange(12))
    assert store.read_series("readme", "grad_norm").values[-1] == scope["record"].total_norm
    local = store.read_series("readme", "grad_norm_local", rank=0).values
    # one rank: the same gradient, summed in float32 by the hook and in float64 by the clipper
    np.testing.assert_allclose(local, store.read_series("readme", "grad_norm").values, rtol=1e-5)


def test_loss_scale_factor_known_answers() -> None:
    from ingest.training.ddp_hook import loss_scale_factor

    assert loss_scale_factor(1315.765 * 1.00000003, 1315.765 / 1024) == 1024.0
    assert loss_scale_factor(0.5, 1.0) == 0.5  # a scale backed off below 1
    assert loss_scale_factor(2.0, 2.0) == 1.0  # no scaling
    assert loss_scale_factor(3.0, 1.0) == 1.0  # no power of two: the clipper saw other parameters
    assert loss_scale_factor(2.01, 1.0) == 1.0
    assert loss_scale_factor(math.inf, 1.0) == 1.0 and loss_scale_factor(1.0, math.nan) == 1.0
    assert loss_scale_factor(0.0, 1.0) == 1.0 and loss_scale_factor(1.0, 0.0) == 1.0


@pytest.mark.parametrize("mode", ["scaler", "scaler_no_clip_stats", "from_clipper", "clip_a_subset"])
def test_fp16_loss_scale_is_divided_out_of_the_hook_norms(tmp_path: Path, mode: str) -> None:
    """Under a GradScaler the hook sees gradients times the loss scale. With the scaler, or from the
    clipper's unscaled norm, grad_norm_local is the true one, for a scale that changes every step."""
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    dist.init_process_group("gloo", init_method=f"file://{tmp_path}/rdzv", rank=0, world_size=1)
    try:
        torch.manual_seed(0)
        model = DistributedDataParallel(torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Linear(16, 4)))
        params = list(model.parameters())
        optimizer = torch.optim.SGD(params, lr=0.01)
        amp = mode != "clip_a_subset"
        scaler = torch.amp.GradScaler("cpu", init_scale=1024.0, growth_interval=1, enabled=amp)
        monitor = StabilityMonitor(
            tmp_path / "shards", model=model, grad_scaler=scaler if mode.startswith("scaler") else None
        )
        seen: list[tuple[float, float, float]] = []
        with warnings.catch_warnings(record=True) as caught, monitor:
            warnings.simplefilter("always")
            for step in range(4):
                optimizer.zero_grad()
                scaler.scale(model(torch.randn(6, 8)).pow(2).mean()).backward()
                scaler.unscale_(optimizer)
                true_norm = float(torch.linalg.vector_norm(torch.cat([p.grad.reshape(-1) for p in params])))
                clipped = params[:2] if mode == "clip_a_subset" else params
                record = clip_grad_norm(clipped, 100.0)
                scale = scaler.get_scale()
                scaler.step(optimizer)
                scaler.update()  # doubles the scale: the hook must keep the one its backward ran with
                logged = monitor.log(step, clip_stats=None if mode == "scaler_no_clip_stats" else record)
                assert logged.local_grad_norm is not None and logged.global_grad_norm is not None
                seen.append((logged.local_grad_norm, true_norm, scale))
        assert [s for _, _, s in seen] == ([1024.0, 2048.0, 4096.0, 8192.0] if amp else [1.0] * 4)
        for local, true_norm, _ in seen:
            assert local == pytest.approx(true_norm, rel=1e-5)
        scaled = [w for w in caught if "loss-scaled" in str(w.message)]
        assert len(scaled) == (1 if mode == "from_clipper" else 0)  # once, and only when it guessed
    finally:
        dist.destroy_process_group()
