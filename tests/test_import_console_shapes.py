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


# --------------------------------------------------------------------------- Keras fit()


def _keras_fit(losses: list[float], *, val: bool, total: int) -> list[str]:
    lines = ["Train on 40000 samples, validate on 10000 samples" if val else "Train on 50000 samples"]
    for epoch, loss in enumerate(losses, start=1):
        lines.append(f"Epoch {epoch}/{total}")
        tail = f" - val_loss: {loss * 0.8:.4f} - val_acc: 0.9000" if val else ""
        lines.append(f"{220 + epoch}s - loss: {loss:.4f} - acc: {1 - loss / 4:.4f}{tail}")
    return lines


def test_keras_fit_calls_are_segments_on_the_epoch_axis(tmp_path: Path) -> None:
    """Keras 1 verbose=2: two fit() calls whose epoch counters restart at 1 are two runs."""
    log = tmp_path / "model_training_log.txt"
    lines = [*_keras_fit([3.55, 1.09, 0.70], val=True, total=50), "stopped after  3 epochs"]
    lines += _keras_fit([0.21, 0.15], val=False, total=19)
    log.write_text("\n".join(lines) + "\n")
    parsed = read_log([log])  # on main: "format not recognised"
    assert parsed.format == "keras_console"
    runs = [parsed, *parsed.segments]
    assert len(runs) == 2
    assert runs[0].series("loss")[0].tolist() == [1, 2, 3]
    assert runs[0].series("loss")[1].tolist() == [3.55, 1.09, 0.70]
    assert runs[0].series("val_loss")[1].tolist() == [pytest.approx(v * 0.8, abs=1e-4) for v in (3.55, 1.09, 0.70)]
    assert runs[0].series("step_time_s")[1].tolist() == [221.0, 222.0, 223.0]  # the epoch's seconds
    assert runs[1].series("loss")[0].tolist() == [1, 2]
    assert runs[1].series("loss")[1].tolist() == [0.21, 0.15]
    assert "val_loss" not in runs[1].metrics
    assert all(not r.events for r in runs)  # a new fit() is not a rollback
    assert "samples" not in parsed.metrics


def test_keras2_progress_bar_line_is_read(tmp_path: Path) -> None:
    log = tmp_path / "fit.log"
    log.write_text(
        "Epoch 1/2\n1875/1875 [==============================] - 5s 3ms/step - loss: 0.2900 - accuracy: 0.9100\n"
        "Epoch 2/2\n1875/1875 [==============================] - 4s 2ms/step - loss: 0.1400 - accuracy: 0.9600\n"
    )
    parsed = read_log([log])
    assert parsed.series("loss")[1].tolist() == [0.29, 0.14]
    # '5s 3ms/step': a 3 ms step in a 5 s epoch (docs/diagnosis.md, "Import: step times and clocks")
    assert parsed.series("step_time_s")[1].tolist() == [0.003, 0.002]
    assert parsed.series("epoch_time_s")[1].tolist() == [5.0, 4.0]


# --------------------------------------------------------------------------- torchtitan in markdown


def test_torchtitan_lines_of_a_bracketed_logger_pasted_into_markdown(tmp_path: Path) -> None:
    """torchtitan through the ezpz logger (`[ts][I][components/metrics:437:log] step: N ...`), the
    console indented in a markdown note. On main: "format not recognised" (0 head lines matched)."""
    lines = ["> [!NOTE]", "> Aurora run, 1 node", "", "```bash"]
    lines.append("  [2025-09-11 14:09:20,264934][I][blendcorpus/train:556:train] Training starts at step 1.")
    for step, (loss, gnorm) in enumerate([(10.8595, 3.2105), (14.4458, 41.788), (11.3134, 14.0597)], start=1):
        lines.append(
            f"  [2025-09-11 14:09:4{step},954794][I][components/metrics:437:log] step: {step:2d}  loss: {loss:.4f}"
            f"  grad_norm: {gnorm:7.4f}  memory:  8.44GiB(13.20%)  tps: 6,697  tflops: 62.15  mfu: 20.84%"
        )
    lines.append("```")
    log = tmp_path / "aurora.md"
    log.write_text("\n".join(lines) + "\n")
    parsed = read_log([log])
    assert parsed.format == "torchtitan"
    assert parsed.series("loss")[0].tolist() == [1, 2, 3]
    assert parsed.series("loss")[1].tolist() == [10.8595, 14.4458, 11.3134]
    assert parsed.series("grad_norm")[1].tolist() == [3.2105, 41.788, 14.0597]
    assert parsed.series("throughput_tok_s", rank=0)[1].tolist() == [6697.0] * 3


# --------------------------------------------------------------------------- generic: eval-only losses


def test_a_custom_console_with_eval_losses_gets_a_proposed_mapping(tmp_path: Path) -> None:
    """`step N/M (P%): train loss x, val loss y | LR: z | Ts (R steps/sec)` every 500 steps between
    progress lines. On main: refused, an llm.c `val loss` line counted as "behind other text"; and
    the generic reader took `val loss` for the loss."""
    lines = ["🚀 Starting training", "TRAINING_DATA_SOURCE=sources/data.md \\"]
    for i, (train, val) in enumerate([(9.227, 9.268), (6.9544, 7.1291), (6.5811, 6.7096)]):
        step = 500 * i
        lines.append(
            f"step {step}/5000 ({step / 50:.1f}%): train loss {train:.4f}, val loss {val:.4f}"
            " | LR: 2.00e-05 | 17.5s (1.04 steps/sec)"
        )
        lines += [f"step {step + k}/5000 ({(step + k) / 50:.1f}%) | 0.85 steps/sec | ETA: 97.4m" for k in (25, 50)]
    log = tmp_path / "output_aborted"
    log.write_text("\n".join(lines) + "\n")
    parsed = read_log([log])
    assert parsed.format == "generic"
    assert parsed.series("loss")[0].tolist() == [0, 500, 1000]
    assert parsed.series("loss")[1].tolist() == [9.227, 6.9544, 6.5811]
    assert parsed.series("val_loss")[1].tolist() == [9.268, 7.1291, 6.7096]
