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
    # every metric of the H100 file is numeric to step 22685, then the string "nan" to end_step 24000: steps
    # that are "nan" in every metric are unrecorded (imp10b), so the run's last step is 22685 of 24000 planned
    store = _imported(open_analysed_store(tmp_path / "s"), "mixtral", MIXTRAL_H100)
    info = store.run_info("mixtral")
    assert info.last_step == 22685 and planned_steps(info.meta) == 24000
    assert last_finite_step(store, "mixtral") == 22685
    assert run_status(store, "mixtral") == "stopped at 22685 of 24000"


def test_a_log_without_planned_steps_ended_rather_than_finished(tmp_path: Path) -> None:
    store = _imported(open_analysed_store(tmp_path / "s"), "llmc", LLMC)
    last_train = re.findall(r"^s:(\d+) trl:(\S+)", LLMC.read_text(), re.M)[-1]  # s:19559 trl:3.2217
    assert last_finite(store, "llmc", "loss") == (int(last_train[0]), pytest.approx(float(last_train[1])))
    assert "planned_steps" not in store.run_info("llmc").meta  # main.log states no total
    assert last_finite_step(store, "llmc") == 19560  # the final "s:19560 tel:3.2722" val line
    # the final val line right after the last training step evaluates the final weights: the run's end
    assert run_status(store, "llmc") == "ended at step 19560 (the final val_loss, after the last training step 19559)"


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


def test_status_text_states_its_evidence() -> None:
    said = status_text("finished", 5, None, 0, "the last loss; val_loss to 9")
    assert said == "ended at step 5 (the last loss; val_loss to 9)"
    assert status_text("finished", 72, 74, 0, "x") == "stopped at 72 of 74 (x)"
    assert status_text("finished", 73, 74, 0, "x") == "finished"


# --------------------------------------------------------------------------------------------------
# The run's last step is its last training step (issue #32: every statement a checked claim). Each
# fixture is a few lines of a trainer's console, in the layout of a real public log.
# --------------------------------------------------------------------------------------------------


def _from_text(tmp_path: Path, name: str, text: str) -> Store:
    log = tmp_path / name
    log.write_text(text)
    store = open_analysed_store(tmp_path / "s")
    store_parsed(store, "run", read_log([log]))
    return store


WLM_EPOCHS = 2
"""PyTorch's word-language-model example: 'end of epoch' validation lines are dated by the epoch
(epoch x batches per epoch), past the last training line (every 200 batches of 2983)."""


def _wlm_console() -> str:
    lines = []
    for epoch in range(1, WLM_EPOCHS + 1):
        for batch in range(200, 2983, 200):
            loss = 7.0 - 0.1 * epoch - batch / 10000
            lines.append(
                f"| epoch {epoch:3d} | {batch:5d}/ 2983 batches | lr 20.0000 | ms/batch  7.45 | "
                f"loss {loss:5.2f} | ppl {2.71828**loss:8.2f}"
            )
        end = f"| end of epoch {epoch:3d} | time: 23.24s | valid loss  6.65 | valid ppl   771.60"
        lines += ["-" * 89, end, "-" * 89]
    lines += ["=" * 89, "| End of training | test loss  6.58 | test ppl   718.99", "=" * 89]
    return "\n".join(lines) + "\n"


def test_an_epoch_end_validation_dates_the_runs_end_with_its_last_training_line(tmp_path: Path) -> None:
    # the log's last training line is epoch 2, batch 2800 = step 2983 + 2800 = 5783; the epoch-2
    # validation, dated at the epoch's last batch (5966, before the next line at 6166 would have been),
    # evaluates the weights after all 2983 batches: the run's end, stated with the training line it rests on
    store = _from_text(tmp_path, "wlm.md", _wlm_console())
    assert store.run_info("run").last_step == 2 * 2983
    assert run_status(store, "run") == "ended at step 5966 (the final val_loss, after the last training step 5783)"


def _lightning_csv(last_train: int, last_eval: int) -> str:
    """A Lightning CSVLogger metrics.csv: train_loss every 10 steps (at step 9, 19, ...), val_loss at
    each epoch's last step on a row of its own."""
    rows = ["epoch,step,train_loss,val_loss"]
    rows += [f"{s // 100},{s},{2.0 - s / 1000:.4f}," for s in range(9, last_train + 1, 10)]
    return "\n".join([*rows, f"{last_eval // 100},{last_eval},,1.5000"]) + "\n"


