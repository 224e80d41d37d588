"""``stabscope experiment --quick`` end to end: real torch training on CPU into a temporary store, the
runs stored and analysed, the results written and loadable, and mechanism B's injected outlier batches
detected as a loss spike in the unprotected arm.

Two arms (none, restart) x 2 seeds x 300 steps keep it near a minute on two cores.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from ingest.cli import main
from ingest.services.run_analyses import open_analysed_store
from ingest.training.experiment_results import load_latest_results, results_path

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def quick_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    store = tmp_path_factory.mktemp("experiment-store")
    status = main(["experiment", "--quick", "--arms", "none,restart", "--id", "ci", "--store", str(store)])
    assert status == 0
    return store


def test_quick_results_are_written_and_load(quick_store: Path) -> None:
    path = results_path(quick_store, "ci")
    assert path.is_file()
    results = load_latest_results(quick_store, None)
    assert results is not None and results.complete
    assert results.experiment_id == "ci" and results.source == str(path)
    assert {(r.arm, r.seed) for r in results.runs} == {("none", 0), ("none", 1), ("restart", 0), ("restart", 1)}
    assert all(r.mechanism == "B" and r.transition_step == 150 for r in results.runs)
    assert all(math.isfinite(r.final_val_loss) and 0.5 < r.final_val_loss < math.log(256) for r in results.runs)
    assert all(r.wall_time_s > 0 and len(r.snr_steps) > 0 for r in results.runs)
    arms = {a.arm: a for a in results.arms}
    assert set(arms) == {"none", "restart"} and arms["none"].seeds == 2
    assert arms["none"].figures["spike_rate"].estimate == 1.0
    assert results.difference("B", "restart", "none", "final_val_loss") is not None
    assert {c.claim for c in results.claim_checks} == {"spike_rate_down_90"}  # no clip arm: no success claim
    assert json.loads(path.read_text())["command"].startswith("stabscope experiment --arms none,restart")


def test_runs_are_in_the_store_as_a_seed_group_and_the_outlier_spike_is_detected(quick_store: Path) -> None:
    store = open_analysed_store(quick_store)
    names = {info.name for info in store.list_runs()}
    assert names == {f"exp-ci-B-{arm}-s{seed}" for arm in ("none", "restart") for seed in (0, 1)}
    info = store.run_info("exp-ci-B-none-s0")
    assert info.meta["seed_group"] == "exp-ci-B-none" and info.meta["transition_step"] == 150
    for seed in (0, 1):
        spikes = store.spikes(f"exp-ci-B-none-s{seed}")
        after = [s for s in spikes if "loss" in s["metrics"] and 148 <= s["start"] < 150 + 60]
        assert after, f"seed {seed}: no loss spike detected after the outlier batches at step 150: {spikes}"
        assert after[0]["ratio"] > 1.2


def test_every_run_measures_the_gradient_at_two_batch_sizes(quick_store: Path) -> None:
    from stab_core.analysis import analyze_run

    store = open_analysed_store(quick_store)
    view = store.run_view("exp-ci-B-none-s0")
    assert view.per_rank["grad_norm_local"].ranks.tolist() == [0, 1]
    assert (view.meta["per_rank_batch_size"], view.meta["global_batch_size"]) == (4, 8)
    snr = analyze_run(view).snr
    assert snr is not None and snr.estimator == "two_batch"
    # the batch's gradient is the mean of the halves': its norm is at most their mean norm
    local = view.per_rank["grad_norm_local"].values
    grad = view.series["grad_norm"].values
    assert (grad <= local.mean(axis=0) * (1 + 1e-6)).all()


def test_the_lead_time_table_reads_the_experiment_store(quick_store: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from ingest.training.lead_time import main as lead_main

    assert lead_main(["--store", str(quick_store), "--horizons", "20"]) == 0
    table = capsys.readouterr().out.splitlines()
    rows = [line for line in table if line.startswith("| 20 |")]
    assert len(rows) == 7  # three SNR depths, two grad-norm and two loss thresholds
    assert all("| 4 |" in row for row in rows)  # every run took part in every row
