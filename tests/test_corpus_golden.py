"""The held-out corpus's golden files (tests/corpus/golden) are complete, and the scorer that reads
them (bench.corpus_eval) counts known answers right; no corpus log is needed."""

from __future__ import annotations

import numpy as np
import pytest

from bench.corpus_eval import (
    default_view,
    golden_problems,
    junk_metrics,
    load_goldens,
    score_import,
    score_incidents,
    score_statements,
)
from bench.corpus_scores import LogScore, totals

GOLDENS = load_goldens()


def test_corpus_has_at_least_fifteen_logs_with_unique_names() -> None:
    names = [g["name"] for g in GOLDENS]
    assert len(names) >= 15
    assert len(set(names)) == len(names)


@pytest.mark.parametrize("golden", GOLDENS, ids=lambda g: str(g["name"]))
def test_golden_file_is_complete(golden: dict) -> None:
    assert golden_problems(golden) == []
    assert golden["provenance"]["path"].endswith(golden["provenance"]["file"])
    for run in golden["import"]["runs"]:
        assert run["steps"][0] <= run["first_step"] <= run["last_step"] <= run["steps"][1]
        # a run holds records: of its records metric, or (a launch that logged only its throughput, batch 23's
        # DreamerV3 file) of another metric it counts
        assert run["records"] >= 1 or any(n > 0 for n in run.get("records_by_metric", {}).values())


GOLDEN = {
    "name": "toy",
    "import": {
        "runs": [
            {
                "steps": [0, 9],
                "records_metric": "loss",
                "records": 10,
                "metrics": ["loss", "lr"],
                "metrics_like": ["ppl"],
                "first": {"loss": 10.5},
                "last": {"loss": 3.25},
            }
        ],
        "known_fields": ["lm loss", "learning rate"],
        "must_not_be_metrics": ["JOB"],
    },
    "incidents": {
        "must_find": [{"step": 30, "metric": "loss", "tolerance_steps": 2}],
        "may_find": [{"step": 50, "metric": "loss", "tolerance_steps": 0}],
        "must_not_flag": [[100, 200]],
        "healthy": False,
    },
    "statements": {"must_not_say": ["DIVERGED"]},
}


def test_an_overfitting_fact_needs_the_keys_its_judge_reads() -> None:
    """Batch 23 wrote two with other keys (``val_min_step``, ``from``): the scorer raised a KeyError on the first
    evaluation; the completeness check now names the missing keys instead."""
    provenance = {"repo": "a/b", "commit": "0" * 40, "path": "x/log", "file": "log", "sha256": "f"}
    full: dict = {**GOLDEN, "provenance": provenance, "format_hint": "text"}
    full["facts"] = {"overfitting": {"best_val_step": 14, "val_rising_from": 15, "val_rising_to": 19}}
    assert golden_problems(full) == []
    full["facts"] = {"overfitting": {"val_min_step": 14, "from": 15}}
    assert golden_problems(full) == [
        "facts.overfitting has no number 'best_val_step'",
        "facts.overfitting has no number 'val_rising_from'",
        "facts.overfitting has no number 'val_rising_to'",
    ]
    full["facts"] = {"overfitting": None}  # no overfitting: nothing to check
    assert golden_problems(full) == []


def _series(n: int, first: float, last: float) -> tuple[np.ndarray, np.ndarray]:
    return np.arange(n), np.linspace(first, last, n)


def test_import_faults_by_kind() -> None:
    result = LogScore("toy")
    stored = [
        {
            "run": "a",
            "series": {"loss": _series(12, 10.5, 3.2), "JOB": _series(3, 1, 1), "nonsense_x": _series(2, 0, 0)},
        }
    ]
    score_import(result, GOLDEN, stored)
    assert result.import_faults["missing"] == ["lr", "ppl (any name)"]
    assert result.import_faults["records"] == ["loss: 12 records stored, 10 in the log"]
    assert result.import_faults["values"] == ["last loss: stored 3.2, log 3.25"]  # first 10.5 is within rounding
    assert result.import_faults["junk"] == ["JOB (must not be a metric)", "nonsense_x"]
    assert "runs" not in result.import_faults


def test_two_runs_stored_for_one_is_a_fault() -> None:
    result = LogScore("toy")
    run = {"loss": _series(10, 10.5, 3.25), "lr": _series(10, 1e-4, 1e-5), "ppl_eval": _series(2, 9, 8)}
    score_import(result, GOLDEN, [{"run": "a", "series": run}, {"run": "a-2", "series": run}])
    assert result.import_faults == {"runs": ["2 runs stored, 1 in the log"]}


def test_a_rollback_in_a_log_without_a_resume_is_a_fault() -> None:
    result = LogScore("toy")
    run = {"loss": _series(10, 10.5, 3.25), "lr": _series(10, 1e-4, 1e-5), "ppl_eval": _series(2, 9, 8)}
    score_import(result, GOLDEN, [{"run": "a", "series": run, "events": ["rollback", "restart"]}])
    assert result.import_faults == {"rollbacks": ["1 rollback events stored, the log has no resume from a checkpoint"]}


