"""Consoles pasted in Markdown notes and READMEs (issues #31/#32, round 15: t21c): an epoch counter
in brackets without its total, one block of lines per epoch for several models in turn."""

from __future__ import annotations

from pathlib import Path

from ingest.formats import detect, read_log
from ingest.formats.generic import line_pairs


def _write(tmp_path: Path, name: str, lines: list[str]) -> Path:
    path = tmp_path / name
    path.write_text("\n".join(lines) + "\n")
    return path


def test_a_bracketed_epoch_without_its_total_is_the_step(tmp_path: Path) -> None:
    assert ("Epoch", 4.0, None) in line_pairs("Epoch [4], train_loss: 0.5, val_loss: 0.7, val_acc: 0.61")
    lines = ["A small CNN on a toy set", "", "**Epoch results**", "", "```"]
    lines += [f"Epoch [{e}], train_loss: {2 - e / 10:.4f}, val_loss: {2.1 - e / 20:.4f}" for e in range(12)]
    lines += ["```", "", "**Loss Plot**", "", "![image](https://example.org/plot.png)"]
    log = read_log([_write(tmp_path, "README.md", lines)])
    steps, loss = log.series("loss")
    assert steps.tolist() == list(range(12)) and loss[0] == 2.0 and loss[-1] == 0.9
    assert log.series("val_loss")[1][-1] == 1.55


def test_epoch_blocks_of_models_trained_in_turn_are_runs_with_test_lines_as_validation(tmp_path: Path) -> None:
    lines = ["# notes", "", "```", "$ python train.py", "net-a: 1.5 GFlops - 20.1 MB", "{'train': 500, 'test': 100}"]
    for model, base in (("net-a", 3.0), ("net-b", 2.5)):
        for e in range(1, 7):
            lines += [
                f"{model} - Epoch {e}/6",
                "----------",
                f"lr: [{0.001 * e:.4f}]",
                f"train Loss: {base - e / 10:.4f} Top-1 Acc: {10.0 * e:.4f} Top-5 Acc: {15.0 * e:.4f}",
                f"test Loss: {base + 0.1 - e / 10:.4f} Top-1 Acc: {9.0 * e:.4f} Top-5 Acc: {14.0 * e:.4f}",
            ]
        lines += [f"Training {model} complete in 12m 5s", "Best test Top-1 Acc: 54.000000", f"train {model} done"]
    lines.append("```")
    path = _write(tmp_path, "log-compare.md", lines)
    assert detect([path])[0][0] == "epoch_blocks"
    log = read_log([path])
    # the second model's epochs 1..6 are another run, not an overwrite of the first's
    assert len(log.segments) == 1
    for run, base in ((log, 3.0), (log.segments[0], 2.5)):
        steps, loss = run.series("loss")
        assert steps.tolist() == list(range(1, 7)) and loss[0] == base - 0.1 and loss[-1] == base - 0.6
        assert run.series("val_loss")[1][0] == base and run.series("lr")[1][2] == 0.003
        assert not {"val_val_loss", "Best_test_Top-1_Acc"} & set(run.metrics)
