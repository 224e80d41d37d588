"""CSV, JSON/JSONL, MLflow and Parquet readers on small inputs written from each format's definition."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from ingest.formats import detect, read_log


def _value(parsed, metric: str, step: int, rank: int = -1) -> float:
    steps, values = parsed.series(metric, rank)
    hit = values[steps == step]
    assert hit.shape == (1,), f"{metric}@{step}: {hit}"
    return float(hit[0])


# --------------------------------------------------------------------------- CSV


def test_wide_csv_with_rank_event_and_nan(tmp_path: Path) -> None:
    path = tmp_path / "run.csv"
    path.write_text(
        "step,rank,loss,grad_norm_local,lr,event\n"
        "1,-1,3.0,,1e-4,\n"
        "1,0,,0.5,,\n"
        "1,1,,0.7,,\n"
        "2,-1,nan,,2e-4,schedule_transition: warmup -> stable\n"
        "2,0,,inf,,\n"
        "3,-1,2.5,,2e-4,data_switch: recipe v2\n"
    )
    assert detect([path])[0][0] == "csv_wide"
    parsed = read_log([path])
    assert _value(parsed, "loss", 1) == 3.0
    assert math.isnan(_value(parsed, "loss", 2))  # kept, not dropped
    assert _value(parsed, "grad_norm_local", 1, rank=1) == 0.7
    assert math.isinf(_value(parsed, "grad_norm_local", 2, rank=0))
    assert parsed.series("lr")[0].tolist() == [1, 2, 3]  # empty cells: not logged
    assert [(e.step, e.kind, e.label) for e in parsed.events] == [
        (2, "schedule_transition", "warmup -> stable"),
        (3, "data_switch", "recipe v2"),
    ]


def test_wide_csv_text_cell_in_a_late_row(tmp_path: Path) -> None:
    rows = "".join(f"{i},{1.0 / (i + 1)}\n" for i in range(3000))
    path = tmp_path / "long.csv"
    path.write_text("step,loss\n" + rows + "3000,NaN\n3001,12.5ms\n")
    parsed = read_log([path], format="csv_wide")
    steps, values = parsed.series("loss")
    assert steps.shape[0] == 3001  # "12.5ms" is not a bare number: skipped and reported
    assert math.isnan(values[-1])
    assert parsed.skipped == 1
    assert parsed.skipped_examples[0][1:] == (3003, "column 'loss': '12.5ms' is not a number")


def test_csv_with_an_epoch_column_and_no_step_is_one_row_per_epoch(tmp_path: Path) -> None:
    # Keras CSVLogger: the epoch is the step axis
    path = tmp_path / "training_log.csv"
    path.write_text(
        "epoch,accuracy,learning_rate,loss,val_accuracy,val_loss\n"
        "0,0.75,0.005,1.92,0.79,1.42\n"
        "1,0.80,0.005,1.34,0.81,1.26\n"
        "2,0.82,0.0025,1.21,0.83,1.17\n"
    )
    assert detect([path])[0][0] == "csv_wide"
    parsed = read_log([path])
    assert parsed.series("loss")[0].tolist() == [0, 1, 2]
    assert _value(parsed, "lr", 2) == 0.0025 and _value(parsed, "val_loss", 0) == 1.42


def test_csv_step_restarting_every_epoch_is_a_global_step(tmp_path: Path) -> None:
    # epoch,step with the step counting batches within the epoch: no near-tie with lightning_csv
    # (no CSVLogger sign), one run, step = (epoch - 1) * 600 + step; a parameter count is no metric
    path = tmp_path / "training_log.csv"
    rows = [f"{e},{s},{3.0 - e * 0.1 - s / 6000},{2.0 - e * 0.05},23293770" for e in (1, 2, 3) for s in (299, 599)]
    path.write_text("epoch,step,train_loss,val_loss,num_params\n" + "\n".join(rows) + "\n")
    candidates = detect([path])
    assert candidates[0][0] == "csv_wide" and candidates[1][1] < candidates[0][1] - 0.1
    parsed = read_log([path])
    assert parsed.series("loss")[0].tolist() == [299, 599, 899, 1199, 1499, 1799]
    assert "num_params" not in parsed.metrics
    zero_based = tmp_path / "zero.csv"
    zero_based.write_text("epoch,step,loss\n0,0,3\n0,10,2.9\n0,19,2.8\n1,0,2.7\n1,10,2.6\n")
    assert read_log([zero_based]).series("loss")[0].tolist() == [0, 10, 19, 20, 30]
    resumed = tmp_path / "resumed.csv"  # the step goes back with the same epoch: kept as written
    resumed.write_text("epoch,step,loss\n0,10,3\n0,20,2.9\n0,15,2.8\n1,25,2.7\n")
    assert sorted(read_log([resumed]).series("loss")[0].tolist()) == [10, 15, 20, 25]


def test_tensorboard_csv_download(tmp_path: Path) -> None:
    a = tmp_path / "run-train-tag-loss.csv"
    b = tmp_path / "run-train-tag-grad_norm.csv"
    a.write_text("Wall time,Step,Value\n1700000000.5,10,2.5\n1700000001.5,20,2.25\n")
    b.write_text("Wall time,Step,Value\n1700000000.5,10,0.75\n")
    assert detect([a, b])[0] == ("tensorboard_csv", 0.95)
    parsed = read_log([a, b])
    assert parsed.metrics == ["grad_norm", "loss"]
    assert _value(parsed, "loss", 20) == 2.25
    assert parsed.table["wall_time"][0].as_py() == 1700000000.5


def test_wandb_panel_export_skips_min_max(tmp_path: Path) -> None:
    path = tmp_path / "wandb_export.csv"
    path.write_text(
        '"Step","run-7 - train/loss","run-7 - train/loss__MIN","run-7 - train/loss__MAX"\n'
        '"100","2.5","2.25","3.75"\n"200","2.0","1.5","2.5"\n'
    )
    assert detect([path])[0][0] == "wandb_csv"
    parsed = read_log([path])
    assert parsed.metrics == ["loss"]  # __MIN/__MAX: the range of the points W&B bucketed, not metrics
    assert _value(parsed, "loss", 200) == 2.0
    assert parsed.meta["wandb_run"] == "run-7"


def test_wandb_panel_export_of_several_runs_is_one_run_per_name(tmp_path: Path) -> None:
    two = tmp_path / "two.csv"
    two.write_text(
        "Step,b-run - train/loss,b-run - train/loss__MIN,b-run - train/loss__MAX,a-run - train/loss\n"
        "1,2,1.5,2.5,3\n2,1.5,1,2,\n3,,,,2.5\n"
    )
    parsed = read_log([two])
    runs = [parsed, *parsed.segments]
    assert [r.meta["wandb_run"] for r in runs] == ["b-run", "a-run"]  # column order
    assert [r.metrics for r in runs] == [["loss"], ["loss"]]
    assert runs[0].series("loss")[0].tolist() == [1, 2] and runs[1].series("loss")[1].tolist() == [3.0, 2.5]


def test_lightning_sparse_rows(tmp_path: Path) -> None:
    folder = tmp_path / "version_0"
    folder.mkdir()
    rows = ["epoch,step,train_loss_epoch,train_loss_step,val_loss"]
    rows += [f"0,{s},,{4.0 - s / 1000:.3f}," for s in range(49, 3000, 50)]
    rows += ["0,2999,,,3.5", "0,2999,3.9,,"]
    (folder / "metrics.csv").write_text("\n".join(rows) + "\n")
    (folder / "hparams.yaml").write_text("lr: 0.001\nmax_seq_len: 256\n")
    assert detect([folder / "metrics.csv"])[0][0] == "lightning_csv"
    parsed = read_log([folder / "metrics.csv"])
    steps, loss = parsed.series("loss")  # train_loss_step -> train_loss -> loss
    assert steps.shape[0] == 60 and loss[0] == pytest.approx(3.951)
    assert _value(parsed, "val_loss", 2999) == 3.5
    assert _value(parsed, "train_loss_epoch", 2999) == 3.9
    assert parsed.meta["peak_lr"] == 0.001 and parsed.meta["seq_len"] == 256
    # the version folder itself works too
    assert detect([folder])[0][0] == "lightning_csv"
    assert read_log([folder]).table.equals(parsed.table)


def test_deepspeed_csv_monitor_folder(tmp_path: Path) -> None:
    folder = tmp_path / "ds_logs" / "job"
    folder.mkdir(parents=True)
    (folder / "Train_Samples_train_loss.csv").write_text("step,train_loss\n512,10.5\n1024,9.75\n")
    (folder / "Train_Samples_lr.csv").write_text("step,lr\n512,1e-05\n1024,2e-05\n")
    (folder / "Train_Samples_loss_scale.csv").write_text("step,loss_scale\n512,65536.0\n1024,32768.0\n")
    assert detect([folder])[0][0] == "deepspeed_csv"
    parsed = read_log([folder])
    assert parsed.metrics == ["loss", "loss_scale", "lr"]
    assert _value(parsed, "loss", 1024) == 9.75
    assert parsed.meta["step_unit"] == "samples"
    assert not parsed.events  # one stream per file: no false restarts


# --------------------------------------------------------------------------- JSON


def test_generic_jsonl_nested_and_nan_literals(tmp_path: Path) -> None:
    path = tmp_path / "metrics.jsonl"
    lines = [
        {"step": 1, "loss": 3.0, "optim": {"lr": 1e-4, "name": "adamw"}},
        {"step": 2, "loss": float("nan"), "optim": {"lr": 2e-4}},
        {"step": 3, "loss": 2.0, "val": {"loss": 2.5}},
    ]
    path.write_text("\n".join(json.dumps(x) for x in lines) + "\nnot json\n")
    assert detect([path])[0][0] == "jsonl"
    parsed = read_log([path])
    assert math.isnan(_value(parsed, "loss", 2))
    assert _value(parsed, "optim/lr", 2) == 2e-4
    assert _value(parsed, "val_loss", 3) == 2.5  # val/loss -> val_loss
    assert parsed.skipped == 1 and parsed.skipped_examples[0][1] == 4


def test_generic_jsonl_fast_path_and_string_nan(tmp_path: Path) -> None:
    path = tmp_path / "m.jsonl"
    path.write_text("".join(json.dumps({"iteration": i, "lm loss": 5.0 - i * 0.01}) + "\n" for i in range(2000)))
    with path.open("a") as f:
        f.write(json.dumps({"iteration": 2000, "lm loss": "nan"}) + "\n")
    parsed = read_log([path])
    steps, loss = parsed.series("loss")
    assert steps.shape[0] == 2001 and math.isnan(loss[-1]) and loss[1] == pytest.approx(4.99)


def test_wandb_history_prefers_trainer_step(tmp_path: Path) -> None:
    path = tmp_path / "wandb-history.jsonl"
    rows = [
        {"_step": 0, "_runtime": 5.1, "_timestamp": 1.7e9, "train/loss": 2.5, "train/global_step": 10},
        {"_step": 1, "_runtime": 9.0, "_timestamp": 1.7e9 + 4, "train/loss": "NaN", "train/global_step": 20},
        {"_step": 2, "_runtime": 12.0, "_timestamp": 1.7e9 + 8, "eval/loss": 2.75, "train/global_step": 20},
        {"_step": 3, "_runtime": 13.0, "_timestamp": 1.7e9 + 9, "img": {"_type": "image-file", "path": "x"}},
    ]
    text = "\n".join(json.dumps(r) for r in rows).replace('"NaN"', "NaN")
    path.write_text(text + "\n")
    assert detect([path])[0][0] == "wandb_history"
    parsed = read_log([path])
    assert _value(parsed, "loss", 10) == 2.5
    assert math.isnan(_value(parsed, "loss", 20))
    assert _value(parsed, "val_loss", 20) == 2.75
    assert "img/path" not in parsed.metrics and "_runtime" not in parsed.metrics
    wall = dict(zip(parsed.table["step"].to_pylist(), parsed.table["wall_time"].to_pylist(), strict=False))
    assert wall[10] == 1.7e9


def test_llamafactory_jsonl(tmp_path: Path) -> None:
    path = tmp_path / "trainer_log.jsonl"
    rows = [
        {
            "current_steps": 5,
            "total_steps": 10,
            "loss": 1.75,
            "eval_loss": None,
            "learning_rate": 5e-05,
            "epoch": 0.1,
            "percentage": 50.0,
            "elapsed_time": "0:03:29",
            "remaining_time": "1 day, 0:00:01",
        },
        {
            "current_steps": 10,
            "total_steps": 10,
            "loss": 1.5,
            "eval_loss": 1.6,
            "learning_rate": 4e-05,
            "epoch": 0.2,
            "percentage": 100.0,
            "elapsed_time": "2 days, 1:00:00",
            "remaining_time": "0:00:00",
        },
        {
            "current_steps": 10,
            "total_steps": 10,
            "loss": None,
            "eval_loss": None,
            "learning_rate": None,
            "epoch": 0.2,
            "percentage": 100.0,
            "elapsed_time": "2 days, 1:00:05",
            "remaining_time": "0:00:00",
        },
    ]
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    assert detect([path])[0][0] == "llamafactory"
    parsed = read_log([path])
    assert parsed.series("loss")[1].tolist() == [1.75, 1.5]  # null = not logged, not NaN
    assert _value(parsed, "val_loss", 10) == 1.6
    assert _value(parsed, "elapsed_time_s", 5) == 209.0
    assert _value(parsed, "elapsed_time_s", 10) == 2 * 86400 + 3605.0  # the later line wins
    assert parsed.meta["total_steps"] == 10
    assert "percentage" not in parsed.metrics


def test_hf_trainer_state_train_eval_and_summary(tmp_path: Path) -> None:
    path = tmp_path / "trainer_state.json"
    state = {
        "global_step": 30,
        "max_steps": 30,
        "train_batch_size": 4,
        "log_history": [
            {"epoch": 0.1, "grad_norm": 1.0, "learning_rate": 1e-5, "loss": 2.0, "step": 10},
            {"epoch": 0.1, "eval_loss": 1.9, "eval_runtime": 3.5, "step": 10},
            {
                "epoch": 0.2,
                "grad_norm": "NaN",
                "learning_rate": 2e-5,
                "loss": 1.8,
                "num_input_tokens_seen": 4096,
                "step": 20,
            },
            {"epoch": 0.3, "step": 30, "train_loss": 1.9, "train_runtime": 100.0, "total_flos": 1e15},
        ],
    }
    path.write_text(json.dumps(state, indent=2))
    assert detect([path])[0][0] == "hf_trainer_state"
    parsed = read_log([path])
    assert _value(parsed, "loss", 20) == 1.8
    assert _value(parsed, "val_loss", 10) == 1.9
    assert math.isnan(_value(parsed, "grad_norm", 20))
    assert _value(parsed, "tokens", 20) == 4096
    assert "train_loss" not in parsed.metrics and parsed.meta["train_summary"]["train_runtime"] == 100.0
    assert parsed.meta["total_steps"] == 30 and parsed.meta["per_rank_batch_size"] == 4
    # an output folder: the latest checkpoint's state holds the whole history
    out = tmp_path / "output"
    for n, history in ((200, state["log_history"][:1]), (1000, state["log_history"])):
        (out / f"checkpoint-{n}").mkdir(parents=True)
        (out / f"checkpoint-{n}" / "trainer_state.json").write_text(json.dumps({**state, "log_history": history}))
    from_folder = read_log([out])
    assert from_folder.source_files == [str(out / "checkpoint-1000" / "trainer_state.json")]
    assert from_folder.table.to_pandas().equals(parsed.table.to_pandas())  # NaN-aware


def test_megatron_golden_values_dict_and_list_forms(tmp_path: Path) -> None:
    path = tmp_path / "golden_values.json"
    golden = {
        "lm loss": {"start_step": 1, "end_step": 15, "step_interval": 5, "values": {"1": 10.5, "5": 9.0, "10": "nan"}},
        "iteration-time": {"start_step": 1, "end_step": 11, "step_interval": 5, "values": [2.0, 1.0, 1.5]},
        "mem-allocated-bytes": {"start_step": 1, "end_step": 1, "step_interval": 5, "values": {"1": 2147483648.0}},
    }
    path.write_text(json.dumps(golden))
    assert detect([path])[0][0] == "megatron_golden"
    parsed = read_log([path])
    steps, loss = parsed.series("loss")
    assert steps.tolist() == [1, 5, 10] and math.isnan(loss[2])
    assert parsed.series("step_time_s")[0].tolist() == [1, 6, 11]
    assert _value(parsed, "gpu_mem_gb", 1) == 2.0
    assert parsed.meta["total_steps"] == 15


def test_megatron_golden_step_nan_in_every_metric_is_no_record(tmp_path: Path) -> None:
    # Megatron writes "nan" in every metric (memory and time too) at a step it did not record: no
    # record, accounted as a placeholder; a NaN loss beside a real memory value stays evidence.
    path = tmp_path / "golden_values.json"
    loss = {"1": 10.5, "2": "nan", "3": 9.0, "4": "nan", "5": "nan"}
    mem = {"1": 1073741824.0, "2": 1073741824.0, "3": 1073741824.0, "4": "nan", "5": "nan"}
    step_time = {"1": "nan", "2": 1.0, "3": 1.0, "4": "nan", "5": "nan"}
    golden = {
        "lm loss": {"start_step": 1, "end_step": 5, "step_interval": 1, "values": loss},
        "mem-allocated-bytes": {"start_step": 1, "end_step": 5, "step_interval": 1, "values": mem},
        "iteration-time": {"start_step": 1, "end_step": 5, "step_interval": 1, "values": step_time},
    }
    path.write_text(json.dumps(golden))
    parsed = read_log([path])
    steps, values = parsed.series("loss")
    assert steps.tolist() == [1, 2, 3] and math.isnan(values[1]) and values[2] == 9.0
    assert parsed.series("step_time_s")[0].tolist() == [1, 2, 3]
    assert parsed.meta["total_steps"] == 5
    assert any("placeholder: every metric nan" in reason for _, _, reason in parsed.skipped_examples)


# --------------------------------------------------------------------------- MLflow, Parquet


def test_mlflow_run_folder(tmp_path: Path) -> None:
    run = tmp_path / "mlruns" / "0" / "abc123"
    (run / "metrics" / "train").mkdir(parents=True)
    (run / "params").mkdir()
    (run / "metrics" / "train" / "loss").write_text("1700000000000 2.5 1\n1700000001000 nan 2\n1700000002000 2.0 3\n")
    (run / "metrics" / "lr").write_text("1700000000000 0.001 1\n")
    (run / "params" / "batch_size").write_text("32")
    (run / "meta.yaml").write_text("run_name: baseline\nrun_id: abc123\n")
    assert detect([tmp_path / "mlruns"])[0][0] == "mlflow"
    parsed = read_log([run])
    assert math.isnan(_value(parsed, "loss", 2))
    assert _value(parsed, "lr", 1) == 0.001
    assert parsed.meta["params"] == {"batch_size": "32"}
    assert parsed.meta["mlflow_run_name"] == "baseline"
    wall = parsed.table.filter(pa.compute.equal(parsed.table["metric"], "loss"))["wall_time"].to_pylist()
    assert wall == [1700000000.0, 1700000001.0, 1700000002.0]


def test_parquet_long_round_trip_and_wide(tmp_path: Path) -> None:
    long_path = tmp_path / "long.parquet"
    table = pa.table(
        {
            "rank": pa.array([-1, -1, 0, 1], pa.int32()),
            "step": pa.array([1, 2, 1, 1], pa.int64()),
            "metric": ["loss", "loss", "grad_norm_local", "grad_norm_local"],
            "value": [2.0, float("nan"), 0.5, 0.25],
            "wall_time": [1.0, 2.0, None, None],
        }
    )
    pq.write_table(table, long_path)
    assert detect([long_path])[0][0] == "parquet"
    parsed = read_log([long_path])
    assert parsed.table.num_rows == 4
    assert math.isnan(_value(parsed, "loss", 2))
    assert _value(parsed, "grad_norm_local", 1, rank=1) == 0.25
    wide_path = tmp_path / "wide.parquet"
    pq.write_table(pa.table({"step": np.arange(5), "train_loss": np.linspace(3, 2, 5)}), wide_path)
    wide = read_log([wide_path])
    assert wide.series("loss")[1].tolist() == pytest.approx([3.0, 2.75, 2.5, 2.25, 2.0])
