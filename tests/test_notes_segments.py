"""Markdown notes that paste several runs starting at the same step (issue #31, "Run segments"):
each excerpt that prints the lowest step again is its own run, not a rollback; a trainer's own log
that prints a step twice, or a block printing one record over several lines, stays one run.
Fixture lines are written here in the shapes of those notes."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ingest.formats import read_log
from ingest.formats.segments import fresh_starts


def _megds_line(step: int, loss: float) -> str:
    """One Megatron-DeepSpeed iteration line behind a launcher's rank prefix (the reshaping log's shape)."""
    return (
        f"[default7]: iteration {step:8d}/  115311 | consumed samples:    {step * 2048:d} | "
        f"elapsed time per iteration (s): 215.82 | learning rate: 7.610E-06 | global batch size:  2048 | "
        f"lm loss: {loss:E} | grad norm: 0.128 | num zeros: 0.0 | number of skipped iterations:   0 | "
        f"number of nan iterations:   0 | samples per second: 9.490 | TFLOPs: 145.31 |"
    )


def _resumed_topologies(path: Path, steps_per_topology: tuple[int, ...]) -> Path:
    """Notes of topologies that each resume from one checkpoint (step 5000) for a few iterations."""
    out = ["# Reshaping tests", ""]
    for number, steps in enumerate(steps_per_topology):
        out += [f"TP=4 PP={2 + number}:", "", "```"]
        out += [_megds_line(5000 + i, 2.0 + 0.01 * number - 0.001 * i) for i in range(steps)]
        out += ["```", ""]
    path.write_text("\n".join(out) + "\n")
    return path


def test_a_repeated_first_step_in_notes_is_a_fresh_start() -> None:
    steps = np.array([5000, 5001, 5000, 5000, 5000, 5001, 5002], np.int64)
    excerpt = np.array([0, 0, 1, 2, 2, 2, 2], np.int64)  # rows 3 and 4: two lines of one record
    assert fresh_starts(steps, excerpt).tolist() == [2, 3]
    assert fresh_starts(steps).tolist() == [2]  # a trainer's log: equal steps are no restart


def test_topologies_resumed_from_one_checkpoint_are_separate_runs(tmp_path: Path) -> None:
    parsed = read_log([_resumed_topologies(tmp_path / "reshaping.md", (2, 1, 3, 1))])
    runs = [parsed, *parsed.segments]
    assert len(runs) == 4
    assert [r.series("loss")[0].tolist() for r in runs] == [[5000, 5001], [5000], [5000, 5001, 5002], [5000]]
    assert [round(float(r.series("loss")[1][0]), 6) for r in runs] == [2.0, 2.01, 2.02, 2.03]
    assert all(not r.events for r in runs)


def test_single_line_tests_at_the_same_step_are_separate_runs(tmp_path: Path) -> None:
    path = tmp_path / "prequel.md"
    losses = (63.84, 63.73, 63.81)
    text = ["# TFLOPs tests", ""]
    for number, loss in enumerate(losses):
        text += [f"bf16, {48 + number} nodes:", "```", _megds_line(2, loss).replace("[default7]: ", ""), "```", ""]
    path.write_text("\n".join(text) + "\n")
    parsed = read_log([path])
    runs = [parsed, *parsed.segments]
    assert [float(r.series("loss")[1][0]) for r in runs] == list(losses)


def test_a_log_file_printing_its_first_step_twice_stays_one_run(tmp_path: Path) -> None:
    lines = [_megds_line(5000, 2.0), _megds_line(5000, 2.0), _megds_line(5001, 1.99)]
    path = tmp_path / "train.log"
    path.write_text("\n".join(lines) + "\n")
    parsed = read_log([path])
    assert not parsed.segments
    assert parsed.series("loss")[0].tolist() == [5000, 5001]


def test_olmo_perplexity_is_stored_as_ppl(tmp_path: Path) -> None:
    path = tmp_path / "README.md"
    header = "[2024-04-17 09:42:{:02d}] INFO     [olmo.train:816, rank=0] [step={}/739328]"
    lines = ["```"]
    for step, (loss, ppl) in enumerate(((11.25, "76,631"), (10.73, "45,773")), start=1):
        lines += [header.format(step, step), f"    train/CrossEntropyLoss={loss}", f"    train/Perplexity={ppl}"]
    path.write_text("\n".join([*lines, "```"]) + "\n")
    parsed = read_log([path])
    assert parsed.series("train_ppl")[1].tolist() == [76631.0, 45773.0]


def _wrapped_iteration(step: int, loss: float) -> list[str]:
    """A Megatron iteration line wrapped at about 100 characters, most pieces ending in ``|``."""
    return [
        f"iteration {step}/ 1000 | consumed samples: {step * 4} | elapsed time per iteration (ms): 661.3 | learning",
        f"rate: 1.497E-04 | global batch size: 4 | lm loss: {loss:E} | loss scale: 16384.0 | grad norm: 2.555 |",
        "number of skipped iterations: 0 | number of nan iterations: 0 | time (ms) | forward-compute: 92.25 |",
        "forward-recv: 65.68 | backward-compute: 239.82 |",
    ]


def _compared_topologies(path: Path, steps: tuple[int, ...]) -> Path:
    """Notes comparing topologies, one wrapped iteration line under each ``### Nodes=N ...`` heading."""
    out = ["# GPT2 scaling", ""]
    for number, step in enumerate(steps):
        out += [f"### Nodes={4 * (number + 1)} DP=1 TP=4 PP={4 * (number + 1)}", "", "Stats:", "", "```"]
        out += [*_wrapped_iteration(step, 8.0 + number), "```", ""]
    path.write_text("\n".join(out) + "\n")
    return path


