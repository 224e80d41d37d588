"""The long tail of trainers (#31 item 9): the Hugging Face Trainer / TRL console, a custom nanoGPT-style
trainer, verl's RL console behind Ray prefixes, JAX/Flax consoles under SLURM, DeepSpeed-Chat, and the
generic reader with its proposed mapping. Each on a small log written in the exact shape the trainer
prints (tests/fixtures/logs/; the shapes and their sources are quoted in each reader's docstring)."""

from __future__ import annotations

from pathlib import Path

import pytest

from ingest.formats import AMBIGUITY_MARGIN, detect, read_log
from ingest.formats._common import ParsedLog

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "logs"


def _series(parsed: ParsedLog, metric: str, rank: int = -1) -> dict[int, float]:
    steps, values = parsed.series(metric, rank)
    return dict(zip(steps.tolist(), values.tolist(), strict=True))


@pytest.mark.parametrize(
    ("log", "fmt"),
    [
        ("hf_trainer_console", "hf_console"),
        ("trl_grpo_console", "hf_console"),
        ("nanogpt_tagged", "nanogpt"),
        ("verl_ray", "verl_console"),
        ("jax_slurm", "jax_console"),
        ("openpi_step", "jax_console"),
    ],
)
def test_detection_picks_the_trainer_alone(log: str, fmt: str) -> None:
    candidates = detect([FIXTURES / f"{log}.log"])
    assert candidates[0][0] == fmt
    assert all(score < candidates[0][1] - AMBIGUITY_MARGIN for _, score in candidates[1:])


def test_hf_console_steps_from_epoch_evals_apart_summary_not_a_step() -> None:
    parsed = read_log([FIXTURES / "hf_trainer_console.log"])
    assert parsed.format == "hf_console"
    # the training bar N/96 drawn before each dict dates it (logged every 8 of 96 steps)
    assert parsed.meta["step_source"].startswith("progress bar: the training bar's count N/96")
    loss = _series(parsed, "loss")
    assert list(loss) == list(range(8, 97, 8))
    assert loss[8] == 3.072 and loss[96] == 1.961  # string values read as numbers
    assert _series(parsed, "grad_norm")[8] == 0.876
    assert _series(parsed, "lr")[96] == 0.0 and _series(parsed, "lr")[8] == 4.583e-05
    # the dicts' epoch is the step axis, no series (docs/diagnosis.md, "Import: settings and counters")
    assert "epoch" not in parsed.metrics
    # eval dicts apart: eval_loss is val_loss, at the training step before it; no eval row in loss
    assert _series(parsed, "val_loss") == {32: 2.818, 64: 2.408, 96: 2.061}
    # the eval loop's own timing is no series (ingest.formats.field_roles): its last value is a setting
    assert "eval_runtime" not in parsed.metrics and parsed.meta["log_settings"]["eval_runtime"] == 3.412
    # the final summary is no step
    assert parsed.meta["train_summary"]["train_loss"] == 2.871
    assert "train_runtime" not in parsed.metrics and "train_loss" not in parsed.metrics
    assert parsed.meta["planned_steps"] == 96
    # the banner, the last bar and the checkpoint line are skipped and counted; no dict line is
    assert parsed.skipped == 10


def test_trl_console_numbers_and_line_order() -> None:
    parsed = read_log([FIXTURES / "trl_grpo_console.log"])
    # no banner, no summary: the bar N/600 drawn before each dict dates it, and the meta says so
    assert parsed.meta["step_source"].startswith("progress bar")
    assert _series(parsed, "loss") == {1: 0.01, 2: 0.02, 3: 0.03, 4: 0.04, 5: 0.05, 6: 0.06}
    assert _series(parsed, "reward")[6] == 0.6
    assert _series(parsed, "kl")[4] == 0.002
    assert _series(parsed, "completions/mean_length")[1] == 181.5
    assert _series(parsed, "tokens")[3] == 12288.0
    assert parsed.skipped == 1


