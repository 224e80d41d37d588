"""A small valid input of every registered log format, and the mutations the fuzz suite applies to it.

``SAMPLES[name]`` is one run in format ``name``: the files it consists of (a log, or a folder of
them for the formats that read a folder), which of them is mutated, and what path is imported.
Text samples are the fixtures under ``tests/fixtures/logs`` or lines written from the format's
definition (the README format table's example line); the TensorBoard sample is an event file
written by ``tests.tfevents_writers``, the Parquet sample a long table written by pyarrow.

``apply_mutation`` turns the mutated file's bytes into a damaged variant: cut at a byte, bits
flipped, junk and binary lines inserted, a 10^6-character line, CRLF line ends, UTF-16 and Latin-1
re-encodings, NaN/Inf/empty values, decreasing and duplicate steps. Positions are fractions of the
input (0 <= f < 1), so one drawn mutation applies to any sample and hypothesis can shrink it.
"""

from __future__ import annotations

import io
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from tests.tfevents_writers import write_scalar_events

FIXTURES: Final = Path(__file__).resolve().parent / "fixtures" / "logs"


@dataclass(frozen=True)
class Sample:
    """One valid run of a format: ``files`` (relative path -> bytes), the one ``target`` that is
    mutated, and ``given``: the path handed to the importer (a file, or the folder holding them)."""

    files: dict[str, bytes]
    target: str
    given: str

    def write(self, root: Path, target_bytes: bytes | None = None) -> Path:
        """Write the sample under ``root`` (the target replaced by ``target_bytes``); the path to import."""
        for rel, data in self.files.items():
            path = root / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(target_bytes if rel == self.target and target_bytes is not None else data)
        return root / self.given


def _file(name: str, text: str | bytes) -> Sample:
    data = text.encode() if isinstance(text, str) else text
    return Sample({name: data}, name, name)


def _fixture(fixture: str, name: str | None = None) -> Sample:
    return _file(name or fixture, (FIXTURES / fixture).read_bytes())


def _lines(rows: list[str]) -> str:
    return "\n".join(rows) + "\n"


def _jsonl(rows: list[dict[str, object]]) -> str:
    return _lines([json.dumps(r) for r in rows])


def _tensorboard() -> bytes:
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "events.out.tfevents.1700000000.host"
        steps = np.arange(1, 9, dtype=np.int64)
        values = np.column_stack([3.0 - 0.1 * steps, 0.5 + 0.01 * steps, np.full(8, 1e-4)])
        write_scalar_events(path, ["train/loss", "train/grad_norm", "train/lr"], steps, values)
        return path.read_bytes()


def _parquet() -> bytes:
    steps = list(range(1, 9))
    table = pa.table(
        {
            "rank": pa.array([-1] * 8 + [0] * 8, pa.int32()),
            "step": pa.array(steps + steps, pa.int64()),
            "metric": ["loss"] * 8 + ["grad_norm_local"] * 8,
            "value": [3.0 - 0.1 * s for s in steps] + [0.5 + 0.01 * s for s in steps],
            "wall_time": [1.7e9 + s for s in steps] * 2,
        }
    )
    out = io.BytesIO()
    pq.write_table(table, out)
    return out.getvalue()


