"""Issues #31/#32 (docs/diagnosis.md, "Import: steps, epochs and runs"): text consoles whose record is split over lines
or prints no step counter. Every input here is synthetic (own numbers in the layout)."""

from __future__ import annotations

from pathlib import Path

import pytest

from ingest.formats import FALLBACK_READERS, read_log
from tests.conftest import metric_series, write_log_lines


def test_three_line_crlf_epoch_record(tmp_path: Path) -> None:
    """``epoch N`` / ``loss: x`` / ``test accuracy: A%, (c/t)`` with CRLF endings: the ``\\r`` that
    ends each line is no progress-bar redraw that hides the fields before it."""
    lines = []
    for epoch in range(1, 13):
        lines += [f"epoch {epoch:>3}", f"loss: {4.0 / epoch:.6f}", f"test accuracy: {20 + epoch}.50%, ({epoch}0/100)"]
    path = tmp_path / "train_log.txt"
    path.write_bytes(("\r\n".join(lines) + "\r\n").encode())
    parsed = read_log([path])
    steps, values = metric_series(parsed, "loss")
    assert steps == list(range(1, 13))
    assert values[0] == pytest.approx(4.0) and values[-1] == pytest.approx(4.0 / 12)


def test_meter_behind_a_colon_closed_logging_prefix(tmp_path: Path) -> None:
    """python logging's ``%(asctime)s:%(levelname)s:`` before ``Epoch: [E][B/N]  Loss x (avg)``: the
    step is ``E * N + B``, as without the prefix."""
    lines = ["2031-03-04 08:00:00,001:INFO: Initializing train dataset"]
    for epoch in range(6):
        for batch in (0, 10, 20):
            loss = 3.0 / (1 + epoch * 3 + batch / 10)
            lines.append(
                f"2031-03-04 08:0{epoch}:{batch:02d},500:INFO: "
                f"Epoch: [{epoch}][{batch:2d}/30]\tLoss {loss:.6f} ({loss:.6f})"
            )
    parsed = read_log([write_log_lines(tmp_path, lines)])
    steps, values = metric_series(parsed, "loss")
    assert steps == [e * 30 + b for e in range(6) for b in (0, 10, 20)]
    assert values[0] == pytest.approx(3.0)


def test_epoch_and_step_of_n_in_brackets_after_a_prefix_only_line(tmp_path: Path) -> None:
    """Each logging message opens with a newline (the prefix stands alone on its line) and prints
    ``Epoch [E/M], Step [S/N], Loss: x``: the step is ``E * N + S``; the epoch summary adds no step."""
    lines = ["2031-05-06 09:00:00,000 - INFO: Logger created"]
    for epoch in range(5):
        for step in (50, 100, 150):
            lines += [
                "2031-05-06 09:00:01,000 - INFO: ",
                f"Epoch [{epoch}/5], Step [{step}/160], Loss: {1 / (1 + epoch * 3 + step / 50):.5f}",
            ]
            lines.append(f"2031-05-06 09:00:02,000 - INFO: Time elasped: {step * 0.15:.3f}")
        lines.append(
            f"2031-05-06 09:00:03,000 - INFO: Epoch {epoch}: "
            f"train loss 0.5, train acc 0.{epoch + 1}, test acc 0.{epoch + 2}"
        )
    for readers in (None, FALLBACK_READERS):
        parsed = read_log([write_log_lines(tmp_path, lines)], reader_set=readers)
        steps, _ = metric_series(parsed, "loss")
        assert steps == [e * 160 + s for e in range(5) for s in (50, 100, 150)]


def test_total_loss_beside_its_terms_is_the_loss_and_an_eta_clock_no_metric(tmp_path: Path) -> None:
    """A loguru trainer line of ``total_loss`` and its terms (``iou_loss``, ``cls_loss``): the total is
    the loss; ``ETA: 1:02:03`` is a time left, no metric whose value is its hours."""
    lines = ["2031-09-10 11:00:00.000 | INFO     | pkg.trainer:before_train:12 - args: Namespace(fp16=False)"]
    for epoch in range(1, 5):
        for it in (10, 20, 30):
            total = 9.0 / (epoch * 3 + it / 10)
            lines.append(
                f"2031-09-10 11:0{epoch}:{it}.000 | INFO     | pkg.trainer:after_iter:99 - epoch: {epoch}/50, "
                f"iter: {it}/35, iter_time: 0.25s, total_loss: {total:.3f}, iou_loss: {total / 2:.3f}, "
                f"cls_loss: {total / 4:.3f}, lr: 1.0e-04, ETA: {5 - epoch}:0{epoch}:1{it // 10}"
            )
    parsed = read_log([write_log_lines(tmp_path, lines)], reader_set=FALLBACK_READERS)
    assert parsed.meta["mapping"]["loss"] == "total_loss"
    _, values = metric_series(parsed, "total_loss")
    assert values[0] == pytest.approx(9.0 / 4, abs=1e-3)
    assert "ETA" not in set(parsed.table["metric"].to_pylist())
