"""Imports that lose nothing silently (issue #31): host prefixes of every shape, an alias that
never replaces the canonical metric of its own line, step times in any unit feeding ``step_time_s``,
no metric names made from shell or SLURM lines, and Megatron iteration lines with unusual fields."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from ingest.formats import detect, read_log
from tests.test_formats_prefixes import _write

# --------------------------------------------------------------------------- 1. host prefixes

MEGATRON = (
    " iteration {step:8d}/     100 | consumed samples: {samples:10d} | consumed tokens: {tokens:12d} |"
    " elapsed time per iteration (ms): {ms:.1f} | learning rate: {lr:.3E} | global batch size:   512 |"
    " lm loss: {loss:.6E} | loss scale: 4096.0 | grad norm: {gnorm:.3f} | actual seqlen:  2048 |"
    " number of skipped iterations:   0 | number of nan iterations:   0 | samples per second: 12.5 |"
    " TFLOPs: 101.25 |"
)
"""Megatron-DeepSpeed's ``training_log`` line (megatron/training.py), leading blank included."""


def _loss(step: int) -> float:
    return 7.0 - 0.01 * step + 0.001 * (step % 7)


def _megatron_line(step: int) -> str:
    return MEGATRON.format(
        step=step,
        samples=512 * step,
        tokens=512 * 2048 * step,
        ms=1000.0 + step,
        lr=1e-4 * step / 100,
        loss=_loss(step),
        gnorm=1.0 + 0.01 * (step % 5),
    )


def _pdsh_megatron_deepspeed_log(host: str, n: int = 30) -> list[str]:
    """A Megatron-DeepSpeed job run by DeepSpeed's pdsh runner on two nodes: the local node's lines
    behind ``localhost: ``, the other node's behind its address (the last pipeline stage, which
    prints the iteration lines, runs there); some behind a rank prefix after the host."""
    lines = [
        "localhost: [2024-03-01 10:00:00,000] [INFO] [runner.py:555:main] cmd = /usr/bin/python -u pretrain_gpt.py",
        f"{host}: ------------------------ arguments ------------------------",
        f"{host}:   clip_grad ....................................... 1.0",
        f"{host}:   global_batch_size ............................... 512",
        f"{host}:   train_iters ..................................... 100",
        f"{host}: -------------------- end of arguments ---------------------",
        "localhost: [2024-03-01 10:00:05,000] [INFO] [config.py:972:print] DeepSpeedEngine configuration:",
    ]
    for step in range(1, n + 1):
        lines.append(
            f"localhost: [2024-03-01 10:00:{step:02d},500] [INFO] [logging.py:96:log_dist] [Rank 0] step={step},"
            f" skipped=0, lr=[{1e-4 * step / 100:.6e}], mom=[(0.9, 0.95)]"
        )
        lines.append(f"localhost: steps: {step} loss: {_loss(step) + 0.5:.4f} iter time (s): 1.001 samples/sec: 511.5")
        prefix = f"{host}: [rank7]:" if step % 3 == 0 else f"{host}: "
        lines.append(prefix + _megatron_line(step))
    return lines


HOSTS = {
    "ipv4": "192.168.205.202",
    "hostname": "node017",
    "fqdn": "gpu-a100-017.cluster.local",
    "localhost": "localhost",
    "ipv6": "fe80::1",
    "ipv6_bracketed": "[2001:db8::1]",
}


@pytest.mark.parametrize("host", sorted(HOSTS))
def test_megatron_deepspeed_pdsh_log_behind_every_host_prefix(tmp_path: Path, host: str, field_engine: str) -> None:
    path = _write(tmp_path / "pdsh.log", _pdsh_megatron_deepspeed_log(HOSTS[host]))
    found = detect([path])
    assert found[0][0] == "megatron_deepspeed"
    assert len(found) == 1 or found[1][1] < found[0][1] - 0.1  # one format found: not ambiguous
    parsed = read_log([path])  # what the CLI does: no --format
    assert parsed.format == "megatron_deepspeed"
    steps, gnorm = parsed.series("grad_norm")
    np.testing.assert_array_equal(steps, np.arange(1, 31))
    np.testing.assert_allclose(gnorm, [1.0 + 0.01 * (s % 5) for s in range(1, 31)])
    steps, lr = parsed.series("lr")
    np.testing.assert_array_equal(steps, np.arange(1, 31))
    np.testing.assert_allclose(lr, [1e-4 * s / 100 for s in range(1, 31)], rtol=1e-3)
    steps, step_time = parsed.series("step_time_s")
    np.testing.assert_allclose(step_time, [(1000.0 + s) / 1000 for s in range(1, 31)])
    assert parsed.meta["max_norm"] == 1.0  # the argument dump read behind the host prefix


