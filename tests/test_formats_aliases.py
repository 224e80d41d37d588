"""The alias map and unit conversion every reader relies on."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from ingest.formats import read_log
from ingest.formats._common import parse_timestamps
from ingest.formats.aliases import canonical_name, sanitise_name, to_canonical_unit
from ingest.formats.numbers import parse_numbers
from stab_core.metrics import CANONICAL_METRICS, is_valid_metric_name


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("lm loss", "loss"),
        ("train_loss", "loss"),
        ("trl", "loss"),
        ("train/loss", "loss"),
        ("grad norm", "grad_norm"),
        ("norm", "grad_norm"),
        ("grad_norm", "grad_norm"),
        ("grad-norm", "grad_norm"),
        ("learning rate", "lr"),
        ("learning_rate", "lr"),
        ("learning-rate", "lr"),
        ("lr", "lr"),
        ("tel", "val_loss"),
        ("eval_loss", "val_loss"),
        ("val_loss", "val_loss"),
        ("eval/loss", "val_loss"),
        ("loss scale", "loss_scale"),
        ("number of skipped iterations", "skipped_iterations"),
        ("number of nan iterations", "nan_iterations"),
        ("consumed tokens", "tokens"),
        ("num_tokens", "tokens"),
        ("tok/s", "throughput_tok_s"),
        ("tps", "throughput_tok_s"),
        ("MFU", "mfu"),
        ("memory", "gpu_mem_gb"),
        ("iteration-time", "step_time_s"),
        ("z_loss", "router_z_loss"),
    ],
)
def test_aliases(raw: str, expected: str) -> None:
    assert canonical_name(raw)[0] == expected


def test_every_alias_target_is_canonical() -> None:
    from ingest.formats.aliases import ALIASES

    assert set(ALIASES.values()) <= set(CANONICAL_METRICS)


def test_unit_in_key_and_unknown_names_kept() -> None:
    assert canonical_name("elapsed time per iteration (ms)") == ("step_time_s", "ms")
    assert canonical_name("iter time (s)") == ("step_time_s", "s")
    assert canonical_name("mem-allocated-bytes") == ("gpu_mem_gb", "B")
    assert canonical_name("eval_mean_token_accuracy") == ("eval_mean_token_accuracy", None)
    assert canonical_name("grad_norm/layer.3") == ("grad_norm/layer.3", None)
    assert sanitise_name("weird name (x) !!") == "weird_name_x"
    assert is_valid_metric_name(sanitise_name("  .. a b .. c"))


def test_units_to_canonical() -> None:
    name, v = to_canonical_unit("step_time_s", "ms", np.array([1500.0]))
    assert name == "step_time_s" and v[0] == pytest.approx(1.5)
    name, v = to_canonical_unit("train_time", "ms", np.array([8410.0]))
    assert name == "train_time_s" and v[0] == pytest.approx(8.41)
    name, v = to_canonical_unit("gpu_mem_gb", "MB", np.array([2048.0]))
    assert name == "gpu_mem_gb" and v[0] == 2.0
    name, v = to_canonical_unit("mfu", "%", np.array([39.51]))
    assert v[0] == pytest.approx(0.3951)
    name, v = to_canonical_unit("gpu_util", "%", np.array([80.0]))
    assert v[0] == 80.0


def test_parse_numbers_units_commas_nan() -> None:
    conv = parse_numbers(pa.array(["10,550", "nanms", "160.86GiB(90.19%)", "-nan", "1.2E+01", "abc", "inf"]))
    assert conv.values[0] == 10550.0
    assert np.isnan(conv.values[1]) and conv.ok[1]
    assert conv.values[2] == pytest.approx(160.86) and conv.pct is not None and conv.pct[2] == pytest.approx(90.19)
    assert np.isnan(conv.values[3]) and conv.ok[3]
    assert conv.values[4] == 12.0
    assert not conv.ok[5]
    assert np.isinf(conv.values[6])
    units = dict(conv.units)
    assert units["ms"].tolist() == [False, True, False, False, False, False, False]
    assert units["GiB"][2]


def test_parse_timestamps() -> None:
    secs = parse_timestamps(pa.array(["2026-05-20 02:22:56,141", "2024-06-14 10:00:10", "garbage"]))
    assert secs[0] == pytest.approx(1779243776.141)
    assert secs[1] == pytest.approx(1718359210.0)
    assert np.isnan(secs[2])


# --------------------------------------------------------------------------- trainers' names (#21 item 3)
# Each name as the trainer's source writes it (TensorBoard tag, W&B key, CSV column).


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        # torchtitan metrics.py (MetricsProcessor.log / log_validation)
        ("loss_metrics/global_avg_loss", "loss"),
        ("loss_metrics/global_max_loss", "loss_metrics/global_max_loss"),  # the max over ranks: kept
        ("grad_norm", "grad_norm"),
        ("lr", "lr"),
        ("throughput(tps)", "throughput_tok_s"),
        ("memory/max_reserved(GiB)", "gpu_mem_gb"),
        ("time_metrics/end_to_end(s)", "step_time_s"),
        ("validation_metrics/loss", "val_loss"),
        # Megatron-LM training.py (training_log)
        ("lm loss", "loss"),
        ("grad-norm", "grad_norm"),
        ("learning-rate", "lr"),
        ("loss-scale", "loss_scale"),
        ("iteration-time", "step_time_s"),
        ("num-zeros", "num-zeros"),  # zeros in the gradient, not non-finite values: kept
        ("lm loss validation", "val_loss"),
        ("throughput", "throughput"),  # Megatron's is TFLOP/s/GPU, not tokens: kept
        # NeMo
        ("reduced_train_loss", "loss"),
        ("train_step_timing in s", "step_time_s"),
        ("val_loss", "val_loss"),
        # Hugging Face (rewrite_logs: train/ and eval/)
        ("train/loss", "loss"),
        ("train/grad_norm", "grad_norm"),
        ("train/learning_rate", "lr"),
        ("eval/loss", "val_loss"),
        ("train/train_loss", "train/train_loss"),  # the run's mean, logged once at the end: kept
        # Lightning (self.log; LearningRateMonitor)
        ("train_loss", "loss"),
        ("train_loss_step", "loss"),
        ("train_loss_epoch", "train_loss_epoch"),
        ("lr-AdamW", "lr"),
        ("lr-AdamW/pg1", "lr"),
        ("lr-AdamW/pg2", "lr-AdamW/pg2"),  # a second param group: kept
        ("lr-AdamW-1", "lr-AdamW-1"),  # a second AdamW optimizer: kept
        # Composer
        ("loss/train/total", "loss"),
        ("lr-DecoupledAdamW/group0", "lr"),
        ("throughput/tokens_per_sec", "throughput_tok_s"),
        ("trainer/device_train_microbatch_size", "trainer/device_train_microbatch_size"),
        # OLMo trainer.py
        ("train/CrossEntropyLoss", "loss"),
        ("optim/total_grad_norm", "grad_norm"),
        ("optim/learning_rate_group0", "lr"),
        ("optim/learning_rate_group1", "optim/learning_rate_group1"),
        ("throughput/device/tokens_per_second", "throughput_tok_s"),
        ("throughput/total_tokens", "tokens"),
        # MaxText train.py: grad_norm is of the clipped gradients, raw_grad_norm before clipping
        ("learning/loss", "loss"),
        ("learning/raw_grad_norm", "grad_norm"),
        ("learning/grad_norm", "grad_norm_clipped"),
        ("learning/current_learning_rate", "lr"),
        ("perf/step_time_seconds", "step_time_s"),
        # Keras: the TensorBoard reader prefixes the writer's folder or label
        ("train/epoch_loss", "loss"),
        ("validation/epoch_loss", "val_loss"),
        ("epoch_loss", "epoch_loss"),  # a writer of unknown split: kept
        # TensorBoard's CSV download writes the tag's '/' as '_'
        ("loss_metrics_global_avg_loss", "loss"),
    ],
)
def test_trainer_names(raw: str, expected: str) -> None:
    assert canonical_name(raw)[0] == expected


def test_units_of_trainer_names() -> None:
    assert canonical_name("memory/max_reserved(GiB)") == ("gpu_mem_gb", "gib")
    assert canonical_name("time_metrics/end_to_end(s)") == ("step_time_s", "s")
    assert canonical_name("mfu(%)") == ("mfu", "%")


def _torchtitan_ranks(root: Path, steps: np.ndarray, loss: np.ndarray, grad_norm: np.ndarray) -> None:
    """torchtitan's per-rank TensorBoard layout (save_for_all_ranks): rank_N/ folders, one writer each."""
    from torch.utils.tensorboard import SummaryWriter

    for rank in range(grad_norm.shape[0]):
        writer = SummaryWriter(str(root / f"rank_{rank}"))
        for i, step in enumerate(steps.tolist()):
            writer.add_scalar("loss_metrics/global_avg_loss", loss[i], step)
            writer.add_scalar("loss_metrics/global_max_loss", loss[i] * 1.25, step)
            writer.add_scalar("grad_norm", grad_norm[rank, i], step)
            writer.add_scalar("throughput(tps)", 1000.0 + rank, step)
        writer.close()


