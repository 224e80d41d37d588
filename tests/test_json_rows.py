"""A JSON document that is a header-less table of number rows (``[[wall, step, value], ...]``,
``[[step, value], ...]``) is read by the fallback as the series its file is named for, one run per
relaunch (issue #31; docs/diagnosis.md, "Import: metrics files"). Documents of those shapes, written here."""

from __future__ import annotations

import json
from pathlib import Path

from ingest.formats import FALLBACK_READERS, read_log
from ingest.formats.json_rows import row_records


def test_clock_step_value_rows_with_a_relaunch(tmp_path: Path) -> None:
    first = [[1700000000.0 + 5 * i, 10 * i, 3.0 - 0.01 * i] for i in range(1, 60)]
    second = [[1700009000.0 + 5 * i, 10 * i, 2.9 - 0.01 * i] for i in range(1, 40)]
    path = tmp_path / "run-exp-tag-loss.json"
    path.write_text(json.dumps(first + second))
    parsed = read_log([path], reader_set=FALLBACK_READERS)
    assert parsed.metrics == ["loss"]
    assert parsed.step_range == (10, 590)
    assert [s.step_range for s in parsed.segments] == [(10, 390)]


def test_step_value_rows_are_named_by_the_file(tmp_path: Path) -> None:
    path = tmp_path / "grad_norm.json"
    path.write_text(json.dumps([[i, 1.0 + 0.1 * (i % 3)] for i in range(0, 200, 5)]))
    parsed = read_log([path], reader_set=FALLBACK_READERS)
    assert parsed.metrics == ["grad_norm"]


def test_other_rows_are_no_table(tmp_path: Path) -> None:
    path = tmp_path / "loss.json"
    assert row_records([[0.5, 1.0, 2.0], [0.7, 2.0, 1.9]], path) is None  # first column no clock
    assert row_records([[1.5, 2.0], [2.5, 1.0]], path) is None  # first column not whole
    assert row_records([[1, 2.0, 3.0], [2, 1.0]], path) is None  # ragged
    assert row_records([[1, "a"], [2, "b"]], path) is None  # labels, no values
