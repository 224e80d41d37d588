"""The one before/after snapshot tool (``python -m tests.behaviour_dump``): its ``--compare`` passes
additions and names each changed JSON path; its import section reads the real logs through the CLI."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.behaviour_dump import REAL_LOGS, _imports, changes, main

BEFORE = {"runs": {"a": {"spikes": [{"kind": "spike", "peak": "3.5"}], "rows": 10}}, "dot": "x"}


def test_additions_pass_and_each_change_is_named() -> None:
    added = {
        "runs": {"a": {"spikes": [{"kind": "spike", "peak": "3.5", "new": 1}, {"kind": "plateau"}], "rows": 10}},
        "dot": "x",
        "new_section": [],
    }
    assert changes(BEFORE, added) == []
    changed = {"runs": {"a": {"spikes": [{"kind": "spike", "peak": "3.6"}]}}, "dot": "x"}
    assert changes(BEFORE, changed) == ["/runs/a/rows: missing after", "/runs/a/spikes[0]/peak: differs"]
    fewer = {"runs": {"a": {"spikes": [], "rows": 10}}, "dot": "x"}
    assert changes(BEFORE, fewer) == ["/runs/a/spikes: 1 entries before, 0 after"]


def test_compare_exit_status(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    before, same, other = tmp_path / "b.json", tmp_path / "s.json", tmp_path / "o.json"
    before.write_text(json.dumps(BEFORE))
    same.write_text(json.dumps(BEFORE))
    other.write_text(json.dumps({**BEFORE, "dot": "y"}))
    assert main(["--compare", str(before), str(same)]) == 0
    assert main(["--compare", str(before), str(other)]) == 1
    assert "/dot: differs" in capsys.readouterr().out


@pytest.mark.skipif(not REAL_LOGS.is_dir(), reason=f"{REAL_LOGS}: the real logs are not beside this checkout")
def test_imports_record_the_import_json_and_meta(tmp_path: Path) -> None:
    out = _imports(tmp_path / "store")
    plain, with_meta = out["llmc"], out["llmc-meta"]
    assert plain["rc"] == with_meta["rc"] == 0
    assert plain["import"]["rows"] == with_meta["import"]["rows"] == 58760
    assert plain["import"]["format"] == "llmc_main"
    assert str(tmp_path) not in json.dumps(out)  # the store's path is replaced: two checkouts compare equal
    assert with_meta["meta"]["gpus"] == 8 and "gpus" not in plain["meta"]
    assert out["megds"]["alerts"]  # the stored alerts are read back
