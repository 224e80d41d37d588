"""Issue #31 (docs/diagnosis.md, "Import: format readers"): framework consoles: fairseq's bookkeeping fields and named
validation subsets, a token rate printed after its value."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from ingest.formats import read_log

LN2 = math.log(2.0)


def _series(parsed: object, metric: str) -> tuple[list[int], list[float]]:
    steps, values = parsed.series(metric)  # type: ignore[attr-defined]
    return [int(s) for s in steps], [float(v) for v in values]


def _hydra_line(stamp: str, tag: str, record: str) -> str:
    return f"[2023-11-21 {stamp},616][{tag}][INFO] - {{{record}}}"


def test_fairseq_bookkeeping_is_no_metric_and_the_first_valid_subset_is_val_loss(tmp_path: Path) -> None:
    """hydra_train's JSON records: ``bsz``, ``wpb``, ``wall``, ``train_wall``, ``gb_free``, ``count_*`` and
    the epoch are bookkeeping; ``ups`` gives the step time; of two validation subsets the config's first
    (``valid_subset: 'dev-other,dev-clean'``) is the val_loss, the other kept under its own name."""
    config = (
        "{'common': {'log_format': 'json'}, 'dataset': {'valid_subset': 'dev-other,dev-clean', 'max_tokens': 1400000}}"
    )
    lines = [f"[2023-11-21 19:49:02,072][fairseq_cli.train][INFO] - {config}"]
    for i, step in enumerate((200, 400, 600, 800, 1000, 1200)):
        lines.append(
            _hydra_line(
                f"20:{10 + i}:21",
                "train_inner",
                f'"epoch": 1, "update": {0.1 * (i + 1):.3f}, "loss": "{11.0 - i:.3f}", "count_m_0": "65969.8", '
                f'"loss_m_0": "8.9", "ppl": "{2 ** (11.0 - i):.2f}", "wps": "10697.1", "ups": "0.16", '
                '"wpb": "65969.8", '
                f'"bsz": "196.8", "num_updates": "{step}", "lr": "3.125e-06", "gnorm": "1.478", "clip": "0", '
                f'"loss_scale": "32", "train_wall": "1232", "gb_free": "65.4", "wall": "{1273 * (i + 1)}"',
            )
        )
    for subset, loss in (("dev-other", "7.552"), ("dev-clean", "7.566")):
        lines.append(
            _hydra_line(
                "20:30:00",
                subset,
                f'"epoch": 1, "{subset}_loss": "{loss}", "{subset}_count_m_0": "1720.42", "{subset}_ppl": "187.72", '
                f'"{subset}_wps": "19924.8", "{subset}_wpb": "1720.4", "{subset}_bsz": "10.8", '
                f'"{subset}_num_updates": "1200"',
            )
        )
    path = tmp_path / "pretrain.log"
    path.write_text("\n".join(lines) + "\n")
    parsed = read_log([path])
    assert parsed.format == "fairseq"
    steps, loss = _series(parsed, "loss")
    assert steps == [200, 400, 600, 800, 1000, 1200]
    assert loss[0] == pytest.approx(11.0 * LN2)
    assert _series(parsed, "val_loss")[0] == [1200]
    assert _series(parsed, "val_loss")[1][0] == pytest.approx(7.552 * LN2)
    assert _series(parsed, "dev-clean_loss") == ([1200], [7.566])
    np.testing.assert_allclose(_series(parsed, "step_time_s")[1], [1 / 0.16] * 6)
    assert _series(parsed, "throughput_tok_s")[1][0] == 10697.1
    for name in parsed.metrics:
        assert not any(b in name for b in ("bsz", "wpb", "wall", "gb_free", "count_", "update")), name
    assert "epoch" not in parsed.metrics


def test_fairseq_simple_lines_and_epoch_summaries_keep_no_bookkeeping(tmp_path: Path) -> None:
    lines = [
        f"2023-06-13 17:3{i}:08 | INFO | train_inner | epoch 143:     {85 + 100 * i} / 282 loss=3.1{i}, nll_loss=1.2, "
        f"ppl=8.8, wps=72384.3, ups=2.00, wpb=59997.9, bsz=2186.3, num_updates={40100 + 100 * i}, lr=0.000157917, "
        "gnorm=0.489, clip=0, loss_scale=32768, train_wall=48, wall=0"
        for i in range(3)
    ]
    lines.append(
        "2023-06-13 17:40:00 | INFO | train | epoch 143 | loss 3.14 | nll_loss 1.23 | ppl 8.82 | wps 106814 | "
        "ups 1.77 | wpb 60411 | bsz 2157.9 | num_updates 40297 | lr 0.00015753 | gnorm 0.485 | train_wall 260 | wall 0"
    )
    path = tmp_path / "train.log"
    path.write_text("\n".join(lines) + "\n")
    parsed = read_log([path])
    assert parsed.format == "fairseq"
    assert _series(parsed, "step_time_s")[1] == [0.5, 0.5, 0.5]
    assert _series(parsed, "epoch_train_loss") == ([40297], [3.14])
    for name in parsed.metrics:
        assert not any(b in name for b in ("bsz", "wpb", "wall")), name


def test_a_token_rate_after_its_value_is_the_throughput(tmp_path: Path) -> None:
    """``| 427 tok/s |``: a speed in tokens printed after its value (as ``1.16it/s`` is in steps)."""
    lines = [
        f"step {700 + 10 * i:5d} | loss {4.5 - 0.01 * i:.4f} | ppl {469.1 - i:.1f} | lr 2.99e-04 | {427 + i} tok/s | "
        "mesoLG 0.58"
        for i in range(30)
    ]
    path = tmp_path / "training.log"
    path.write_text("\n".join(lines) + "\n")
    parsed = read_log([path])
    steps, tps = _series(parsed, "throughput_tok_s")
    assert steps[:2] == [700, 710]
    assert tps[:2] == [427.0, 428.0]
    assert "step_time_s" not in parsed.metrics
