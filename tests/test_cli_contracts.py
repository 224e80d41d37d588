"""CLI contracts of the importers (issue 3) and the analyses (issue 4), end to end through real files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.test_cli import stabscope

SPIKE_FIELDS = {"start", "peak", "end", "metric", "ratio", "recovered", "cause", "confidence", "path", "actions"}
CAUSES = {"numerical", "lr_transition", "rank_fault", "router", "data_outlier", "unknown"}


def _llmc_log(path: Path, steps: int = 600, spike: int = 400) -> Path:
    """An llm.c main.log (`s:N trl:x lr:x norm:x`, `s:N tel:x`) with a 4x loss spike at ``spike``."""
    lines = []
    for s in range(steps):
        loss = 4.0 - s / steps + (12.0 if s == spike else 0.0) + 0.01 * ((s * 7919) % 13 - 6) / 6
        lines.append(f"s:{s} trl:{loss:.4f} lr:{min(1, s / 50) * 6e-4:.6f} norm:{1.0 + 0.05 * (s % 3):.2f}")
        if s % 100 == 0:
            lines.append(f"s:{s} tel:{loss + 0.1:.4f}")
    path.write_text("\n".join(lines) + "\n")
    return path


def test_import_json_contract_then_spikes_and_diagnose(tmp_path: Path) -> None:
    store = tmp_path / "store"
    log = _llmc_log(tmp_path / "main.log")
    proc = stabscope("import", str(log), "--run", "llmc", "--json", store=store)
    assert proc.returncode == 0, proc.stderr
    [result] = [json.loads(line) for line in proc.stdout.splitlines() if line.strip()]
    assert result["run"] == "llmc" and result["format"] == "llmc_main"
    assert result["steps"] == [0, 599] and result["skipped"] == 0
    assert {"loss", "lr", "grad_norm", "val_loss"} <= set(result["metrics"])
    assert result["rows"] == 600 * 3 + 6

    proc = stabscope("spikes", "llmc", "--json", store=store)
    assert proc.returncode == 0, proc.stderr
    spikes = json.loads(proc.stdout)
    loss_spikes = [s for s in spikes if s["metric"] == "loss"]
    assert len(loss_spikes) == 1
    spike = loss_spikes[0]
    assert set(spike) >= SPIKE_FIELDS
    assert spike["peak"] == 400 and spike["recovered"] is True and spike["ratio"] > 3.5
    assert spike["cause"] in CAUSES and 0.0 <= spike["confidence"] <= 1.0
    assert next(n["node"] for n in spike["path"]) == "numerical" and spike["actions"]

    proc = stabscope("diagnose", "llmc", "--step", "400", "--json", store=store)
    assert json.loads(proc.stdout)["peak"] == 400

    out = tmp_path / "llmc.csv"
    assert stabscope("export", "llmc", "-o", str(out), store=store).returncode == 0
    rows = [r for r in out.read_text().splitlines() if ",loss," in r and r.startswith("400,")]
    assert rows and float(rows[0].split(",")[3]) > 15


@pytest.mark.parametrize(
    "content", [b"\x00\x01\x02 binary garbage \xff\xfe" * 50, b"hello world\nnot a log\n"], ids=["binary", "text"]
)
def test_refused_input_leaves_the_store_unchanged(tmp_path: Path, content: bytes) -> None:
    store = tmp_path / "store"
    log = _llmc_log(tmp_path / "main.log", steps=50, spike=40)
    assert stabscope("import", str(log), "--run", "keep", store=store).returncode == 0
    before = stabscope("runs", "--json", store=store).stdout
    bad = tmp_path / "bad.txt"
    bad.write_bytes(content)
    proc = stabscope("import", str(bad), "--run", "bad", store=store)
    assert proc.returncode != 0 and "bad.txt" in proc.stderr and "Traceback" not in proc.stderr
    assert stabscope("runs", "--json", store=store).stdout == before
    assert not (store / "runs" / "run=bad").exists()


def test_import_of_a_missing_file_is_refused(tmp_path: Path) -> None:
    proc = stabscope("import", str(tmp_path / "nope.log"), store=tmp_path / "store")
    assert proc.returncode != 0 and "no such file" in proc.stderr