def _loss_curve() -> tuple[np.ndarray, np.ndarray]:
    steps = np.arange(1, 301)
    loss = (6.0 * np.exp(-steps / 100.0) + 2.5).astype(np.float32)
    loss[199] = 9.5  # a spike at step 200
    return steps, loss


def test_torchtitan_per_rank_tensorboard(tmp_path: Path) -> None:
    steps, loss = _loss_curve()
    grad_norm = np.vstack([np.full(steps.size, 1.5), np.full(steps.size, 2.0)]).astype(np.float32)
    _torchtitan_ranks(tmp_path / "tb", steps, loss, grad_norm)
    parsed = read_log([tmp_path / "tb"])
    assert parsed.format == "tensorboard"
    assert set(parsed.metrics) == {"loss", "loss_metrics/global_max_loss", "grad_norm", "throughput_tok_s"}
    for rank in (0, 1):
        got_steps, got = parsed.series("loss", rank=rank)
        assert got_steps.tolist() == steps.tolist()
        np.testing.assert_array_equal(got, loss.astype(np.float64))
        assert parsed.series("grad_norm", rank=rank)[1].tolist() == [1.5 + 0.5 * rank] * steps.size
        assert parsed.series("throughput_tok_s", rank=rank)[1][0] == 1000.0 + rank
    assert parsed.meta["world_size"] == 2


