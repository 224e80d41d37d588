"""A file whose lines one reader takes as its trainer's own is read by it, not refused as "ambiguous"
(issue #31, "a detection that finds one format in a prefixed file is not ambiguous").

The rule: a reader whose metric lines in the head are only DeepSpeed's engine lines, or only the HF
Trainer's end-of-training summary dicts, steps back by more than the ambiguity margin when another
reader finds the trainer's own per-step lines (the more specific reader is used). Fixtures are written
here in the exact shape of the held-out corpus logs (a GPT-NeoX slurm log; a HF Trainer + ZeRO-3 log).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from ingest.formats import detect, read_log

_DS = "[2023-10-20 00:20:36,500] [INFO] [logging.py:96:log_dist] [Rank 0]"


def _neox_loss(step: int) -> float:
    return 11.0 - step * 0.0123456


def _neox_log(path: Path, steps: int = 12) -> Path:
    """GPT-NeoX on DeepSpeed: its arguments dump, then per step the engine's `step=` and `steps:`
    lines (4 decimals) and NeoX's own iteration line (7 significant digits), a validation line."""
    lines = [
        "NeoXArgs.from_ymls() ['configs/70M.yml']",
        "-------------------- arguments --------------------",
        "  train_iters ..................... 12..........................updated",
        "---------------- end of arguments ----------------",
        f"{_DS} DeepSpeed info: version=0.10.0, git-hash=unknown, git-branch=unknown",
    ]
    for s in range(1, steps + 1):
        loss = _neox_loss(s)
        lines += [
            f"{_DS} step={s}, skipped=0, lr=[{s * 1e-05:g}, {s * 1e-05:g}], mom=[[0.9, 0.95], [0.9, 0.95]]",
            f"{_DS} rank=0 time (ms) | forward: 101.99 | backward: 320.67 | step: 4.99",
            f"steps: {s} loss: {loss:.4f} iter time (s): 0.605 samples/sec: 845.628",
            f" samples/sec: 845.100 | iteration {s:8d}/{steps:8d} | elapsed time per iteration (ms): 605.9 |"
            f" learning rate: {s * 1e-05:.3E} | approx flops per GPU: 55.1TFLOPS | lm_loss: {loss:.6E} |"
            " loss scale: 4096.0 | number of skipped iterations:   0 | number of nan iterations:   0 |",
        ]
    lines.append(
        f" validation results at iteration {steps} | lm_loss value: 3.948146E+00 | lm_loss_ppl value: 5.183916E+01 | "
    )
    path.write_text("\n".join(lines) + "\n")
    return path


def test_a_neox_log_with_deepspeed_engine_lines_is_neox_and_keeps_its_own_loss(tmp_path: Path) -> None:
    log = _neox_log(tmp_path / "70M_0_1.out")
    ranked = detect([log])
    # on main: megatron_deepspeed (0.95) and gpt_neox (0.95): refused as ambiguous
    assert ranked[0][0] == "gpt_neox"
    assert ranked[1][1] < ranked[0][1] - 0.1
    parsed = read_log([log])
    assert parsed.format == "gpt_neox"
    steps, loss = parsed.series("loss")
    assert steps.tolist() == list(range(1, 13))
    assert loss.tolist() == [float(f"{_neox_loss(s):.6E}") for s in range(1, 13)]  # NeoX's digits
    ds_steps, ds_loss = parsed.series("loss_deepspeed")
    assert ds_steps.tolist() == list(range(1, 13))
    assert ds_loss.tolist() == [round(_neox_loss(s), 4) for s in range(1, 13)]
    kept = {k["metric"]: k for k in parsed.kept_over}
    assert kept["loss"]["kept"] == "gpt_neox 'lm_loss'"
    assert kept["loss"]["over"] == "deepspeed 'loss'"
    assert kept["loss"]["stored_as"] == "loss_deepspeed"
    assert parsed.series("val_loss")[1].tolist() == [pytest.approx(3.948146)]
    assert parsed.segments == []
    assert [e for e in parsed.events if e.kind == "rollback"] == []


def test_deepspeed_lines_alone_are_not_neox(tmp_path: Path) -> None:
    """The engine lines every DeepSpeed trainer prints do not make a log NeoX's."""
    log = tmp_path / "ds.out"
    log.write_text(
        "".join(f"steps: {s} loss: {5 - s / 10:.4f} iter time (s): 0.605 samples/sec: 845.628\n" for s in range(1, 11))
    )
    assert "gpt_neox" not in dict(detect([log]))


def test_a_hf_trainer_zero_log_with_only_summary_dicts_is_read_by_its_engine_lines(tmp_path: Path) -> None:
    """HF Trainer + DeepSpeed ZeRO-3 on 8 ranks with no Trainer step line: one engine `step=0` line
    and each rank's `{'train_runtime': ...}` summary dict. On main: deepspeed_stdout (0.95) and
    hf_console (0.90), refused as ambiguous."""
    lines = [
        "[INFO|trainer.py:1013] 2021-05-25 06:53:00,000 >> ***** Running training *****",
        f"{_DS} DeepSpeed info: version=0.3.17+unknown, git-hash=unknown, git-branch=unknown",
        f"{_DS} step=0, skipped=0, lr=[5e-05], mom=[[0.9, 0.999]]",
    ]
    lines += [
        f"{{'train_runtime': {896.0 + r / 1000:.4f}, 'train_samples_per_second': 1.116,"
        " 'train_steps_per_second': 0.009, 'epoch': 1.0}"
        for r in range(8)
    ]
    log = tmp_path / "hf_ds_gpt2_base_n8-1.out"
    log.write_text("\n".join(lines) + "\n")
    ranked = dict(detect([log]))
    assert ranked["hf_console"] <= ranked["deepspeed_stdout"] - 0.1
    parsed = read_log([log])
    assert parsed.format == "deepspeed_stdout"
    steps, lr = parsed.series("lr")
    assert steps.tolist() == [0]
    assert lr.tolist() == [5e-05]


def test_a_trainer_log_with_step_dicts_is_still_the_trainers(tmp_path: Path) -> None:
    """Step dicts (`{'loss': ...}`) keep the HF console reader's full confidence."""
    log = tmp_path / "hf.out"
    log.write_text(
        "".join(f"{{'loss': {3 - s / 10:.4f}, 'learning_rate': 5e-05, 'epoch': {s / 10:.2f}}}\n" for s in range(1, 6))
    )
    assert detect([log])[0] == ("hf_console", 0.9)
