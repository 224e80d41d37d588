"""Issue #31 (docs/diagnosis.md, "Import: metrics files"): batch 18's import faults, as rules for any file of the shape,
on synthetic inputs in each layout (own numbers): a JSON Lines file whose last line has no newline, fairseq's
sentence and token counts, and a metrics CSV's lone ``samples`` counter."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ingest.formats import FALLBACK_READERS, read_log
from ingest.formats.csv_counters import is_run_clock
from ingest.formats.run_loss import lone_training_loss


def test_jsonl_last_line_without_newline_is_a_record(tmp_path: Path) -> None:
    """An epoch-per-line JSON Lines log (MAE/DeiT's log.txt: ``train_loss``, ``NaN`` grad norms) whose
    last object ends the file without a newline: it is the last epoch, not a one-line summary."""
    rows = [
        {
            "train_lr": 1e-3 / (e + 1),
            "train_loss": 4.0 - 0.5 * e,
            "train_grad_norm": float("nan") if e == 1 else 1.5,
            "test_loss": 2.0 - 0.1 * e,
            "epoch": e,
        }
        for e in range(4)
    ]
    path = tmp_path / "log.txt"
    path.write_text("\n".join(json.dumps(r) for r in rows))  # no newline after the last object
    parsed = read_log([path])
    steps, loss = parsed.series("loss")
    assert steps.tolist() == [0, 1, 2, 3]
    assert loss[-1] == pytest.approx(2.5)
    assert parsed.series("lr")[1][-1] == pytest.approx(2.5e-4)
    assert parsed.series("val_loss")[1][-1] == pytest.approx(1.7)


def test_fairseq_sentence_and_token_counts_are_no_metric(tmp_path: Path) -> None:
    """fairseq's CTC/wav2vec criteria log ``nsentences`` and ``ntokens`` per interval and per
    validation pass (``valid_ntokens``): counts of what a step saw, never a training metric."""
    lines = []
    for n in range(1, 5):
        record = {
            "epoch": 1,
            "update": n / 10,
            "loss": f"{900 - 50 * n}",
            "ntokens": f"{5000 + n}",
            "nsentences": f"{60 + n}",
            "num_updates": f"{n}",
            "lr": "1e-06",
            "gnorm": "300.5",
        }
        lines.append(f"[2030-01-01 00:00:0{n},100][train_inner][INFO] - " + json.dumps(record))
    valid = {
        "epoch": 1,
        "valid_loss": "800.5",
        "valid_ntokens": "3000",
        "valid_nsentences": "40",
        "valid_wer": "99.1",
        "valid_num_updates": "4",
    }
    lines.append("[2030-01-01 00:00:09,100][valid][INFO] - " + json.dumps(valid))
    path = tmp_path / "hydra_train.log"
    path.write_text("\n".join(lines) + "\n")
    parsed = read_log([path])
    assert parsed.format == "fairseq"
    assert not {"ntokens", "nsentences", "valid_ntokens", "valid_nsentences"} & set(parsed.metrics)
    assert parsed.series("valid_wer")[1].tolist() == [99.1]
    assert parsed.series("loss")[0].tolist() == [1, 2, 3, 4]


def test_lone_samples_column_counts_the_run(tmp_path: Path) -> None:
    """OpenAI's guided-diffusion logger writes ``samples`` (the samples seen so far) beside ``step``:
    a counter, no metric; a name that only contains the word (``samples_per_s``) is no counter."""
    assert is_run_clock("samples")
    assert not is_run_clock("samples_per_s") and not is_run_clock("val_samples_acc")
    header = "grad_norm,loss,loss_q0,samples,step"
    rows = [f"{2.0 - 0.1 * s:.3f},{1.0 / (s + 1):.4f},{0.9 / (s + 1):.4f},{(s + 1) * 8},{s}" for s in range(6)]
    path = tmp_path / "progress.csv"
    path.write_text("\n".join([header, *rows]) + "\n")
    parsed = read_log([path])
    assert "samples" not in parsed.metrics
    assert parsed.series("loss")[0].tolist() == [0, 1, 2, 3, 4, 5]


def test_lightning_eval_batch_rows_are_off_the_training_axis(tmp_path: Path) -> None:
    """A Lightning metrics.csv with on_step+on_epoch validation keys: the per-batch validation rows sit
    on the evaluation-batch counter (0, 1, 2 ... with an empty epoch) and are no restart of the run; the
    ``_epoch`` aggregate at each epoch's last training step is the validation series."""
    header = "epoch,step,train_loss_epoch,train_loss_step,val_acc_epoch,val_acc_step,val_loss_epoch,val_loss_step"
    rows = []
    batch = 0
    for epoch in range(3):
        for step in (10 * epoch + 4, 10 * epoch + 9):
            rows.append(f"{epoch},{step},,{3.0 - 0.1 * step:.2f},,,,")
        for _ in range(3):  # three validation batches, on their own counter
            rows.append(f",{batch},,,,{0.5 + 0.01 * batch:.2f},,{2.5 + 0.01 * batch:.2f}")
            batch += 1
        end = 10 * epoch + 9
        rows.append(f"{epoch},{end},{3.0 - 0.1 * end:.2f},,,,,")
        rows.append(f"{epoch},{end},,,{0.6 + 0.1 * epoch:.2f},,{2.0 + 0.1 * epoch:.2f},")
    path = tmp_path / "metrics.csv"
    path.write_text("\n".join([header, *rows]) + "\n")
    parsed = read_log([path])
    assert not parsed.segments  # one run
    steps, loss = parsed.series("loss")
    assert steps.tolist() == [4, 9, 14, 19, 24, 29] and loss[-1] == pytest.approx(0.1)
    steps, val = parsed.series("val_loss")
    assert steps.tolist() == [9, 19, 29] and val.tolist() == pytest.approx([2.0, 2.1, 2.2])
    assert parsed.series("train_loss_epoch")[0].tolist() == [9, 19, 29]


def test_lightning_eval_batch_rows_in_the_fallback_csv_reader(tmp_path: Path) -> None:
    """The same file read by the wide-CSV reader (a layout nobody wrote a reader for): one run, the
    validation series from the epoch aggregate."""
    test_lightning_eval_batch_rows_are_off_the_training_axis(tmp_path)
    parsed = read_log([tmp_path / "metrics.csv"], reader_set=FALLBACK_READERS)
    assert not parsed.segments
    steps, val = parsed.series("val_loss")
    assert steps.tolist() == [9, 19, 29] and val.tolist() == pytest.approx([2.0, 2.1, 2.2])


def test_lone_training_loss_is_the_run_loss(tmp_path: Path) -> None:
    """A Lightning metrics.csv with a LearningRateMonitor and one training loss under a split prefix
    (``train/nll_loss``) and an evaluation metric (``val/rmse_loss``): the training loss is the run's
    loss; with a second training loss beside it, neither is."""
    header = "epoch,lr-Adam,step,train/nll_loss,val/rmse_loss"
    rows = []
    for i in range(1, 7):
        rows += [f",{1e-3 * i:.4f},{10 * i - 1},,", f"{i // 4},,{10 * i - 1},{0.9 / i:.4f},"]
    rows.append("1,,59,,0.25")
    path = tmp_path / "metrics.csv"
    path.write_text("\n".join([header, *rows]) + "\n")
    parsed = read_log([path])
    steps, loss = parsed.series("loss")
    assert steps.tolist() == [9, 19, 29, 39, 49, 59] and loss[0] == pytest.approx(0.9)
    assert parsed.meta["loss_source"] == {"name": "train/nll_loss", "kind": "training"}
    assert lone_training_loss(["train/nll_loss", "train/kl_loss"]) is None
    assert lone_training_loss(["nll_loss", "val/rmse_loss"]) is None
