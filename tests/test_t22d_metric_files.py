"""A GAN's losses in a CSV whose header spells them in words (issue #32; docs/diagnosis.md, "GANs and RL"): a
``Step,Generator Loss,Discriminator Loss`` table is a GAN's (the generator loss is the run's loss), and a
whole discriminator loss collapsing toward 0 while the generator loss climbs is the discriminator's win,
as its per-input parts collapsing is. Synthetic numbers in that layout."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from ingest.formats import read_log
from ingest.formats.run_loss import stand_in_loss
from ingest.services.run_analyses import open_analysed_store
from stab_core.analysis import find_incidents
from stab_core.discriminator_wins import discriminator_wins
from stab_core.runview import RunView, Series
from tests.conftest import RunSpec, write_run

N = 3000
ONSET = 300


def _losses() -> tuple[np.ndarray, np.ndarray]:
    """A generator loss ~0.7 from row 0 that climbs from row ``ONSET`` to ~10; a discriminator loss
    ~1.3 that decays to ~1e-4 over the same rows."""
    rng = np.random.default_rng(5)
    frac = np.clip((np.arange(N) - ONSET) / (N - ONSET), 0.0, 1.0)
    g = (0.7 + 9.3 * np.sqrt(frac)) * rng.lognormal(0.0, 0.1, N)
    d = 1.3 * (1e-4 / 1.3) ** np.sqrt(frac) * rng.lognormal(0.0, 0.2, N)
    return g, d


def test_worded_gan_headers_make_the_generator_loss_the_runs_loss() -> None:
    assert stand_in_loss(["Generator Loss", "Discriminator Loss"]) == "Generator Loss"
    assert stand_in_loss(["Generator Loss", "PSNR"]) is None  # no discriminator: not said to be a GAN


def test_a_gan_loss_csv_with_a_collapsing_discriminator_is_one_divergence(tmp_path: Path) -> None:
    g, d = _losses()
    path = tmp_path / "losses.csv"
    rows = "".join(f"{i},{float(g[i])!r},{float(d[i])!r}\r\n" for i in range(N))
    path.write_text("Iteration,Generator Loss,Discriminator Loss\r\n" + rows)
    log = read_log([path])
    assert "loss" in set(log.table.column("metric").to_pylist())
    assert log.meta["loss_source"]["kind"] == "generator"


def test_a_whole_discriminator_loss_collapsing_is_the_discriminators_win() -> None:
    g, d = _losses()
    steps = np.arange(N, dtype=np.int64)
    series = {"loss": Series(steps, g), "Discriminator_Loss": Series(steps, d), "Generator_Loss": Series(steps, g)}
    (won,) = discriminator_wins(series, [])
    assert won.severity == "divergence" and abs(won.start - ONSET) <= 150
    loss = [i for i in find_incidents(RunView(name="gan", series=series, meta={})) if i.primary.metric == "loss"]
    assert any(i.severity == "divergence" and abs(i.start - ONSET) <= 150 for i in loss), loss


def test_a_run_logging_a_generators_and_a_discriminators_terms_trains(tmp_path: Path) -> None:
    # a CycleGAN loss log stores D_A, G_A, cycle_A, idt_A... and no "loss": before, "empty: no training steps"
    from ingest.services.run_status import _trains

    store = write_run(
        open_analysed_store(tmp_path / "s"),
        RunSpec(name="gan", per_rank=False, run_level=("tokens",), loss_spike=None, grad_spike_step=None),
    )
    assert _trains(store, "gan", ["D_A", "G_A", "cycle_A", "idt_A", "D_B", "G_B"])
    assert _trains(store, "gan", ["errD", "errG", "D_x"])
    assert not _trains(store, "gan", ["G_A", "cycle_A"])  # one side alone says no GAN
    assert not _trains(store, "gan", ["D_model", "Gx"])


def _metrics(path: Path) -> set[str]:
    return set(read_log([path]).table.column("metric").to_pylist())


def test_an_hf_log_history_csv_keeps_its_summary_row_out_of_the_steps(tmp_path: Path) -> None:
    header = "loss,grad_norm,learning_rate,epoch,step,eval_loss,eval_runtime,train_runtime,total_flos,train_loss\n"
    rows = [f"{1.0 - s / 1000:.4f},2.5,{1e-4 * (1 - s / 800):.3e},{s / 400:.3f},{s},,,,,\n" for s in range(50, 850, 50)]
    rows += [f",,,{s / 400:.3f},{s},{0.9 - s / 4000:.4f},12.5,,,\n" for s in (400, 800)]
    rows.append(",,,2.0,800,,,1234.5,0.0,0.71\n")
    path = tmp_path / "log_history.csv"
    path.write_text(header + "".join(rows))
    log = read_log([path])
    metrics = set(log.table.column("metric").to_pylist())
    assert {"loss", "grad_norm", "lr", "val_loss"} <= metrics
    assert not metrics & {"total_flos", "train_loss", "train_runtime"}
    assert log.meta["train_summary"] == {"train_runtime": 1234.5, "total_flos": 0.0, "train_loss": 0.71}


def test_an_evals_token_counter_is_no_metric_in_a_trainer_state(tmp_path: Path) -> None:
    history = []
    for s in range(10, 110, 10):
        history.append(
            {"loss": 2.0 - s / 100, "grad_norm": 1.5, "learning_rate": 2e-5, "num_tokens": 4096.0 * s, "step": s}
        )
        if s % 50 == 0:
            history.append({"eval_loss": 1.9 - s / 200, "eval_num_tokens": 4096.0 * s, "eval_runtime": 3.2, "step": s})
    path = tmp_path / "trainer_state.json"
    path.write_text(json.dumps({"global_step": 100, "max_steps": 100, "log_history": history}))
    metrics = _metrics(path)
    assert {"loss", "val_loss", "tokens"} <= metrics and "eval_num_tokens" not in metrics


def test_an_evals_token_counter_is_no_metric_in_a_console_of_dicts(tmp_path: Path) -> None:
    lines = []
    for s in range(1, 21):
        lines.append(
            f"{{'loss': {2.0 - s / 20:.4f}, 'grad_norm': 1.25, 'learning_rate': 2e-05, "
            f"'num_tokens': {512.0 * s}, 'epoch': {s / 20}}}"
        )
        if s % 10 == 0:
            lines.append(
                f"{{'eval_loss': {1.5 - s / 100:.4f}, 'eval_num_tokens': {512.0 * s}, "
                f"'eval_runtime': 3.2, 'epoch': {s / 20}}}"
            )
    path = tmp_path / "train.log"
    path.write_text("\n".join(lines) + "\n")
    metrics = _metrics(path)
    assert {"loss", "val_loss"} <= metrics and "eval_num_tokens" not in metrics


def test_a_stats_jsonl_of_nested_num_mean_std_stores_each_statistics_mean(tmp_path: Path) -> None:
    # StyleGAN-style stats: every value a {num, mean, std} dict, the tick under Progress/, no step field
    lines = []
    for tick in range(30):
        record = {
            "Loss/G/loss": {"num": 16, "mean": 2.5 - tick / 30, "std": 0.4},
            "Loss/D/loss": {"num": 16, "mean": 0.3 + tick / 100, "std": 0.1},
            "Progress/tick": {"num": 1, "mean": float(tick), "std": 0.0},
            "Timing/sec_per_tick": {"num": 1, "mean": 40.0 + tick % 3, "std": 0.0},
            "timestamp": 1.7e9 + 41.0 * tick,
        }
        lines.append(json.dumps(record))
    path = tmp_path / "stats.jsonl"
    path.write_text("\n".join(lines) + "\n")
    log = read_log([path])
    table = log.table.to_pandas()
    metrics = set(table["metric"])
    assert {"Loss/G/loss", "Loss/D/loss", "loss", "step_time_s"} <= metrics
    assert not any(m.endswith(("/num", "/std", "/mean")) or m.startswith("Progress/tick") for m in metrics)
    loss = table[table["metric"] == "loss"]
    assert list(loss["step"]) == list(range(30)) and loss["value"].iloc[0] == 2.5
    assert set(table[table["metric"] == "step_time_s"]["value"]) == {40.0, 41.0, 42.0}
    assert stand_in_loss(["Loss/G/loss", "Loss/D/loss"]) == "Loss/G/loss"


def test_a_timm_console_keeps_the_plain_evaluation_beside_the_ema_one(tmp_path: Path) -> None:
    # timm with --model-ema: the "Test (EMA)" block follows the plain "Test" block; before, it replaced
    # the plain block's means and val_loss was never stored
    lines = []
    for epoch in range(3):
        for batch in (0, 50, 99):
            loss = 6.9 - epoch * 0.3 - batch / 1000
            lines.append(
                f"Train: {epoch} [{batch:4d}/100 ({batch:3d}%)]  Loss: {loss:.6f} ({loss:.4f})  "
                f"Time: 0.700s,  180.00/s  (0.800s,  160.00/s)  LR: 1.000e-04  Data: 0.020 (0.030)"
            )
        for kind, shift in (("Test", 0.0), ("Test (EMA)", 0.25)):
            for batch in (0, 20):
                val = 6.5 - epoch * 0.2 + shift
                lines.append(
                    f"{kind}: [{batch:4d}/20]  Time: 0.225 (0.300)  Loss:  {val + 0.1:.4f} ({val:.4f})  "
                    f"Acc@1:  {epoch + 1.0:.4f} ({epoch + 1.5:.4f})  Acc@5:  {epoch + 5.0:.4f} ({epoch + 5.5:.4f})"
                )
        lines.append("Current checkpoints:")
    path = tmp_path / "train.log"
    path.write_text("\n".join(lines) + "\n")
    table = read_log([path]).table.to_pandas()
    val = table[table["metric"] == "val_loss"]
    assert [round(v, 4) for v in val["value"]] == [6.5, 6.3, 6.1]
    assert {"val_ema_loss", "val_acc@1"} <= set(table["metric"])


def test_an_hf_console_takes_its_planned_epochs_from_the_training_arguments(tmp_path: Path) -> None:
    # no "Num Epochs" banner and no summary dict; the TrainingArguments dump plans 2 epochs (max_steps
    # off), the bar 200 steps: step = epoch x 100. Before: the N-th dict was step N
    lines = ["TrainingArguments(output_dir='out', num_train_epochs=2, max_steps=-1, logging_steps=10, fp16=True)"]
    lines.append("  0%|          | 0/200 [00:00<?, ?it/s]")
    steps = [s for s in range(10, 210, 10) if s != 50]  # one dict cut by a redraw
    for s in steps:
        lines.append(
            f"{{'loss': {1.5 - s / 400:.4f}, 'learning_rate': {3e-05 * (1 - s / 200):.4e}, 'epoch': {s / 100}}}"
        )
    lines.append("100%|##########| 200/200 [01:40<00:00,  2.00it/s]")
    path = tmp_path / "README.md"
    path.write_text("\n".join(lines) + "\n")
    table = read_log([path]).table.to_pandas()
    assert list(table[table["metric"] == "loss"]["step"]) == steps
