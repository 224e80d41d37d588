"""Round 23 (f29a, issue #31): consoles that hold several launches or stages, and console layouts read
without their loss (synthetic logs of the same shapes, written from what the trainers print; no corpus
file copied)."""

from __future__ import annotations

from pathlib import Path

from ingest.formats import read_log


def _write(tmp_path: Path, name: str, lines: list[str]) -> Path:
    path = tmp_path / name
    path.write_text("".join(lines))
    return path


def test_bare_split_words_are_the_losses(tmp_path: Path) -> None:
    """``epoch N/300  train X  val V  lr R``: no key names a loss, so the bare ``train`` is the training
    loss and ``val`` the validation loss (proposed, as a ``--map`` would be)."""
    lines = ["device: mps\n", "params: 7.58M\n"]
    for epoch in range(1, 41):
        lines.append(
            f"epoch {epoch:3d}/300  train {2.0 / epoch:.4f}  val {2.1 / epoch:.4f}  mr 0.50  pf 0.00  lr 1.00e-03\n"
        )
    log = read_log([_write(tmp_path, "train.log", lines)])
    assert log.meta["proposed_map"] == {"train": "loss", "val": "val_loss"}


def test_split_words_beside_a_named_loss_stay(tmp_path: Path) -> None:
    """GluonCV's ``[Epoch 3] train=0.56 val=0.60 loss=1.22``: the line names its loss; ``train``/``val``
    are accuracies and keep their names."""
    lines = [
        f"INFO:root:[Epoch {e}] train={0.2 + e / 100:.6f} val={0.3 + e / 100:.6f} loss={2.0 - e / 50:.6f} time: 103.4\n"
        for e in range(40)
    ]
    log = read_log([_write(tmp_path, "cifar.log", lines)])
    assert not {"train", "val"} & set((log.meta.get("proposed_map") or {}).keys())
    assert "loss" in log.metrics


def _info(message: str) -> str:
    return f"2025-09-17 10:24:10,944 - INFO - {message}\n"


def _launch(lines: list[str], epochs: int, batches: int, logged: int, loss0: float) -> None:
    """One launch of a Python-logging trainer: a banner, its settings, then ``Epoch e/E`` header lines
    over ``Batch b/N | ...`` lines whose counter restarts every epoch (``logged`` lines per epoch, every
    10 batches), and an epoch summary line."""
    lines += [_info(""), "#" * 80 + "\n", _info("Using device: cpu (local rank 0)"), _info("1.27 M parameters")]
    for epoch in range(1, epochs + 1):
        lines.append(_info(f"Epoch {epoch}/{epochs}"))
        for b in range(10, 10 * logged + 1, 10):
            loss = loss0 - b / 1000 + epoch / 10
            pairs = f"Batch Energy: 2.1 | Batch Loss: {loss:.4f}  | Perplexity: 12.5"
            lines.append(_info(f"  Batch {b}/{batches} | {pairs}"))
        lines.append(_info(f"Epoch {epoch}/{epochs} | Train Energy: 2.3264 | Train Perplexity: 3578.4019"))


def test_epoch_header_lines_make_the_batch_counter_global(tmp_path: Path) -> None:
    """``Epoch 2/2`` alone on a line, then ``Batch 10/1827 | ...``: the batch counter counts within the
    epoch the header opened, so the step is ``(E - 1) * N + b`` and a launch of two epochs is one run; the
    next launch (its epoch back to 1) is another run, even where it logs one line."""
    lines: list[str] = []
    _launch(lines, 2, 300, 30, 9.0)
    _launch(lines, 1, 10, 1, 11.0)
    _launch(lines, 5, 100, 10, 11.0)
    log = read_log([_write(tmp_path, "training.log", lines)])
    runs = [log, *log.segments]
    assert len(runs) == 3
    steps = runs[0].series("Batch_Loss")[0].tolist()
    assert steps[:2] == [10, 20] and steps[29:31] == [300, 310] and steps[-1] == 600
    assert runs[1].series("Batch_Loss")[0].tolist() == [10]
    assert runs[2].series("Batch_Loss")[0].tolist()[-1] == 500


def _grpo_dict(i: int) -> str:
    return (
        f"{{'loss': 0.0, 'grad_norm': {0.1 + i / 1000}, 'learning_rate': 1.5e-05, 'reward': 1.2, "
        f"'reward_std': 0.3, 'completion_length': 180.5, 'kl': 0.002, 'epoch': {i * 5 / 1875:.2f}}}\n"
    )


