"""Run metadata on the pages: the Run settings form's change rules, and aligning by tokens from tokens_per_step."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from ingest.errors import StabScopeError
from ingest.services.run_analyses import open_analysed_store

REAL_LOGS = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "real_logs"
LLMC = REAL_LOGS / "mng_llmc_gpt2_124m" / "main.log"


def test_settings_changes_set_changed_values_and_remove_emptied_ones() -> None:
    from pages.parts.run_meta import NOT_SET, settings_changes

    meta = {"gpus": 8, "max_norm": 1.0, "precision": "bf16", "world_size": 8}
    entered = {"gpus": 16, "max_norm": 1.0, "precision": NOT_SET, "world_size": None, "tokens_per_step": None}
    assert settings_changes(meta, entered) == ({"gpus": 16}, ["precision", "world_size"])
    with pytest.raises(StabScopeError, match=re.escape("usd_per_gpu_hour = -2.0 is not valid: expected a number >= 0")):
        settings_changes(meta, {"usd_per_gpu_hour": -2.0})


def test_llmc_aligns_by_tokens_once_its_tokens_per_step_is_set(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from ingest.importing.importer import import_logs
    from pages.parts import compare_lines

    if not LLMC.exists():
        pytest.skip(f"real log {LLMC} is absent (the shared real_logs folder is not on this machine)")
    store = open_analysed_store(tmp_path / "store")
    monkeypatch.setenv("STABSCOPE_STORE", str(store.root))
    import_logs(store, [LLMC], run="llmc")
    loss = store.read_series("llmc", "loss")
    with pytest.raises(StabScopeError, match=re.escape("logged no `tokens` series and has no tokens_per_step")):
        compare_lines.to_x(store.run_info("llmc"), loss, "tokens")
    store.update_meta("llmc", {"tokens_per_step": 524_288})  # PROVENANCE.txt: batch 524,288 tokens/step
    x = compare_lines.to_x(store.run_info("llmc"), loss, "tokens")
    # steps 0..19,559: after the last one, 19,560 x 524,288 = 10.25B tokens (the record's ~10.26B)
    assert x[0] == 524_288 and x[-1] == 19_560 * 524_288
    assert np.all(np.diff(x) > 0)
