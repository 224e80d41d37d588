"""Benchmark inputs, generated once per size under the work folder and reused (they are inputs, not
results): a multi-rank run as per-rank shards and the same records as wide CSV; single-run logs
(wide CSV, JSON Lines, long CSV, a Megatron-LM console log, a TensorBoard event file) of the same
8 metrics.

The values come from StabScope's one run generator (the physical model of
:func:`stab_core.simulate.simulate_run`); this module holds only what is the benchmark's own: the
sizes, the marker spikes, the rounding and the writing. Every input carries the same 5 one-step
spikes of 100x in ``loss`` (``spike_steps``), and the shard run one more, on one rank only, in
``grad_norm_local`` (``rank_spike``): the downsampled reads of goal 3 must keep them all. Values are
rounded to the few digits loggers print, so text files have realistic sizes."""

from __future__ import annotations

import json
import shutil
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.csv as pcsv

from ingest.store.shards import ShardWriter, list_segments, read_segment
from stab_core.simulate import SimSpec, SimulatedRun, simulate_run

PER_RANK_METRICS = (
    "grad_norm_local",
    "step_time_s",
    "throughput_tok_s",
    "gpu_mem_gb",
    "gpu_util",
    "gpu_temp_c",
    "gpu_power_w",
    "expert_load_max_over_mean",
)
"""The 8 per-rank metrics of the multi-rank run (issue 8: 256 ranks x 200k steps x 8 metrics)."""

RUN_LEVEL_METRICS = ("loss", "grad_norm", "lr", "clip_coef")
"""Run-level series rank 0 also writes (rank -1): what the overview page draws."""

LOG_METRICS = ("loss", "grad_norm", "grad_norm_clipped", "lr", "clip_coef", "tokens", "step_time_s", "throughput_tok_s")
"""The 8 metrics of the single-run logs of goal 2."""

SPIKE_FRACTIONS = (0.13, 0.31, 0.52, 0.74, 0.91)
SPIKE_FACTOR = 100.0
FRAME_STEPS = 4096
"""Steps per shard frame: ``ShardWriter``'s default buffer (``max_buffer_rows``)."""
PER_RANK_BATCH = 8
DONE_MARKER = ".complete"


def spike_steps(steps: int) -> list[int]:
    """The steps of the 5 injected one-step spikes of a run of ``steps`` steps."""
    return [int(f * steps) for f in SPIKE_FRACTIONS]


def rank_spike(ranks: int, steps: int) -> tuple[int, int]:
    """``(rank, step)`` of the one-rank spike in ``grad_norm_local``."""
    return (2 * ranks) // 3, int(0.43 * steps)


def _ready(folder: Path) -> bool:
    return (folder / DONE_MARKER).exists()


def _mark(folder: Path) -> None:
    (folder / DONE_MARKER).write_text("ok\n")


def _fresh(folder: Path) -> Path:
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    return folder


# ------------------------------------------------------------------------------- the generated runs

PER_RANK_DIGITS = {
    "grad_norm_local": 4,
    "step_time_s": 4,
    "throughput_tok_s": 1,
    "gpu_mem_gb": 2,
    "gpu_util": 1,
    "gpu_temp_c": 1,
    "gpu_power_w": 1,
    "expert_load_max_over_mean": 3,
}
"""Decimals each per-rank metric is written with (what loggers print)."""

LOG_SEQ_LEN = 1024
LOG_GLOBAL_BATCH = 512
"""The single-run logs' batch: 512 sequences of 1,024 tokens a step (Megatron's ``global batch size``)."""