def test_canonical_metrics_and_their_companions_are_not_junk() -> None:
    imp = {"known_fields": ["train_time"], "must_not_be_metrics": ["pass"]}
    run = {"metrics": ["loss"], "metrics_like": []}
    assert junk_metrics(["loss", "gpu_mem_gb", "gpu_mem_max_gb", "train_time_s", "pass_3", "export_x"], imp, run) == [
        "pass_3 (must not be a metric)",
        "export_x",
    ]


def test_incidents_found_missed_invented_and_quiet_spans() -> None:
    incidents = [
        {"start": 31, "end": 33, "peak": 32, "metrics": ["loss"]},  # the required one, within tolerance
        {"start": 50, "end": 50, "peak": 50, "metric": "loss"},  # optional: neither found nor invented
        {"start": 150, "end": 151, "peak": 150, "metric": "loss"},  # invented, and in a quiet span
        {"start": 400, "end": 400, "peak": 400, "metric": "loss", "severity": "blip"},  # not in the default view
        {"start": 0, "end": 900, "peak": 0, "kind": "overfitting"},  # a finding, not an incident
    ]
    result = LogScore("toy")
    score_incidents(result, GOLDEN, incidents)
    assert (result.required, result.found, result.missed) == (1, 1, [])
    assert result.invented == ["spike loss at 150"]
    assert result.quiet_flagged == ["spike loss at 150 in quiet span 100-200"]
    assert result.reported == 3 == len(default_view(incidents))
    missed = LogScore("toy")
    score_incidents(missed, GOLDEN, [{"start": 34, "end": 40, "peak": 35, "metric": "loss"}])
    assert missed.found == 0 and len(missed.missed) == 1 and missed.invented == ["spike loss at 35"]


def test_statements_and_totals() -> None:
    result = LogScore("toy", required=2, found=1, healthy=True, reported=4)
    score_statements(result, GOLDEN, {"run status": ["DIVERGED at 40"], "incidents": ["recovered at 41"]})
    assert result.statements_broken == ["'DIVERGED' in run status"]
    # a phrase inside another word is not said ("NaN" in "resonance"); one a word starts with is (docs/diagnosis.md,
    # "Scorer")
    inside = LogScore("toy")
    score_statements(inside, {"statements": {"must_not_say": ["NaN", "diverge"]}}, {"s": ["resonance, diverged"]})
    assert inside.statements_broken == ["'diverge' in s"]
    result.fault("junk", "JOB")
    t = totals([result, LogScore("other", required=2, found=2)])
    assert t["recall"] == 0.75
    assert (t["shown_on_healthy"], t["healthy_logs"], t["statements_broken"]) == (4, 1, 1)
    assert t["import_faults"] == {"junk": 1}


def test_corpus_fetch_rebuilds_a_log_from_a_mirror_and_checks_its_sha256(tmp_path) -> None:
    import hashlib
    import json
    import subprocess

    from bench.corpus_fetch import rebuild

    work = tmp_path / "src"
    work.mkdir()
    log = b"step 1 loss 2.5\nstep 2 loss 2.25\n"
    (work / "logs").mkdir()
    (work / "logs" / "train.log").write_bytes(log)
    git = ["git", "-C", str(work), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "."], check=True)
    subprocess.run([*git, "commit", "-qm", "log"], check=True)
    commit = subprocess.run([*git, "rev-parse", "HEAD"], check=True, capture_output=True, text=True).stdout.strip()
    mirrors = tmp_path / "mirrors"
    (mirrors / "owner+repo").mkdir(parents=True)
    (work).rename(mirrors / "owner+repo" / "repo")
    goldens = tmp_path / "golden"
    goldens.mkdir()
    prov = {"repo": "owner/repo", "commit": commit, "path": "logs/train.log", "file": "train.log"}
    good = {"name": "ok", "provenance": {**prov, "sha256": hashlib.sha256(log).hexdigest()}}
    bad = {"name": "bad", "provenance": {**prov, "sha256": "0" * 64}}
    gone = {"name": "gone", "provenance": {**prov, "repo": "owner/absent", "sha256": "0" * 64}}
    for golden in (good, bad, gone):
        (goldens / f"{golden['name']}.json").write_text(json.dumps(golden))
    written, missing = rebuild(mirrors, tmp_path / "corpus", goldens)
    assert written == ["ok"]
    assert (tmp_path / "corpus" / "ok" / "train.log").read_bytes() == log
    assert "lines: 2" in (tmp_path / "corpus" / "ok" / "PROVENANCE.txt").read_text()
    assert len(missing) == 2 and any("sha256" in m for m in missing)
    assert any("no mirror of owner/absent" in m for m in missing)
    assert not (tmp_path / "corpus" / "bad").exists()
