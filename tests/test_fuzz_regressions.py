"""The smallest inputs that failed the fuzz suite (tests/test_fuzz_formats.py, issue #23), one per bug,
each checked for the answer it now gets: read with the bad record counted, or refused with one
``StabScopeError`` naming the file, where in it, and what was expected."""

from __future__ import annotations

import io
import json
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from ingest.errors import StabScopeError
from ingest.formats import read_log


def test_a_million_character_line_in_an_unrecognised_file_is_refused_promptly(tmp_path: Path) -> None:
    """The refusal's "closest formats" searched every position of every head line with each text
    format's prefix: quadratic in the line, hours for a 10^6-character line."""
    path = tmp_path / "run.csv"
    path.write_bytes(b"loss: 1.0 " * 100_000 + b"\nstep,loss\n1,2.0\n")
    started = time.perf_counter()
    with pytest.raises(StabScopeError, match=r"line 1: format not recognised") as refused:
        read_log([path])
    assert time.perf_counter() - started < 30
    assert str(path) in str(refused.value)


@pytest.mark.parametrize("name", ["trainer_state.json", "golden_values.json"])
def test_a_json_state_file_with_a_byte_that_is_not_utf8_is_refused_at_it(tmp_path: Path, name: str) -> None:
    """A Latin-1 byte in a whole-file JSON format raised ``UnicodeDecodeError``."""
    path = tmp_path / name
    state = {"global_step": 1, "log_history": [{"loss": 2.0, "step": 1}]}
    if name == "golden_values.json":
        state = {"lm loss": {"start_step": 1, "end_step": 1, "step_interval": 1, "values": {"1": 2.0}}}
    path.write_bytes(json.dumps(state, indent=2).encode().replace(b'"step', b'"\xb5step', 1))
    with pytest.raises(StabScopeError) as refused:
        read_log([path], format="hf_trainer_state" if name == "trainer_state.json" else "megatron_golden")
    message = str(refused.value)
    assert message.startswith(f"{path}, line ") and "is not UTF-8 text (0xb5)" in message, message


def test_a_jsonl_key_that_is_not_utf8_skips_its_line(tmp_path: Path) -> None:
    """Arrow took the key and failed when its name was read: ``UnicodeDecodeError`` out of the reader."""
    path = tmp_path / "metrics.jsonl"
    lines = [json.dumps({"step": s, "loss": 3.0 - s / 10}).encode() for s in range(1, 5)]
    lines[2] = lines[2].replace(b'"loss"', b'"\xb5loss"')
    path.write_bytes(b"\n".join(lines) + b"\n")
    parsed = read_log([path], format="jsonl")
    assert parsed.series("loss")[0].tolist() == [1, 2, 4]
    assert parsed.skipped == 1 and parsed.skipped_examples[0][1] == 3


def test_a_latin1_csv_is_read_with_its_bad_cells_counted(tmp_path: Path) -> None:
    """A header or cell that is not UTF-8 raised ``UnicodeDecodeError`` (header) or refused the
    file at a wrong line (cell); it is now read with the bytes replaced, the bad cell counted."""
    path = tmp_path / "run.csv"
    path.write_bytes(b"step,loss,temp\xe9rature\n1,2.0,30\n2,1.9\xb5,31\n3,1.8,32\n")
    parsed = read_log([path], format="csv_wide")
    assert parsed.series("loss")[0].tolist() == [1, 3]
    assert "temp_rature" in parsed.metrics  # the replaced byte, sanitised like any foreign name
    assert parsed.skipped == 1
    assert parsed.skipped_examples[0][1:] == (3, "column 'loss': '1.9\ufffd' is not a number")


def test_a_csv_row_with_the_wrong_number_of_cells_is_skipped_at_its_line(tmp_path: Path, capfd) -> None:
    """A row cut by a crash (or a binary line) refused the whole CSV naming line 2 whatever its line;
    a row of bytes that are not UTF-8 printed Arrow's callback traceback to stderr."""
    path = tmp_path / "run.csv"
    rows = [b"step,loss,lr"] + [b"%d,%.1f,1e-4" % (s, 3 - s / 10) for s in range(1, 8)]
    rows.insert(5, b"\x00e\xc3/\xf9^\xc3(\x8d")
    path.write_bytes(b"\n".join(rows) + b"\n8,2.2")
    parsed = read_log([path], format="csv_wide")
    assert parsed.series("loss")[0].tolist() == [1, 2, 3, 4, 5, 6, 7]
    assert parsed.skipped == 2
    assert [ex[1] for ex in parsed.skipped_examples] == [6, 10]
    assert parsed.skipped_examples[1][2] == "expected 3 cells, found 2: '8,2.2'"
    assert capfd.readouterr().err == ""


