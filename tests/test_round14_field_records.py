"""Text consoles of `` : ``-separated ``Name value`` fields with abbreviated names (Marian NMT's layout,
issue #31, round 14): ``Up.`` is the step, ``Ep.`` the epoch, ``L.r.`` the lr, ``Cost`` the loss, a
``[valid]`` line's cross-entropy the validation loss; the counter ``Sen.``, the interval ``Time`` and
the early-stopping verdict are no metrics. Numbers are made up."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ingest.formats import read_log
from ingest.formats.field_records import expand


def _series(parsed) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    t = parsed.table
    metrics = np.asarray(t.column("metric").to_pylist())
    steps = t.column("step").to_numpy()
    values = t.column("value").to_numpy()
    return {m: (steps[metrics == m], values[metrics == m]) for m in np.unique(metrics)}


def _field_console(updates: int = 40, every: int = 200) -> list[str]:
    lines = [
        "[2020-01-02 10:00:00] [marian] Marian v1.9.0 build",
        "[2020-01-02 10:00:00] [config] after-batches: 0",
        "[2020-01-02 10:00:00] [config] learn-rate: 0.0005",
        "[2020-01-02 10:00:00] [config] valid-freq: 2000",
    ]
    sentences = 0
    for i in range(1, updates + 1):
        up = i * every
        sentences += 31_250
        cost = 80.0 / (1 + i / 10)
        lines.append(
            f"[2020-01-02 10:{i % 60:02d}:00] Ep. {1 + i // 20} : Up. {up} : Sen. {sentences:,} : Cost {cost:.8f} "
            f": Time {40 + i % 3:.2f}s : {9000 + 10 * i:.2f} words/s : L.r. {up * 1e-7:.4e}"
        )
        if up % 2000 == 0:
            verdict = "new best" if i == 10 else f"stalled {i // 10 - 1} times (last best: 70.5)"
            head = f"[2020-01-02 10:{i % 60:02d}:30] [valid] Ep. {1 + i // 20} : Up. {up}"
            lines.append(f"{head} : cross-entropy : {cost + 5:.4f} : {verdict}")
            lines.append(f"{head} : perplexity : {np.exp(cost / 20):.2f} : {verdict}")
        if i % 10 == 0:
            lines.append(f"[2020-01-02 10:{i % 60:02d}:40] Saving model weights to model.iter{up}.npz")
    return lines


def test_abbreviated_fields_are_spelled_as_their_roles() -> None:
    line = "[2020-01-02 10:00:00] Ep. 2 : Up. 600 : Sen. 98,123 : Cost 5.25 : Time 30.10s : 9000.5 words/s : L.r. 3e-4"
    assert expand(line) == "[2020-01-02 10:00:00] epoch 2 : step 600 :  : loss 5.25 :  : 9000.5 words/s : lr 3e-4"
    valid = "[2020-01-02 10:00:00] [valid] Ep. 2 : Up. 600 : cross-entropy : 7.5 : stalled 2 times (last best: 7.1)"
    assert expand(valid) == "[2020-01-02 10:00:00] epoch 2 : step 600 : val_loss: 7.5"
    # one ' : ' is a 'key : value' pair, not a field record: left as it is
    assert expand("Cost : 5.0") == "Cost : 5.0"


def test_field_record_console_reads_with_its_roles(tmp_path: Path) -> None:
    path = tmp_path / "train.log"
    path.write_text("\n".join(_field_console()) + "\n")
    parsed = read_log([path])
    series = _series(parsed)
    assert parsed.meta["mapping"]["step"] == "step"
    steps, loss = series["loss"]
    assert list(steps) == list(range(200, 8001, 200))
    assert abs(loss[0] - 80.0 / 1.1) < 1e-6
    assert series["lr"][1][0] == 2e-05
    assert list(series["val_loss"][0]) == [2000, 4000, 6000, 8000]
    assert "throughput_tok_s" in series and series["throughput_tok_s"][1][0] == 9010.0
    assert "val_ppl" in series
    # counters, the interval time, the verdict and the settings are no metrics
    assert not any(n.lower().startswith(("sen", "time", "best", "stalled", "learn", "valid-freq")) for n in series)
    assert "step_time_s" not in series