def _hf_dicts(evals_at: dict[int, float], n: int, per_epoch: float, interval: int, epochs: int) -> str:
    """A Trainer console without bars: a training dict every ``interval`` steps whose epoch is
    ``step / per_epoch`` rounded to 2 decimals (as the Trainer prints it), an eval dict at each epoch
    end in ``evals_at``, the banner and the summary."""
    lines = [f"  Num Epochs = {epochs:,}", f"  Total optimization steps = {round(per_epoch * epochs):,}"]
    for i in range(1, n + 1):
        step = interval * i
        lines.append(f"{{'loss': {2.0 - step / 10000:.4f}, 'learning_rate': 5e-05, 'epoch': {step / per_epoch:.2f}}}")
        for epoch, loss in evals_at.items():
            if step < epoch * per_epoch <= step + interval:
                lines.append(f"{{'eval_loss': {loss}, 'eval_runtime': 17.99, 'epoch': {float(epoch)}}}")
    return "\n".join(lines) + "\n"


def test_hf_console_a_constant_logging_interval_is_not_left_to_the_epochs_drift(tmp_path: Path) -> None:
    # LLaMA-Factory's console: 17.047 steps per epoch (2,182 examples), a dict every 5 steps, the banner's
    # 1,000 epochs over 17,000 steps (17 per epoch). Before: the epoch x 17 drifted to step 2099 at the
    # 421st dict (epoch 123.48), which the Trainer logged at step 2105
    log = tmp_path / "running_log.txt"
    log.write_text(
        _hf_dicts({}, 421, 2105 / 123.48, 5, 1000).replace(
            "Total optimization steps = 17,047", "Total optimization steps = 17,000"
        )
    )
    parsed = read_log([log])
    assert parsed.meta["step_source"].startswith("logging interval: the N-th logs dict is step N x 5")
    loss = _series(parsed, "loss")
    assert min(loss) == 5 and max(loss) == 2105 and len(loss) == 421


def test_hf_console_an_epoch_end_evaluation_is_dated_by_its_epoch(tmp_path: Path) -> None:
    # 2,820 steps over 30 epochs (94 a epoch), a dict every 10: the eval at epoch 7.0 is step 658, between
    # the training dicts of 650 and 660. Before: 650 (the training dict before it), a step whose
    # checkpoint "of the lowest val loss" is not the one evaluated
    log = tmp_path / "console.md"
    log.write_text(_hf_dicts({6: 1.80, 7: 1.783, 8: 1.807}, 282, 94.0, 10, 30))
    parsed = read_log([log])
    assert _series(parsed, "val_loss") == {564: 1.80, 658: 1.783, 752: 1.807}
    assert 650 in _series(parsed, "loss") and 660 in _series(parsed, "loss")


def test_hf_console_tensor_values_and_prefixes(tmp_path: Path) -> None:
    log = tmp_path / "train.log"
    log.write_text(
        "[rank0]: {'loss': 2.5, 'grad_norm': tensor(0.75, device='cuda:0'), 'learning_rate': 1e-05, 'epoch': 0.5}\n"
        "[rank0]: {'loss': 2.25, 'grad_norm': tensor(0.5, device='cuda:0'), 'learning_rate': 1e-05, 'epoch': 1.0}\n"
    )
    parsed = read_log([log])
    assert _series(parsed, "grad_norm") == {1: 0.75, 2: 0.5}
    assert _series(parsed, "loss") == {1: 2.5, 2: 2.25}


def test_nanogpt_style_custom_trainer_step_time_in_ms() -> None:
    parsed = read_log([FIXTURES / "nanogpt_tagged.log"])
    assert _series(parsed, "loss") == {0: 10.9712, 10: 8.8782, 20: 7.641, 30: 6.9902, 40: 6.5127}
    # '9905 ms/iter' is the step time, in seconds
    step_time = _series(parsed, "step_time_s")
    assert list(step_time) == [0, 10, 20, 30, 40]
    assert list(step_time.values()) == pytest.approx([31.022, 9.905, 9.871, 9.893, 9.88])
    assert _series(parsed, "val_loss") == {30: 6.9514}
    assert parsed.meta["tokens_per_step"] == 491520


