"""Consoles that were refused as "format not recognised" (issue #31, held-out corpus): each fixture is
written here in the exact shape of the real log, values of our own."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from ingest.formats import read_log

# --------------------------------------------------------------------------- word_language_model


def _wlm_log(path: Path, losses: list[list[float]], per_epoch: int = 2983, interval: int = 200) -> Path:
    """PyTorch examples/word_language_model: a Namespace dump, per epoch the training lines every
    ``interval`` batches and the end-of-epoch validation line, then the test line."""
    lines = ["Namespace(batch_size=20, bptt=35, clip=0.25, cuda=True, epochs=2, log_interval=200, lr=20)"]
    for epoch, epoch_losses in enumerate(losses, start=1):
        for i, loss in enumerate(epoch_losses, start=1):
            lines.append(
                f"| epoch {epoch:3d} | {i * interval:5d}/{per_epoch:5d} batches | lr {20 / epoch:02.2f} | "
                f"ms/batch {11.5 + i / 100:5.2f} | loss {loss:5.2f} | ppl {math.exp(loss):8.2f}"
            )
        lines.append("-" * 89)
        lines.append(
            f"| end of epoch {epoch:3d} | time: 35.58s | valid loss {epoch_losses[-1]:5.2f} | "
            f"valid ppl {math.exp(epoch_losses[-1]):8.2f}"
        )
        lines.append("-" * 89)
    lines += [
        "=" * 89,
        f"| End of training | test loss {losses[-1][-1]:5.2f} | test ppl {math.exp(losses[-1][-1]):8.2f}",
    ]
    path.write_text("\n".join(lines) + "\n")
    return path


def test_word_language_model_console_is_read_on_the_global_batch_axis(tmp_path: Path) -> None:
    log = _wlm_log(tmp_path / "model_LSTM_epochs_2.md", [[7.63, 6.90, 6.51], [6.10, 5.95, 5.80]])
    parsed = read_log([log])  # on main: "format not recognised"
    assert parsed.format == "word_language_model"
    steps, loss = parsed.series("loss")
    # step = (epoch - 1) * batches per epoch + batch
    assert steps.tolist() == [200, 400, 600, 3183, 3383, 3583]
    assert loss.tolist() == [7.63, 6.90, 6.51, 6.10, 5.95, 5.80]
    assert parsed.series("lr")[1].tolist() == [20.0] * 3 + [10.0] * 3
    assert parsed.series("step_time_s")[1][0] == pytest.approx(0.01151)  # ms/batch in seconds
    val_steps, val_loss = parsed.series("val_loss")
    assert val_steps.tolist() == [2983, 5966]  # the last batch of each epoch
    assert val_loss.tolist() == [6.51, 5.80]
    assert parsed.series("test_loss")[0].tolist() == [5966]
    assert parsed.segments == []
    assert parsed.events == []


def test_a_word_language_model_run_nan_from_the_start_imports_its_nans(tmp_path: Path) -> None:
    log = _wlm_log(tmp_path / "model_RNN_RELU.md", [[math.nan] * 3, [math.nan] * 3])
    parsed = read_log([log])
    steps, loss = parsed.series("loss")
    assert steps.tolist() == [200, 400, 600, 3183, 3383, 3583]
    assert np.isnan(loss).all()
    assert np.isnan(parsed.series("val_loss")[1]).all()