@pytest.mark.parametrize("host", sorted(HOSTS))
def test_torchtitan_behind_a_host_and_rank_prefix(tmp_path: Path, host: str) -> None:
    """Another text format behind the same prefixes: every host shape, with and without a rank."""
    lines = [
        f"{HOSTS[host]}: {'[rank0]:' if step % 2 else ''}[titan] 2026-05-20 02:23:{step:02d},182 - root - INFO"
        f" - step: {step:2d}  loss: {_loss(step):8.5f}  grad_norm: 2.0000  memory: 169.10GiB(94.81%)"
        f"  tps: 10,000  tflops: 888.93  mfu: 39.51%"
        for step in range(1, 21)
    ]
    parsed = read_log([_write(tmp_path / "titan.log", lines)])
    assert parsed.format == "torchtitan"
    assert parsed.skipped == 0
    steps, loss = parsed.series("loss")
    np.testing.assert_array_equal(steps, np.arange(1, 21))
    np.testing.assert_allclose(loss, [_loss(s) for s in range(1, 21)], rtol=1e-6)


# --------------------------------------------------------------------------- 2. an alias beside its metric

MAXTEXT_DPO = (
    "I1202 07:50:{sec:02d}.123456 140245 metric_logger.py:231] completed step: {step}, seconds: 1.{ms:03d},"
    " TFLOP/s/device: 181.028, Tokens/s/device: 3949.842, total_weights: 1572864, loss: {loss:.3f},"
    " lm_loss: 0.000, reward_accuracy: {acc}"
)
"""MaxText's metric line of a DPO run: ``loss`` is the DPO loss, ``lm_loss`` 0 (no LM term)."""


def test_maxtext_dpo_lm_loss_does_not_replace_the_loss(tmp_path: Path) -> None:
    lines = [
        MAXTEXT_DPO.format(sec=s, step=s, ms=200 + s, loss=0.693 - 0.01 * s, acc=0.5 + 0.05 * (s % 3))
        for s in range(1, 11)
    ]
    parsed = read_log([_write(tmp_path / "dpo.log", lines)])
    assert parsed.format == "maxtext"
    steps, loss = parsed.series("loss")
    np.testing.assert_array_equal(steps, np.arange(1, 11))
    np.testing.assert_allclose(loss, [0.693 - 0.01 * s for s in range(1, 11)])
    np.testing.assert_array_equal(parsed.series("lm_loss")[1], np.zeros(10))
    np.testing.assert_allclose(parsed.series("reward_accuracy")[1], [0.5 + 0.05 * (s % 3) for s in range(1, 11)])
    np.testing.assert_allclose(parsed.series("step_time_s", 0)[1], [1.0 + (200 + s) / 1000 for s in range(1, 11)])


def test_jsonl_and_csv_lm_loss_beside_loss(tmp_path: Path) -> None:
    rows = [(s, 0.693 - 0.01 * s, 0.0, 0.5) for s in range(1, 6)]
    jsonl = _write(
        tmp_path / "metrics.jsonl",
        [f'{{"step": {s}, "loss": {lo}, "lm_loss": {lm}, "reward_accuracy": {acc}}}' for s, lo, lm, acc in rows],
    )
    csv = _write(tmp_path / "metrics.csv", ["step,lm loss,loss"] + [f"{s},{lm},{lo}" for s, lo, lm, _ in rows])
    for path in (jsonl, csv):
        parsed = read_log([path])
        np.testing.assert_allclose(parsed.series("loss")[1], [lo for _, lo, _, _ in rows], err_msg=str(path))
        np.testing.assert_array_equal(parsed.series("lm_loss")[1], np.zeros(5))


def test_two_aliases_of_one_metric_are_both_kept(tmp_path: Path) -> None:
    """No key of the line is the metric's own name: the first keeps it, the other its own name."""
    path = _write(tmp_path / "m.csv", ["step,train_loss,lm loss"] + [f"{s},{s}.5,{s}.25" for s in range(1, 4)])
    parsed = read_log([path])
    np.testing.assert_allclose(parsed.series("loss")[1], [1.5, 2.5, 3.5])
    np.testing.assert_allclose(parsed.series("lm_loss")[1], [1.25, 2.25, 3.25])


