"""The import report (#31): every line of an input is parsed, ignored for a stated reason or flagged as
suspect, and the counts add up to the file's line count; on every real log of ../shared and on logs
written here with known answers (a mangled Megatron iteration line, a value that is not a number)."""

from __future__ import annotations

from pathlib import Path

import pytest

from ingest.formats import read_log
from ingest.formats.accounting import (
    IGNORE_REASONS,
    classify_line,
    import_report,
    summary_line,
    suspect_warning,
)
from ingest.formats.megatron import MegatronReader
from ingest.importing.importer import import_logs
from ingest.store import Store
from tests.test_formats_prefixes import _megatron_lines, _write

REAL_LOGS = Path(__file__).resolve().parents[2] / "shared" / "data" / "real_logs"
REAL_INPUTS = sorted(
    p
    for p in (REAL_LOGS.rglob("*") if REAL_LOGS.is_dir() else [])
    if p.is_file() and p.name != "PROVENANCE.txt" and p.suffix not in {".yaml"} and "tfevents" not in p.name
)
"""Every real input file (TensorBoard event files are read as their folder, below)."""
_NO_SHARED = "../shared absent: the real public logs are not on this machine"


def _file_lines(path: Path) -> int:
    data = path.read_bytes()
    return data.count(b"\n") + (0 if data.endswith(b"\n") or not data else 1)


def _balanced(report: dict[str, object]) -> bool:
    ignored = sum(t["count"] for t in report["ignored"].values())  # type: ignore[attr-defined]
    return report["lines_read"] == report["parsed"]["lines"] + ignored + report["suspect"]["count"]  # type: ignore[index]


