"""Run status from the data: "finished" only at the planned steps, "stopped at N of M" before them,
"ended at step N" when nothing states a plan; the planned steps the logs print reach the metadata."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from ingest.formats import read_log
from ingest.importing.importer import store_parsed
from ingest.services.run_analyses import open_analysed_store
from ingest.services.run_status import last_finite, last_finite_step, planned_steps, run_status, status_text
from ingest.store import Store
from tests.conftest import RunSpec, write_run

REAL = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "real_logs"
MEGDS = REAL / "bigscience_megds_perf_log" / "meg_ds_3d_gpt2_perf_n16-ds-off.out"
MIXTRAL_H100 = REAL / "megatron_mixtral8x7b_h100" / "golden_values_dev_dgx_h100.json"
LLMC = REAL / "mng_llmc_gpt2_124m" / "main.log"
TITAN = REAL / "torchtitan_qwen3_14b_run217" / "run.log"


def _imported(store: Store, name: str, path: Path) -> Store:
    if not path.exists():
        pytest.skip(f"../shared absent: no real log at {path}")
    store_parsed(store, name, read_log([path]))
    return store


def test_a_perf_run_killed_at_62_of_1000_iterations_stopped(tmp_path: Path) -> None:
    # the log's last metric line is "iteration       62/    1000 | ... lm loss: 2.043871E+01"
    store = _imported(open_analysed_store(tmp_path / "s"), "megds", MEGDS)
    meta = store.run_info("megds").meta
    assert meta["planned_steps"] == 1000 == planned_steps(meta)
    assert last_finite(store, "megds", "loss") == (62, pytest.approx(20.43871))
    assert run_status(store, "megds") == "stopped at 62 of 1000"


def test_golden_values_that_turn_to_nan_stopped_where_they_did(tmp_path: Path) -> None:
    # every metric of the H100 file is numeric to step 22685, then the string "nan" to end_step 24000
    store = _imported(open_analysed_store(tmp_path / "s"), "mixtral", MIXTRAL_H100)
    info = store.run_info("mixtral")
    assert info.last_step == 24000 and planned_steps(info.meta) == 24000
    assert last_finite_step(store, "mixtral") == 22685
    assert run_status(store, "mixtral") == "stopped at 22685 of 24000"


def test_a_log_without_planned_steps_ended_rather_than_finished(tmp_path: Path) -> None:
    store = _imported(open_analysed_store(tmp_path / "s"), "llmc", LLMC)
    last_train = re.findall(r"^s:(\d+) trl:(\S+)", LLMC.read_text(), re.M)[-1]  # s:19559 trl:3.2217
    assert last_finite(store, "llmc", "loss") == (int(last_train[0]), pytest.approx(float(last_train[1])))
    assert "planned_steps" not in store.run_info("llmc").meta  # main.log states no total
    assert last_finite_step(store, "llmc") == 19560  # the final "s:19560 tel:3.2722" val line
    assert run_status(store, "llmc") == "ended at step 19560"


def test_a_run_that_reached_its_planned_steps_finished(tmp_path: Path) -> None:
    # "total steps 10" ... "step: 10 loss: 6.92163"
    store = _imported(open_analysed_store(tmp_path / "s"), "titan", TITAN)
    assert store.run_info("titan").meta["planned_steps"] == 10
    assert run_status(store, "titan") == "finished"


def test_the_users_planned_steps_win_and_live_stays_live(tmp_path: Path) -> None:
    store = write_run(
        open_analysed_store(tmp_path / "s"), RunSpec(name="job", per_rank=False, meta={"planned_steps": 5000})
    )
    assert run_status(store, "job") == "stopped at 1999 of 5000"  # steps 0..1999 of 5,000
    assert planned_steps({"planned_steps": 5000, "total_steps": 2000}) == 5000
    assert planned_steps({"total_steps": 2000.0}) == 2000
    assert planned_steps({"planned_steps": True, "total_steps": "many"}) is None
    write_run(store, RunSpec(name="live-job", per_rank=False), status="live")
    assert run_status(store, "live-job") == "live"


@pytest.mark.parametrize(
    ("reached", "planned", "first", "expected"),
    [
        (1000, 1000, 1, "finished"),  # Megatron counts 1..M
        (999, 1000, 1, "stopped at 999 of 1000"),
        (73, 74, 0, "finished"),  # llm.c's console counts 0..M-1
        (72, 74, 0, "stopped at 72 of 74"),
        (5, None, 0, "ended at step 5"),
        (None, 100, None, "empty: no finite value logged"),
    ],
)
def test_status_text(reached: int | None, planned: int | None, first: int | None, expected: str) -> None:
    assert status_text("finished", reached, planned, first) == expected
    assert status_text("live", reached, planned, first) == "live"
