"""Imports that lose nothing silently (#31): several runs in one file, a metric two line layouts
print, and ranks whose lines interleave.

Every fixture is written here, line by line, in the shape the trainers print (nanoGPT's ``iter N:``
line, OLMo's ``[step=N/M]`` record, Megatron-DeepSpeed's ``iteration N/ M |`` and DeepSpeed's
``steps: N loss:`` lines behind torchrun's ``[defaultN]:`` prefixes)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from ingest.formats import read_log
from ingest.formats.segments import KEEP_RULE, fresh_starts
from ingest.importing.importer import import_logs
from ingest.store import Store
from tests.test_cli import stabscope

RUNS, STEPS = 3, 20


def _three_nanogpt_runs(path: Path) -> Path:
    """Three back-to-back 20-step runs: the same losses, step times 100 ms + 10 ms per run."""
    lines = [
        f"iter {step}: loss {10.0 - 0.1 * step:.4f}, time {100 + 10 * run + step / 2:.2f}ms, mfu 30.00%"
        for run in range(RUNS)
        for step in range(1, STEPS + 1)
    ]
    path.write_text("\n".join(lines) + "\n")
    return path


def _olmo_readme(path: Path, runs: int = 9) -> Path:
    """A README holding ``runs`` separate 10-step OLMo benchmark runs, each in its own code block."""
    out = ["# Throughput", "", "OLMo-1B, ten steps, run again after each change.", ""]
    for run in range(runs):
        out += [f"## Attempt {run + 1}", "", "```"]
        for step in range(1, 11):
            out.append(f"2024-02-01 12:{run:02d}:{step:02d}.123\thost:0\tolmo.train:1240\tINFO\t[step={step}/739328]")
            out.append(f"    train/CrossEntropyLoss={11.0 - 0.05 * step + 0.01 * run:.4f}")
            out.append(f"    optim/total_grad_norm={2.0 + run:.4f}")
        out += ["```", ""]
    path.write_text("\n".join(out) + "\n")
    return path


def _megds_loss(step: int) -> float:
    return 11.21008 - 0.0123457 * step


def _megds_interleaved(path: Path, steps: int = 30) -> Path:
    """A Megatron-DeepSpeed log of two printing ranks: rank 7 prints Megatron's ``iteration`` line
    (``lm loss: 1.121008E+01``), rank 0 DeepSpeed's engine lines (``steps: 1 loss: 11.2101``). Every
    other pair of steps rank 7 runs one step ahead, so its lines come before rank 0's."""
    meg = {
        s: (
            f"[default7]: iteration {s:8d}/     100 | consumed samples: {8 * s:12d} | elapsed time per "
            f"iteration (ms): {1234.5 + s:.1f} | learning rate: 1.000E-04 | global batch size:     8 | "
            f"lm loss: {_megds_loss(s):.6E} | loss scale: 4096.0 | grad norm: 2.918 | number of skipped "
            f"iterations:   0 | number of nan iterations:   0 |"
        )
        for s in range(1, steps + 1)
    }
    ds = {
        s: [
            f"[default0]:[2021-06-10 12:00:{s % 60:02d},123] [INFO] [logging.py:60:log_dist] [Rank 0] "
            f"step={s}, skipped=0, lr=[0.0001], mom=[(0.9, 0.999)]",
            f"[default0]:steps: {s} loss: {_megds_loss(s):.4f} iter time (s): 1.235 samples/sec: 6.478",
        ]
        for s in range(1, steps + 1)
    }
    lines = [
        "[default0]:------------------------ arguments ------------------------",
        "[default0]:  train_iters ..................................... 100",
        "[default0]:-------------------- end of arguments ---------------------",
    ]
    for s in range(1, steps + 1, 2):
        if (s // 2) % 2:  # rank 7 ahead: both its lines, then rank 0's two steps
            lines += [meg[s], meg[s + 1], *ds[s], *ds[s + 1]]
        else:
            lines += [*ds[s], meg[s], *ds[s + 1], meg[s + 1]]
    path.write_text("\n".join(lines) + "\n")
    return path


# --------------------------------------------------------------------------- segments


def test_fresh_starts_are_the_steps_back_at_the_first() -> None:
    # 1..3, back to 1 (fresh), 2..4, back to 3 (a resume: not fresh), back to 0 (fresh: step 0)
    steps = np.array([1, 2, 3, 1, 2, 3, 4, 3, 4, 0, 1], np.int64)
    assert fresh_starts(steps).tolist() == [3, 9]


def test_three_back_to_back_runs_are_three_runs(tmp_path: Path) -> None:
    log = _three_nanogpt_runs(tmp_path / "three.log")
    store = Store(tmp_path / "store")
    [result] = import_logs(store, [log], run="bench")
    assert [s["run"] for s in result["segments"]] == ["bench-2", "bench-3"]
    assert [(s["first_step"], s["last_step"], s["lines"]) for s in result["segments"]] == [
        (1, 20, [21, 40]),
        (1, 20, [41, 60]),
    ]
    assert result["line_range"] == [1, 20] and result["lines"] == 20 + 40
    assert {r.name for r in store.list_runs()} == {"bench", "bench-2", "bench-3"}
    for run_index, name in enumerate(["bench", "bench-2", "bench-3"]):
        series = store.read_series(name, "step_time_s")
        assert series.steps.tolist() == list(range(1, STEPS + 1))
        # each run keeps its own step times (seconds): 100 ms + 10 ms per run + step/2 ms
        expected = [(100 + 10 * run_index + s / 2) / 1000 for s in range(1, STEPS + 1)]
        assert np.allclose(series.values, expected)
        assert store.read_series(name, "loss").values[0] == pytest.approx(9.9)
        assert not [e for e in store.events(name) if e.kind == "rollback"]


def test_nine_olmo_runs_in_a_readme_are_nine_runs(tmp_path: Path) -> None:
    parsed = read_log([_olmo_readme(tmp_path / "README.md")])
    runs = [parsed, *parsed.segments]
    assert len(runs) == 9
    for index, run in enumerate(runs):
        assert run.step_range == (1, 10)
        steps, loss = run.series("loss")
        assert steps.tolist() == list(range(1, 11))
        assert loss[0] == pytest.approx(11.0 - 0.05 + 0.01 * index)
        assert run.series("grad_norm")[1].tolist() == [2.0 + index] * 10
        assert not run.events
    # the lines holding each run's values: the first header is line 8, its loss line 9; a run is 30
    # lines, and 35 with its heading, blank, fences and blank
    assert [r.lines for r in runs] == [(9 + 35 * i, 37 + 35 * i) for i in range(9)]


def test_a_resume_from_a_checkpoint_stays_one_run_with_a_rollback(tmp_path: Path) -> None:
    log = tmp_path / "resumed.log"
    steps = [*range(1, 21), *range(11, 31)]  # crashed after 20, resumed from the checkpoint at 10
    # the resumed launch's batches differ from the first pass's (a resume that logs the very same losses
    # again changed nothing: no rollback, round 22 f28a, tests/test_f28a_metric_files.py)
    again = [0.0] * 20 + [0.01] * 20
    log.write_text(
        "".join(
            f"iter {s}: loss {5 + s / 100 + d:.4f}, time 100.00ms, mfu 30.00%\n"
            for s, d in zip(steps, again, strict=True)
        )
    )
    parsed = read_log([log])
    assert parsed.segments == []
    assert parsed.step_range == (1, 30)
    assert [(e.kind, _span(e.detail)) for e in parsed.events] == [
        ("rollback", {"replayed_from": 11, "replayed_to": 20})
    ]


# --------------------------------------------------------------------------- one source per metric


def test_megatron_loss_is_kept_over_deepspeeds_rounded_copy(tmp_path: Path) -> None:
    parsed = read_log([_megds_interleaved(tmp_path / "megds.out")])
    assert parsed.format == "megatron_deepspeed"
    steps, loss = parsed.series("loss")
    assert steps.tolist() == list(range(1, 31))
    # Megatron's seven significant digits at every step (on main DeepSpeed's 4-decimal copy replaced them)
    assert loss.tolist() == [float(f"{_megds_loss(s):.6E}") for s in range(1, 31)]
    ds_steps, ds_loss = parsed.series("loss_deepspeed")
    assert ds_steps.tolist() == list(range(1, 31))
    assert ds_loss.tolist() == [round(_megds_loss(s), 4) for s in range(1, 31)]
    kept = {k["metric"]: k for k in parsed.kept_over}
    assert kept["loss"] == {
        "metric": "loss",
        "kept": "megatron 'lm loss'",
        "over": "deepspeed 'loss'",
        "stored_as": "loss_deepspeed",
        "rule": KEEP_RULE,
    }
    assert kept["lr"]["kept"] == "megatron 'learning rate'"
    assert kept["lr"]["stored_as"] == "lr_deepspeed"
    assert kept["step_time_s"]["over"] == "deepspeed 'iter time (s)'"
    assert parsed.series("step_time_s")[1][0] == pytest.approx(1.2355)


def test_interleaved_ranks_are_no_restart(tmp_path: Path) -> None:
    parsed = read_log([_megds_interleaved(tmp_path / "megds.out")])
    # rank 0's and rank 7's lines interleave 7 times out of step order: no restart, no further run
    assert [e for e in parsed.events if e.kind == "rollback"] == []
    assert parsed.segments == []


def test_two_runs_of_an_interleaved_log_are_split_per_source(tmp_path: Path) -> None:
    first = _megds_interleaved(tmp_path / "a.out").read_text()
    log = tmp_path / "twice.out"
    log.write_text(first + first)
    parsed = read_log([log])
    assert len(parsed.segments) == 1
    for run in (parsed, parsed.segments[0]):
        assert run.series("loss")[0].tolist() == list(range(1, 31))
        assert run.series("loss_deepspeed")[0].tolist() == list(range(1, 31))
        assert [e for e in run.events if e.kind == "rollback"] == []


# --------------------------------------------------------------------------- the CLI


@pytest.mark.slow  # out of the fast loop: multi-second (CLI processes, several threads); CI runs it
def test_cli_reports_the_further_runs_and_what_was_kept(tmp_path: Path) -> None:
    store = tmp_path / "store"
    log = _three_nanogpt_runs(tmp_path / "three.log")
    done = stabscope("import", str(log), "--run", "bench", "--json", store=store)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["segments"] == [
        {"run": "bench-2", "first_step": 1, "last_step": 20, "lines": [21, 40], "rows": 60, "events": 0},
        {"run": "bench-3", "first_step": 1, "last_step": 20, "lines": [41, 60], "rows": 60, "events": 0},
    ]
    assert result["kept_over"] == []
    megds = _megds_interleaved(tmp_path / "megds.out")
    done = stabscope("import", str(megds), "--run", "megds", store=store)
    assert done.returncode == 0, done.stderr
    assert "loss: kept megatron 'lm loss' over deepspeed 'loss' (stored as loss_deepspeed" in done.stdout
    done = stabscope("import", str(log), "--run", "again", store=store)
    assert "the steps start again: again-3: 60 rows (steps 1..20, lines 41..60), imported as its own run" in (
        done.stdout
    )


# --------------------------------------------------------------------------- the Upload page


def test_upload_page_warns_of_the_further_runs_and_imports_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from ingest.services.run_analyses import open_analysed_store
    from tests.conftest import open_page

    monkeypatch.setenv("STABSCOPE_STORE", str(tmp_path / "store"))
    store = open_analysed_store(tmp_path / "store")
    text = _three_nanogpt_runs(tmp_path / "three.log").read_bytes()
    at = open_page("upload").run()
    at.file_uploader(key="up_files").upload("bench.log", text, "text/plain").run()
    assert not at.exception
    warning = next(w.value for w in at.warning if "start again" in w.value)
    assert "holds 3 runs" in warning and "**bench-2** (steps 1–20)" in warning and "**bench-3**" in warning
    at.button(key="up_import").click().run()
    assert not at.exception
    assert "**bench-2** (60 rows), **bench-3** (60 rows)" in at.success[1].value
    assert {r.name for r in store.list_runs()} == {"bench", "bench-2", "bench-3"}
    assert np.allclose(store.read_series("bench-3", "step_time_s").values[:2], [0.1205, 0.121])


def _llmc_notes(path: Path) -> Path:
    """Notes in markdown of a GPT-2 course: runs pasted one after another, each in its own fenced
    block, the logged fields growing from run to run (loss only; then time and tokens/sec, the
    milliseconds one blank after the number; then norm and lr), the last run starting at step 1."""
    out = ["# GPT-2 from scratch", "", "Overfit a single batch", "", "```", "Using device: mps"]
    out += [f"step {s}, loss: {10.9 - 0.5 * s:.6f}" for s in range(5)]
    out += ["```", "", "With timing", "", "```"]
    out += [f"step {s}, loss: {10.8 - 0.4 * s:.6f}, time: {600.5 - s:.2f} ms, tokens/sec: 1588.47" for s in range(5)]
    out += ["```", "", "Full run, excerpt", "", "```"]
    out += [
        f"step {s:4d}, loss: {9.5 - 0.3 * s:.6f}, norm: 1.2500, lr: 6.0000e-05, time: {449.9 + s:.1f}ms, "
        f"tokens/sec: 36418.0"
        for s in range(1, 6)
    ]
    out += ["```", ""]
    path.write_text("\n".join(out) + "\n")
    return path


def test_markdown_notes_of_fresh_starts_are_separate_runs(tmp_path: Path) -> None:
    # the generic reader's rows are cut where the step starts afresh, as a trainer's text log's are
    log = _llmc_notes(tmp_path / "log.md")
    store = Store(tmp_path / "store")
    [result] = import_logs(store, [log], run="notes")
    assert [(s["run"], s["first_step"], s["last_step"]) for s in result["segments"]] == [
        ("notes-2", 0, 4),
        ("notes-3", 1, 5),
    ]
    assert result["line_range"] == [7, 11]
    assert store.read_series("notes", "loss").values.tolist() == pytest.approx([10.9, 10.4, 9.9, 9.4, 8.9])
    # the proposed step-time map fits the runs that log a time, not the first
    assert store.read_series("notes-2", "step_time_s").values[0] == pytest.approx(0.6005)  # '600.50 ms'
    assert store.read_series("notes-3", "step_time_s").values[0] == pytest.approx(0.4509)
    assert store.read_series("notes-3", "loss").steps.tolist() == [1, 2, 3, 4, 5]
    for name in ("notes", "notes-2", "notes-3"):
        assert not [e for e in store.events(name) if e.kind == "rollback"]


def _megatron_line(step: int, loss: float, samples: int) -> str:
    return (
        f" iteration {step:>8}/  159576 | consumed samples: {samples:>12} | elapsed time per iteration (ms): 18706.1 | "
        f"learning rate: 5.994E-05 | global batch size:    96 | lm loss: {loss:.6E} | loss scale: 4096.0 | "
        "grad norm: 0.542 | number of skipped iterations:   0 | number of nan iterations:   0 |"
    )


def test_pasted_experiments_under_their_headings_are_runs_of_their_own(tmp_path: Path) -> None:
    # tr8-104B's chronicles: four experiments' excerpts, each under "## Experiment N"; the steps go
    # back (7220 -> 6900, 11448 -> 8738) and forward (6940 -> 11446) between experiments
    experiments = {1: [7000, 7010, 7220], 2: [6900, 6910, 6920], 11: [11446, 11447, 11448], 12: [8738, 8739, 9026]}
    out = ["# tr8-104B Chronicles", ""]
    for number, steps in experiments.items():
        out += [
            f"## Experiment {number}",
            "",
            "- rolled back and restarted with a lower LR",
            "",
            "```bash",
            "# not a heading",
        ]
        out += [_megatron_line(s, 3.0 + number / 100 + s / 1e5, 96 * s) for s in steps]
        out += ["```", "", "### Analyzing the spike", ""]
    log = tmp_path / "chronicles.md"
    log.write_text("\n".join(out) + "\n")
    parsed = read_log([log])
    runs = [parsed, *parsed.segments]
    assert [r.series("loss")[0].tolist() for r in runs] == list(experiments.values())
    assert not [e for r in runs for e in r.events if e.kind == "rollback"]  # no resume: other experiments


def test_dated_headings_keep_one_runs_excerpts_together_and_a_resume_stays(tmp_path: Path) -> None:
    # BLOOM's chronicles: one run's excerpts under dated headings; a step back with no heading that
    # names another experiment is a resume from a checkpoint (a rollback), as in a trainer's log
    out = ["# The final training", "", "### 2022-04-12 First lm loss spike", "", "```"]
    out += [_megatron_line(s, 2.4 - s / 1e5, 2048 * s) for s in (31214, 31215, 31216)]
    out += ["```", "", "### 2022-04-28 sudden 5% drop in throughput", "", "```"]
    out += [_megatron_line(s, 2.1, 2048 * s) for s in (42780, 42781, 42500, 42501)]
    out += ["```"]
    log = tmp_path / "chronicles.md"
    log.write_text("\n".join(out) + "\n")
    parsed = read_log([log])
    assert parsed.segments == []
    assert [e.step for e in parsed.events if e.kind == "rollback"] != []


def _span(detail: dict) -> dict:
    """A rollback's replayed span (its ``abandoned`` rows are tests/test_abandoned_attempts.py's)."""
    return {k: v for k, v in detail.items() if k != "abandoned"}
