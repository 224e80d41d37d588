"""Issues #31/#32 (docs/diagnosis.md, "Import: steps, epochs and runs"): GluonCV-style consoles. A file several launches
appended to with an ``Epoch E iteration I/N`` step axis is one run per launch that trains, each counted from its own
epoch 0 as ``E * N + I``; a NaN that a running mean over the epoch carries to each epoch's end is one
incident. Every input here is synthetic (own numbers in the layout)."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from ingest.formats import read_log
from ingest.formats.eval_lines import eval_pairs
from ingest.formats.generic import line_pairs
from stab_core.spikes import detect_spikes
from tests.conftest import metric_series, write_log_lines


def _launch(epochs: int, per_epoch: int, start: float, *, nan_at: int | None = None) -> list[str]:
    lines = ["Namespace(batch_size=8, epochs=30, lr=0.02, start_epoch=0, workers=4)", "Starting Epoch: 0"]
    for e in range(epochs):
        for i in range(10, per_epoch, 10):
            # the printed N wobbles by one late in the epoch, as a logger of a ragged last batch does
            n = per_epoch + (1 if i > per_epoch - 15 else 0)
            loss = "nan" if nan_at is not None and e * per_epoch + i >= nan_at else f"{start / (1 + e + i / 100):.3f}"
            lines.append(f"Epoch {e} iteration {i:04d}/{n:04d}: training loss {loss}")
        lines.append(f"Epoch {e} validation pixAcc: 0.{60 + e}, mIoU: 0.{20 + e}")
    return lines


def test_relaunches_appended_to_one_file_are_one_run_each_on_a_global_epoch_axis(tmp_path: Path) -> None:
    empty = ["Namespace(batch_size=8, epochs=30, lr=0.01, start_epoch=0, workers=4)", "Model file not found."]
    lines = empty + _launch(1, 203, 4.0, nan_at=0)[:4] + empty + _launch(1, 203, 4.0, nan_at=50)[:7]
    lines += _launch(4, 203, 3.0)
    parsed = read_log([write_log_lines(tmp_path, lines)])
    runs = [parsed, *parsed.segments]
    assert len(runs) == 3  # the empty launches print no training line: no run
    steps, values = metric_series(runs[0], "loss")
    assert steps == [10, 20]
    steps, values = metric_series(runs[1], "loss")
    assert steps == [10, 20, 30, 40, 50] and values[-1] != values[-1]
    steps, _ = metric_series(runs[2], "loss")
    # step = epoch * N + iteration with N the epoch's first printed denominator (203, never 204)
    assert steps[18:22] == [190, 200, 213, 223] and steps[-1] == 3 * 203 + 200
    assert steps == sorted(steps)


def test_a_pair_printed_with_a_magnitude_and_a_token_rate_is_the_token_throughput(tmp_path: Path) -> None:
    assert ("tok/s", 98500.0, None) in line_pairs("[step 40]\tloss=3.2\tthroughput=98.5K tks/s\tlr=0.0001")
    assert ("tok/s", 2100000.0, None) in line_pairs("step 7 | speed=2.1M tokens/sec | loss 1.5")
    assert ("x", 3000.0, None) in line_pairs("step 7 x=3K loss=2")  # a bare magnitude stays the key's value
    lines = ["Namespace(num_steps=2000, lr=0.0001)"]
    lines += [
        f"INFO:root:[step {s}]\tmlm_loss={9 - s / 400:.4f}\tthroughput={120 + s % 7}.0K tks/s\tlr=0.0001 time=60.1"
        for s in range(99, 2000, 100)
    ]
    parsed = read_log([write_log_lines(tmp_path, lines)])
    steps, values = metric_series(parsed, "throughput_tok_s")
    assert steps[:2] == [99, 199] and values[0] == 121000.0


def _speedometer(batches: range, epochs: int, lr: float) -> list[str]:
    lines = [f"Namespace(batch_size=64, lr={lr}, num_epochs={epochs}, log_interval={batches.step})"]
    for e in range(epochs):
        for b in batches:
            loss = 0.002 / (1 + e + b / 1000)
            lines.append(f"Epoch[{e}] Batch [{b}]\tSpeed: {900 + b % 13:.2f} samples/sec\tloss={loss:.6f}\tlr={lr}")
        lines.append(f"Epoch[{e}]\t\tSpeed: 880 samples/sec over 95 secs\tloss={0.002 / (1 + e):.6f}")
    return lines


def test_speedometer_lines_of_two_trainings_appended_to_one_file_are_two_runs(tmp_path: Path) -> None:
    lines = _speedometer(range(19, 160, 20), 6, 0.004) + _speedometer(range(49, 400, 50), 5, 0.001)
    parsed = read_log([write_log_lines(tmp_path, lines)])
    runs = [parsed, *parsed.segments]
    assert len(runs) == 2  # the epoch going back to 0 is a relaunch, though its first batch (49) is past 19
    steps, _ = metric_series(runs[0], "loss")
    assert steps[:9] == [19, 39, 59, 79, 99, 119, 139, 159, 179] and steps[-1] == 5 * 160 + 159
    steps, _ = metric_series(runs[1], "loss")
    assert steps[:9] == [49, 99, 149, 199, 249, 299, 349, 399, 449] and steps[-1] == 4 * 400 + 399


def test_an_epochs_validation_line_without_a_separator_is_its_evaluation(tmp_path: Path) -> None:
    assert eval_pairs("Epoch 4 validation pixAcc: 0.702, mIoU: 0.331", line_pairs) == [
        ("val_pixacc", 0.702, None),
        ("val_miou", 0.331, None),
    ]
    assert eval_pairs("Epoch 4 iteration 0020/0203: training loss 1.25", line_pairs) == []
    parsed = read_log([write_log_lines(tmp_path, _launch(3, 203, 3.0))])
    steps, values = metric_series(parsed, "val_miou")
    assert steps == [200, 403, 606] and values == [0.2, 0.21, 0.22]


def _component_log(ranks: int) -> list[str]:
    lines = ["$ mpirun -np 16 python train_mask_rcnn.py --epochs 3"]
    settings = "Namespace(batch_size=16, epochs=3, lr=0.02, lr_warmup=500, momentum=0.9, wd=0.0001)"
    lines += [f"[1,{r}]<stderr>:INFO:root:{settings}" for r in range(ranks)]
    lines += [f"[1,{r}]<stderr>:INFO:root:Start training from [Epoch 0]" for r in range(ranks)]
    for e in range(3):
        for b in range(49, 300, 50):
            f = 1 + e + b / 300
            lines.append(
                f"[1,0]<stderr>:INFO:root:[Epoch {e}][Batch {b}], Speed: {700 + b % 9:.3f} samples/sec, "
                f"RPN_Conf={0.2 / f:.3f},RPN_SmoothL1={0.05 / f:.3f},RCNN_CrossEntropy={0.8 / f:.3f},"
                f"RCNN_Mask={0.7 / f:.3f},RPNL1Loss={0.5 / f:.3f}"
            )
    return lines


def test_loss_components_without_a_total_under_rank_prefixes_are_read(tmp_path: Path) -> None:
    # a settings line every rank prints alike is one record: 40 copies do not outvote the metric lines
    parsed = read_log([write_log_lines(tmp_path, _component_log(40))])
    steps, values = metric_series(parsed, "RCNN_CrossEntropy")
    assert len(steps) == 18 and steps[:7] == [49, 99, 149, 199, 249, 299, 349]
    assert values[0] == round(0.8 / (1 + 49 / 300), 3)
    assert {"RPN_Conf", "RCNN_Mask", "RPNL1Loss"} <= set(parsed.metrics)


def _running_mean_with_nan_epochs(nan_from: dict[int, int], epochs: int = 30, lines: int = 9) -> np.ndarray:
    """A loss printed as the running mean of the epoch so far: NaN from a bad batch to the epoch's end."""
    values = []
    for e in range(epochs):
        for i in range(lines):
            bad = e in nan_from and i >= nan_from[e]
            values.append(math.nan if bad else 2.0 / (1 + e / 5) + 0.01 * ((i * 7 + e) % 3))
    return np.asarray(values)


