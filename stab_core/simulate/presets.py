"""The runs StabScope ships with, as specs of the physical model: the demo runs of the default
dashboard and the three playbook scenarios of issue 7 (each a before and an after run)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from stab_core.runview import RunEvent
from stab_core.simulate.spec import (
    PER_RANK_METRICS,
    BatchSkip,
    DataOutlierSpike,
    LrJumpSpike,
    NumericalFault,
    RankFault,
    RouterSeesawSpike,
    SimSpec,
    Straggler,
    WarmupRestart,
)

_DEMO_RANK_METRICS = PER_RANK_METRICS
_SCENARIO_RANK_METRICS = ("grad_norm_local", "loss", "step_time_s", "gpu_temp_c")


def _config(**values: Any) -> dict[str, Any]:
    """A normalised run config (``stab_core.checklist.CONFIG_KEYS``) with the common defaults."""
    base: dict[str, Any] = {
        "source_format": "stabscope",
        "lr_decay_style": "cosine",
        "num_cycles": 1,
        "max_norm": 1.0,
        "precision": "bf16",
        "fp32_master_weights": True,
        "nan_check": True,
        "checkpoint_enabled": True,
        "num_experts": 1,
        "per_rank_metrics_logged": True,
    }
    base.update(values)
    return base


def demo_specs() -> list[SimSpec]:
    """Three small runs for the default dashboard: 4 ranks x 3,000 steps each, warmup 200 steps,
    every per-rank metric, one or two injected spikes each (seeded by ``simulate_run``'s argument)."""
    common: dict[str, Any] = {
        "steps": 3000,
        "world_size": 4,
        "per_rank_batch_size": 32,
        "seq_len": 2048,
        "checkpoint_interval_steps": 500,
        "checkpoint_write_s": 20.0,
        "per_rank_metrics": _DEMO_RANK_METRICS,
        "schedule_kwargs": {"warmup_steps": 200, "min_lr_ratio": 0.1},
    }
    dense = SimSpec(
        name="demo-dense-1b",
        model="1.3B dense decoder (simulated)",
        tags=("demo", "dense"),
        step_time_s=1.1,
        gpus=32,
        mechanisms=(DataOutlierSpike(1800), RankFault(2400, rank=2)),
        config=_config(
            total_steps=3000,
            warmup_steps=200,
            peak_lr=3e-4,
            min_lr_ratio=0.1,
            checkpoint_interval_steps=500,
            checkpoint_write_s=20.0,
            step_time_s=1.1,
            gpus=32,
            world_size=4,
            per_rank_batch_size=32,
        ),
        **common,
    )
    fp16 = SimSpec(
        name="demo-fp16-350m",
        model="350M dense decoder, fp16 (simulated)",
        tags=("demo", "dense", "fp16"),
        precision="fp16",
        step_time_s=0.6,
        gpus=8,
        loss_start=10.9,
        loss_floor=2.6,
        mechanisms=(NumericalFault(1500, kind="loss_scale_collapse", duration_steps=20),),
        stragglers=(Straggler(rank=3, start=2000, end=2600, slowdown=1.25),),
        config=_config(
            total_steps=3000,
            warmup_steps=200,
            peak_lr=6e-4,
            min_lr_ratio=0.1,
            precision="fp16",
            loss_scale_mode="dynamic",
            checkpoint_interval_steps=500,
            checkpoint_write_s=20.0,
            step_time_s=0.6,
            gpus=8,
            world_size=4,
            per_rank_batch_size=32,
        ),
        **common,
    )
    moe = SimSpec(
        name="demo-moe-2b",
        model="2B MoE, 16 experts top-2 (simulated)",
        tags=("demo", "moe"),
        step_time_s=1.4,
        gpus=32,
        num_experts=16,
        mechanisms=(RouterSeesawSpike(2100),),
        config=_config(
            total_steps=3000,
            warmup_steps=200,
            peak_lr=4e-4,
            min_lr_ratio=0.1,
            checkpoint_interval_steps=500,
            checkpoint_write_s=20.0,
            step_time_s=1.4,
            gpus=32,
            world_size=4,
            per_rank_batch_size=32,
            num_experts=16,
            router_aux_loss_coeff=0.01,
            router_z_loss_coeff=0.0,
            expert_load_logged=True,
        ),
        **common,
    )
    return [dense, fp16, moe]


@dataclass(frozen=True)
class Scenario:
    """A playbook scenario: ``before`` (what happened) and ``after`` (the run with the remedy, sharing
    ``before``'s seed so both are identical up to the fork at ``fork_step``). ``setup`` describes the
    run and ``remedy`` what was done; neither names the cause, which the analyses must find."""

    key: str
    title: str
    setup: str
    remedy: str
    fork_step: int
    before: SimSpec
    after: SimSpec


def _s1_moe_7b() -> Scenario:
    seed, warmup, fork = 7101, 500, 4000
    config = _config(
        model="7B MoE, 64 experts top-8",
        total_steps=6000,
        warmup_steps=warmup,
        peak_lr=4e-4,
        min_lr_ratio=0.1,
        checkpoint_interval_steps=4000,
        checkpoint_write_s=120.0,
        step_time_s=3.0,
        gpus=256,
        restore_rehearsed=True,
        world_size=8,
        per_rank_batch_size=128,
        global_batch_size=1024,
        seq_len=4096,
        num_experts=64,
        router_aux_loss_coeff=0.01,
        router_z_loss_coeff=0.0,
        router_bias_balancing=False,
        expert_load_logged=True,
        batch_provenance_logged=True,
    )
    before = SimSpec(
        name="s1-moe-7b-before",
        steps=6000,
        world_size=8,
        per_rank_batch_size=128,
        seq_len=4096,
        gpus=256,
        step_time_s=3.0,
        model=config["model"],
        tags=("scenario", "moe"),
        seed=seed,
        schedule_kwargs={"warmup_steps": warmup, "min_lr_ratio": 0.1},
        peak_lr=4e-4,
        num_experts=64,
        expert_load_base=1.35,
        checkpoint_interval_steps=4000,
        checkpoint_write_s=120.0,
        per_rank_metrics=_SCENARIO_RANK_METRICS,
        batch_provenance_logged=True,
        mechanisms=(RouterSeesawSpike(4400), RouterSeesawSpike(5200, load_peak=3.6, height=1.5)),
        config=config,
        scenario="s1-moe-7b",
        variant="before",
    )
    restart = WarmupRestart(fork, warmup // 4)
    after = replace(
        before,
        name="s1-moe-7b-after",
        variant="after",
        bias_balancing_from=fork,
        warmup_restarts=(restart,),
        extra_events=(
            RunEvent(fork, "rollback", "restored checkpoint 4000", {"restored_step": fork, "abandoned_at": 4460}),
        ),
        config={
            **config,
            "router_bias_balancing": True,
            "router_z_loss_coeff": 1e-3,
            "transition_steps": [fork],
            "restart_warmup_steps": restart.warmup_steps,
        },
    )
    return Scenario(
        key="s1-moe-7b",
        title="7B MoE: a mid-run loss spike, diagnosed and fixed",
        setup="7B MoE (64 experts, top-8) on 256 GPUs, 4M tokens/step, auxiliary balance loss only.",
        remedy=(
            "Rolled back to the checkpoint at step 4,000, switched on auxiliary-loss-free bias balancing and a "
            "1e-3 router z-loss, and re-warmed the LR over 125 steps (1/4 of the warmup)."
        ),
        fork_step=fork,
        before=before,
        after=after,
    )


def _s2_dense_70b() -> Scenario:
    seed, warmup, switch = 7202, 300, 3000
    config = _config(
        model="70B dense",
        total_steps=6000,
        warmup_steps=warmup,
        peak_lr=1.5e-4,
        min_lr_ratio=0.1,
        num_cycles=2,
        restart_warmup_steps=0,
        transition_steps=[switch],
        checkpoint_interval_steps=1000,
        checkpoint_write_s=300.0,
        step_time_s=8.0,
        gpus=2048,
        restore_rehearsed=True,
        world_size=8,
        per_rank_batch_size=128,
        global_batch_size=1024,
        seq_len=4096,
        batch_provenance_logged=True,
    )
    schedule = {"warmup_steps": warmup, "restart_warmup_steps": 0, "num_cycles": 2, "min_lr_ratio": 0.1}
    before = SimSpec(
        name="s2-dense-70b-before",
        steps=6000,
        world_size=8,
        per_rank_batch_size=128,
        seq_len=4096,
        gpus=2048,
        step_time_s=8.0,
        model=config["model"],
        tags=("scenario", "dense"),
        seed=seed,
        schedule="warmup_cosine_restart",
        schedule_kwargs=schedule,
        peak_lr=1.5e-4,
        loss_floor=1.7,
        checkpoint_interval_steps=1000,
        checkpoint_write_s=300.0,
        data_switch_steps=(switch,),
        per_rank_metrics=_SCENARIO_RANK_METRICS,
        batch_provenance_logged=True,
        mechanisms=(
            LrJumpSpike(switch),
            DataOutlierSpike(switch + 30, ramp_steps=30, snr_drop=10.0, lr_threshold=0.6, height=1.0),
        ),
        config=config,
        scenario="s2-dense-70b",
        variant="before",
    )
    restart_warmup = warmup // 3
    after = replace(
        before,
        name="s2-dense-70b-after",
        variant="after",
        schedule_kwargs={**schedule, "restart_warmup_steps": restart_warmup},
        config={**config, "restart_warmup_steps": restart_warmup},
    )
    return Scenario(
        key="s2-dense-70b",
        title="~70B dense: a data-recipe switch",
        setup=(
            "70B dense on 2,048 GPUs; at step 3,000 the data recipe switches and a second LR cycle starts "
            "(warmup-cosine with restarts, no restart warmup); clipping at max_norm 1.0."
        ),
        remedy="Re-ran the switch with a 100-step warmup restart (1/3 of the 300-step warmup), clipping unchanged.",
        fork_step=switch,
        before=before,
        after=after,
    )


def _s3_dense_140b() -> Scenario:
    seed, warmup, fork, skipped = 7303, 500, 4000, 300
    config = _config(
        model="140B dense",
        total_steps=5000,
        warmup_steps=warmup,
        peak_lr=1.2e-4,
        min_lr_ratio=0.0,
        checkpoint_interval_steps=2000,
        checkpoint_write_s=600.0,
        step_time_s=12.0,
        gpus=6144,
        restore_rehearsed=False,
        world_size=8,
        per_rank_batch_size=256,
        global_batch_size=2048,
        seq_len=4096,
        batch_provenance_logged=False,
    )
    # Precursors 700-800 steps apart: the SNR estimator's EMA has recovered from one before the next.
    outliers = (
        DataOutlierSpike(2000, height=0.9),
        DataOutlierSpike(2800, height=1.0),
        DataOutlierSpike(3500, height=1.1),
        DataOutlierSpike(4250, height=1.5, diverge=True),
    )
    before = SimSpec(
        name="s3-dense-140b-before",
        steps=5000,
        stop_step=4450,
        world_size=8,
        per_rank_batch_size=256,
        seq_len=4096,
        gpus=6144,
        step_time_s=12.0,
        usd_per_gpu_hour=2.0,
        model=config["model"],
        tags=("scenario", "dense"),
        seed=seed,
        schedule_kwargs={"warmup_steps": warmup, "min_lr_ratio": 0.0},
        peak_lr=1.2e-4,
        loss_floor=1.6,
        checkpoint_interval_steps=2000,
        checkpoint_write_s=600.0,
        per_rank_metrics=_SCENARIO_RANK_METRICS,
        mechanisms=outliers,
        config=config,
        scenario="s3-dense-140b",
        variant="before",
    )
    restart = WarmupRestart(fork, warmup // 4, lr_scale=0.5, floor_ratio=0.05)
    after = replace(
        before,
        name="s3-dense-140b-after",
        variant="after",
        stop_step=None,
        checkpoint_interval_steps=None,
        checkpoint_steps=(2000, 4000, 4500),
        warmup_restarts=(restart,),
        batch_skips=(BatchSkip(fork, skipped),),
        batch_provenance_logged=True,
        extra_events=(
            RunEvent(fork, "rollback", "restored checkpoint 4000", {"restored_step": fork, "abandoned_at": 4450}),
        ),
        config={
            **config,
            "min_lr_ratio": 0.1,
            "checkpoint_interval_steps": 500,
            "restore_rehearsed": True,
            "batch_provenance_logged": True,
            "transition_steps": [fork],
            "restart_warmup_steps": restart.warmup_steps,
        },
    )
    return Scenario(
        key="s3-dense-140b",
        title="140B dense: when clipping alone is not enough",
        setup=(
            "140B dense on 6,144 GPUs at 12 s/step, clipping at max_norm 1.0, LR decaying to 0, a checkpoint "
            "every 2,000 steps; the job was stopped at step 4,450."
        ),
        remedy=(
            "Rolled back to the checkpoint at step 4,000, skipped the next 300 batches, halved the LR with a "
            "125-step warmup restart, and checkpointed every 500 steps."
        ),
        fork_step=fork,
        before=before,
        after=after,
    )


def scenarios() -> list[Scenario]:
    """The three playbook scenarios of issue 7, each with its before and after run."""
    return [_s1_moe_7b(), _s2_dense_70b(), _s3_dense_140b()]


def scenario_specs() -> list[SimSpec]:
    """The scenario runs in store order (before, after per scenario): 8 ranks x 5,000-6,000 steps each.
    Their seeds are pinned (``SimSpec.seed``) so each pair shares its noise."""
    return [spec for scenario in scenarios() for spec in (scenario.before, scenario.after)]
