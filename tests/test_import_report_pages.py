"""The import report (#31) where a user meets it: ``stabscope import`` (text and ``--json``, a process),
the Upload preview and the run's overview (AppTest)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ingest.importing.importer import import_logs
from ingest.services.run_analyses import open_analysed_store
from ingest.store import Store
from tests.conftest import open_page
from tests.test_cli import stabscope
from tests.test_import_report import _megatron_with_faults

SUMMARY = "22 lines: 19 parsed, 2 ignored (1 blank, 1 banner), 1 suspect"


def test_cli_prints_the_report_and_warns_of_suspect_lines(tmp_path: Path) -> None:
    path, mangled, bad_value = _megatron_with_faults(tmp_path)
    proc = stabscope("import", str(path), "--run", "faults", store=tmp_path / "store")
    assert proc.returncode == 0, proc.stderr
    assert f"  {SUMMARY}" in proc.stdout.splitlines()
    warning = next(line for line in proc.stderr.splitlines() if "warning:" in line)
    assert f"not parsed (line {mangled})" in warning and f"left out (line {bad_value})" in warning

    proc = stabscope("import", str(path), "--run", "again", "--json", store=tmp_path / "store")
    assert proc.returncode == 0, proc.stderr
    [result] = [json.loads(line) for line in proc.stdout.splitlines() if line.strip()]
    assert result["lines_read"] == 22 and result["lines_unit"] == "lines"
    assert result["parsed"]["lines"] == 19 and result["parsed"]["per_metric"]["loss"] == 18
    assert result["ignored"]["banner"] == {"count": 1, "first_lines": [1]}
    assert result["suspect"]["count"] == 1 and result["suspect"]["lines"] == [mangled]
    assert result["lines"] == 22 and result["line_range"] == [3, 22]
    assert result["segments"] == [] and result["kept_over"] == []


@pytest.fixture
def empty_store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Store:
    monkeypatch.setenv("STABSCOPE_STORE", str(tmp_path / "store"))
    return open_analysed_store(tmp_path / "store")


def test_upload_preview_shows_the_report_then_keeps_it(empty_store: Store, tmp_path: Path) -> None:
    path, mangled, _ = _megatron_with_faults(tmp_path)
    at = open_page("upload").run()
    at.file_uploader(key="up_files").upload(path.name, path.read_bytes(), "text/plain").run()
    assert not at.exception
    assert any(c.value == f"Import: {SUMMARY}." for c in at.caption)
    warning = next(w.value for w in at.warning if "not parsed" in w.value)
    assert f"(line {mangled})" in warning
    details = [m.value for e in at.expander for m in e.markdown]
    assert any(f"**Suspect lines** (1): {mangled}" in d for d in details)
    assert any("**banner**: 1 (first: 1)" in d for d in details)
    at.button(key="up_import").click().run()
    assert not at.exception
    name = at.text_input(key="up_name").value
    assert empty_store.run_info(name).meta["import_report"]["suspect"]["lines"] == [mangled]


def test_overview_shows_the_report_kept_with_the_run(empty_store: Store, tmp_path: Path) -> None:
    path, mangled, _ = _megatron_with_faults(tmp_path)
    import_logs(empty_store, [path], run="faults")
    at = open_page("overview").run()
    assert not at.exception
    assert any(c.value == f"Import: {SUMMARY}." for c in at.caption)
    assert any(f"(line {mangled})" in w.value for w in at.warning)