def test_verl_console_behind_ray_prefixes() -> None:
    parsed = read_log([FIXTURES / "verl_ray.log"])
    # the policy loss is the run's loss: a verl step line carries no other loss of the trained model
    assert _series(parsed, "loss") == {1: -0.0123, 2: 0.0051, 3: -0.0087}
    assert _series(parsed, "critic/score/mean")[3] == 0.2813
    assert _series(parsed, "actor/ppo_kl")[2] == 0.0006
    assert _series(parsed, "response_length/mean")[3] == 240.25
    assert _series(parsed, "grad_norm") == {1: 0.41, 2: 0.38, 3: 0.44}
    assert _series(parsed, "lr")[1] == 1e-06
    assert _series(parsed, "step_time_s") == {1: 41.27, 2: 39.84, 3: 40.02}  # timing_s/step feeds the cost view
    assert _series(parsed, "val-core/openai/gsm8k/reward/mean@1") == {0: 0.152}
    # the policy loss is not kept twice; the shell command and Ray's own lines are no metrics
    assert "actor/pg_loss" not in parsed.metrics
    assert not any(m.startswith(("algorithm", "data", "pid", "python")) for m in parsed.metrics)


def test_jax_clu_console_under_slurm() -> None:
    parsed = read_log([FIXTURES / "jax_slurm.log"])
    assert _series(parsed, "loss") == {100: 2.3021, 200: 1.9874, 300: 1.8123}
    assert _series(parsed, "grad_norm")[200] == 0.98
    assert _series(parsed, "lr")[300] == 0.0003
    assert _series(parsed, "step_time_s") == {100: 0.412, 200: 0.405, 300: 0.401}
    assert _series(parsed, "val_loss") == {200: 2.0412}
    # '#SBATCH', 'srun ...' and slurmstepd's cancel line are not metrics
    assert sorted(parsed.metrics) == ["grad_norm", "loss", "lr", "step_time_s", "val_loss"]


def test_jax_step_info_lines() -> None:
    parsed = read_log([FIXTURES / "openpi_step.log"])
    assert _series(parsed, "loss") == {0: 0.9876, 100: 0.2451, 200: 0.1987}
    assert _series(parsed, "param_norm")[200] == 1802.6678
    assert sorted(parsed.metrics) == ["grad_norm", "loss", "param_norm"]  # '(4101:train.py:268)' is no value


def test_deepspeed_chat_ppo_console() -> None:
    parsed = read_log([FIXTURES / "deepspeed_chat_ppo.log"])
    assert parsed.format == "deepspeed_stdout"
    assert _series(parsed, "actor_loss") == {0: 0.1274, 1: 0.0981}
    assert _series(parsed, "critic_loss") == {0: 0.0453, 1: 0.0412}
    assert _series(parsed, "reward") == {0: -2.4638671875, 1: -2.3125}
    assert _series(parsed, "ema_reward")[1] == -2.44873046875
    assert _series(parsed, "step_time_s") == {0: 13.41, 1: 12.87}  # End-to-End latency: the PPO step
    assert _series(parsed, "lr") == {0: 5e-06}  # the engine's own line, still read
    assert "loss" not in parsed.metrics  # the actor's policy loss is not a language-model loss


def test_deepspeed_chat_sft_console_and_eval_perplexity() -> None:
    parsed = read_log([FIXTURES / "deepspeed_chat_sft.log"])
    assert _series(parsed, "loss") == {0: 2.9121, 1: 2.8012, 2: 2.7004}  # rank 0's, not rank 1's
    assert _series(parsed, "step_time_s") == {1: 0.22}
    assert _series(parsed, "eval_ppl") == {2: 9.4512}  # DS-Chat prints `ppl`
    assert _series(parsed, "val_loss") == {2: 2.2461}


