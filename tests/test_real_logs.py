"""Every real public training log in ../shared/data/real_logs imports with the figures its
PROVENANCE.txt states: format, metrics, step counts, spot values, and the known spikes survive."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from ingest.formats import ParsedLog, detect, read_log

REAL = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "real_logs"

pytestmark = pytest.mark.skipif(not REAL.is_dir(), reason=f"../shared absent: no real logs at {REAL}")


def _read(*parts: str, fmt: str) -> ParsedLog:
    path = REAL.joinpath(*parts)
    if not path.exists():
        pytest.skip(f"../shared absent: {path}")
    assert detect([path])[0][0] == fmt
    parsed = read_log([path])
    assert parsed.format == fmt
    return parsed


def _at(parsed: ParsedLog, metric: str, step: int, rank: int = -1) -> float:
    steps, values = parsed.series(metric, rank)
    hit = values[steps == step]
    assert hit.shape == (1,), f"{metric}@{step}"
    return float(hit[0])


def test_modded_nanogpt_quantized_fp4() -> None:
    parsed = _read("mng_quantizedfp4", "433c1732-0c3d-4099-a4a8-ec31eae49b16.txt", fmt="modded_nanogpt")
    steps, loss = parsed.series("loss")
    assert steps[0] == 1 and steps[-1] == 3242 and steps.shape[0] == 3242
    val_steps, val = parsed.series("val_loss")
    assert val_steps.shape[0] == 27 and val[-1] == pytest.approx(3.2484) and val_steps[-1] == 3242
    # the spikes of PROVENANCE.txt, each over its neighbours
    for step, value in ((2263, 5.238), (2906, 4.783), (524, 5.168), (201, 5.85), (3240, 3.917)):
        assert _at(parsed, "loss", step) == pytest.approx(value, abs=1e-3)
    assert _at(parsed, "loss", 2263) > 1.4 * np.median(loss[(steps > 2200) & (steps < 2330)])
    assert math.isnan(_at(parsed, "step_avg_s", 1))  # "nanms" kept as NaN
    assert _at(parsed, "train_time_s", 1) == pytest.approx(8.41)
    # nvidia-smi table, banners and token counts: skipped and counted, not metrics
    assert parsed.skipped == 53
    assert parsed.meta["gpus"] == 8 and parsed.meta["total_steps"] == 3242


def test_llmc_main_log() -> None:
    parsed = _read("mng_llmc_gpt2_124m", "main.log", fmt="llmc_main")
    steps, _ = parsed.series("loss")
    assert steps.shape[0] == 19560 and steps[0] == 0 and steps[-1] == 19559
    assert parsed.series("val_loss")[0].shape[0] == 80
    assert _at(parsed, "val_loss", 0) == pytest.approx(11.0092)
    assert _at(parsed, "loss", 0) == pytest.approx(11.0091)
    assert _at(parsed, "grad_norm", 9025) == pytest.approx(2.02)
    assert _at(parsed, "loss", 9025) == pytest.approx(3.4915)
    assert _at(parsed, "grad_norm", 7435) == pytest.approx(1.44)
    assert _at(parsed, "loss", 7856) == pytest.approx(3.80, abs=0.01)
    assert parsed.series("val_loss")[1][-1] == pytest.approx(3.2722)
    lr_steps, lr = parsed.series("lr")
    assert lr[np.argmax(lr)] == pytest.approx(6.0e-4) and 650 <= lr_steps[np.argmax(lr)] <= 750
    assert parsed.skipped == 0


def test_megatron_golden_values_h100() -> None:
    parsed = _read("megatron_mixtral8x7b_h100", "golden_values_dev_dgx_h100.json", fmt="megatron_golden")
    steps, loss = parsed.series("loss")
    # from 22690 on every metric (memory and time too) is "nan": 263 steps not recorded, no records
    # (counted as placeholders in the import account); the planned steps stay the file's end_step
    assert steps.shape[0] == 4801 - 263 and steps[0] == 1 and steps[-1] == 22685
    assert _at(parsed, "loss", 1) == pytest.approx(12.66665)
    assert np.isfinite(loss).all() and parsed.meta["total_steps"] == 24000
    assert any("placeholder: every metric nan" in reason for _, _, reason in parsed.skipped_examples)
    for step, value in ((3850, 3.411), (4260, 3.025), (3800, 2.787)):
        assert _at(parsed, "loss", step) == pytest.approx(value, abs=1e-3)
    assert _at(parsed, "loss", 3855) == pytest.approx(2.646, abs=1e-3)
    assert set(parsed.metrics) == {"loss", "num-zeros", "gpu_mem_gb", "gpu_mem_max_gb", "step_time_s"}
    assert _at(parsed, "step_time_s", 1) == pytest.approx(92.35132)


def test_megatron_golden_values_a100_gaps() -> None:
    path = REAL / "megatron_mixtral8x7b_h100" / "golden_values_lts_dgx_a100.json"
    if not path.exists():
        pytest.skip(f"../shared absent: {path} (PROVENANCE lists it; this copy holds only the H100 file)")
    parsed = read_log([path])
    steps = parsed.series("loss")[0]
    gap = (steps >= 13555) & (steps <= 15230)
    assert not gap.any()  # "nan" in every metric there: unrecorded steps, no records
    assert _at(parsed, "loss", 4055) == pytest.approx(5.115, abs=1e-3)


def test_bigscience_megatron_deepspeed_console() -> None:
    parsed = _read("bigscience_megds_perf_log", "meg_ds_3d_gpt2_perf_n16-ds-off.out", fmt="megatron_deepspeed")
    steps, loss = parsed.series("loss")
    assert steps.tolist() == list(range(1, 63))
    assert loss[0] == pytest.approx(12.44238)
    assert _at(parsed, "loss", 3) == pytest.approx(44.24266)
    assert _at(parsed, "loss", 4) == pytest.approx(48.14127)  # the peak of the blow-up
    assert loss.max() == pytest.approx(48.14127)
    assert _at(parsed, "grad_norm", 1) == pytest.approx(67.593)
    assert _at(parsed, "grad_norm", 62) == pytest.approx(8.017)
    assert _at(parsed, "lr", 1) == pytest.approx(1.875e-05)
    assert _at(parsed, "loss_scale", 10) == 12.0
    assert _at(parsed, "step_time_s", 1) == pytest.approx(144.9156)
    assert _at(parsed, "skipped_iterations", 5) == 0.0
    # per-rank memory lines after iteration 1 (MB -> GiB)
    assert _at(parsed, "gpu_mem_gb", 1, rank=43) == pytest.approx(15492.84619140625 / 1024)
    assert parsed.meta["global_batch_size"] == 1024
    assert parsed.meta["world_size"] == 64
    assert parsed.meta["max_norm"] == 1.0 and parsed.meta["total_steps"] == 1000
    assert parsed.skipped > 500  # argument dump, compiler warnings, timers...


def test_hf_trainer_state_tinyllama() -> None:
    parsed = _read("hf_trainer_state_tinyllama_sft", "trainer_state.json", fmt="hf_trainer_state")
    steps, loss = parsed.series("loss")
    assert steps.shape[0] == 186 and steps[0] == 15 and steps[-1] == 2790
    val_steps, val = parsed.series("val_loss")
    assert val_steps.shape[0] == 14 and val_steps[0] == 200 and val_steps[-1] == 2800
    assert val[-1] == pytest.approx(1.1219322681427002)
    assert loss[0] == pytest.approx(2.0762)
    _, gnorm = parsed.series("grad_norm")
    assert gnorm[0] == pytest.approx(1.0048305988311768)
    assert np.median(gnorm) == pytest.approx(1.95, abs=0.01) and gnorm.max() == pytest.approx(2.73, abs=0.01)
    assert _at(parsed, "tokens", 15) == 61440.0
    # train and eval entries interleave without looking like a restart
    assert not [e for e in parsed.events if e.kind == "rollback"]


def test_lightning_csvlogger_slm() -> None:
    parsed = _read("lightning_csv_slm_124m", "metrics.csv", fmt="lightning_csv")
    steps, loss = parsed.series("loss")
    assert steps.shape[0] == 2814 and steps[0] == 49
    assert loss[0] == pytest.approx(7.628580570220947)
    assert _at(parsed, "loss", 100999) == pytest.approx(4.145, abs=1e-3)
    val_steps, val = parsed.series("val_loss")
    assert val_steps.shape[0] == 10 and val[0] == pytest.approx(4.132571697235107)
    assert val[-1] == pytest.approx(3.57, abs=0.01)
    assert parsed.series("train_loss_epoch")[0].shape[0] == 10
    assert parsed.series("epoch_time")[1][0] == pytest.approx(2517.10107421875)
    assert parsed.meta["seq_len"] == 128


def test_llamafactory_two_formats_agree() -> None:
    jsonl = _read("llamafactory_luojiu7b_cpt", "trainer_log.jsonl", fmt="llamafactory")
    state = _read("llamafactory_luojiu7b_cpt", "trainer_state.json", fmt="hf_trainer_state")
    for metric in ("loss", "lr"):
        s1, v1 = jsonl.series(metric)
        s2, v2 = state.series(metric)
        assert np.array_equal(s1, s2), metric
        assert np.allclose(v1, v2, rtol=1e-12), metric
    # the JSONL's end-of-training line also logs the epoch at 8712; the state keeps the epoch reached
    # as meta (docs/diagnosis.md, "Import: settings and counters": epoch is the step axis's companion, no metric series)
    s1, e1 = jsonl.series("epoch")
    assert s1[-1] == 8712 and "epoch" not in state.metrics
    assert state.meta["epochs_done"] == pytest.approx(e1[:-1].max())
    steps, loss = jsonl.series("loss")
    assert steps.shape[0] == 1742 and steps[0] == 5 and steps[-1] == 8710
    assert loss[0] == pytest.approx(1.7484)
    assert jsonl.meta["total_steps"] == 8712 and state.meta["total_steps"] == 8712
    assert _at(jsonl, "elapsed_time_s", 8712) == 4 * 86400 + 7 * 3600 + 19 * 60 + 52


def test_torchtitan_qwen3_console() -> None:
    parsed = _read("torchtitan_qwen3_14b_run217", "run.log", fmt="torchtitan")
    steps, _ = parsed.series("loss")
    assert steps.tolist() == list(range(1, 11))
    assert _at(parsed, "loss", 1) == pytest.approx(12.55223)
    assert _at(parsed, "loss", 3) == pytest.approx(15.82324)  # the step-3 spike
    assert _at(parsed, "loss", 10) == pytest.approx(6.92163)
    assert _at(parsed, "throughput_tok_s", 10, rank=0) == 10550.0  # "tps: 10,550"
    assert _at(parsed, "throughput_tok_s", 2, rank=0) == 9891.0
    assert _at(parsed, "gpu_mem_gb", 1, rank=0) == pytest.approx(160.86)
    assert _at(parsed, "gpu_mem_pct", 1, rank=0) == pytest.approx(90.19)
    assert _at(parsed, "mfu", 10) == pytest.approx(0.3951)
    assert _at(parsed, "grad_norm", 6) == pytest.approx(59.0)
    assert parsed.meta["global_batch_size"] == 1280 and parsed.meta["world_size"] == 8
    assert parsed.meta["n_params"] == 14768307200


def test_tfevents_keras_toy() -> None:
    root = REAL / "tfevents_keras_mnist_toy"
    assert detect([root])[0][0] == "tensorboard"
    parsed = read_log([root])
    steps, loss = parsed.series("loss")  # the train writer's epoch_loss (#21 item 3)
    assert steps.tolist() == list(range(10))
    assert loss[0] == pytest.approx(0.2974, abs=1e-4) and loss[-1] == pytest.approx(0.0319, abs=1e-4)
    assert parsed.series("train/epoch_accuracy")[0].shape[0] == 10
    v_steps, _ = parsed.series("validation/evaluation_loss_vs_iterations")
    assert v_steps.tolist() == list(range(1500, 15001, 1500))
    assert parsed.series("val_loss")[0].shape[0] == 10  # the validation writer's epoch_loss
    assert parsed.skipped == 0
    assert not parsed.events