def test_tensorboard_lm_loss_tag_beside_loss_tag(tmp_path: Path) -> None:
    from tests.tfevents_writers import write_scalar_events

    run = tmp_path / "tb"
    run.mkdir()
    values = np.array([[0.693 - 0.01 * s, 0.0] for s in range(1, 6)])
    write_scalar_events(run / "events.out.tfevents.1700000000.host.1.0", ["loss", "lm loss"], range(1, 6), values)
    parsed = read_log([run])
    assert parsed.format == "tensorboard"
    np.testing.assert_allclose(parsed.series("loss")[1], values[:, 0])
    np.testing.assert_array_equal(parsed.series("lm_loss")[1], np.zeros(5))


def test_one_key_printed_twice_on_a_line_stays_one_metric(tmp_path: Path) -> None:
    """Two ranks' memory reports run together on one line (as in the BigScience perf log): the same
    keys twice are not two metrics; only different keys on one metric are kept apart."""
    report = "[Rank {r}] (after 1 iterations) memory (MB) | allocated: 1024.0 | max allocated: 2048.0 | reserved: {res}"
    lines = [report.format(r=r, res=3072.0) for r in range(2)]
    lines.append(report.format(r=2, res=3072.0) + report.format(r=3, res=4096.0))
    lines += _megatron_lines_plain(5)
    parsed = read_log([_write(tmp_path / "megatron.log", lines)], format="megatron")
    assert not {"allocated", "max_allocated", "reserved", "allocated_gb"} & set(parsed.metrics)
    np.testing.assert_allclose(parsed.series("gpu_mem_reserved_gb", 2)[1], [4.0])  # the later record, as before


def _megatron_lines_plain(n: int) -> list[str]:
    return [_megatron_line(s) for s in range(1, n + 1)]


def test_megatron_deepspeed_lm_loss_and_engine_loss_stay_one_loss(tmp_path: Path) -> None:
    """The rule is per line: Megatron's ``lm loss`` and DeepSpeed's ``steps: N loss:`` are on
    different lines of one log and stay the one ``loss`` series they were (the later line's)."""
    parsed = read_log([_write(tmp_path / "pdsh.log", _pdsh_megatron_deepspeed_log("node017", 5))])
    assert "lm_loss" not in parsed.metrics
    np.testing.assert_allclose(parsed.series("loss")[1], [_loss(s) for s in range(1, 6)], rtol=1e-6)


# --------------------------------------------------------------------------- 3. step times in any unit

REAL_LOGS = Path(__file__).resolve().parents[2] / "shared" / "data" / "real_logs"


def _modded_nanogpt_log() -> tuple[list[str], dict[int, float]]:
    """A modded-nanogpt record log: 10 warm-up steps, the timer reset after them, a validation line
    every 5 steps (its ``train_time`` a little later than the training line's: bookkeeping), step 13
    slow. Returns the lines and each step's true time (s) after the reset."""
    lines = ["step:0/20 val_loss:10.8259 train_time:250ms step_avg:nanms"]
    train_ms = 8000.0
    for step in range(1, 11):
        train_ms += 350.0
        lines.append(f"step:{step}/20 train_loss:{_loss(step):.4f} train_time:{train_ms:.0f}ms step_avg:nanms")
    truth: dict[int, float] = {}
    train_ms = 0.0
    for step in range(11, 21):
        took = 1200.0 if step == 13 else 400.0
        train_ms += took
        truth[step] = took / 1000
        avg = f"{train_ms / (step - 10):.2f}ms" if step > 12 else "nanms"
        lines.append(f"step:{step}/20 train_loss:{_loss(step):.4f} train_time:{train_ms:.0f}ms step_avg:{avg}")
        if step % 5 == 0:
            lines.append(f"step:{step}/20 val_loss:{_loss(step):.4f} train_time:{train_ms + 30:.0f}ms step_avg:{avg}")
    return lines, truth


def test_modded_nanogpt_step_time_is_each_steps_own(tmp_path: Path) -> None:
    lines, truth = _modded_nanogpt_log()
    parsed = read_log([_write(tmp_path / "record.txt", lines)])
    assert parsed.format == "modded_nanogpt"
    steps, step_time = parsed.series("step_time_s", 0)
    # warm-up steps 2-10 (350 ms each); step 11 has none: the timer was reset before it
    np.testing.assert_array_equal(steps, [*range(2, 11), *range(12, 21)])
    np.testing.assert_allclose(step_time[:9], 0.35)
    # after the reset: each step's own time, the slow step 13 included (step_avg smears it over N)
    np.testing.assert_allclose(step_time[9:], [truth[s] for s in range(12, 21)])
    assert parsed.series("step_avg_s")[1][-1] == pytest.approx(sum(truth.values()) / 10)


