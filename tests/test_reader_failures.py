"""Integer columns past 2**53 read as floats, and a reader's own failure reaches the user as a sentence
naming the file (issue #31; docs/diagnosis.md, "Import: readers and prefixes")."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest

from ingest.errors import ReaderFailed, StabScopeError
from ingest.formats import read_log
from ingest.formats._tabular import to_float
from ingest.formats.jsonl import JsonlReader


def test_int64_beyond_float_precision_converts() -> None:
    big = 2**53 + 12345  # a token or FLOP counter: only digits past 2**53 may go
    values, present = to_float(pa.array([1, big, None], type=pa.int64()))
    assert present.tolist() == [True, True, False]
    assert values[0] == 1.0 and abs(values[1] - big) <= 2


def test_jsonl_with_huge_counter_imports(tmp_path: Path) -> None:
    path = tmp_path / "metrics.jsonl"
    rows = [{"step": i, "loss": 3.0 - 0.01 * i, "flops": (2**53 + 7) * (i + 1)} for i in range(1, 30)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    log = read_log([path])
    assert "loss" in set(log.table.column("metric").to_pylist())


def test_reader_bug_names_the_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "metrics.jsonl"
    path.write_text("".join(json.dumps({"step": i, "loss": 1.0 / i}) + "\n" for i in range(1, 30)))

    def broken(self: object, *args: object, **kwargs: object) -> None:
        raise ValueError("boom")

    monkeypatch.setattr(JsonlReader, "read", broken)
    with pytest.raises(StabScopeError) as info:
        read_log([path])
    assert isinstance(info.value, ReaderFailed)
    assert str(path) in str(info.value) and "ValueError: boom" in str(info.value)
    assert info.value.page_message is not None and "Format box" in info.value.page_message
