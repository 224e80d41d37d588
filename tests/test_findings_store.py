"""Overfitting and throughput loss end to end: a nanoGPT console log imported as a user imports it,
then ``stabscope spikes`` (text and ``--json``), the stored analyses and the alerts; and a run slower
than its sibling of the same config."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest

from ingest.cli import main
from ingest.services.run_alerts import run_alerts
from ingest.services.run_analyses import open_analysed_store
from ingest.services.run_findings import finding_entries, sibling_gap, stored_findings
from tests.test_cli_contracts import SPIKE_FIELDS


def nanogpt_log(path: Path, *, overfit: bool, slow_from: int | None) -> Path:
    """A nanoGPT shakespeare-char console: ``iter N: loss x, time x ms, mfu x%`` every step to 5,000,
    ``step N: train loss x, val loss y`` every 250. With ``overfit`` the val loss bottoms at 1.472
    (step 1,750) and climbs to 1.719 at 5,000 while the train loss falls to 0.62; from ``slow_from``
    on each step takes 160 ms instead of 100 ms."""
    rng = np.random.default_rng(7)
    lines = []
    for step in range(5001):
        if step % 250 == 0:
            if overfit and step > 1750:
                val = 1.472 + (1.719 - 1.472) * (step - 1750) / 3250
            else:
                val = 1.472 + 2.7 * np.exp(-step / 350) - 2.7 * np.exp(-5)
                val = max(val, 1.472) if overfit else 1.47 + 2.7 * np.exp(-step / 350)
            lines.append(f"step {step}: train loss {0.62 + 3.6 * np.exp(-step / 900):.4f}, val loss {val:.4f}")
        loss = 0.62 + 3.6 * np.exp(-step / 900) + rng.normal(0, 0.02)
        ms = 2500.0 if step == 0 else (160.0 if slow_from is not None and step >= slow_from else 100.0)
        ms *= 1 + rng.normal(0, 0.01)
        lines.append(f"iter {step}: loss {loss:.4f}, time {ms:.2f}ms, mfu 30.00%")
    path.write_text("\n".join(lines) + "\n")
    return path


def _spikes_json(store: str, run: str, capsys: pytest.CaptureFixture[str]) -> list[dict]:
    capsys.readouterr()
    assert main(["spikes", run, "--json", "--store", store]) == 0
    out: list[dict] = json.loads(capsys.readouterr().out)
    return out


def test_overfitting_and_a_slow_span_reach_spikes_json_text_and_alerts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = str(tmp_path / "store")
    log = nanogpt_log(tmp_path / "train.log", overfit=True, slow_from=3000)
    assert main(["import", str(log), "--run", "shakespeare", "--store", store]) == 0
    entries = _spikes_json(store, "shakespeare", capsys)
    found = {e["kind"]: e for e in entries if e["kind"] in ("overfitting", "throughput_loss")}
    for entry in found.values():  # every field an incident of spikes --json has, so a reader of them still reads
        assert entry.keys() >= SPIKE_FIELDS
    assert found["overfitting"]["ratio"] == pytest.approx(1.70 / 1.472, abs=0.02)
    assert found["throughput_loss"]["ratio"] == pytest.approx(0.100 / 0.160, abs=0.02)
    over = found["overfitting"]["overfitting"]
    assert over["best_step"] == 1750 and over["span"] == [1750, 5000]
    assert over["best_val_loss"] == pytest.approx(1.472) and over["end_val_loss"] == pytest.approx(1.70, abs=0.02)
    assert found["overfitting"]["start"] == 1750 and found["overfitting"]["metric"] == "val_loss"
    slow = found["throughput_loss"]["throughput"]
    assert slow["metric"] == "step_time_s" and abs(slow["start"] - 3000) <= 15 and slow["end"] == 5000
    assert slow["level"] == pytest.approx(0.160, rel=0.02) and slow["norm"] == pytest.approx(0.100, rel=0.02)
    assert not slow["recovered"]

    capsys.readouterr()
    assert main(["spikes", "shakespeare", "--store", store]) == 0
    text = capsys.readouterr().out
    assert "overfitting: val loss rose 1.472 (step 1750)" in text and "best checkpoint is at step 1750" in text
    # the step is the evaluation's; which checkpoint to keep is said, with the value (#32 item 4)
    assert "Keep the checkpoint of step 1750 (the lowest val loss, 1.472), or the last one saved before it" in text
    # the norm is the level before the slow span (0.0999 s: its 75th percentile as a rate)
    assert "throughput loss: step time (s) 0.0999 -> 0.16" in text and "over steps 30" in text, text

    opened = open_analysed_store(store)
    info = opened.run_info("shakespeare")
    assert info.meta["analysis"]["findings"]["overfitting"]["best_step"] == 1750
    alerts = {a.kind: a for a in run_alerts(opened, "shakespeare", live=False)}
    assert alerts["overfitting"].step == 1750 and alerts["overfitting"].metric == "val_loss"
    assert alerts["throughput_loss"].metric == "step_time_s"


def test_a_healthy_run_has_no_finding_and_the_first_slow_step_is_warm_up(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = str(tmp_path / "store")
    log = nanogpt_log(tmp_path / "train.log", overfit=False, slow_from=None)
    assert main(["import", str(log), "--run", "healthy", "--store", store]) == 0
    entries = _spikes_json(store, "healthy", capsys)
    assert [e for e in entries if e["kind"] in ("overfitting", "throughput_loss")] == []
    opened = open_analysed_store(store)
    assert {a.kind for a in run_alerts(opened, "healthy", live=False)}.isdisjoint({"overfitting", "throughput_loss"})


def test_a_run_slower_than_its_sibling_of_the_same_config(tmp_path: Path) -> None:
    store = str(tmp_path / "store")
    for name, slow_from in (("fast", None), ("slow", 1)):
        log = nanogpt_log(tmp_path / f"{name}.log", overfit=False, slow_from=slow_from)
        assert main(["import", str(log), "--run", name, "--store", store]) == 0
    opened = open_analysed_store(store)
    runs = [dataclasses.replace(r, meta={**r.meta, "config_name": "shakespeare-char"}) for r in opened.list_runs()]
    slow = next(r for r in runs if r.name == "slow")
    level = stored_findings(opened, slow, siblings=False)["throughput_level"]
    assert level["metric"] == "step_time_s" and level["level"] == pytest.approx(0.160, rel=0.02)
    gap = sibling_gap(slow, level, runs)
    assert gap is not None and gap["siblings"] == ["fast"]
    assert gap["change_pct"] == pytest.approx(100 * (0.100 / 0.160 - 1), abs=2)
    (entry,) = finding_entries({"throughput_siblings": gap})
    assert entry["kind"] == "throughput_loss" and "1 sibling run(s) of the same config" in entry["summary"]
    # the action's premise is the finding's: a gap over the whole run has no slow span to compare (docs/diagnosis.md,
    # "Findings")
    assert "slow span" not in entry["actions"][0] and "sibling runs'" in entry["actions"][0]
    fast = next(r for r in runs if r.name == "fast")
    assert sibling_gap(fast, stored_findings(opened, fast, siblings=False)["throughput_level"], runs) is None
    # without a shared config or file the runs are not siblings
    assert sibling_gap(opened.run_info("slow"), level, opened.list_runs()) is None


@pytest.mark.parametrize("page", ["spikes", "overview"])
def test_the_pages_show_the_overfitting_and_the_slow_span(
    page: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tests.conftest import open_page

    store = str(tmp_path / "store")
    log = nanogpt_log(tmp_path / "train.log", overfit=True, slow_from=3000)
    assert main(["import", str(log), "--run", "shakespeare", "--store", store]) == 0
    monkeypatch.setenv("STABSCOPE_STORE", store)
    at = open_page(page).run()
    assert not at.exception
    warnings = [w.value for w in at.warning]
    assert any("overfitting: val loss rose 1.472 (step 1750)" in w for w in warnings), warnings
    assert any("throughput loss: step time (s)" in w and "over steps 30" in w for w in warnings), warnings
    assert any("Keep the checkpoint of step 1750" in c.value for c in at.caption)


def test_a_segment_slower_than_the_run_before_it_in_the_same_log(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A log whose steps start again holds two runs (NAME, NAME-2): siblings of the same file."""
    lines = []
    for ms in (100.0, 160.0):
        lines += [f"iter {s}: loss {3 - s / 300:.4f}, time {ms * (1 + 0.01 * ((s * 7) % 5 - 2) / 2):.2f}ms, mfu 30.00%"
                  for s in range(300)]  # fmt: skip
    (tmp_path / "train.log").write_text("\n".join(lines) + "\n")
    store = str(tmp_path / "store")
    assert main(["import", str(tmp_path / "train.log"), "--run", "seg", "--store", store]) == 0
    (gap,) = [e for e in _spikes_json(store, "seg-2", capsys) if e["kind"] == "throughput_loss"]
    assert gap["throughput"]["kind"] == "siblings" and gap["throughput"]["siblings"] == ["seg"]
    assert gap["throughput"]["change_pct"] == pytest.approx(100 * (100 / 160 - 1), abs=1)
    assert "1 sibling run(s) of the same log file" in gap["summary"]
    assert [e for e in _spikes_json(store, "seg", capsys) if e["kind"] == "throughput_loss"] == []
    opened = open_analysed_store(store)
    assert "throughput_loss" in {a.kind for a in run_alerts(opened, "seg-2", live=False)}