def test_a_nan_recurring_in_a_running_mean_epoch_after_epoch_is_one_incident() -> None:
    # NaN from epoch 8, mostly whole epochs, then sporadic epochs with a few finite lines before it
    nan_from = {8: 5, 9: 0, 10: 1, 11: 6, 12: 0, 13: 3, 15: 2, 18: 6, 19: 7}
    values = _running_mean_with_nan_epochs(nan_from)
    steps = np.arange(1, values.shape[0] + 1) * 20
    events = detect_spikes(steps, values, "loss")
    assert len(events) == 1 and events[0].nonfinite
    assert events[0].start == steps[8 * 9 + 5] and events[0].recovery_step == steps[20 * 9]


def test_two_lone_nans_far_apart_stay_two_incidents() -> None:
    values = _running_mean_with_nan_epochs({})
    values[100], values[140] = math.nan, math.nan
    events = detect_spikes(np.arange(values.shape[0]) * 10, values, "loss")
    assert [e.start for e in events if e.nonfinite] == [1000, 1400]


def test_loss_terms_do_not_outvote_a_consoles_step_and_loss_lines(tmp_path: Path) -> None:
    # an RL console that also prints a debug dict per step (its own counter, a policy and a value loss):
    # the Step/Loss lines hold the run's loss, so loss terms are no training lines and the dicts' counter
    # does not compete for the step key (only a log whose lines hold no canonical metric trains on terms)
    lines = []
    for step in range(1, 41):
        lines += [
            f"{{'prompt_len': {90 + step % 9}, 'steps_taken': {step * 30}, 'ratio_mean': tensor(1.0001, "
            f"device='mps:0'), 'adv_mean': tensor(-0.0055, device='mps:0'), 'policy_loss': -{step}e-05}}",
            f"Step: {step} | Loss: {0.001 * (step % 5) - 0.002:.4f} | KL: {0.0001 * (step % 3):.4f}",
        ]
    parsed = read_log([write_log_lines(tmp_path, lines)])
    steps, values = metric_series(parsed, "loss")
    assert steps == list(range(1, 41))
    assert values[:3] == [-0.001, 0.0, 0.001]