def test_generic_reader_proposes_a_mapping() -> None:
    parsed = read_log([FIXTURES / "generic_custom.log"])
    assert parsed.format == "generic"
    assert parsed.meta["mapping"] == {
        "step": "it",
        "grad_norm": "gnorm",
        "lr": "learning_rate",
        "throughput_tok_s": "tok/s",
        "val_loss": "val_loss",
        "loss": "train_ce_loss",
        "step_time_s": "dt_s",
    }
    # roles from the key's name alone are proposed, applied by the import as a --map would be
    assert parsed.meta["proposed_map"] == {"train_ce_loss": "loss", "dt_s": "step_time_s"}
    assert _series(parsed, "train_ce_loss") == {10: 4.8812, 20: 4.553, 30: 4.3107, 40: 4.1022}
    assert _series(parsed, "dt_s")[20] == pytest.approx(0.4091)  # '409.1ms' in seconds
    assert _series(parsed, "val_loss") == {30: 4.4021}
    # the srun command's --lr=3e-4 and slurmstepd's JOB are no metrics; prose without a step is skipped
    assert not {"lr_3e", "batch", "JOB", "shard"} & set(parsed.metrics)
    assert _series(parsed, "lr")[10] == 3.0e-05
    assert parsed.skipped == 4


def test_generic_reader_other_layouts(tmp_path: Path) -> None:
    log = tmp_path / "custom.log"
    log.write_text(
        "starting\n"
        "global_step=100 total_loss=3.5 grad_norm=1.5\n"
        "global_step=200 total_loss=3.25 grad_norm=1.25\n"
        "global_step=300 total_loss=3.0 grad_norm=1.0\n"
    )
    parsed = read_log([log])
    assert parsed.meta["mapping"]["step"] == "global_step"
    assert parsed.meta["mapping"]["loss"] == "total_loss"
    assert _series(parsed, "total_loss") == {100: 3.5, 200: 3.25, 300: 3.0}
    assert _series(parsed, "grad_norm") == {100: 1.5, 200: 1.25, 300: 1.0}


def test_text_without_a_step_counter_is_still_refused(tmp_path: Path) -> None:
    from ingest.errors import StabScopeError

    prose = tmp_path / "notes.txt"
    prose.write_text("We trained for 3 days on 64 GPUs.\nThe loss went down to 2.1 at the end.\n")
    with pytest.raises(StabScopeError, match="format not recognised"):
        read_log([prose])


def test_import_json_carries_the_mapping_and_the_users_corrections(tmp_path: Path) -> None:
    from ingest.importing.importer import import_logs
    from ingest.services.run_analyses import open_analysed_store

    store = open_analysed_store(tmp_path / "store")
    (out,) = import_logs(store, [FIXTURES / "generic_custom.log"], run="g")
    assert out["format"] == "generic" and out["reader_note"].startswith("read by the generic reader")
    assert out["mapping"]["loss"] == "train_ce_loss" and out["mapping"]["step"] == "it"
    # the proposal is applied: the stored loss is train_ce_loss, the step time dt in seconds
    assert store.read_series("g", "loss").values.tolist() == [4.8812, 4.553, 4.3107, 4.1022]
    assert store.read_series("g", "step_time_s").values.tolist() == pytest.approx([0.4125, 0.4091, 0.4107, 0.4088])
    # the user corrects it: gnorm is the clipped norm
    (out,) = import_logs(store, [FIXTURES / "generic_custom.log"], run="g2", metric_map={"gnorm": "grad_norm_clipped"})
    assert out["mapping"]["grad_norm_clipped"] == "gnorm" and "grad_norm" not in out["mapping"]
    assert store.read_series("g2", "grad_norm_clipped").values.tolist() == [1.12, 0.98, 0.91, 0.87]
    # and chooses the step: the samples seen, not the iteration
    log = tmp_path / "samples.log"
    log.write_text("iter 1 samples 64 loss 3.0\niter 2 samples 128 loss 2.5\niter 3 samples 192 loss 2.0\n")
    (out,) = import_logs(store, [log], run="s", metric_map={"samples": "step"})
    assert out["mapping"] == {"step": "samples", "loss": "loss"}
    assert store.read_series("s", "loss").steps.tolist() == [64, 128, 192]
    assert store.read_series("s", "iter").values.tolist() == [1.0, 2.0, 3.0]
    # another reader's log: the step is its own
    from ingest.errors import StabScopeError

    with pytest.raises(StabScopeError, match="chooses the step key of the generic reader"):
        import_logs(store, [FIXTURES / "nanogpt_tagged.log"], run="n", metric_map={"loss": "step"})
    # other readers' imports say no mapping
    (out,) = import_logs(store, [FIXTURES / "nanogpt_tagged.log"], run="n")
    assert out["mapping"] is None and out["reader_note"] is None