def test_wrapped_iteration_lines_ending_in_bars_are_joined(tmp_path: Path) -> None:
    parsed = read_log([_compared_topologies(tmp_path / "scaling.md", (50,))])
    assert {"grad_norm", "loss", "loss_scale", "lr", "step_time_s"} <= set(parsed.metrics)
    assert parsed.series("loss")[1].tolist() == [8.0]
    assert parsed.series("lr")[1].tolist() == [1.497e-4]


def test_configuration_headings_whose_steps_go_back_are_experiments(tmp_path: Path) -> None:
    parsed = read_log([_compared_topologies(tmp_path / "scaling.md", (50, 30, 50, 40))])
    runs = [parsed, *parsed.segments]
    assert [r.series("loss")[0].tolist() for r in runs] == [[50], [30], [50], [40]]
    assert [r.series("loss")[1].tolist() for r in runs] == [[8.0], [9.0], [10.0], [11.0]]


def test_configuration_headings_whose_steps_go_on_are_one_run(tmp_path: Path) -> None:
    parsed = read_log([_compared_topologies(tmp_path / "rounds.md", (50, 60, 70))])
    assert not parsed.segments
    assert parsed.series("loss")[0].tolist() == [50, 60, 70]


def _maxtext_line(step: int, loss: float, weights: int = 196608, indent: str = "") -> str:
    return (
        f"{indent}completed step: {step}, seconds: 5.667, TFLOP/s/device: 134.924, Tokens/s/device: 8672.758, "
        f"total_weights: {weights}, loss: {loss:.3f}"
    )


def test_a_quoted_repeat_is_no_record_and_a_later_block_below_is_another_run(tmp_path: Path) -> None:
    path = tmp_path / "guide.md"
    losses = [12.0 - 0.2 * step for step in range(10)]
    text = ["## Run it", "", "```none", *(_maxtext_line(s, v) for s, v in enumerate(losses)), "```", ""]
    text += ["Take the last step:", "", "```none", _maxtext_line(9, losses[9]), "```", ""]
    text += ["- On a real data set:", "  ```none"]
    text += [_maxtext_line(8, 9.596, 163259, "  "), _maxtext_line(9, 9.58, 155934, "  "), "  ```", ""]
    path.write_text("\n".join(text) + "\n")
    parsed = read_log([path])
    runs = [parsed, *parsed.segments]
    assert [r.series("loss")[0].tolist() for r in runs] == [list(range(10)), [8, 9]]
    assert runs[0].series("loss")[1][-1] == round(losses[9], 3)
    assert runs[1].series("loss")[1].tolist() == [9.596, 9.58]
    assert not any(r.events for r in runs)  # neither the quotation nor the other run is a resume


def test_a_resume_inside_one_block_stays_a_rollback(tmp_path: Path) -> None:
    path = tmp_path / "notes.md"
    steps = [0, 1, 2, 3, 4, 2, 3, 4, 5]
    text = ["```", *(_maxtext_line(s, 10.0 - 0.1 * i) for i, s in enumerate(steps)), "```"]
    path.write_text("\n".join(text) + "\n")
    parsed = read_log([path])
    assert not parsed.segments
    assert [e.kind for e in parsed.events] == ["rollback"]
