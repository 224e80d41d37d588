"""Issue #31 (docs/diagnosis.md, "Import: format readers"): trainers' console and metrics layouts, written from what
each trainer's source prints (file and function named per case; no log of theirs copied), imported with every line
accounted for: the import report's parsed lines plus its ignored lines are all the lines of the file."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from ingest.importing.importer import import_logs
from ingest.services.run_analyses import open_analysed_store


def _human(num: float) -> str:
    """A number as nanotron's ``human_format`` (``src/nanotron/logging/base.py``) prints it: 3 significant
    digits, then K, M, B (billions) or T; under 1 as ``{:.3g}``."""
    if abs(num) < 1:
        return f"{num:.3g}"
    num, magnitude = float(f"{num:.3g}"), 0
    while abs(num) >= 1000:
        num, magnitude = num / 1000.0, magnitude + 1
    return f"{num:f}".rstrip("0").rstrip(".") + ["", "K", "M", "B", "T"][magnitude]


def _maxtext() -> list[str]:
    # MaxText metric_logger.py (MetricLogger, the training metrics line) after the config and memory prints
    head = [
        "Config param steps: 10",
        "System Information: Jax Version: 0.7.2",
        "Total memory size: 100.4 GB, Output size: 44.5 GB, Temp size: 55.9 GB, Argument size: 44.5 GB, "
        "Host temp size: 0.0 GB.",
        "number parameters: 15.933 billion",
        "Memstats: After params initialized:",
        "\tUsing (GB) 44.63 / 95.74 (46.615835%) on TPU_0(process=0,(0,0,0,0))",
        "Per train step:",
        " Total TFLOPs: 764.67",
    ]
    return head + [
        f"completed step: {s}, seconds: {5.6 + 0.01 * s:.3f}, TFLOP/s/device: {134.9 + s:.3f}, "
        f"Tokens/s/device: {8670 + s:.3f}, total_weights: {196608 - s}, loss: {12 - 0.1 * s:.3f}"
        for s in range(10)
    ]


def _fairseq_simple() -> list[str]:
    # fairseq logging/progress_bar.py SimpleProgressBar.log under fairseq_cli/train.py's 'train_inner'
    # logger, then the epoch's 'valid' and 'train' summaries (the '|'-joined simple format)
    lines = [
        f"2021-03-05 12:00:{s - 100:02d} | INFO | train_inner | epoch 001:    {s} / 2000 loss={9 - 0.01 * s:.3f}, "
        f"nll_loss={8.9 - 0.01 * s:.3f}, ppl=478.3, wps={12345.6 + s}, ups=3.01, wpb=4096, bsz=128, "
        f"num_updates={s}, lr=0.0005, gnorm={1.2 + 0.001 * s:.3f}, clip=0, loss_scale=128, train_wall=30, "
        f"gb_free=10.2, wall={33 + s}"
        for s in range(100, 110)
    ]
    return [
        *lines,
        "2021-03-05 12:01:00 | INFO | valid | epoch 001 | valid on 'valid' subset | loss 8.5 | nll_loss 8.3 | "
        "ppl 315.2 | wps 30000 | wpb 4000 | bsz 120 | num_updates 110",
    ]


def _fairseq_json() -> list[str]:
    # fairseq logging/progress_bar.py JsonProgressBar.log (--log-format json): values as strings
    return [
        f"2021-03-05 12:00:{s - 100:02d} | INFO | train_inner | "
        + json.dumps(
            {"epoch": 1, "update": round(s / 2000, 3), "loss": f"{9 - 0.01 * s:.3f}", "wps": f"{12345.6 + s}"}
            | {"num_updates": str(s), "lr": "0.0005", "gnorm": f"{1.2 + 0.001 * s:.3f}", "wall": str(33 + s)}
        )
        for s in range(100, 110)
    ]


def _nemo2() -> list[str]:
    # NeMo 2 nemo/lightning/pytorch/callbacks/progress_printer.py (ProgressPrinter): ' | '-joined metrics
    return [
        f"Training epoch 0, iteration {s}/99 | lr: 0.0003 | global_batch_size: 32 | global_step: {s} | "
        f"reduced_train_loss: {8.1 - 0.01 * s:.4f} | train_step_timing in s: {1.23 + 0.01 * s:.3f} | "
        f"consumed_samples: {32 * (s + 1)}"
        for s in range(10)
    ]


def _nemo_tqdm() -> list[str]:
    # NeMo 1 / Lightning's TQDMProgressBar: the postfix of the metrics logged with prog_bar=True
    return [
        f"Epoch 0: :  {s}%|#         | {s}/100 [00:20<03:00, reduced_train_loss={8.1 - 0.01 * s:.3f}, "
        f"global_step={s - 1}.000, consumed_samples={320.0 * s}, train_step_timing in s={1.23 + 0.01 * s:.3f}]"
        for s in range(1, 11)
    ]


def _torchtune_console() -> list[str]:
    # torchtune recipes' train loop: tqdm description '{epoch + 1}|{global_step}|Loss: {loss}', with the
    # metric logger writing to a file (training/metric_logging.py DiskLogger), so the bar is all there is
    head = ["INFO:torchtune.utils._logging:Running FullFinetuneRecipeSingleDevice with resolved config:", "", "seed: 1"]
    return head + [
        f"1|{s}|Loss: {2.3 - 0.01 * s}:   {s}%|          | {s}/100 [00:{s:02d}<01:40,  1.01s/it]" for s in range(1, 11)
    ]


def _torchtune_both() -> list[str]:
    # torchtune's StdoutLogger.log_dict ('Step N | key:value ...') printed behind the bar's last redraw
    # (tqdm writes to stderr without a newline)
    return [
        f"1|{s}|Loss: {2.3 - 0.01 * s}:   {s}%|          | {s}/100 [00:{s:02d}<01:40,  1.01s/it]"
        f"Step {s} | loss:{2.3 - 0.01 * s} lr:2e-05 tokens_per_second_per_gpu:{1234.5 + s}"
        for s in range(1, 11)
    ]


def _axolotl() -> list[str]:
    # transformers trainer_callback.py ProgressCallback.on_log prints the logs dict; axolotl adds its
    # memory and tokens-per-second keys
    return [
        str(
            {"loss": round(1.2 - 0.01 * s, 4), "grad_norm": round(0.5 + 0.01 * s, 4), "learning_rate": 2e-05}
            | {"memory/max_mem_active(gib)": 20.1 + s, "tokens_per_second_per_gpu": 1234.5 + s, "epoch": 0.01 * s}
        )
        for s in range(1, 11)
    ] + [
        "{'eval_loss': 1.1, 'eval_runtime': 10.0, 'eval_samples_per_second': 5.0, 'eval_steps_per_second': 1.0, "
        "'epoch': 0.1}"
    ]


def _composer() -> list[str]:
    # composer/loggers/console_logger.py ConsoleLogger: '[batch=N/M]:' then one tab-indented line a metric
    lines = []
    for s in range(1, 11):
        lines += [
            f"[batch={s}/100]:",
            f"\t Train time/batch: {s - 1}",
            f"\t Train loss/train/total: {10.5 - 0.1 * s:.4f}",
            f"\t Train throughput/tokens_per_sec: {96000 + s}",
            "\t Train lr-DecoupledAdamW/group0: 0.0001",
        ]
    return lines


def _nanotron() -> list[str]:
    # nanotron logging/base.py LoggerWriter.add_scalars_from_list ('iteration: N / M | tag: value'),
    # the values in human_format as trainer.py's train_step_logs asks, behind the SafeFormatter prefix
    prefix = "12/05 10:00:{:02d} [INFO|DP=0|PP=0|TP=0|lm-gpu-1]: "
    return [prefix.format(0) + "[Start training] datetime: 2024-12-05 | mbs: 4 | train_steps: 100"] + [
        prefix.format(s)
        + " | ".join(
            [
                f"iteration: {s} / 100",
                f"consumed_tokens: {_human(262144 * s)}",
                f"elapsed_time_per_iteration_ms: {_human(1230 + 10 * s)}",
                f"tokens_per_sec: {_human(1.06e6 + 1e4 * s)}",
                f"tokens_per_sec_per_gpu: {_human(133000 + 1000 * s)}",
                f"lm_loss: {_human(10.5 - 0.1 * s)}",
                f"lr: {_human(0.0003)}",
                f"grad_norm: {_human(1.23 + 0.01 * s)}",
            ]
        )
        for s in range(1, 11)
    ]


def _lightning_csv() -> list[str]:
    # lightning/pytorch/loggers/csv_logs.py ExperimentWriter: one row per log call, blank where a
    # metric was not logged at that call
    rows = ["epoch,lr-AdamW,step,train_loss_epoch,train_loss_step,val_loss"]
    rows += [f"0,0.001,{10 * s + 9},,{2.0 - 0.01 * s}," for s in range(10)]
    return [*rows, "0,,99,,,1.8", "0,,99,1.9,,"]


def _swift_jsonl() -> list[str]:
    # ms-swift's logging.jsonl (its trainer callback's per-step record)
    return [
        json.dumps(
            {"loss": 2.0 - 0.01 * s, "grad_norm": 1.0 + s, "learning_rate": 1e-5, "global_step/max_steps": f"{s}/10"}
            | {"tokens_per_gpu_per_sec": 100.0 + s, "tokens_global_per_sec": 800.0 + s, "train_speed(s/it)": 60.0 + s}
        )
        for s in range(1, 11)
    ]


# (file name, lines, format, {metric: (first step, last step, first value)})
CASES: list[tuple[str, Callable[[], list[str]], str, dict[str, tuple[int, int, float]]]] = [
    (
        "train.log",
        _maxtext,
        "maxtext",
        {"loss": (0, 9, 12.0), "step_time_s": (0, 9, 5.6), "throughput_tok_s": (0, 9, 8670.0)},
    ),
    (
        "train.log",
        _fairseq_simple,
        "fairseq",
        {"lr": (100, 109, 0.0005), "grad_norm": (100, 109, 1.3), "throughput_tok_s": (100, 109, 12445.6)},
    ),
    (
        "train.log",
        _fairseq_json,
        "fairseq",
        {"lr": (100, 109, 0.0005), "grad_norm": (100, 109, 1.3), "throughput_tok_s": (100, 109, 12445.6)},
    ),
    ("train.log", _nemo2, None, {"loss": (0, 9, 8.1), "lr": (0, 9, 0.0003), "step_time_s": (0, 9, 1.23)}),
    ("train.log", _nemo_tqdm, None, {"loss": (0, 9, 8.09), "step_time_s": (0, 9, 1.24)}),
    ("train.log", _torchtune_console, "torchtune", {"loss": (1, 10, 2.29)}),
    ("train.log", _torchtune_both, "torchtune", {"loss": (1, 10, 2.29), "throughput_tok_s": (1, 10, 1235.5)}),
    (
        "train.log",
        _axolotl,
        None,
        {"loss": (1, 10, 1.19), "grad_norm": (1, 10, 0.51), "throughput_tok_s": (1, 10, 1235.5)},
    ),
    (
        "train.log",
        _composer,
        "composer",
        {"loss": (1, 10, 10.4), "lr": (1, 10, 0.0001), "throughput_tok_s": (1, 10, 96001.0)},
    ),
    (
        "train.log",
        _nanotron,
        None,
        {
            "loss": (1, 10, 10.4),
            "step_time_s": (1, 10, 1.24),
            "throughput_tok_s": (1, 10, 1.07e6),
            "tokens": (1, 10, 262000.0),
            "grad_norm": (1, 10, 1.24),
        },
    ),
    (
        "metrics.csv",
        _lightning_csv,
        "lightning_csv",
        {"loss": (9, 99, 2.0), "lr": (9, 99, 0.001), "val_loss": (99, 99, 1.8)},
    ),
    (
        "logging.jsonl",
        _swift_jsonl,
        "jsonl",
        {"loss": (1, 10, 1.99), "step_time_s": (1, 10, 61.0), "throughput_tok_s": (1, 10, 801.0)},
    ),
]


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory):
    return open_analysed_store(tmp_path_factory.mktemp("layouts") / "store")


@pytest.mark.parametrize(("name", "make", "fmt", "want"), CASES, ids=[c[1].__name__.strip("_") for c in CASES])
def test_a_trainers_layout_imports_with_every_line_accounted_for(
    tmp_path: Path, store, name: str, make: Callable[[], list[str]], fmt: str | None, want: dict
) -> None:
    path = tmp_path / name
    lines = make()
    path.write_text("\n".join(lines) + "\n")
    (report,) = import_logs(store, [path], run=make.__name__.strip("_"))
    if fmt is not None:
        assert report["format"] == fmt
    ignored = sum(kind["count"] for kind in (report.get("ignored") or {}).values())
    header = 1 if name.endswith(".csv") else 0  # a table's lines are its records
    assert report["lines"] == len(lines) - header == report["parsed"]["lines"] + ignored  # every line accounted for
    assert report["parsed"]["unread_values"]["count"] == 0
    view = store.run_view(report["run"])
    for metric, (first, last, value) in want.items():
        series = view.series[metric]
        assert (int(series.steps[0]), int(series.steps[-1])) == (first, last), metric
        assert float(series.values[0]) == pytest.approx(value, rel=1e-3), metric
