"""Layouts of batch 10's text logs, each on a few lines written here from the trainer's layout (issue #31)."""

from __future__ import annotations

from pathlib import Path

from ingest.formats import read_log


def test_epoch_and_step_of_n_restarting_each_epoch_is_one_run_on_a_global_step(tmp_path: Path) -> None:
    # 'Epoch E | Step S/N' with S restarting at every epoch (Python logging's 'INFO:__main__:' prefix)
    lines = [
        f"INFO:__main__:Epoch {e} | Step {s:4d}/40 | Loss: {2.0 - e * 0.4 - s / 100:.4f} | PPL: 5.0 | LR: 1.0e-04 |"
        f" Grad: {0.3 + s / 1000:.3f} | Time: 0.52s"
        for e in (0, 1)
        for s in range(0, 40, 10)
    ]
    path = tmp_path / "train.log"
    path.write_text("\n".join(lines) + "\n")
    parsed = read_log([path])
    assert parsed.series("loss")[0].tolist() == [0, 10, 20, 30, 40, 50, 60, 70]
    assert parsed.series("grad_norm")[1][-1] == 0.33
    one_based = tmp_path / "one_based.log"  # epochs counted from 1: (E - 1) * N + S
    rows = [f"Epoch {e} | Step {s}/20 | loss: {3.0 - s / 100 - e:.3f}" for e in (1, 2) for s in (5, 10, 15)]
    one_based.write_text("\n".join(rows) + "\n")
    assert read_log([one_based]).series("loss")[0].tolist() == [5, 10, 15, 25, 30, 35]


def test_hf_dict_after_a_printed_step_is_at_that_step(tmp_path: Path) -> None:
    # text-generation-webui's Training_PRO: 'Step:      3 {...}' every 4 steps
    lines = [
        f"Step: {s:6d} {{'loss': {2.4 + s / 1000:.4f}, 'grad_norm': inf, 'learning_rate': 8e-06,"
        f" 'epoch': {s / 228:.4f}}}"
        for s in range(3, 40, 4)
    ]
    lines.append("Step:     39 {'train_runtime': 120.5, 'train_loss': 2.44, 'epoch': 3.0}")
    path = tmp_path / "notes.md"
    path.write_text("\n".join(lines) + "\n")
    parsed = read_log([path])
    assert parsed.format == "hf_console"
    assert parsed.series("loss")[0].tolist() == list(range(3, 40, 4))


def test_hf_console_other_dicts_and_a_loading_bar_do_not_date_the_logs(tmp_path: Path) -> None:
    # a program's own dict (no key the Trainer logs) is no logs dict; a model-loading bar of another
    # total is not the training bar; Unsloth's banner says 'Total steps = T'
    lines = ["Loading weights: 100%|##########| 254/254 [00:00<00:00, 516.71it/s]", "Total steps = 20"]
    for n in range(1, 21):
        lines.append(f"  {n * 5}%|#         | {n}/20 [00:{n:02d}<01:00, 27.88s/it]Both `max_new_tokens` are set.")
        if n % 5 == 0:
            loss = f"{0.1 - n / 1000:.4f}"
            lines.append(f"{{'loss': '{loss}', 'grad_norm': '0.3', 'learning_rate': '8e-06', 'epoch': '{n / 8}'}}")
            lines.append("{'step': 0, 'agent_id': 'maker', 'reward': -0.67} of type {'step': Number} is not assignable")
    path = tmp_path / "output.log"
    path.write_text("\n".join(lines) + "\n")
    parsed = read_log([path])
    assert parsed.format == "hf_console"
    assert parsed.series("loss")[0].tolist() == [5, 10, 15, 20]
    assert parsed.meta["total_steps"] == 20
    assert "agent_id" not in parsed.metrics and "reward" not in parsed.metrics


def test_hf_console_a_bar_drawn_once_before_the_dicts_is_not_the_training_bar(tmp_path: Path) -> None:
    # a tokenizing bar before the first dict; the training bar (40 steps, 2 epochs) only at the end
    lines = ["Tokenizing: 100%|##########| 1500/1500 [00:01<00:00, 900.1 examples/s]"]
    lines += [
        f"{{'loss': {3.0 - n / 10:.2f}, 'learning_rate': 1e-05, 'epoch': {n * 10 / 20:.1f}}}" for n in range(1, 5)
    ]
    lines += [
        "{'train_runtime': 12.5, 'train_loss': 2.8, 'epoch': 2.0}",
        "100%|##########| 40/40 [00:12<00:00, 3.2it/s]",
    ]
    path = tmp_path / "README.md"
    path.write_text("\n".join(lines) + "\n")
    parsed = read_log([path])
    assert parsed.series("loss")[0].tolist() == [10, 20, 30, 40]
    assert parsed.meta["total_steps"] == 40