def _spec(name: str, steps: int, ranks: int, per_rank_batch: int, seq_len: int, per_rank: tuple[str, ...]) -> SimSpec:
    """A plain run of the physical model: no injected mechanism and no checkpoint stalls (the marker
    spikes are the only ones), warmup over 2% of the run then cosine decay to 10%, and a grad norm
    that starts at most a few times its later level, so that nothing but the markers is 10x the
    median the spike check compares with."""
    return SimSpec(
        name=name,
        steps=max(steps, 2),
        world_size=ranks,
        per_rank_batch_size=per_rank_batch,
        seq_len=seq_len,
        step_time_s=0.8,
        schedule_kwargs={"warmup_steps": max(steps // 50, 1), "min_lr_ratio": 0.1},
        grad_norm_start=1.0,
        checkpoint_interval_steps=None,
        num_experts=8 if "expert_load_max_over_mean" in per_rank else 1,
        per_rank_metrics=per_rank,
    )


def _with_loss_spikes(loss: np.ndarray) -> np.ndarray:
    """The loss with the 5 marker spikes of 100x, rounded to 4 decimals."""
    loss = loss.copy()
    for s in spike_steps(loss.size):
        loss[s] *= SPIKE_FACTOR
    return np.round(loss, 4)


def _run_level_of(run: SimulatedRun) -> dict[str, np.ndarray]:
    """``RUN_LEVEL_METRICS`` of a generated run, rounded, with the loss's marker spikes."""
    level = run.run_level
    return {
        "loss": _with_loss_spikes(level["loss"]),
        "grad_norm": np.round(level["grad_norm"], 4),
        "lr": np.round(level["lr"], 10),
        "clip_coef": np.round(level["clip_coef"], 4),
    }


def _run_level_columns(steps: np.ndarray) -> dict[str, np.ndarray]:
    """The run-level series of a one-rank run of ``steps.size`` steps."""
    spec = _spec("bench-run-level", int(steps.size), 1, PER_RANK_BATCH, 4096, ())
    return _run_level_of(simulate_run(spec, 10_000))


def grad_norm_curve(steps: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Per-rank norms of bench/app.py's wide run (1,000 ranks at every 10th step): noise around a
    constant drawn from ``rng`` rank by rank, since a run of that size is written one rank at a time."""
    return np.round(0.8 + 0.3 * np.abs(rng.standard_normal(steps.size)), 4)


# ------------------------------------------------------------------------------- multi-rank run


@dataclass(frozen=True)
class RunInputs:
    """The multi-rank run: its shard folder and the wide CSV of the same records."""

    shards: Path
    wide_csv: Path
    ranks: int
    steps: int
    records: int


def run_inputs(workdir: Path, ranks: int, steps: int, *, csv: bool = True) -> RunInputs:
    """Shards (and the wide CSV) of a ``ranks`` x ``steps`` run, generated unless already there."""
    folder = workdir / f"run-{ranks}x{steps}"
    shards, wide_csv = folder / "shards", folder / "wide.csv"
    if not _ready(shards):
        write_run_shards(_fresh(shards), ranks, steps)
        _mark(shards)
    if csv and not (folder / (DONE_MARKER + "-csv")).exists():
        shards_to_wide_csv(shards, wide_csv)
        (folder / (DONE_MARKER + "-csv")).write_text("ok\n")
    records = ranks * steps * len(PER_RANK_METRICS) + steps * len(RUN_LEVEL_METRICS)
    return RunInputs(shards, wide_csv, ranks, steps, records)


def write_run_shards(shard_dir: Path, ranks: int, steps: int) -> None:
    """Per-rank shards as a training job writes them: frames of ``FRAME_STEPS`` steps per rank."""
    all_steps = np.arange(steps, dtype=np.int64)
    wall = np.round(1.7e9 + all_steps * 0.8, 3)
    spike_rank, spike_step = rank_spike(ranks, steps)
    run = simulate_run(_spec("bench-run", steps, ranks, PER_RANK_BATCH, 4096, PER_RANK_METRICS), 0)
    run_level = _run_level_of(run)
    for rank in range(ranks):
        columns = {m: np.round(run.per_rank[m][rank].astype(np.float64), PER_RANK_DIGITS[m]) for m in PER_RANK_METRICS}
        if rank == spike_rank:
            columns["grad_norm_local"][spike_step] *= SPIKE_FACTOR
        with ShardWriter(shard_dir, rank) as writer:
            if rank == 0:
                writer.write_meta(
                    {
                        "world_size": ranks,
                        "per_rank_batch_size": PER_RANK_BATCH,
                        "global_batch_size": PER_RANK_BATCH * ranks,
                        "generator": "bench.data",
                    }
                )
            for a in range(0, steps, FRAME_STEPS):
                b = min(a + FRAME_STEPS, steps)
                if rank == 0:
                    writer.write_columns(
                        all_steps[a:b], {m: v[a:b] for m, v in run_level.items()}, rank=-1, wall_time=wall[a:b]
                    )
                writer.write_columns(all_steps[a:b], {m: v[a:b] for m, v in columns.items()}, wall_time=wall[a:b])


def wide_schema() -> pa.Schema:
    """The wide CSV's columns: rank, step, wall_time, then every metric (empty = not logged)."""
    fields: dict[str, pa.DataType] = {"rank": pa.int32(), "step": pa.int64(), "wall_time": pa.float64()}
    fields.update({m: pa.float64() for m in (*RUN_LEVEL_METRICS, *PER_RANK_METRICS)})
    return pa.schema(fields)


def shards_to_wide_csv(shard_dir: Path, target: Path) -> None:
    """The shards' records as one wide CSV (the bytes the pyarrow ceiling reads), segment by segment."""
    schema = wide_schema()
    with pcsv.CSVWriter(target, schema) as writer:
        for path in list_segments(shard_dir):
            for table in read_segment(path).metrics:
                writer.write_table(_conform(table, schema))


def _conform(table: pa.Table, schema: pa.Schema) -> pa.Table:
    columns = [
        table.column(f.name).cast(f.type) if f.name in table.column_names else pa.nulls(table.num_rows, f.type)
        for f in schema
    ]
    return pa.Table.from_arrays(columns, schema=schema)


# ------------------------------------------------------------------------------- single-run logs


@dataclass(frozen=True)
class LogInputs:
    """The same single-run records in every format goal 2 reads; ``records`` = steps x 8 metrics."""

    wide_csv: Path
    jsonl: Path
    long_csv: Path
    megatron: Path
    megatron_csv: Path
    tfevents: Path
    steps: int
    tb_steps: int
    records: int
    tb_records: int


def log_inputs(workdir: Path, steps: int, tb_steps: int) -> LogInputs:
    """Generate (once) the single-run logs of ``steps`` steps and the event file of ``tb_steps``."""
    folder = workdir / f"logs-{steps}-tb{tb_steps}"
    inputs = LogInputs(
        wide_csv=folder / "metrics.csv",
        jsonl=folder / "metrics.jsonl",
        long_csv=folder / "long.csv",
        megatron=folder / "megatron.log",
        megatron_csv=folder / "megatron.csv",
        tfevents=folder / "tb" / "events.out.tfevents.1700000000.bench.1.0",
        steps=steps,
        tb_steps=tb_steps,
        records=steps * len(LOG_METRICS),
        tb_records=tb_steps * len(LOG_METRICS),
    )
    if _ready(folder):
        return inputs
    _fresh(folder)
    table = log_table(steps)
    pcsv.write_csv(table, inputs.wide_csv)
    write_jsonl(table, inputs.jsonl)
    pcsv.write_csv(long_form(table), inputs.long_csv)
    write_megatron_log(table, inputs.megatron, inputs.megatron_csv)
    inputs.tfevents.parent.mkdir()
    write_tfevents(log_table(tb_steps), inputs.tfevents)
    _mark(folder)
    return inputs


def log_table(steps: int) -> pa.Table:
    """``step`` and the 8 ``LOG_METRICS`` of one run."""
    s = np.arange(steps, dtype=np.int64)
    level = simulate_run(_spec("bench-log", steps, 1, LOG_GLOBAL_BATCH, LOG_SEQ_LEN, ()), 7).run_level
    grad_norm = np.round(level["grad_norm"][:steps], 4)
    clip = np.round(level["clip_coef"][:steps], 4)
    step_time = np.round(level["step_time_s"][:steps], 4)
    tokens_per_step = LOG_GLOBAL_BATCH * LOG_SEQ_LEN
    columns = {
        "step": s,
        "loss": _with_loss_spikes(level["loss"][:steps]),
        "grad_norm": grad_norm,
        "grad_norm_clipped": np.round(grad_norm * clip, 4),
        "lr": np.round(level["lr"][:steps], 10),
        "clip_coef": clip,
        "tokens": ((s + 1) * tokens_per_step).astype(np.float64),
        "step_time_s": step_time,
        "throughput_tok_s": np.round(tokens_per_step / step_time, 1),
    }
    return pa.table(columns)


def long_form(table: pa.Table) -> pa.Table:
    """``step, rank, metric, value`` rows (rank -1: run level) of a wide log table."""
    steps = table.column("step").to_numpy()
    metrics = [m for m in table.column_names if m != "step"]
    return pa.table(
        {
            "step": np.tile(steps, len(metrics)),
            "rank": np.full(steps.size * len(metrics), -1, np.int32),
            "metric": pa.array(np.repeat(np.array(metrics, dtype=object), steps.size)),
            "value": np.concatenate([table.column(m).to_numpy() for m in metrics]),
        }
    )


def write_jsonl(table: pa.Table, target: Path, chunk: int = 100_000) -> None:
    """One JSON object per step, as ``json.dumps`` writes it."""
    names = table.column_names
    with open(target, "w") as f:
        for a in range(0, table.num_rows, chunk):
            part = table.slice(a, chunk).to_pydict()
            rows = zip(*(part[n] for n in names), strict=True)
            f.writelines(json.dumps(dict(zip(names, row, strict=True))) + "\n" for row in rows)


def write_megatron_log(table: pa.Table, target: Path, same_as_csv: Path) -> None:
    """Megatron-LM ``training_log`` lines (9 values per iteration) and the same values as wide CSV
    (what the pyarrow ceiling of a text log reads)."""
    n = table.num_rows
    cols = {c: table.column(c).to_numpy() for c in table.column_names}
    iteration = cols["step"] + 1
    fields = {
        "consumed samples": (iteration * 512).astype(np.float64),
        "elapsed time per iteration (ms)": np.round(cols["step_time_s"] * 1000.0, 1),
        "learning rate": cols["lr"],
        "global batch size": np.full(n, 512.0),
        "lm loss": cols["loss"],
        "loss scale": np.full(n, 1.0),
        "grad norm": cols["grad_norm"],
        "number of skipped iterations": np.zeros(n),
        "number of nan iterations": np.zeros(n),
    }
    with open(target, "w") as f:
        for a in range(0, n, 100_000):
            b = min(a + 100_000, n)
            f.writelines(
                f" iteration {iteration[i]:>8d}/ {n:>8d} | consumed samples: {int(fields['consumed samples'][i])} | "
                f"elapsed time per iteration (ms): {fields['elapsed time per iteration (ms)'][i]:.1f} | "
                f"learning rate: {fields['learning rate'][i]:.6E} | global batch size: 512 | "
                f"lm loss: {fields['lm loss'][i]:.6E} | loss scale: 1.0 | grad norm: {fields['grad norm'][i]:.3f} | "
                "number of skipped iterations: 0 | number of nan iterations: 0 |\n"
                for i in range(a, b)
            )
    pcsv.write_csv(pa.table({"step": cols["step"], **fields}), same_as_csv)


_MASK_DELTA = 0xA282EAD8


def _masked_crc(data: bytes) -> int:
    import crc32c

    crc = crc32c.crc32c(data)
    return (((crc >> 15) | (crc << 17)) + _MASK_DELTA) & 0xFFFFFFFF


def tf_records(payloads: Iterator[bytes]) -> Iterator[bytes]:
    """TFRecord framing: length, masked CRC-32C of the length, payload, masked CRC-32C of the payload."""
    for payload in payloads:
        length = struct.pack("<Q", len(payload))
        yield length + struct.pack("<I", _masked_crc(length)) + payload + struct.pack("<I", _masked_crc(payload))


def write_tfevents(table: pa.Table, target: Path) -> None:
    """An event file as PyTorch's ``SummaryWriter.add_scalar`` writes it: one Event per scalar, tags
    ``train/<metric>``, step by step."""
    from tensorboard.compat.proto import event_pb2, summary_pb2

    steps = table.column("step").to_numpy()
    metrics = [m for m in table.column_names if m != "step"]
    values = {m: table.column(m).to_numpy() for m in metrics}

    def events() -> Iterator[bytes]:
        yield event_pb2.Event(wall_time=1.7e9, file_version="brain.Event:2").SerializeToString()
        for i, step in enumerate(steps.tolist()):
            wall = 1.7e9 + 0.8 * step
            for m in metrics:
                summary = summary_pb2.Summary(
                    value=[summary_pb2.Summary.Value(tag=f"train/{m}", simple_value=values[m][i])]
                )
                yield event_pb2.Event(wall_time=wall, step=step, summary=summary).SerializeToString()

    with open(target, "wb") as f:
        for record in tf_records(events()):
            f.write(record)
