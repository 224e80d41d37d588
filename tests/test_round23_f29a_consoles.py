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
