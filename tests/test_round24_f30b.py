"""Round 24, f30b (issue #31): layouts that were refused, metrics without their role, junk metric names and
units (docs/diagnosis.md, "Rules added in round 24": f30b)."""

from __future__ import annotations

import json
from pathlib import Path

from ingest.formats import detect, read_log
from tests.log_text import write_lines


def test_a_json_object_keyed_by_step_is_a_step_keyed_metric_file(tmp_path: Path) -> None:
    """NeMo Megatron-Bridge's golden values: ``{"0": {"lm loss": .., "elapsed time per iteration (ms)": ..}, ..}``
    with run-level totals (``alloc``) beside the steps."""
    doc: dict[str, object] = {
        str(s): {"lm loss": 10.0 - 0.1 * s, "elapsed time per iteration (ms)": 230.0 + s, "GPU utilization": 270.0}
        for s in range(12)
    }
    doc["alloc"], doc["max_alloc"] = 81.9, 93.2
    path = tmp_path / "golden_values.json"
    path.write_text(json.dumps(doc, indent=4))
    log = read_log([path])
    steps, loss = log.series("loss")
    assert steps.tolist() == list(range(12)) and loss[0] == 10.0
    assert log.series("step_time_s")[1][0] == 0.23  # ms in the key: stored in seconds
    assert "alloc" not in log.metrics and "max_alloc" not in log.metrics


def _swin_train(epoch: int, total: int, loss: float) -> str:
    return (
        f"[2024-09-04 20:35:07 swin_base] (main.py 257): INFO Train: [{epoch}/{total}][0/4]\teta 0:00:03 lr 0.000100"
        f"\t wd 0.0500\ttime 0.9720 (0.9720)\tloss {loss:.4f} ({loss:.4f})\tgrad_norm 18.4493 (18.4493)"
        "\tloss_scale 65536.0000 (65536.0000)\tmem 3277MB"
    )


def _swin_eval(val: float) -> list[str]:
    return [
        "[2024-09-04 20:35:10 swin_base] (main.py 300): INFO Test: [0/4]\tTime 0.325 (0.325)\tLoss 13.2 (13.2)"
        "\tMAE 3.491 (3.491)\tMem 3952MB",
        f"[2024-09-04 20:35:10 swin_base] (main.py 306): INFO  * Average Loss: {val:.4f}, Average MAE: 3.991",
    ]


def test_a_swin_console_of_launches_is_read_one_run_per_launch_a_record_per_epoch(tmp_path: Path) -> None:
    banner = "[2024-09-04 20:10:10 swin_base] (main.py 381): INFO Full config saved to output/default/config.json"
    lines = [banner, "AMP_ENABLE: false", "  BASE_LR: 0.0001"]
    for e in range(3):
        lines += [_swin_train(e, 300, 15.0 - e), *_swin_eval(18.0 - e)]
    lines += [banner, "  BASE_LR: 0.0001"]  # a second launch resumed from epoch 2's checkpoint
    lines.append(
        "[2024-09-05 14:15:40 swin_base] (utils.py 36): INFO => loaded successfully 'ckpt_epoch_2.pth' (epoch 2)"
    )
    lines += _swin_eval(16.5)
    for e in range(3, 6):
        lines += [_swin_train(e, 300, 15.0 - e), *_swin_eval(18.0 - e)]
    path = write_lines(tmp_path, "log_rank0.txt", lines)
    assert detect([path])[0][0] == "timm_console"
    log = read_log([path])
    assert len(log.segments) == 1  # each 'Full config saved' banner starts a launch
    steps, loss = log.series("loss")
    assert steps.tolist() == [0, 1, 2] and loss.tolist() == [15.0, 14.0, 13.0]  # one line an epoch: the epoch
    assert log.series("val_loss")[1].tolist() == [18.0, 17.0, 16.0]
    assert log.series("step_time_s")[1][0] == 0.972 and log.series("grad_norm")[1][0] == 18.4493
    second = log.segments[0]
    assert second.series("loss")[0].tolist() == [3, 4, 5]
    # the resumed launch's first evaluation is the loaded checkpoint's, at its epoch
    assert second.series("val_loss")[0].tolist() == [2, 3, 4, 5]
    assert second.series("val_loss")[1][0] == 16.5
    assert "val_mae" in log.metrics and "eta" not in log.metrics