def test_cli_import_says_it_used_the_generic_reader(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from ingest.cli import main

    args = ["import", str(FIXTURES / "generic_custom.log"), "--store", str(tmp_path / "s"), "--run", "g"]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "format generic" in out
    assert "read by the generic reader with the proposed mapping" in out and "loss = train_ce_loss" in out
    assert main([*args[:-1], "g2", "--map", "gnorm=grad_norm_clipped", "--json"]) == 0
    assert '"grad_norm_clipped": "gnorm"' in capsys.readouterr().out


def test_deepspeed_chat_released_ppo_lines() -> None:
    # the shape of DeepSpeedExamples' released step-3 log: lower-case `|`-separated fields, reward apart
    parsed = read_log([FIXTURES / "deepspeed_chat_ppo_released.log"])
    assert parsed.format == "deepspeed_stdout"
    assert _series(parsed, "act_loss") == {0: 0.2099609375, 1: 0.296630859375, 2: -0.03875732421875}
    assert _series(parsed, "cri_loss")[2] == 0.1396484375
    assert _series(parsed, "reward") == {0: -0.67919921875, 1: -0.0648193359375, 2: 4.3828125}
    assert _series(parsed, "lr") == {10: 3.5e-07}
    assert "loss" not in parsed.metrics


def test_deepspeed_chat_released_sft_ppl_and_dpo_eval() -> None:
    parsed = read_log([FIXTURES / "deepspeed_chat_dpo_sft_released.log"])
    # the evaluation before training is at step 0, the epoch's at its last step
    assert _series(parsed, "eval_ppl") == {0: 4998.29638671875, 20: 2.017983436584473}
    assert _series(parsed, "dpo_eval_loss") == {20: 0.6650807857513428}
    assert _series(parsed, "dpo_eval_chosen") == {20: -31.9375}
    # DS-Chat's own FLOP estimate, printed by every rank, has no role: not stored
    assert "tflops_per_gpu" not in parsed.metrics
    assert _series(parsed, "step_time_s") == {10: 0.27}


def test_deepspeed_examples_eval_perplexity() -> None:
    parsed = read_log([FIXTURES / "deepspeed_examples_ppl.log"])
    ppl = _series(parsed, "eval_ppl")
    assert ppl[0] == 61.800734668415046 and ppl[10] == 61.772465037680455 and ppl[1] == 61.57951131190911
    assert ppl[2] != ppl[2]  # the NaN perplexity is kept: it is the fault to see
    assert not {"seq_len", "consume_layer_tokens"} & set(parsed.metrics)


def test_megatron_deepspeed_log_whose_first_iteration_is_past_the_head(tmp_path: Path) -> None:
    # BigScience's 2021 Megatron-DeepSpeed logs: the argument dump, the engine's `step=0` line, then
    # thousands of NCCL lines before the first (slow) iteration: the head holds no iteration line
    ts = "[2021-05-27 19:49:22,947] [INFO] [logging.py:60:log_dist] [Rank 0]"
    head = [
        "using world size: 64 and model-parallel size: 4 ",
        "-------------------- arguments --------------------",
        "  adam_beta1 ...................................... 0.9",
        "---------------- end of arguments ----------------",
        "> building GPT2BPETokenizer tokenizer ...",
        f"{ts} step=0, skipped=0, lr=[0.0, 0.0], mom=[(0.9, 0.999), (0.9, 0.999)]",
    ]
    nccl = [
        f"r9i1n7:8762:{8800 + i} [2] NCCL INFO comm 0x145fc0001060 rank 0 nranks 1 cudaDev 2 - Init COMPLETE"
        for i in range(4000)
    ]
    tail = []
    for step in (1, 2):
        tail += [
            f"{ts} step={step}, skipped=0, lr=[{1.875e-05 * step:.4g}, {1.875e-05 * step:.4g}], mom=[(0.9, 0.999)]",
            f"steps: {step} loss: {12.7902 + step / 100:.4f} iter time (s): 150.471 samples/sec: 6.805",
            f" iteration        {step}/    1000 | elapsed time per iteration (ms): 150471.3 | learning rate: "
            f"{1.875e-05 * step:.3E} | lm loss: {12.790221 + step / 100:.6E} | loss scale: 1024.0 |",
        ]
    log = tmp_path / "meg_ds_perf.out"
    log.write_text("\n".join(head + nccl + tail) + "\n")
    assert log.stat().st_size > 256 * 1024
    candidates = detect([log])
    assert candidates[0][0] == "megatron_deepspeed"
    assert all(score < candidates[0][1] - AMBIGUITY_MARGIN for _, score in candidates[1:])
    parsed = read_log([log])
    assert _series(parsed, "loss") == pytest.approx({1: 12.80022, 2: 12.81022})  # Megatron's, not the copy


def test_wrapped_megatron_lines_are_joined_and_valid_loss_is_read() -> None:
    # BLOOM's chronicles: iteration lines wrapped over three lines when pasted, and the
    # Megatron-DeepSpeed of 2022 printing "valid loss at iteration N"
    path = FIXTURES / "megatron_chronicle_wrapped.md"
    parsed = read_log([path])
    assert _series(parsed, "loss") == {42780: 2.117073, 42781: 2.116946, 45000: 2.113567}
    assert _series(parsed, "step_time_s") == {42780: 105.16, 42781: 110.17, 45000: 111.0}
    assert _series(parsed, "lr")[42781] == 4.474e-05  # the field the wrap cut in two
    assert _series(parsed, "samples_per_s")[42780] == 19.474  # from the third piece
    assert _series(parsed, "val_loss") == {45000: 2.327091}
    report = parsed.account.to_json({})
    assert report["suspect"]["count"] == 0
    assert report["lines_read"] == len(path.read_text().splitlines())  # the join keeps every line counted
    assert report["parsed"]["lines"] == 4


def test_generic_reader_counts_a_step_that_is_not_a_whole_number_as_no_step(tmp_path: Path) -> None:
    """Found by the fuzz test: a mutated step counter (`step=nan`) past the head the mapping is proposed
    from raised "cannot convert float NaN to integer" out of the generic reader; the line is now skipped
    with its reason, the others are read."""
    log = tmp_path / "custom.log"
    n = 70_000  # past the 2 MiB head
    lines = [f"step={s} loss={4.0 - s / n:.6f} lr=0.001\n" for s in range(1, n + 1)]
    lines[-2] = "step=nan loss=1.5 lr=0.001\n"
    log.write_text("".join(lines))
    assert log.stat().st_size > 2 * 1024 * 1024
    parsed = read_log([log], "generic")
    steps = sorted(r["step"] for r in parsed.table.to_pylist() if r["metric"] == "loss")
    assert len(steps) == n - 1 and n - 1 not in steps and steps[-1] == n
    assert parsed.skipped == 1