def test_torchtitan_loss_spike_is_found(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Under its torchtitan name the loss was never looked at; as ``loss`` its spike is an incident."""
    import json

    from ingest.cli import main

    steps, loss = _loss_curve()
    _torchtitan_ranks(tmp_path / "tb", steps, loss, np.ones((2, steps.size), dtype=np.float32))
    store = str(tmp_path / "store")
    assert main(["import", str(tmp_path / "tb"), "--run", "titan", "--store", store]) == 0
    capsys.readouterr()
    assert main(["spikes", "titan", "--json", "--store", store]) == 0
    incidents = json.loads(capsys.readouterr().out)
    assert [(i["metric"], i["peak"]) for i in incidents] == [("loss", 200)]


def test_one_rank_spiking_alone_in_per_rank_folders_is_a_rank_fault(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue #21 item 4: rank 1's grad_norm jumps 14x at step 200 while rank 0 stays flat; node 3 reads
    the per-rank grad_norm (not only grad_norm_local) and one rank of two far out counts."""
    import json

    from ingest.cli import main

    steps, loss = _loss_curve()
    grad_norm = np.ones((2, steps.size), dtype=np.float32)
    grad_norm[1, 199] = 14.0
    _torchtitan_ranks(tmp_path / "tb", steps, loss, grad_norm)
    store = str(tmp_path / "store")
    assert main(["import", str(tmp_path / "tb"), "--run", "titan", "--store", store]) == 0
    capsys.readouterr()
    assert main(["spikes", "titan", "--json", "--store", store]) == 0
    (incident,) = json.loads(capsys.readouterr().out)
    assert incident["cause"] == "rank_fault" and incident["peak"] == 200
    assert incident["rank_outlier"]["rank"] == 1 and incident["rank_outlier"]["metric"] == "grad_norm"
    assert incident["rank_outlier"]["ratio"] == pytest.approx(14.0)


HF_NAMES = ("train/loss", "train/grad_norm", "train/learning_rate", "eval/loss")
HF_ROWS = [(10, 2.5, 1.25, 1e-4, None), (20, 2.25, 1.0, 2e-4, 2.375), (30, 2.0, 0.75, 3e-4, None)]


def _hf_expected(parsed: Any) -> None:
    assert {"loss", "grad_norm", "lr", "val_loss"} <= set(parsed.metrics)
    assert parsed.series("loss")[0].tolist() == [10, 20, 30]
    assert parsed.series("loss")[1].tolist() == [2.5, 2.25, 2.0]
    assert parsed.series("grad_norm")[1].tolist() == [1.25, 1.0, 0.75]
    np.testing.assert_allclose(parsed.series("lr")[1], [1e-4, 2e-4, 3e-4])
    assert parsed.series("val_loss")[0].tolist() == [20] and parsed.series("val_loss")[1].tolist() == [2.375]


def test_hf_names_in_a_wandb_csv_export(tmp_path: Path) -> None:
    header = ["Step"] + [f"tinyllama - {n}{agg}" for n in HF_NAMES for agg in ("", "__MIN", "__MAX")]
    lines = [",".join(header)]
    for step, *values in HF_ROWS:
        cells = [str(step)] + ["" if v is None else repr(v) for v in values for _ in range(3)]
        lines.append(",".join(cells))
    path = tmp_path / "wandb_export.csv"
    path.write_text("\n".join(lines) + "\n")
    parsed = read_log([path])
    assert parsed.format == "wandb_csv"
    _hf_expected(parsed)
    assert not [m for m in parsed.metrics if m.endswith(("__min", "__max"))]  # bucket ranges, not metrics


def test_hf_names_in_a_plain_csv(tmp_path: Path) -> None:
    lines = ["step," + ",".join(HF_NAMES)]
    lines += [",".join([str(s)] + ["" if v is None else repr(v) for v in vals]) for s, *vals in HF_ROWS]
    path = tmp_path / "metrics.csv"
    path.write_text("\n".join(lines) + "\n")
    parsed = read_log([path])
    assert parsed.format == "csv_wide"
    _hf_expected(parsed)


def test_hf_names_in_tensorboard_and_wandb_history(tmp_path: Path) -> None:
    """The same names through the other readers: one table, one answer."""
    import json

    from torch.utils.tensorboard import SummaryWriter

    writer = SummaryWriter(str(tmp_path / "tb"))
    history = []
    for step, *values in HF_ROWS:
        row: dict[str, Any] = {"_step": step, "_runtime": 1.0 * step, "train/global_step": step}
        for name, value in zip(HF_NAMES, values, strict=True):
            if value is not None:
                writer.add_scalar(name, value, step)
                row[name] = value
        history.append(row)
    writer.close()
    (tmp_path / "wandb-history.jsonl").write_text("\n".join(json.dumps(r) for r in history) + "\n")
    for path in (tmp_path / "tb", tmp_path / "wandb-history.jsonl"):
        parsed = read_log([path])
        assert parsed.format in {"tensorboard", "wandb_history"}
        _hf_expected(parsed)


def test_tensorboard_csv_download_of_a_torchtitan_tag(tmp_path: Path) -> None:
    path = tmp_path / "run-rank_0-tag-loss_metrics_global_avg_loss.csv"
    path.write_text("Wall time,Step,Value\n1700000000.0,1,10.5\n1700000001.0,2,9.75\n")
    parsed = read_log([path])
    assert parsed.metrics == ["loss"] and parsed.series("loss")[1].tolist() == [10.5, 9.75]


KERAS = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "real_logs" / "tfevents_keras_mnist_toy"


def test_keras_train_and_validation_writers() -> None:
    if len(list(KERAS.glob("*/events.out.tfevents.*"))) != 2:
        pytest.skip("../shared absent: the real Keras tfevents files are not on this machine")
    parsed = read_log([KERAS])
    # PROVENANCE.txt: train epoch_loss 0.2974 -> 0.0319 at steps 0..9; validation's own 10 points
    steps, loss = parsed.series("loss")
    assert steps.tolist() == list(range(10))
    assert loss[0] == pytest.approx(0.2974, abs=1e-4) and loss[-1] == pytest.approx(0.0319, abs=1e-4)
    v_steps, val = parsed.series("val_loss")
    assert v_steps.tolist() == list(range(10)) and val[0] == pytest.approx(0.1429, abs=1e-4)
    assert "train/epoch_accuracy" in parsed.metrics  # no role: kept under the writer's name