def test_a_csv_cut_inside_its_header_is_refused_as_holding_no_metrics(tmp_path: Path) -> None:
    path = tmp_path / "run-train-tag-loss.csv"
    path.write_bytes(b"Wall time,St")
    with pytest.raises(StabScopeError, match="no metrics found as tensorboard_csv") as refused:
        read_log([path], format="tensorboard_csv")
    assert str(path) in str(refused.value)


def test_lightning_forced_on_a_csv_without_a_step_column_is_refused_at_its_header(tmp_path: Path) -> None:
    """``KeyError: 'Field "step" does not exist in schema'`` out of the reader."""
    path = tmp_path / "metrics.csv"
    path.write_text("0,99,,3.98,\n0,149,,3.97,\n")
    with pytest.raises(StabScopeError, match=r"line 1: expected a header with a 'step' column"):
        read_log([path], format="lightning_csv")


def test_a_parquet_file_with_a_damaged_page_is_refused_at_its_row_group(tmp_path: Path) -> None:
    """``OSError: Couldn't deserialize thrift`` out of the reader (the footer read, a page did not)."""
    out = io.BytesIO()
    pq.write_table(pa.table({"step": [1, 2, 3], "metric": ["loss"] * 3, "value": [3.0, 2.0, 1.0]}), out)
    data = bytearray(out.getvalue())
    data[4:12] = b"\xff" * 8  # the first page's header
    path = tmp_path / "long.parquet"
    path.write_bytes(bytes(data))
    with pytest.raises(StabScopeError, match=r"row group 0 \(from byte 4\) does not decode") as refused:
        read_log([path])
    assert str(refused.value).startswith(str(path))


def test_an_mlflow_line_that_is_not_three_fields_is_skipped_at_its_line(tmp_path: Path) -> None:
    """It refused the run with Arrow's message and no line."""
    run = tmp_path / "mlruns" / "0" / "abc"
    (run / "metrics").mkdir(parents=True)
    (run / "metrics" / "loss").write_text("1700000000000 2.5 1\nloss: 1.0 loss: 1.0\n1700000002000 2.0 3\n")
    (run / "metrics" / "lr").write_text("")
    parsed = read_log([run], format="mlflow")
    assert parsed.series("loss")[0].tolist() == [1, 3]
    assert parsed.skipped == 2
    assert [(Path(f).name, line) for f, line, _ in parsed.skipped_examples] == [("loss", 2), ("lr", 1)]


def test_a_deepspeed_csv_that_is_no_metric_file_is_reported_not_dropped(tmp_path: Path) -> None:
    """A Train_*.csv whose header was damaged was left out of the import without a word."""
    folder = tmp_path / "ds_logs"
    folder.mkdir()
    (folder / "Train_Samples_lr.csv").write_text("step,lr\n512,1e-05\n1024,2e-05\n")
    (folder / "Train_Samples_train_loss.csv").write_text("st\x00ep,train_loss\n512,10.5\n")
    parsed = read_log([folder], format="deepspeed_csv")
    assert parsed.metrics == ["lr"]
    assert parsed.skipped == 1
    file, line, reason = parsed.skipped_examples[0]
    assert Path(file).name == "Train_Samples_train_loss.csv" and line == 1 and "is not 'step,<metric>'" in reason


def test_llamafactory_with_an_infinite_total_or_step_is_read(tmp_path: Path) -> None:
    """``"total_steps": Infinity`` raised ``OverflowError`` (int of inf); a NaN step was cast to int64."""
    path = tmp_path / "trainer_log.jsonl"
    rows = [
        '{"current_steps": 5, "total_steps": Infinity, "loss": 1.75, "elapsed_time": "0:03:29"}',
        '{"current_steps": NaN, "total_steps": 10, "loss": 1.5, "elapsed_time": "0:04:00"}',
        '{"current_steps": 10, "total_steps": 10, "loss": 1.25, "elapsed_time": "0:05:00"}',
    ]
    path.write_text("\n".join(rows) + "\n")
    parsed = read_log([path], format="llamafactory")
    assert parsed.series("loss")[0].tolist() == [5, 10]
    assert parsed.series("elapsed_time_s")[0].tolist() == [5, 10]
    assert parsed.meta["total_steps"] == 10
    assert parsed.skipped == 1