def test_nemo_step_timing_is_the_step_time(tmp_path: Path) -> None:
    lines = [
        f"Training epoch 0, iteration {i}/99 | lr: 1.5e-05 | global_batch_size: 32 | global_step: {i} |"
        f" reduced_train_loss: {_loss(i):.4} | train_step_timing in s: 0.{5800 + i} | consumed_samples: {32 * (i + 1)}"
        for i in range(10)
    ]
    parsed = read_log([_write(tmp_path / "nemo.log", lines)])
    assert parsed.format == "nemo"
    steps, step_time = parsed.series("step_time_s")  # run-level: NeMo prints the line once, on rank 0
    np.testing.assert_array_equal(steps, np.arange(10))
    np.testing.assert_allclose(step_time, [0.58 + i / 10_000 for i in range(10)])


@pytest.mark.parametrize(
    ("folder", "name", "median_s"),
    [
        ("mng_quantizedfp4", "433c1732-0c3d-4099-a4a8-ec31eae49b16.txt", 0.40),
        ("megatron_mixtral8x7b_h100", "golden_values_dev_dgx_h100.json", None),
    ],
)
def test_real_runs_are_priced_with_their_logged_step_time(
    tmp_path: Path, folder: str, name: str, median_s: float | None
) -> None:
    """What the Cost and Spikes pages read (``ingest.services.run_cost``): a step time measured from the log."""
    from ingest.importing.importer import import_logs
    from ingest.services.run_analyses import open_analysed_store
    from ingest.services.run_cost import run_cost_inputs

    source = REAL_LOGS / folder / name
    if not source.exists():
        pytest.skip(f"real log absent: {source} (see its PROVENANCE.txt)")
    store = open_analysed_store(tmp_path / "store")
    import_logs(store, [source], run="run")
    inputs = run_cost_inputs(store, store.run_info("run"))
    assert inputs.step_time_source == "measured"
    assert inputs.step_time_s is not None
    if median_s is not None:  # the record's log: ~400 ms a step after the first steps (step_avg 400.89 ms)
        assert inputs.step_time_s == pytest.approx(median_s, abs=0.01)


# --------------------------------------------------------------------------- 4. no metric from shell or SLURM lines

OLMO_BLOCK = (
    "2024-02-01 12:00:0{step}.123\tnode017:0\tolmo.train:1240\tINFO\t[step={step}/1000]\n"
    "    train/CrossEntropyLoss={loss}\n"
    "    optim/total_grad_norm=1.5\n"
)


def test_readme_shell_commands_are_not_metrics(tmp_path: Path) -> None:
    """A README pasted around an OLMo log: its ``export NAME=1`` lines look like OLMo's ``name=value``."""
    text = "# Reproduce\n\n```bash\nexport HF_DATASETS_OFFLINE=1\n+ export NCCL_IB_DISABLE=1\n"
    text += "python -m torch.distributed.run --nproc_per_node=8 scripts/train.py configs/olmo.yaml --lr=3\n```\n\n"
    for step in range(1, 4):
        text += OLMO_BLOCK.format(step=step, loss=10.0 - step)
        text += "export WANDB_MODE=0\n"
    path = tmp_path / "README.md"
    path.write_text(text)
    parsed = read_log([path], format="olmo")
    assert parsed.metrics == ["grad_norm", "loss"]
    np.testing.assert_allclose(parsed.series("loss")[1], [9.0, 8.0, 7.0])
    assert any(
        "a shell command, not a metric line: export HF_DATASETS_OFFLINE=1" in e[2] for e in parsed.skipped_examples
    )


def test_slurm_cancel_message_written_into_a_metric_line(tmp_path: Path) -> None:
    """slurmstepd's stderr lands in the middle of the trainer's stdout: the line's own metrics are
    read, SLURM's ``JOB 123456`` is not one of them."""
    lines = [f"iter {i}: loss {4.0 - 0.1 * i:.4f}, time 120.00ms, mfu 30.00%" for i in range(10)]
    lines[9] += "slurmstepd: error: *** JOB 123456 ON node017 CANCELLED AT 2024-01-01T00:00:00 ***"
    lines.append(
        "slurmstepd: error: *** STEP 123456.0 ON node017 CANCELLED AT 2024-01-01T00:00:00 DUE TO TIME LIMIT ***"
    )
    lines.append("srun: error: node017: task 3: Exited with exit code 1")
    parsed = read_log([_write(tmp_path / "slurm-123456.out", lines)])
    assert parsed.format == "nanogpt"
    assert parsed.metrics == ["loss", "mfu", "step_time_s"]
    np.testing.assert_allclose(parsed.series("loss")[1], [4.0 - 0.1 * i for i in range(10)])


