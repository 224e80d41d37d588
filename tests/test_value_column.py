"""A one-series table whose value column has no name of its own (``Wall time,Step,Value``,
``step,value``) is the series its file is named for (issue #31; docs/diagnosis.md, "Import: metrics files"): the
fallback reader stores ``loss``, not a metric called ``Value``. Tables of those shapes, written here."""

from __future__ import annotations

from pathlib import Path

from ingest.formats import FALLBACK_READERS, read_log


def _table(path: Path, header: str, rows: list[str]) -> Path:
    path.write_text("\n".join([header, *rows]) + "\n")
    return path


def test_an_exported_scalar_is_named_by_its_tag(tmp_path: Path) -> None:
    rows = [f"{1600000000.5 + 30 * i},{i},{4.0 - 0.05 * i}" for i in range(40)]
    path = _table(tmp_path / "run-.-tag-loss.csv", "Wall time,Step,Value", rows)
    parsed = read_log([path], reader_set=FALLBACK_READERS)
    assert "loss" in parsed.metrics and "Value" not in parsed.metrics


def test_a_step_value_table_is_named_by_its_stem(tmp_path: Path) -> None:
    rows = [f"{10 * i},{2.5 - 0.01 * i}" for i in range(30)]
    parsed = read_log([_table(tmp_path / "train_loss.csv", "step,value", rows)], reader_set=FALLBACK_READERS)
    assert "value" not in parsed.metrics
    assert any("loss" in name for name in parsed.metrics)


def test_two_value_columns_keep_their_names(tmp_path: Path) -> None:
    rows = [f"{i},{1.0 + i},{2.0 - 0.01 * i}" for i in range(30)]
    parsed = read_log([_table(tmp_path / "loss.csv", "step,value,grad_norm", rows)], reader_set=FALLBACK_READERS)
    assert "value" in parsed.metrics
