"""Imports of the layouts of the corpus's batch 8 (issue #31: import fidelity), each on a few lines of
that shape written here (never the corpus file): minGPT's trainer callback pasted into markdown notes,
a wordplay/ezpz ``key=value`` console behind its logger header, the pytorch imagenet example's
``Epoch: [E][ i/N]`` meter lines. Each test fails on main at 43f701e.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from ingest.formats import read_log


def _write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


# --------------------------------------------------------------------------- minGPT in markdown notes

_MINGPT_CONFIG = """```
$ python chargpt.py
system:
    seed: 3407
    work_dir: ./out/chargpt
trainer:
    num_workers: 4
    batch_size: 64
    learning_rate: 0.0005
    grad_norm_clip: 1.0

data has 26724 characters, 29 unique.
number of parameters: 0.09M
running on device cpu
"""


def _mingpt_lines(first_loss: float, steps: range, dt_ms: float) -> str:
    out = []
    for i, step in enumerate(steps):
        dt = 0.0 if step == 0 else dt_ms + i
        out.append(f"iter_dt {dt:.2f}ms; iter {step}: train loss {first_loss * 0.99**i:.5f}")
        if step and step % 10 == 0:
            out.append("saving model")
            out.append("the sample text a model writes: 1+2=3")
    return "\n".join(out) + "\n```\n"


def test_mingpt_notes_with_two_pasted_runs_are_two_runs(tmp_path: Path) -> None:
    """minGPT's ``iter_dt X ms; iter N: train loss X`` pasted twice under two headings: two runs, the
    loss and the step time (ms -> s) read, the first iteration's 0.00 ms (no previous iteration)
    dropped; the config dump, samples and prose read nothing."""
    notes = (
        "# chargpt.py\n\n## exp.txt\n\n"
        + _MINGPT_CONFIG
        + _mingpt_lines(2.84515, range(0, 31, 2), 5000.0)
        + "\nSome prose about the run.\n\n## english.txt\n\n"
        + _MINGPT_CONFIG
        + _mingpt_lines(2.98566, range(0, 21, 2), 2100.0)
    )
    log = read_log([_write(tmp_path, "chargpt.md", notes)])
    assert log.format == "nanogpt"
    runs = [log, *log.segments]
    assert len(runs) == 2
    steps, loss = runs[0].series("loss")
    assert steps.tolist() == list(range(0, 31, 2))
    assert loss[0] == pytest.approx(2.84515) and loss[-1] == pytest.approx(round(2.84515 * 0.99**15, 5))
    dt_steps, dt = runs[0].series("step_time_s")
    assert dt_steps[0] == 2 and dt[0] == pytest.approx(5.001)  # iter 0's 0.00 ms is no measurement
    steps2, loss2 = runs[1].series("loss")
    assert steps2.tolist() == list(range(0, 21, 2)) and loss2[0] == pytest.approx(2.98566)
    for run in runs:
        assert set(run.metrics) == {"loss", "step_time_s"}
