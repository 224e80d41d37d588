"""Text consoles of `` : ``-separated ``Name value`` fields with abbreviated names (Marian NMT's layout,
issue #31, docs/diagnosis.md, "Import: the generic reader"): ``Up.`` is the step, ``Ep.`` the epoch, ``L.r.`` the lr,
``Cost`` the loss, a ``[valid]`` line's cross-entropy the validation loss; the counter ``Sen.``, the interval ``Time``
and the early-stopping verdict are no metrics. Numbers are made up."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ingest.formats import read_log
from ingest.formats.field_records import expand
from tests.log_text import series_by_metric


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
    series = series_by_metric(parsed)
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


def _bar(n: int, total: int) -> str:
    return f"\r {100 * n // total:2d}%|##        | {n}/{total} [00:10<00:20,  1.85s/it]"


def test_step_restarting_each_epoch_on_many_lines_counts_with_its_epoch(tmp_path: Path) -> None:
    # 'Step' restarts every epoch (12 restarts in 24 lines): a batch counter, global with its epoch; a tqdm
    # bar over the epoch's 1000 batches, redrawn on the step line's own line, says the epoch's length
    lines = []
    for e in range(12):
        for s in (400, 800):
            lines.append(f"{_bar(s - 1, 1000)}INFO:root:Epoch {e}, Step {s}, loss: {0.5 - e / 100:.4f}, disc_loss: 0.1")
    parsed = read_log([_file(tmp_path, "train.err", lines)])
    steps, _ = series_by_metric(parsed)["loss"]
    assert parsed.meta["mapping"]["step"] == "Step"
    assert list(steps[:4]) == [400, 800, 1400, 1800] and steps[-1] == 11 * 1000 + 800
    # without a bar: the epoch's length is read from the first epoch the log completes (800)
    plain = [line.split("INFO:root:")[1] for line in lines]
    steps, _ = series_by_metric(read_log([_file(tmp_path, "plain.log", plain)]))["loss"]
    assert list(steps[:4]) == [400, 800, 1200, 1600]


def test_evaluation_line_without_a_step_is_at_the_step_line_above(tmp_path: Path) -> None:
    lines = ["INFO:root:Model parameters: Total=3.20M, Trainable=3.20M"]
    for e in range(4):
        for s in (100, 200, 300):
            lines.append(f"INFO:root:Epoch {e}, Step {s}, loss: {0.2 - e / 100:.4f}, disc_loss: 0.05, PESQ: 1.9")
        lines.append(f"INFO:root:TEST - Generator loss: {0.1 - e / 100:.4f}, Discriminator loss: 0.02, PESQ: 2.4")
    series = series_by_metric(read_log([_file(tmp_path, "train_log.txt", lines)]))
    assert list(series["val_loss"][0]) == [300, 600, 900, 1200]
    assert abs(series["val_loss"][1][0] - 0.1) < 1e-9
    assert "val_disc_loss" in series and "val_pesq" in series and "val_PESQ" not in series


def test_validation_after_epoch_lines_and_norms_between_bars(tmp_path: Path) -> None:
    lines = ["```", "{   'batch_size': 64,", "    'lr': 0.001,", "    'max_grad_norm': 100000000.0}"]
    best = "inf"
    for e in range(1, 11):
        loss, val = 4.0 / e, 3.5 / e
        norms = f"|param|={650 + e:.2f} |g_param|={2e5 / e:.2e}"
        lines.append(f"Epoch {e} - {norms} loss={loss:.4e} ppl={np.exp(loss):.2f}")
        lines.append(f"Validation - loss={val:.4e} ppl={np.exp(val):.2f} best_loss={best} best_ppl={best}")
        best = f"{val:.4e}"
    series = series_by_metric(read_log([_file(tmp_path, "notes.md", lines)]))
    assert list(series["loss"][0]) == list(range(1, 11))
    assert list(series["val_loss"][0]) == list(range(1, 11)) and abs(series["val_loss"][1][0] - 3.5) < 1e-9
    assert abs(series["grad_norm"][1][0] - 2e5) < 1e-3, sorted(series)
    assert any("param_norm" in name for name in series), sorted(series)
    # the running best (inf before the first evaluation) is no measurement
    assert not any("best" in name for name in series)


def _file(tmp_path: Path, name: str, lines: list[str]) -> Path:
    path = tmp_path / name
    path.write_text("\n".join(lines) + "\n")
    return path


def _roles(parsed) -> dict[str, str]:
    """role -> key as the import maps it (the proposal, with the names proposed for a role)."""
    return dict(parsed.meta["mapping"])


_LAYOUTS = {
    # custom print() layouts: (line of record i, step key, {role: key}, first step)
    "pipes.log": (
        lambda i: f"step {i * 100} | loss {3 - i * 0.05:.4f} | lr 3e-4 | grad_norm {1 + i % 3 / 10:.3f} | time 0.40s",
        "step",
        {"loss": "loss", "lr": "lr", "grad_norm": "grad_norm", "step_time_s": "time_s"},
        100,
    ),
    "brackets.log": (
        lambda i: f"[Epoch {1 + i // 10}][Iter {i % 10 * 100 + 100}/1000] loss={3 - i * 0.05:.4f} lr={1e-4 * i:.2e}",
        "Iter",
        {"loss": "loss", "lr": "lr"},
        200,
    ),
    "it.log": (
        lambda i: f"it {i * 100} loss {3 - i * 0.05:.3f} time {0.4 + i % 2 * 0.01:.2f}s",
        "it",
        {"loss": "loss", "step_time_s": "time_s"},
        100,
    ),
    "meter.log": (
        lambda i: (
            f"Epoch: [{i // 10}][{(i % 10) * 50:4d}/500]  Time {0.3 + i % 3 * 0.01:.3f} ({0.4:.3f})  "
            f"Loss {2.1 - i * 0.02:.4f} ({2.3 - i * 0.01:.4f})  Acc@1 {50 + i:.2f} ({45 + i:.2f})"
        ),
        "Iter",
        {"loss": "Loss"},
        50,
    ),
    # OpenNMT-py's Statistics.output layout (numbers made up)
    "opennmt.log": (
        lambda i: (
            f"[2024-01-01 10:00:{i % 60:02d},000 INFO] Step {i * 50:5d}/10000; acc: {20 + i:6.2f}; "
            f"ppl: {np.exp(4 - i * 0.05):5.2f}; xent: {4 - i * 0.05:4.2f}; lr: {1e-4 * i:7.5f}; "
            f"{9000 + i % 7:3.0f}/{9500 + i % 5:3.0f} tok/s; {i * 10:6.0f} sec"
        ),
        "Step",
        {"loss": "xent", "lr": "lr", "throughput_tok_s": "tok/s"},
        50,
    ),
    # Sockeye's Speedometer layout (numbers made up)
    "sockeye.log": (
        lambda i: (
            f"[2024-01-01:10:00:00:INFO:sockeye.training:__call__] E=0 B={i * 50}\ts/sec={1000 + i % 3:.2f} "
            f"tok/sec={25000 + i % 4:.2f} u/sec={1.5:.2f}\tperplexity={np.exp(4 - i * 0.05):.6f} "
        ),
        "B",
        {"throughput_tok_s": "tok/sec"},
        50,
    ),
}


def test_custom_print_layouts_read_with_their_roles(tmp_path: Path) -> None:
    for name, (line, step, roles, first) in _LAYOUTS.items():
        parsed = read_log([_file(tmp_path, name, [line(i) for i in range(1, 31)])])
        mapping = _roles(parsed)
        assert mapping["step"] == step, (name, mapping)
        for role, key in roles.items():
            assert mapping.get(role) == key, (name, role, mapping)
        series = series_by_metric(parsed)
        main = series.get("loss") or series.get("perplexity") or series[next(iter(roles.values()))]
        assert len(main[0]) == 30 and main[0][0] == first and np.all(np.diff(main[0]) > 0), (name, main[0])


def test_a_global_counter_beside_a_batch_counter_is_the_step(tmp_path: Path) -> None:
    # 'step' restarts each epoch, 'global_step' counts updates (2 batches an update): the one that counts
    # by itself is the axis, the batch counter is not made one
    lines = [
        f"Epoch {e} | step {s} | global_step {(e * 400 + s) // 2} | loss {0.5 - e / 100 - s / 1e5:.5f}"
        for e in range(6)
        for s in (100, 200, 300, 400)
    ]
    parsed = read_log([_file(tmp_path, "train.log", lines)])
    assert parsed.meta["mapping"]["step"] == "global_step"
    assert list(series_by_metric(parsed)["loss"][0][:5]) == [50, 100, 150, 200, 250]
