"""Issues #31/#32 (docs/diagnosis.md, "Import: the generic reader"): verl's wrapped numbers and policy loss, tqdm
postfix bars, a bare ``N/TOTAL`` step counter, ``train/step_time_s``, step time that grows with the work per step, and a
side loss that explodes while the headline falls. Synthetic inputs in the layouts, no real log."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from ingest.formats import read_log
from ingest.formats._common import ParsedLog
from ingest.formats.aliases import canonical_name
from stab_core.findings import run_findings
from stab_core.runview import Series
from stab_core.side_losses import exploded_terms


def _series(parsed: ParsedLog, metric: str) -> dict[int, float]:
    steps, values = parsed.series(metric, -1)
    return dict(zip(steps.tolist(), values.tolist(), strict=True))


def test_verl_wrapped_numbers_and_policy_loss(tmp_path: Path) -> None:
    lines = [
        f"step:{s} - actor/pg_loss:np.float64({0.01 * s}) - actor/grad_norm:np.float64({0.5 + s / 10})"
        f" - num_turns/max:np.int32({4 + s}) - actor/entropy:tensor({0.3 - s / 100}) - actor/lr:np.float64(1e-06)"
        for s in range(1, 6)
    ]
    log = tmp_path / "output.log"
    log.write_text("\n".join(lines) + "\n")
    parsed = read_log([log])
    assert parsed.format == "verl_console"
    assert _series(parsed, "loss")[3] == pytest.approx(0.03)
    assert _series(parsed, "num_turns/max") == {1: 5.0, 2: 6.0, 3: 7.0, 4: 8.0, 5: 9.0}
    assert _series(parsed, "actor/entropy")[2] == pytest.approx(0.28)
    assert "actor/pg_loss" not in parsed.metrics


def test_tqdm_postfix_bar_every_redraw_last_per_step(tmp_path: Path) -> None:
    redraws = ["Train:   0%|          | 0/900 [00:00<?, ?it/s]"]
    for n in range(1, 31):
        old, new = 5.0 - (n - 1) / 100, 5.0 - n / 100
        bar = f"Train:   0%|          | {n}/900 [00:{n:02d}<10:00, 1.10s/it"
        redraws.append(f"{bar}, Loss={old:.4f}, Aux={old / 2:.4f}]")
        redraws.append(f"{bar}, Loss={new:.4f}, Aux={new / 2:.4f}]")
    text = "\r".join(redraws[:20]) + "\n[WARNING] NaN loss detected! Skipping batch.\n" + "\r".join(redraws[20:]) + "\n"
    log = tmp_path / "training.log"
    log.write_text(text)
    parsed = read_log([log])
    assert parsed.format == "tqdm_postfix"
    loss = _series(parsed, "loss")
    assert len(loss) == 30 and loss[1] == 4.99 and loss[30] == 4.7
    assert _series(parsed, "Aux")[10] == 2.45
    assert parsed.meta.get("planned_steps") == 900


def test_bare_counter_out_of_a_total_is_the_step(tmp_path: Path) -> None:
    lines = []
    for i in range(40):
        step = 300 + 5 * i
        lines.append(f"{step}/9000 (epoch {1 + i // 20}) loss: {3.0 - i / 100:.3f}, kl_loss: {2.0 + i / 50:.3f}, ")
        lines.append("\t")
    log = tmp_path / "train.out"
    log.write_text("\n".join(lines) + "\n")
    parsed = read_log([log])
    loss = _series(parsed, "loss")
    assert len(loss) == 40 and min(loss) == 300 and max(loss) == 495


def test_train_group_step_time() -> None:
    assert canonical_name("train/step_time_s") == ("step_time_s", None)


def _s(values: np.ndarray) -> Series:
    return Series(np.arange(values.size, dtype=np.int64) * 5, values.astype(np.float64))


def test_side_loss_that_explodes_and_stays_is_a_divergence() -> None:
    n = 200
    kl = np.full(n, 13.0) + np.sin(np.arange(n)) * 0.3
    kl[40:] = 13.0 * np.geomspace(1.5, 1e12, n - 40)  # rises from sample 40 by orders of magnitude, never back
    loss = np.linspace(8.0, 3.0, n)  # the headline falls
    scale = np.full(n, 1024.0)
    scale[100:] = 65536.0 * 64  # a loss scale that grows is no loss
    series = {"loss": _s(loss), "KL_loss": _s(kl), "loss_scale": _s(scale)}
    found = exploded_terms(series, [])
    assert [(i.primary.metric, i.severity, i.kind) for i in found] == [("KL_loss", "divergence", "climb")]
    assert found[0].start == 40 * 5 and not found[0].primary.recovered


def test_side_loss_spike_that_comes_back_is_not_an_explosion() -> None:
    aux = np.full(100, 0.5)
    aux[50:55] = 500.0  # back to its level after five samples: the spike detectors' business
    assert exploded_terms({"aux_loss": _s(aux)}, []) == []


def test_step_time_growing_with_work_per_step_is_no_throughput_loss() -> None:
    steps = np.arange(1, 241, dtype=np.int64)
    step_time = np.linspace(200.0, 700.0, steps.size)  # each step generates longer responses
    tokens = np.full(steps.size, 880.0) + np.sin(steps) * 20  # tokens/s holds its level
    found = run_findings({"step_time_s": (steps, step_time), "throughput_tok_s": (steps, tokens)})
    assert found["throughput"] == []
    slower = tokens * np.where(steps > 120, 0.4, 1.0)  # the hardware slowed: tokens/s fell with it
    found = run_findings({"step_time_s": (steps, step_time), "throughput_tok_s": (steps, slower)})
    assert found["throughput"]