def _samples() -> dict[str, Sample]:
    steps = range(1, 9)
    samples = {
        "csv_wide": _file(
            "run.csv",
            _lines(["step,loss,grad_norm,lr"] + [f"{s},{3 - 0.1 * s:.4f},{0.5 + 0.01 * s:.3f},1e-4" for s in steps]),
        ),
        "tensorboard_csv": _file(
            "run-train-tag-loss.csv",
            _lines(["Wall time,Step,Value"] + [f"{1.7e9 + s:.1f},{10 * s},{3 - 0.1 * s:.4f}" for s in steps]),
        ),
        "scalar_json": _file(
            "run-train-tag-loss.json",
            json.dumps([[1.7e9 + s, 10 * s, round(3 - 0.1 * s, 4)] for s in steps]) + "\n",
        ),
        "wandb_csv": _file(
            "wandb_export.csv",
            _lines(
                ['"Step","run-7 - train/loss","run-7 - train/loss__MIN","run-7 - train/loss__MAX"']
                + [f'"{100 * s}","{3 - 0.1 * s:.3f}","{2.9 - 0.1 * s:.3f}","{3.1 - 0.1 * s:.3f}"' for s in steps]
            ),
        ),
        "lightning_csv": _file(
            "metrics.csv",
            _lines(
                ["epoch,step,train_loss_epoch,train_loss_step,val_loss"]
                + [f"0,{50 * s - 1},,{4.0 - s / 100:.3f}," for s in steps]
                + ["0,399,,,3.5", "0,399,3.9,,"]
            ),
        ),
        "csv_sweep": _file(
            "learning_rate_loss.csv",
            _lines(
                ["learning_rate_0.01,learning_rate_0.1"] + [f"{3 - 0.1 * s:.4f},{3.2 - 0.1 * s:.4f}" for s in steps]
            ),
        ),
        "deepspeed_csv": Sample(
            {
                "ds_logs/Train_Samples_train_loss.csv": _lines(
                    ["step,train_loss"] + [f"{512 * s},{10.5 - 0.25 * s}" for s in steps]
                ).encode(),
                "ds_logs/Train_Samples_lr.csv": _lines(
                    ["step,lr"] + [f"{512 * s},{1e-5 * s:.1e}" for s in steps]
                ).encode(),
            },
            "ds_logs/Train_Samples_train_loss.csv",
            "ds_logs",
        ),
        "jsonl": _file(
            "metrics.jsonl",
            _jsonl([{"step": s, "loss": 3 - 0.1 * s, "optim": {"lr": 1e-4 * s, "name": "adamw"}} for s in steps]),
        ),
        "wandb_history": _file(
            "wandb-history.jsonl",
            _jsonl(
                [
                    {"_step": s, "_runtime": 4.0 * s, "_timestamp": 1.7e9 + 4 * s, "train/loss": 3 - 0.1 * s}
                    for s in steps
                ]
            ),
        ),
        "llamafactory": _file(
            "trainer_log.jsonl",
            _jsonl(
                [
                    {
                        "current_steps": 5 * s,
                        "total_steps": 40,
                        "loss": 2 - 0.1 * s,
                        "learning_rate": 5e-5,
                        "epoch": 0.1 * s,
                        "percentage": 12.5 * s,
                        "elapsed_time": f"0:0{s}:29",
                        "remaining_time": "0:10:00",
                    }
                    for s in steps
                ]
            ),
        ),
        "hf_trainer_state": _file(
            "trainer_state.json",
            json.dumps(
                {
                    "global_step": 80,
                    "max_steps": 80,
                    "train_batch_size": 4,
                    "log_history": [
                        {"epoch": 0.1 * s, "grad_norm": 1.0, "learning_rate": 1e-5, "loss": 2 - 0.1 * s, "step": 10 * s}
                        for s in steps
                    ]
                    + [{"epoch": 0.8, "eval_loss": 1.9, "eval_runtime": 3.5, "step": 80}],
                },
                indent=2,
            ),
        ),
        "hf_console": _fixture("hf_trainer_console.log"),
        "megatron_golden": _file(
            "golden_values.json",
            json.dumps(
                {
                    "lm loss": {
                        "start_step": 1,
                        "end_step": 36,
                        "step_interval": 5,
                        "values": {str(1 + 5 * i): 10.5 - 0.1 * i for i in range(8)},
                    },
                    "iteration-time": {"start_step": 1, "end_step": 11, "step_interval": 5, "values": [2.0, 1.0, 1.5]},
                },
                indent=2,
            ),
        ),
        "tensorboard": _file("events.out.tfevents.1700000000.host", _tensorboard()),
        "megatron": _fixture("megatron_lm_restart.log"),
        "megatron_deepspeed": _fixture("megatron_deepspeed.log"),
        "llmc_main": _file(
            "main.log", _lines([f"s:{s} trl:{3 + 1 / (s + 1):.4f} lr:0.0006 norm:{0.5 + s % 3:.2f}" for s in steps])
        ),
        "llmc_console": _fixture("llmc_console.log"),
        "buildnanogpt_log": _file(
            "log.txt",
            _lines(["0 val 11.0864", "0 hella 0.2498"] + [f"{s} train {11.0 - 0.25 * s:.6f}" for s in steps]),
        ),
        "buildnanogpt_console": _file(
            "slurm.out",
            _lines(
                ["validation loss: 10.95", "HellaSwag accuracy: 2497/10042=0.2487"]
                + [
                    f"step {s:5d} | loss: {10.9 - 0.2 * s:.6f} | lr 6.0000e-04 | norm: 0.5000 | dt: 400.00ms | "
                    "tok/sec: 1310000.00"
                    for s in steps
                ]
            ),
        ),
        "modded_nanogpt": _file(
            "record.txt",
            _lines(
                [f"step:{s}/8 train_loss:{4.0 - s * 0.1:.4f} train_time:{s * 400}ms step_avg:400.00ms" for s in steps]
            ),
        ),
        "torchtitan": _fixture("torchtitan_color_2ranks.log"),
        "maxtext": _fixture("maxtext.log"),
        "composer": _fixture("composer.log"),
        "gpt_neox": _fixture("gpt_neox.log"),
        "torchtune": _fixture("torchtune.log"),
        "deepspeed_stdout": _fixture("deepspeed_stdout.log"),
        "fairseq": _fixture("fairseq_json.log"),
        "olmo": _fixture("olmo_console.log"),
        "nemo": _fixture("nemo2_progress.log"),
        "nemo_tqdm": _fixture("nemo1_tqdm.log"),
        "nanogpt": _fixture("nanogpt.log"),
        "verl_console": _fixture("verl_ray.log"),
        "jax_console": _fixture("jax_slurm.log"),
        "word_language_model": _file(
            "wlm.md",
            _lines(
                [
                    f"| epoch   1 | {200 * (s + 1):5d}/ 2983 batches | lr 20.00 | ms/batch 11.61 |"
                    f" loss {7.6 - s * 0.1:5.2f} | ppl  2063.37"
                    for s in steps
                ]
            ),
        ),
        "keras_console": _file(
            "fit.txt",
            _lines(
                [line for s in steps for line in (f"Epoch {s + 1}/8", f"224s - loss: {3.5 - s * 0.1:.4f} - acc: 0.29")]
            ),
        ),
        "paddle_hapi": _file(
            "train.log",
            _lines(
                [
                    line
                    for s in steps
                    for line in (f"Epoch {s + 1}/8", f"step 614/614 - loss: {0.5 - s * 0.01:.4f} - acc: 0.7 - 3s/step")
                ]
            ),
        ),
        "mxnet_module": _file(
            "train.log",
            _lines(
                ["INFO:root:start with arguments Namespace(batch_size=32, lr=0.1, num_examples=640)"]
                + [
                    line
                    for s in steps
                    for line in (
                        f"INFO:root:Epoch[{s}] Batch [20]\tSpeed: 142.3 samples/sec\taccuracy={0.5 + s * 0.01:.4f}",
                        f"INFO:root:Epoch[{s}] Time cost=140.9",
                    )
                ]
            ),
        ),
        "openmmlab": _file(
            "20261206_050001.log",
            _lines(
                [
                    f"12/06 05:00:{s:02d} - mmengine - INFO - Epoch(train)  [1][{s + 1:>2}/80]  lr: 1.0000e-02"
                    f"  eta: 0:01:00  time: 0.4120  data_time: 0.0123  memory: 3512  loss: {3 - 0.1 * s:.4f}"
                    for s in steps
                ]
            ),
        ),
        "detectron2": _file(
            "log.txt",
            _lines(
                [
                    f"[12/06 05:00:{s:02d} d2.utils.events]:  eta: 0:10:00  iter: {s}  total_loss: {3 - 0.1 * s:.3f}"
                    f"  loss_cls: 0.9  time: 0.5012  data_time: 0.0123  lr: 0.0002  max_mem: 2048M"
                    for s in steps
                ]
            ),
        ),
        "timm_console": _file(
            "train.log",
            _lines(
                [
                    f"Train: 0 [{s:>4d}/100 ({s:>3d}%)]  Loss: {3 - 0.1 * s:#.3g} (3.00)  Time: 0.312s,  820.51/s"
                    f"  (0.331s,  773.41/s)  LR: 1.000e-03  Data: 0.012 (0.015)"
                    for s in steps
                ]
            ),
        ),
        "espnet": _file(
            "train.log",
            _lines(
                [
                    f"[gpu01] 2026-12-06 05:00:{s:02d},555 (trainer:762) INFO: 1epoch:train:{s * 10 - 9}-{s * 10}batch:"
                    f" iter_time=1.2e-04, loss={3 - 0.1 * s:.3f}, grad_norm=41.3, optim0_lr0=1.0e-03, train_time=0.456"
                    for s in steps
                ]
            ),
        ),
        "icefall": _file(
            "log-train",
            _lines(
                [
                    f"2026-12-06 05:00:{s:02d},555 INFO [train.py:1030] (0/4) Epoch 1, batch {s * 50}, loss[loss="
                    f"{3 - 0.1 * s:.4f}, over 5432.00 frames. ], tot_loss[loss=3.0, over 9876.00 frames. ],"
                    f" batch size: 45, lr: 3.00e-03"
                    for s in steps
                ]
            ),
        ),
        "kv_console": _file(
            "train.out",
            _lines(
                [
                    f"\x1b[32m[2026-12-06 05:00:{s:02d},555] [    INFO]\x1b[0m - loss: {3 - 0.1 * s:.4f},"
                    f" learning_rate: 3e-05, global_step: {s * 10}, interval_runtime: 4.2, epoch: {s / 100}\x1b[0m"
                    for s in steps
                ]
            ),
        ),
        "coqui_trainer": _file(
            "trainer_0_log.txt",
            "".join(
                f"\x1b[1m   --> STEP: {s}/36 -- GLOBAL_STEP: {s * 25}\x1b[0m\n"
                f"     | > loss_disc: 2.9  (2.9)\n     | > loss_0: 2.9  (2.9)\n"
                f"     | > loss_1: {30 - s:.3f}  (25.0)\n     | > grad_norm_1: 40.0  (41.0)\n"
                f"     | > current_lr_1: 0.00020 \n     | > step_time: 1.3  (1.3)\n\n"
                for s in steps
            ),
        ),
        "ultralytics": _file(
            "train.log",
            _lines(
                [
                    line
                    for s in steps
                    for line in (
                        "      Epoch    GPU_mem   box_loss   cls_loss   dfl_loss  Instances       Size",
                        f"      {s:>2}/8      2.61G      {3 - 0.1 * s:.4g}      2.345      1.123         37        640:"
                        " 100%|##########| 8/8 [00:01<00:00,  5.1it/s]",
                    )
                ]
            ),
        ),
        "yolov5_results": _file(
            "results.txt",
            _lines(
                [
                    f"{s:>7}/7    1.20G   {0.05 - 0.001 * s:.4g}   0.02   0.01   {0.08 - 0.001 * s:.4g}   21   512"
                    "   0.61   0.52   0.55   0.31   0.04   0.02   0.01"
                    for s in steps
                ]
            ),
        ),
        "gan_console": _file(
            "dcgan.log",
            _lines(
                [
                    f"[{s // 4}/3][{s % 4 * 10}/40]\tLoss_D: 0.{40 + s}\tLoss_G: {2 + 0.1 * s:.3f}"
                    "\tD(x): 0.71\tD(G(z)): 0.22 / 0.19"
                    for s in steps
                ]
            ),
        ),
        "pylog_epochs": _file(
            "train.log",
            _lines(
                [
                    line
                    for s in steps
                    for line in (
                        f"03-14 10:0{s % 10}:00 - INFO - trainer - Epoch: {s}, Loss: {2 - 0.1 * s:.2f}",
                        f"03-14 10:0{s % 10}:00 - INFO - trainer - Train. Total Loss: {2 - 0.1 * s:.2f}, KL: 0.3",
                        f"03-14 10:0{s % 10}:00 - INFO - trainer - Val. Total Loss: {2.2 - 0.1 * s:.2f}, AUC: 61.5%",
                    )
                ]
            ),
        ),
        "pix2pix_loss_log": _file(
            "loss_log.txt",
            _lines(
                ["================ Training Loss (Tue Jan  9 08:00:00 2024) ================"]
                + [
                    f"(epoch: {1 + s // 4}, iters: {s % 4 * 50 + 20}, time: 0.05{s}, data: 0.002) "
                    f"G_GAN: {0.8 + 0.1 * s:.3f} G_L1: 3.{s}10 D_real: 0.4{s}0 D_fake: 0.5{s}0 "
                    for s in steps
                ]
            ),
        ),
        "kv_tables": _file(
            "log.txt",
            _lines(
                ["Logging to /tmp/run-7"]
                + [
                    line
                    for s in steps
                    for line in (
                        "-------------------------------",
                        f"| rollout/return   | {-90 + 7 * s:<8.3g} |",
                        f"| total/steps      | {500 * s:<8} |",
                        f"| train/loss_actor | {3 - 0.1 * s:<8.3g} |",
                        "-------------------------------",
                        "",
                    )
                ]
            ),
        ),
        "epoch_blocks": _file(
            "log_output.md",
            _lines(
                ["```bash"]
                + [
                    line
                    for s in steps
                    for line in (
                        f"Epoch: {s}",
                        f"Learning rate: {0.01 - s / 1000:.6f}",
                        f"Train Epoch: {s} Loss: {3 - 0.1 * s:.3f} Acc@1 {10 + s:.3f}: 100%|#####| 50/50 [00:09<00:00]",
                        f"Test set: Average loss: {3.1 - 0.1 * s:.4f}, Acc@1: {9 + s:.3f}%",
                        "",
                    )
                ]
                + ["```"]
            ),
        ),
        "stage_console": _file(
            "train_log.txt",
            _lines(
                [
                    line
                    for s in steps
                    for line in (
                        f"- Train | Epoch {s} | 40/80 | 2.10 it/sec | Loss {3 - 0.1 * s:.4f} | Grad 0.{s + 10}",
                        f"- Train | Epoch {s} | 80/80 | 2.20 it/sec | Loss {2.9 - 0.1 * s:.4f} | Grad 0.{s + 11}",
                        f"- Valid Summary | Epoch {s} | Loss={3.1 - 0.1 * s:.4f} | Best=0.9 | Bname=main",
                    )
                ]
            ),
        ),
        "tqdm_postfix": _file(
            "training.log",
            "\r".join(
                f"Training:   0%|          | {s}/500 [00:{s:02d}<09:00, 1.05s/it, "
                f"Loss={3 - 0.1 * s:.4f}, Aux={0.1 * s:.3f}]"
                for s in steps
            )
            + "\n",
        ),
        "mlflow": Sample(
            {
                "mlruns/0/abc123/metrics/train/loss": _lines(
                    [f"{1_700_000_000_000 + 1000 * s} {3 - 0.1 * s:.4f} {s}" for s in steps]
                ).encode(),
                "mlruns/0/abc123/metrics/lr": b"1700000000000 0.001 1\n",
                "mlruns/0/abc123/params/batch_size": b"32",
                "mlruns/0/abc123/meta.yaml": b"run_name: baseline\nrun_id: abc123\n",
            },
            "mlruns/0/abc123/metrics/train/loss",
            "mlruns/0/abc123",
        ),
        "long_rows": _file(
            "metrics.txt",
            _lines(["# launch 1", "0 dev 4.5", "0 acc 0.12"] + [f"{s} loss {4.4 - 0.2 * s:.5f}" for s in steps]),
        ),
        "parquet": _file("long.parquet", _parquet()),
        "generic": _fixture("generic_custom.log"),
    }
    return samples