def test_notebook_bars_date_a_completed_runs_dicts_by_its_interval(tmp_path: Path) -> None:
    """A notebook's copy of a TRL console: bars without glyphs (``  3% 9/300 [03:58<2:06:28, 26.08s/it]``)
    drawn only now and then, 60 dicts of a run whose bar reached 300/300 and whose epoch has 2 decimals: the
    N-th dict is step N x 5 (300 / 60), and each bar with a rate gives that step's time."""
    lines = ["==((====))==  Unsloth - 2x faster free finetuning | Num GPUs used = 1\n"]
    lines.append("   \\\\   /|    Num examples = 7,473 | Num Epochs = 1 | Total steps = 300\n")
    lines.append("  0% 0/300 [00:00<?, ?it/s]\n")
    bars = {}
    for i in range(1, 61):
        if i % 3 == 0:  # a bar now and then, lagging the dict's step
            count = 5 * i - 2
            bars[count] = 20.0 + i / 10
            lines.append(f" {count * 100 // 300}% {count}/300 [01:00<1:00:00, {bars[count]:.2f}s/it]\n")
        lines.append(_grpo_dict(i))
    lines.append("100% 300/300 [2:04:25<00:00, 24.97s/it]\n")
    lines.append("{'train_runtime': 7502.1, 'train_samples_per_second': 0.16, 'train_loss': 1e-07, 'epoch': 0.16}\n")
    log = read_log([_write(tmp_path, "LFGRPO.md", lines)])
    assert log.format == "hf_console"
    steps = log.series("loss")[0].tolist()
    assert steps[:3] == [5, 10, 15] and steps[-1] == 300
    t_steps, t_values = log.series("step_time_s")
    assert t_steps.tolist() == [*sorted(bars), 300]
    assert t_values.tolist()[0] == bars[min(bars)]


def test_training_bar_gives_the_step_time(tmp_path: Path) -> None:
    """A TRL console whose bar counts every step before each dict: the bar's ``s/it`` (and ``it/s`` as its
    inverse) at each count is that step's time; the ``0/T`` start and an evaluation bar's give none."""
    lines = ["  0%|          | 0/20 [00:00<?, ?it/s]\n"]
    for step in range(1, 21):
        rate = f"{18.0 + step / 10:.2f}s/it" if step % 2 else f"{1 / (18.0 + step / 10):.3f}it/s"
        lines.append(f"  {step * 5}%|▌         | {step}/20 [00:{step:02d}<06:00, {rate}]\n")
        loss = 0.5 - step / 100
        lines.append(f"{{'loss': {loss}, 'grad_norm': 0.2, 'learning_rate': 1e-06, 'epoch': {step / 20}}}\n")
    lines.append("100%|██████████| 40/40 [00:10<00:00, 4.00it/s]\n")  # an evaluation loop's bar
    log = read_log([_write(tmp_path, "trl.txt", lines)])
    t_steps, t_values = log.series("step_time_s")
    assert t_steps.tolist() == list(range(1, 21))
    assert t_values[0] == 18.1 and abs(t_values[1] - 18.2) < 0.05  # it/s printed to 3 decimals


def test_a_stage_of_step_lines_before_the_dicts_is_its_own_run(tmp_path: Path) -> None:
    """An Unsloth pipeline: a custom SFT loop prints ``  step 10/60  loss=12.1  lr=1.97e-04``, then TRL's
    GRPO trainer its bars and dicts from step 10 again: two runs, each with its own loss (the SFT stage was
    not read, and its steps were the GRPO run's)."""
    lines = ["PHASE: SFT (grammar-masked)\n", "SFT: 1631 samples, 3 epochs, 60 steps, bf16=True\n"]
    lines += [f"  step {s}/60  loss={12.0 - s / 10:.4f}  lr={2e-4 - s * 1e-6:.2e}\n" for s in range(10, 61, 10)]
    lines += ["SFT complete in 1257s\n", "PHASE: GRPO (constrained generation)\n"]
    lines.append("   \\\\   /|    Num examples = 1,622 | Num Epochs = 1 | Total steps = 40\n")
    for s in range(1, 41):
        lines.append(f"  {s * 100 // 40}%|▏         | {s}/40 [00:{s:02d}<2:31:38, 22.{s:02d}s/it]\n")
        if s % 10 == 0:
            lines.append(
                f"{{'loss': {100.0 / s}, 'grad_norm': 4.2, 'learning_rate': 1e-06, 'reward': 0.0, 'epoch': {s / 40}}}\n"
            )
    log = read_log([_write(tmp_path, "logs.md", lines)])
    (grpo,) = log.segments
    assert log.series("loss")[0].tolist() == [10, 20, 30, 40, 50, 60]
    assert log.series("loss")[1][0] == 11.0
    assert grpo.series("loss")[0].tolist() == [10, 20, 30, 40] and grpo.series("loss")[1][0] == 10.0
    assert "step_time_s" in grpo.metrics and "step_time_s" not in log.metrics