def test_llmc_console_line_with_a_slurm_message(tmp_path: Path) -> None:
    lines = [
        f"step {s:4d}/100 | loss {5.0 - 0.01 * s:.6f} (+nanz)| norm 1.0000 (+nanz)| lr 6.00e-04 | 140.00 ms"
        " | 40.0% bf16 MFU | 3700000 tok/s"
        for s in range(1, 8)
    ]
    lines[-1] += " slurmstepd: error: *** JOB 123456 ON node017 CANCELLED AT 2024-01-01T00:00:00 ***"
    parsed = read_log([_write(tmp_path / "llmc.out", lines)])
    assert parsed.format == "llmc_console"
    assert not [m for m in parsed.metrics if "JOB" in m or "CANCELLED" in m]
    assert parsed.series("loss")[0].shape[0] == 7


# --------------------------------------------------------------------------- 5. Megatron lines with unusual fields

BLOOM = (
    "{lead}iteration {step:8d}/  115311 | consumed samples: {samples:12d} | consumed tokens: {tokens:12d} |"
    " elapsed time per iteration (s): 105.{step3:03d} | learning rate: 5.969E-05 | global batch size:  2048 |"
    " lm loss: {loss} | grad norm: {gnorm} | num zeros: 0.0 | number of skipped iterations:   0 |"
    " number of nan iterations:   0 | samples per second: 19.463 | TFLOPs: 149.02 |"
)
"""Megatron-DeepSpeed's iteration line of the BLOOM 176B run, with seconds per iteration."""


def _bloom(step: int, lead: str = " [default7]: ", loss: str = "", gnorm: str = "0.174") -> str:
    return BLOOM.format(
        lead=lead,
        step=step,
        samples=2048 * step,
        tokens=2048 * 2048 * step,
        step3=step % 1000,
        loss=loss or f"{_loss(step % 100):.6E}",
        gnorm=gnorm,
    )


def test_bloom_chronicle_pasted_iteration_lines(tmp_path: Path, field_engine: str) -> None:
    """A chronicle (markdown) quoting the log: the quoted line keeps torchrun's ``[default7]:``
    behind a blank, among prose; then variants Megatron prints: ``lm loss: nan``, no grad norm, an
    extra ``curriculum seqlen`` field, ``E+00`` values, a wide step counter."""
    lines = [
        "### 2022-03-18",
        "",
        "At the current speed we need 125 days more `(115311-12695)*105/(3600*24)=124.7` to finish the plan.",
        "",
        "```",
        _bloom(12695),
        "```",
        "",
    ]
    lines += [_bloom(s) for s in range(12696, 12700)]
    lines.append(_bloom(12700, loss="nan"))
    lines.append(_bloom(12701).replace(" grad norm: 0.174 |", ""))
    lines.append(_bloom(12702).replace(" global batch size:", " curriculum seqlen:  1024 | global batch size:"))
    lines.append(_bloom(12703, gnorm="1.234E+00"))
    lines.append(_bloom(12704, lead=" ").replace("iteration    12704/  115311", "iteration    12704/  115311"))
    parsed = read_log([_write(tmp_path / "chronicles.md", lines)], format="megatron")
    steps, loss = parsed.series("loss")
    np.testing.assert_array_equal(steps, np.arange(12695, 12705))
    assert np.isnan(loss[12700 - 12695])
    np.testing.assert_allclose(loss[:5], [_loss(s % 100) for s in range(12695, 12700)], rtol=1e-6)
    steps, gnorm = parsed.series("grad_norm")
    assert 12701 not in steps and 12700 in steps
    assert gnorm[list(steps).index(12703)] == 1.234
    np.testing.assert_array_equal(parsed.series("curriculum_seqlen")[0], [12702])
    steps, step_time = parsed.series("step_time_s")
    np.testing.assert_allclose(step_time[0], 105.695)  # seconds, as the key says
    assert parsed.skipped == 4  # the prose lines and the fences, each said


def test_keys_that_differ_only_in_blanks_stay_one_metric(tmp_path: Path) -> None:
    """A JSON key ``"loss "`` beside ``"loss"`` has ``loss`` as its own name too: merged as before
    (found by the fuzz test: moving the rows onto the name they came from never ended)."""
    path = _write(tmp_path / "m.jsonl", ['{"step": 1, "loss": 2.0}', '{"step": 2, "loss ": 1.5}'])
    parsed = read_log([path])
    np.testing.assert_array_equal(parsed.series("loss")[1], [2.0, 1.5])