SAMPLES: Final[dict[str, Sample]] = _samples()

# --------------------------------------------------------------------------- mutations

LONG_LINE_CHARS: Final = 1_000_000
MUTATIONS: Final = (
    "cut",
    "bit_flip",
    "junk_line",
    "binary_line",
    "long_line",
    "crlf",
    "utf16",
    "latin1",
    "bad_value",
    "decreasing_steps",
    "duplicate_step",
)
"""What ``apply_mutation`` can do to a file, by name."""
BAD_VALUES: Final = (b"NaN", b"nan", b"-nan", b"inf", b"-Inf", b"Infinity", b"", b"1e999", b"null", b"--")
JUNK_LINES: Final = (
    b"Traceback (most recent call last):",
    b"step: loss: grad_norm:",
    b"{",
    b'{"step": "x"}',
    b",,,,",
    b"iteration / | lm loss: |",
    b"s:-1 trl:",
    b"\xef\xbb\xbfBOM in the middle",
)
_NUMBER: Final = re.compile(rb"-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?")


def _at(fraction: float, n: int) -> int:
    """An index in ``range(n)`` (0 when empty) for ``fraction`` in [0, 1)."""
    return min(n - 1, int(fraction * n)) if n > 0 else 0


def apply_mutation(data: bytes, kind: str, a: float, b: float, choice: int) -> bytes:
    """``data`` damaged by mutation ``kind``; ``a`` and ``b`` (in [0, 1)) place it, ``choice`` picks
    among its variants (which bit, which junk line, which bad value)."""
    lines = data.split(b"\n")
    if kind == "cut":
        return data[: _at(a, len(data) + 1)]
    if kind == "bit_flip":
        if not data:
            return data
        i = _at(a, len(data))
        return data[:i] + bytes([data[i] ^ (1 << (choice % 8))]) + data[i + 1 :]
    if kind in ("junk_line", "binary_line", "long_line"):
        if kind == "junk_line":
            line = JUNK_LINES[choice % len(JUNK_LINES)]
        elif kind == "binary_line":
            line = bytes((choice * 37 + k * 101) % 256 for k in range(16 + choice % 48))
        else:
            line = (b"loss: 1.0 " * (LONG_LINE_CHARS // 10))[:LONG_LINE_CHARS]
        i = _at(a, len(lines) + 1)
        return b"\n".join([*lines[:i], line, *lines[i:]])
    if kind == "crlf":
        return data.replace(b"\r\n", b"\n").replace(b"\n", b"\r\n")
    if kind == "utf16":
        text = data.decode("utf-8", "replace")
        return text.encode("utf-16" if choice % 2 else "utf-16-le")
    if kind == "latin1":
        i = _at(a, len(data) + 1)
        text = (data[:i] + "µé°".encode() + data[i:]).decode("utf-8", "replace")
        return text.encode("latin-1", "replace")
    if kind == "bad_value":
        numbers = list(_NUMBER.finditer(data))
        if not numbers:
            return data
        m = numbers[_at(a, len(numbers))]
        return data[: m.start()] + BAD_VALUES[choice % len(BAD_VALUES)] + data[m.end() :]
    if kind == "decreasing_steps":
        # a later stretch of lines moved before an earlier one: the steps go down, then up again
        i, j = sorted((_at(a, len(lines)), _at(b, len(lines))))
        if i == j:
            return data
        return b"\n".join(lines[:i] + lines[j:] + lines[i:j])
    if kind == "duplicate_step":
        i, j = _at(a, len(lines)), _at(b, len(lines) + 1)
        return b"\n".join([*lines[:j], lines[i], *lines[j:]])
    raise ValueError(f"unknown mutation {kind!r}")