@pytest.mark.parametrize(("last_eval", "reached"), [(434, 434), (439, 439), (440, 429), (520, 429)])
def test_a_validation_before_the_next_training_row_is_the_runs_end(
    tmp_path: Path, last_eval: int, reached: int
) -> None:
    # Lightning validates at an epoch's last step, between logging steps: before, "ended at step 429
    # (the last training step; val_loss to 434)" while the trainer ran to 434; one at the next row's step
    # (439) ends a loop that logged no training row there. A validation past that step is no evidence of
    # training steps the log would have shown
    store = _from_text(tmp_path, "metrics.csv", _lightning_csv(429, last_eval))
    assert run_status(store, "run").startswith(f"ended at step {reached} ")


LLMC_NAN = (
    "step    1/19560 | loss     nan (+nanz)| norm    nan (+nanz)| lr 8.57e-07 | 3788.44 ms | 35.6% bf16 MFU | "
    "138391 tok/s\n"
    "step    2/19560 | loss     nan (+nanz)| norm    nan (+nanz)| lr 1.71e-06 | 3646.20 ms | 37.0% bf16 MFU | "
    "143790 tok/s\n"
    "step    3/19560 | loss     nan (+nanz)| norm    nan (+nanz)| lr 2.57e-06 | 3603.56 ms | 37.5% bf16 MFU | "
    "144663 tok/s\n"
    "step    4/19560 | loss     nan (+nanz)|slurmstepd: error: *** JOB 1 ON g084 CANCELLED AT 2024-10-10T02:20:29 "
    "DUE TO TIME LIMIT ***\n"
)


def test_a_run_nan_from_its_first_step_reached_its_last_logged_loss(tmp_path: Path) -> None:
    # llm.c's console, NaN from step 1, the last line cut by slurm after its loss: stored 0-based, the
    # cut line is step 3. Before: "stopped at 2 of 19560" (the last finite LR), a step the trainer had
    # passed; the loss being never finite is said with it
    store = _from_text(tmp_path, "train.log", LLMC_NAN * 1)
    assert last_finite(store, "run", "loss") is None
    # the step is said as the log prints it, in the numbering of the plan it states ("step 4/19560") (docs/diagnosis.md,
    # "Run status")
    assert run_status(store, "run") == (
        "stopped at 4 of 19560 (the loss is non-finite at every logged step; stored as step 3)"
    )


def test_nan_loss_rows_count_while_the_trainer_still_logs_step_times(tmp_path: Path) -> None:
    # nanoGPT keeps printing "loss nan" with its step times: those iterations ran; the run's last step
    # is the last of them, not the last finite loss (420)
    lines = ["step 0: train loss 4.2367, val loss 4.2475"]
    lines += [f"iter {i}: loss {3.5 - i / 1000:.4f}, time 1447.97ms, mfu 0.01%" for i in range(0, 425, 5)]
    lines += [f"iter {i}: loss nan, time 1440.31ms, mfu 0.01%" for i in range(425, 455, 5)]
    store = _from_text(tmp_path, "train.log", "\n".join(lines) + "\n")
    assert last_finite(store, "run", "loss") == (420, pytest.approx(3.08))
    assert run_status(store, "run") == "ended at step 450 (the last step_time_s; the last finite loss at 420)"


def test_evaluations_are_named_by_prefix_or_benchmark() -> None:
    from ingest.services.run_status import is_eval_metric

    assert [
        m for m in ("val_loss", "eval_train_loss", "test_ppl", "hellaswag_acc", "loss", "lr") if is_eval_metric(m)
    ] == [
        "val_loss",
        "eval_train_loss",
        "test_ppl",
        "hellaswag_acc",
    ]


def test_a_run_without_a_training_metric_says_so(tmp_path: Path) -> None:
    store = write_run(
        open_analysed_store(tmp_path / "s"),
        RunSpec(name="evals", per_rank=False, run_level=("lr",), loss_spike=None, grad_spike_step=None),
    )
    assert run_status(store, "evals") == "ended at step 1999 (the last lr: no metric read as the training loss)"