@pytest.mark.skipif(not REAL_INPUTS, reason=_NO_SHARED)
@pytest.mark.parametrize("path", REAL_INPUTS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_every_line_of_a_real_log_is_accounted_for(path: Path) -> None:
    log = read_log([path])
    report = import_report(log)
    assert report is not None and _balanced(report), report
    assert set(report["ignored"]) <= {*IGNORE_REASONS, *report["ignored"]}
    if report["unit"] == "lines":  # a text log: every line of the file, once
        assert report["lines_read"] == _file_lines(path)
        assert report["parsed"]["lines"] > 0
        assert report["suspect"]["count"] == 0, report["suspect"]  # these logs import whole
    else:  # records: at least the stored rows' worth of one record per step
        assert report["parsed"]["lines"] > 0
    stored = sum(report["parsed"]["per_metric"].values())
    assert stored == log.table.num_rows + sum(s.table.num_rows for s in log.segments) == report["parsed"]["records"]


@pytest.mark.skipif(not REAL_LOGS.is_dir(), reason=_NO_SHARED)
def test_a_tensorboard_folder_counts_records() -> None:
    log = read_log([REAL_LOGS / "tfevents_keras_mnist_toy"])
    report = import_report(log)
    assert report is not None and report["unit"] == "records" and _balanced(report)
    assert report["parsed"]["lines"] == log.table.num_rows  # one scalar event, one record


@pytest.mark.skipif(not REAL_LOGS.is_dir(), reason=_NO_SHARED)
def test_known_kinds_of_a_real_megatron_deepspeed_log() -> None:
    """The BigScience log (984 lines): its argument dump, banners, blank lines and the timer lines
    (``time (ms) | forward-compute: ...``, numbers that no step places) are each named."""
    path = next((REAL_LOGS / "bigscience_megds_perf_log").glob("*.out"))
    report = import_report(read_log([path]))
    assert report is not None
    ignored = report["ignored"]
    text = path.read_text().splitlines()
    for reason, must_hold in [
        ("config dump", " ....."),
        ("values without a step", "|"),
    ]:
        first = ignored[reason]["first_lines"]
        assert any(must_hold in text[n - 1] for n in first), (reason, [text[n - 1] for n in first])
    assert all(not text[n - 1].strip() for n in ignored["blank"]["first_lines"])
    assert ignored["blank"]["count"] == sum(1 for line in text if not line.strip())


def _megatron_with_faults(tmp_path: Path) -> tuple[Path, int, int]:
    """A 20-step Megatron log after a banner; step 10's ``iteration`` word and step 15's loss value
    mangled. Returns the file and the two lines' numbers."""
    lines = ["==================== training ====================", "", *_megatron_lines(20)]
    mangled_line, bad_value_line = 2 + 10, 2 + 15
    lines[mangled_line - 1] = lines[mangled_line - 1].replace("iteration", "iteratoin")
    lines[bad_value_line - 1] = lines[bad_value_line - 1].replace("lm loss: ", "lm loss: x")
    return _write(tmp_path / "faults.log", lines), mangled_line, bad_value_line


def test_a_mangled_megatron_iteration_line_is_suspect(tmp_path: Path, field_engine: str) -> None:
    path, mangled, bad_value = _megatron_with_faults(tmp_path)
    log = read_log([path])
    report = import_report(log)
    assert report is not None and _balanced(report)
    assert report["lines_read"] == 22
    assert report["parsed"]["lines"] == 19
    assert report["ignored"] == {"blank": {"count": 1, "first_lines": [2]}, "banner": {"count": 1, "first_lines": [1]}}
    assert report["suspect"]["count"] == 1 and report["suspect"]["lines"] == [mangled]
    assert report["suspect"]["examples"][0]["text"].startswith("iteratoin")
    unread = report["parsed"]["unread_values"]
    assert unread == {"count": 1, "lines": [bad_value], "keys": {"lm loss": 1}}
    steps, _ = log.series("loss")
    assert 10 not in steps and 15 not in steps and len(steps) == 18
    assert report["parsed"]["per_metric"]["loss"] == 18 and report["parsed"]["per_metric"]["grad_norm"] == 19
    warning = suspect_warning(report)
    assert warning is not None and f"(line {mangled})" in warning and f"(line {bad_value})" in warning
    assert summary_line(report) == "22 lines: 19 parsed, 2 ignored (1 blank, 1 banner), 1 suspect"


def test_counts_add_up_across_chunks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Chunks of about 2 KiB: lines counted once each across chunk edges, and line numbers stay the file's."""
    monkeypatch.setattr(MegatronReader, "chunk_bytes", 2048)
    chatter = ["> saving checkpoint at iteration {s}", "", "  lr .................................... 0.0003"]
    lines = []
    for i, line in enumerate(_megatron_lines(300), start=1):
        lines.append(line)
        if i % 7 == 0:
            lines.extend(c.format(s=i) for c in chatter)
    lines[400] = lines[400].replace("iteration", "iter_ation")
    assert "iter_ation" in lines[400] and "consumed samples" in lines[400]  # an iteration line, line 401
    path = _write(tmp_path / "chunks.log", lines)
    report = import_report(read_log([path], "megatron"))
    assert report is not None and _balanced(report)
    assert report["lines_read"] == len(lines)
    assert report["ignored"]["blank"]["count"] == 300 // 7
    assert report["ignored"]["config dump"]["count"] == 300 // 7
    assert report["ignored"]["prose"]["count"] == 300 // 7
    assert report["suspect"]["lines"] == [401]
    assert report["parsed"]["lines"] == 299


@pytest.mark.parametrize(
    ("line", "reason"),
    [
        ("", "blank"),
        ("=" * 40, "banner"),
        ("------------------------ arguments ------------------------", "banner"),
        ("  accumulate_allreduce_grads_in_fp32 .............. False", "config dump"),
        ("  hidden_size: 4096", "config dump"),
        ("lr = 3e-4", "config dump"),
        ("Traceback (most recent call last):", "stack trace"),
        ('  File "/opt/train.py", line 12, in <module>', "stack trace"),
        ("torch.OutOfMemoryError: CUDA out of memory.", "stack trace"),
        ("+ NGPU=8", "shell/launcher"),
        (" 45%|████▌     | 450/1000 [01:02<01:16,  7.19it/s]", "progress bar"),
        ("time (ms) | forward-compute: 29189.57 | forward-recv: 15.89 | backward: 7.07", "values without a step"),
        ("> saving checkpoint at iteration 2000 to /ckpt", "prose"),
        ("Wed Nov 13 23:53:09 2024", "unknown layout"),
        ("step 120 | loss 2.31 | lr 3e-4", None),  # no ':' or '=': a known name with a number and a step
        ("epoch=3 train_loss=2.31 val_loss=2.40", None),
        ("iteratoin 10/ 20000 | consumed samples: 5120 | learning rate: 1.000E-04 | lm loss: 6.9E+00 |", None),
        ("step=12 throughput=1234.5 mem=40.1", None),  # an unknown layout with a step counter and numbers
    ],
)
def test_classify_line(line: str, reason: str | None) -> None:
    assert classify_line(line) == reason


def test_import_keeps_the_report_with_the_run(tmp_path: Path) -> None:
    path, mangled, _ = _megatron_with_faults(tmp_path)
    store = Store(tmp_path / "store")
    [result] = import_logs(store, [path], run="faults")
    for field in ("lines", "parsed", "ignored", "suspect", "segments", "kept_over", "lines_read", "lines_unit"):
        assert field in result, field  # the first six are #31's Contract
    assert result["lines"] == 22  # lines read, every one accounted for below
    assert result["line_range"] == [3, 22]  # the first and last line of the rows
    assert result["lines_read"] == 22 and result["lines_unit"] == "lines"
    assert result["suspect"]["lines"] == [mangled]
    kept = store.run_info("faults").meta["import_report"]
    assert kept["suspect"]["lines"] == [mangled] and kept["lines_read"] == 22


def test_a_tabular_import_reports_records(tmp_path: Path) -> None:
    path = tmp_path / "run.jsonl"
    path.write_text('{"step": 1, "loss": 2.5}\nnot json\n{"step": 2, "loss": 2.25}\n{"step": 3}\n')
    report = import_report(read_log([path]))
    assert report is not None and report["unit"] == "records" and _balanced(report)
    assert report["parsed"]["lines"] == 2
    assert sum(t["count"] for t in report["ignored"].values()) == 2  # the line that is not JSON, the empty step


def test_a_user_regex_format_accounts_for_its_lines(tmp_path: Path) -> None:
    """A custom format (``ingest.formats.custom``, not the text engine) reports its lines too."""
    from ingest.formats.custom import save_custom_format

    formats = tmp_path / "formats"
    save_custom_format("mine", r"it=(?P<step>\d+) L=(?P<l>\S+)", {"l": "loss"}, formats)
    path = tmp_path / "train.log"
    path.write_text("booting the trainer\n\nit=1 L=5.0\nit=2 L=4.5\nit=3 loss=4.2 grad_norm=1.1\n")
    report = import_report(read_log([path], "custom:mine", custom_dir=formats))
    assert report is not None and report["unit"] == "lines" and _balanced(report)
    assert report["lines_read"] == 5 and report["parsed"]["lines"] == 2
    assert report["ignored"] == {"blank": {"count": 1, "first_lines": [2]}, "prose": {"count": 1, "first_lines": [1]}}
    assert report["suspect"]["lines"] == [5]


def test_line_by_line_readers_account_for_their_lines(tmp_path: Path) -> None:
    """Readers outside the text engine that read line by line (the generic reader, the Hugging Face
    console) count their lines the same way."""
    generic = tmp_path / "custom_trainer.log"
    generic.write_text("starting the custom trainer now\n\nstep 1 | loss: 2.5 | lr: 0.1\nstep 2 | loss: 2.4\n")
    hf = tmp_path / "hf.log"
    hf.write_text(
        "***** Running training *****\n"
        "{'loss': '2.897', 'grad_norm': '0.7695', 'learning_rate': '2.262e-05', 'epoch': '0.03'}\n"
        "\n"
        "{'loss': '2.5', 'grad_norm': '0.7', 'learning_rate': '2.2e-05', 'epoch': '0.06'}\n"
    )
    for path, fmt in ((generic, "generic"), (hf, "hf_console")):
        report = import_report(read_log([path], fmt))
        assert report is not None and report["unit"] == "lines" and _balanced(report), (fmt, report)
        assert report["lines_read"] == 4 and report["parsed"]["lines"] == 2, (fmt, report)
        assert report["ignored"]["blank"]["count"] == 1, (fmt, report)


FIXTURE_LOGS = sorted((Path(__file__).parent / "fixtures" / "logs").glob("*.log"))


@pytest.mark.parametrize("path", FIXTURE_LOGS, ids=lambda p: p.name)
def test_every_line_of_a_fixture_log_is_accounted_for(path: Path) -> None:
    """The trainers' sample logs of tests/fixtures/logs: every line once, and the only suspect lines are
    DeepSpeed-Chat SFT's rank-1 loss lines (the reader keeps rank 0's, the report says the others were
    not read)."""
    report = import_report(read_log([path]))
    assert report is not None and report["unit"] == "lines" and _balanced(report), report
    assert report["lines_read"] == _file_lines(path)
    expected = [6, 8, 11] if path.name == "deepspeed_chat_sft.log" else []
    assert report["suspect"]["lines"] == expected, report["suspect"]
