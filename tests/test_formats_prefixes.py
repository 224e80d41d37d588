"""Launcher and logger prefixes on text logs (issue #21 item 1): every text format reads through
``[defaultN]:`` (torchrun --tee 3), ``[rankN]:`` (newer torchrun), ``N: `` (srun -l), ``host: ``
(pdsh, DeepSpeed's multi-node runner), time stamps and log levels, ANSI codes and NUL bytes; a rank
prefix makes the line's per-rank values that rank's; detection finds metric lines after long banners,
and a refusal says which formats came closest."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from ingest.errors import StabScopeError
from ingest.formats import detect, read_log
from ingest.formats.raw_text import clean_text

REAL_LOGS = Path(__file__).resolve().parents[2] / "shared" / "data" / "real_logs"

MEGATRON = (
    " iteration {step:8d}/   20000 | consumed samples: {samples:10d} | elapsed time per iteration (ms): 1234.5 |"
    " learning rate: 1.000E-04 | global batch size:   512 | lm loss: {loss:.6E} | loss scale: 1.0 |"
    " grad norm: {gnorm:.3f} | number of skipped iterations:   0 | number of nan iterations:   0 |"
)
"""Megatron-LM's ``training_log`` line (megatron/training/training.py), leading blank included."""
TORCHTITAN = (
    "[titan] 2026-05-20 02:23:{sec:02d},182 - root - INFO - step: {step:2d}  loss: {loss:8.5f}  grad_norm: {gnorm:.4f}"
    "  memory: 169.10GiB(94.81%)  tps: {tps:,}  tflops: 888.93  mfu: 39.51%"
)
"""torchtitan's metrics line (torchtitan/components/metrics.py), colour codes already stripped."""

PREFIXES = {
    "torchrun_tee": "[default{rank}]:",
    "torchrun_rank": "[rank{rank}]:",
    "srun_label": "{rank}: ",
    "srun_label_padded": "{rank:2d}: ",
    "pdsh_host": "node017: ",
    "pdsh_host_and_rank": "node017: [rank{rank}]:",
    "timestamp_level": "2024-05-01 12:00:00,123 INFO ",
    "bracketed_timestamp_level": "[2024-05-01 12:00:00] [INFO] ",
    "python_logging": "INFO:root:",
    "ansi": "\x1b[1;32m[default{rank}]:\x1b[0m",
    # a task label that names its host, and srun -l around torchrun (the inner rank is kept) (docs/diagnosis.md,
    # "Import: readers and prefixes")
    "srun_host_task": "[ip-26-0-147-189:{rank}]:",
    "srun_around_torchrun": "0: [default{rank}]: ",
    "srun_padded_around_torchrun": " 1:   [rank{rank}]:",
}
NAMES_A_RANK = {
    "torchrun_tee",
    "torchrun_rank",
    "srun_label",
    "srun_label_padded",
    "pdsh_host_and_rank",
    "ansi",
    "srun_host_task",
    "srun_around_torchrun",
    "srun_padded_around_torchrun",
}


def _loss(step: int) -> float:
    return 7.0 - 0.01 * step + 0.001 * (step % 7)


def _megatron_lines(n: int, prefix: str = "", rank: int = 7) -> list[str]:
    return [
        prefix.format(rank=rank) + MEGATRON.format(step=s, samples=512 * s, loss=_loss(s), gnorm=1.0 + 0.01 * (s % 5))
        for s in range(1, n + 1)
    ]


def _torchtitan_line(step: int, rank: int, prefix: str = "") -> str:
    return prefix.format(rank=rank) + TORCHTITAN.format(
        sec=step % 60, step=step, loss=_loss(step), gnorm=2.0 + 0.1 * (step % 3), tps=10_000 + 100 * rank + step
    )


def _write(path: Path, lines: list[str]) -> Path:
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.mark.parametrize("shape", sorted(PREFIXES))
def test_megatron_line_behind_every_launcher_prefix(tmp_path: Path, shape: str, field_engine: str) -> None:
    plain = read_log([_write(tmp_path / "plain.log", _megatron_lines(40))])
    path = _write(tmp_path / "prefixed.log", _megatron_lines(40, PREFIXES[shape]))
    assert detect([path])[0][0] == "megatron"
    parsed = read_log([path])
    assert parsed.format == "megatron"
    assert parsed.skipped == 0
    assert parsed.metrics == plain.metrics
    for metric in ("loss", "grad_norm", "lr", "step_time_s"):
        steps, values = parsed.series(metric)
        want_steps, want_values = plain.series(metric)
        np.testing.assert_array_equal(steps, want_steps)
        np.testing.assert_array_equal(values, want_values)
    np.testing.assert_allclose(parsed.series("loss")[1][:3], [_loss(1), _loss(2), _loss(3)], rtol=1e-6)
    # the iteration line is run-level whichever rank printed it (Megatron prints it on the last rank)
    assert set(parsed.table.column("rank").to_pylist()) == {-1}
    assert parsed.meta.get("total_steps") == 20000
    assert parsed.meta.get("run_level_rank") == (7 if shape in NAMES_A_RANK else None)


@pytest.mark.parametrize("shape", sorted(PREFIXES))
def test_torchtitan_line_behind_every_launcher_prefix(tmp_path: Path, shape: str) -> None:
    plain = read_log([_write(tmp_path / "plain.log", [_torchtitan_line(s, 0) for s in range(1, 31)])])
    path = _write(tmp_path / "prefixed.log", [_torchtitan_line(s, 0, PREFIXES[shape]) for s in range(1, 31)])
    parsed = read_log([path])
    assert parsed.format == "torchtitan"
    assert parsed.skipped == 0
    assert parsed.metrics == plain.metrics
    for metric, rank in (("loss", -1), ("grad_norm", -1), ("throughput_tok_s", 0), ("gpu_mem_gb", 0)):
        np.testing.assert_array_equal(parsed.series(metric, rank)[0], plain.series(metric, rank)[0])
        np.testing.assert_array_equal(parsed.series(metric, rank)[1], plain.series(metric, rank)[1])
    assert parsed.series("throughput_tok_s", 0)[1][0] == 10_001.0
    # the kind's own time stamp still gives the wall time behind the launcher's prefix
    wall = parsed.table.column("wall_time").to_pylist()
    assert None not in wall


_RANKED = [
    "torchrun_tee",
    "torchrun_rank",
    "srun_label",
    "pdsh_host_and_rank",
    "srun_host_task",
    "srun_around_torchrun",
]


@pytest.mark.parametrize("shape", _RANKED)
def test_rank_prefixes_give_per_rank_series(tmp_path: Path, shape: str) -> None:
    """Every rank prints the line (torchtitan logs on all ranks without LOG_RANK): tps and memory are
    per GPU, so each rank's are its own series; the loss is the run's, taken from rank 0 once a step
    (the other ranks print the same global figure). Rank 2 prints before rank 0 at the first step."""
    ranks = [2, 0, 3, 1]
    lines = [_torchtitan_line(s, r, PREFIXES[shape]) for s in range(1, 21) for r in ranks]
    parsed = read_log([_write(tmp_path / "all_ranks.log", lines)])
    assert parsed.meta["run_level_rank"] == 0
    steps, loss = parsed.series("loss")
    np.testing.assert_array_equal(steps, np.arange(1, 21))  # one run-level row a step, no restart
    np.testing.assert_allclose(loss, [_loss(s) for s in range(1, 21)], rtol=1e-6)
    assert not [e for e in parsed.events if e.kind == "rollback"]
    for rank in ranks:
        steps, tps = parsed.series("throughput_tok_s", rank)
        np.testing.assert_array_equal(steps, np.arange(1, 21))
        np.testing.assert_array_equal(tps, [10_000 + 100 * rank + s for s in range(1, 21)])
        assert parsed.series("gpu_mem_gb", rank)[0].shape[0] == 20
    assert set(parsed.table.column("rank").to_pylist()) == {-1, 0, 1, 2, 3}


def test_megatron_per_rank_memory_lines_and_last_rank_iteration_lines(tmp_path: Path) -> None:
    """torchrun --tee 3 on a Megatron job: ranks print their memory report, the last rank (7) the
    iteration lines; the report's own ``[Rank N]`` names the rank it is about."""
    lines = [
        f"[default{r}]:[Rank {r}] (after 10 iterations) memory (MB) | allocated: {1000.0 + r} | max allocated: 2000.0"
        f" | reserved: 3000.0 | max reserved: 3000.0"
        for r in (3, 0, 1, 2)
    ]
    lines += _megatron_lines(30, "[default7]:")
    parsed = read_log([_write(tmp_path / "tee.log", lines)])
    assert parsed.format == "megatron"
    assert parsed.series("loss")[0].shape[0] == 30
    for r in range(4):
        steps, mem = parsed.series("gpu_mem_gb", r)
        np.testing.assert_array_equal(steps, [10])
        np.testing.assert_allclose(mem, [(1000.0 + r) / 1024])


def test_ansi_codes_and_nul_bytes_of_a_cut_log(tmp_path: Path) -> None:
    """A node's log cut by a crash: a run of NUL bytes where the file system had blocks not yet
    written, then the job's next lines; colour codes around the prefix and inside the line."""
    lines = _megatron_lines(60, "\x1b[32m[default0]:\x1b[0m")
    lines[3] = lines[3].replace("lm loss", "\x1b[1mlm loss\x1b[0m")
    text = "\n".join(lines[:30]) + "\n" + "\x00" * 4096 + "\n".join(lines[30:]) + "\n"
    path = tmp_path / "cut.log"
    path.write_bytes(text.encode())
    assert detect([path])[0][0] == "megatron"
    parsed = read_log([path])
    steps, loss = parsed.series("loss")
    np.testing.assert_array_equal(steps, np.arange(1, 61))
    np.testing.assert_allclose(loss, [_loss(s) for s in range(1, 61)], rtol=1e-6)
    # a log that starts with the NUL padding (the head's first 4 KiB are NULs) is still text
    path.write_bytes(b"\x00" * 8192 + "\n".join(lines).encode() + b"\n")
    assert detect([path])[0][0] == "megatron"
    assert read_log([path]).series("loss")[0].shape[0] == 60


@pytest.mark.parametrize(
    ("chunk", "clean"),
    [
        (b"\x1b[1mlm loss\x1b[0m: 2.5\n", b"lm loss: 2.5\n"),
        (b"[1m --> STEP: 99[0m\n", b" --> STEP: 99\n"),  # the codes a paste lost their escape byte from
        (b"loss: 2.5\x1b\n\x00\x00", b"loss: 2.5\x1b\n"),  # an escape byte opening no code is kept
        (b"iteration 3 | loss: 2.5 |\n", b"iteration 3 | loss: 2.5 |\n"),
    ],
)
def test_a_chunk_loses_its_colour_codes_and_nul_bytes(chunk: bytes, clean: bytes) -> None:
    assert clean_text(chunk) == clean


def test_binary_files_are_still_not_text(tmp_path: Path) -> None:
    path = tmp_path / "blob.log"
    path.write_bytes(bytes(range(256)) * 64)
    assert detect([path]) == []


def test_metric_lines_after_300_lines_of_banner_and_argument_dump(tmp_path: Path) -> None:
    """300 lines of an argument dump with long values (data paths, a pasted config: 330 KB, more
    than the first 256 KiB sniffed) and an nvidia-smi table before the first iteration line."""
    banner = [
        "=" * 100,
        "------------------------ arguments ------------------------",
        "  clip_grad " + "." * 30 + " 1.0",
    ]
    banner += [f"  data_path_{i} " + "." * 30 + " " + "/lustre/datasets/shard_" * 40 + f"{i}" for i in range(300)]
    banner += ["-------------------- end of arguments ---------------------"]
    banner += ["| NVIDIA-SMI 550.90.12   Driver Version: 550.90.12   CUDA Version: 12.6 |"] * 40
    assert len("\n".join(banner)) > 256 * 1024
    path = _write(
        tmp_path / "banner.log", ["[default0]:" + line for line in banner] + _megatron_lines(50, "[default0]:")
    )
    assert detect([path])[0][0] == "megatron"
    parsed = read_log([path])
    np.testing.assert_array_equal(parsed.series("loss")[0], np.arange(1, 51))
    assert parsed.meta["max_norm"] == 1.0  # the argument dump read behind its prefix too


def test_refusal_names_the_formats_that_came_closest(tmp_path: Path) -> None:
    """A prefix no launcher writes: no format is recognised, and the error says that Megatron's
    iteration line is in the file, after text the reader does not take."""
    lines = ["job 42 on partition gpu"] + [f"<<host 7 | gpu {i % 8}>> " + x for i, x in enumerate(_megatron_lines(30))]
    path = _write(tmp_path / "odd.log", lines)
    with pytest.raises(StabScopeError) as err:
        read_log([path])
    text = str(err.value)
    assert "format not recognised" in text
    assert "closest: megatron: 0 of 31 head lines matched its 'iteration N/ M" in text
    assert "30 hold it after other text (first: '<<host 7 | gpu 0>>  iteration" in text
    # the line quoted is the text as a reader sees it: no colour codes, no NUL padding
    path.write_bytes(
        b"\x00" * 100 + b"\x1b[31mjob 42\x1b[0m on partition gpu\n" + "\n".join(lines[1:]).encode() + b"\n"
    )
    with pytest.raises(StabScopeError, match="line 1: format not recognised: 'job 42 on partition gpu' is not a line"):
        read_log([path])
    # nothing close at all: said so, not a list of unrelated formats
    path = _write(tmp_path / "notes.txt", ["shopping list", "eggs", "milk"])
    with pytest.raises(StabScopeError, match="no format came close: none of the 3 head lines"):
        read_log([path])


@pytest.mark.parametrize("prefix", [b"0: ", b"[default0]:"])
@pytest.mark.parametrize(
    ("folder", "name", "metric", "expected"),
    [
        ("mng_quantizedfp4", "433c1732-0c3d-4099-a4a8-ec31eae49b16.txt", "loss", "modded_nanogpt"),
        ("torchtitan_qwen3_14b_run217", "run.log", "loss", "torchtitan"),
        ("bigscience_megds_perf_log", "meg_ds_3d_gpt2_perf_n16-ds-off.out", "gpu_mem_gb", "megatron"),
    ],
)
def test_real_logs_read_the_same_behind_a_launcher_prefix(
    tmp_path: Path, folder: str, name: str, metric: str, expected: str, prefix: bytes
) -> None:
    """The real logs, every line prefixed as ``srun -l`` or ``torchrun --tee 3`` would on rank 0:
    the same table, and the same facts from the argument dump and banners."""
    source = REAL_LOGS / folder / name
    if not source.exists():
        pytest.skip(f"real log absent: {source} (see its PROVENANCE.txt)")
    original = read_log([source])
    assert original.format.startswith(expected)
    prefixed = tmp_path / name
    raw = source.read_bytes().removeprefix(b"[rank0]:")
    prefixed.write_bytes(b"".join(prefix + line.removeprefix(b"[rank0]:") for line in raw.splitlines(keepends=True)))
    parsed = read_log([prefixed])
    assert parsed.format == original.format
    assert parsed.metrics == original.metrics
    assert parsed.skipped == original.skipped  # a blank line behind its prefix is still blank
    launcher_keys = {"run_level_rank"}
    assert {k: v for k, v in parsed.meta.items() if k not in launcher_keys} == {
        k: v for k, v in original.meta.items() if k not in launcher_keys
    }
    assert len(original.meta) >= 6  # world size, batch sizes, planned steps ...: the dump was read
    for rank in sorted(set(original.table.column("rank").to_pylist())):
        got, want = parsed.series(metric, rank), original.series(metric, rank)
        np.testing.assert_array_equal(got[0], want[0])
        np.testing.assert_array_equal(got[1], want[1])


def test_upload_page_reads_a_prefixed_all_ranks_log(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """What a new user does first: upload the log of a 4-rank torchtitan job run with torchrun's
    ``[rankN]:`` prefixes. The preview says torchtitan, and the import stores one run-level loss a
    step and each rank's tokens/s."""
    from streamlit.testing.v1 import AppTest

    from ingest.services.run_analyses import open_analysed_store
    from tests.conftest import open_page

    monkeypatch.setenv("STABSCOPE_STORE", str(tmp_path / "store"))
    store = open_analysed_store(tmp_path / "store")
    lines = [_torchtitan_line(s, r, "[rank{rank}]:") for s in range(1, 21) for r in (1, 0, 3, 2)]
    at: AppTest = open_page("upload").run()
    at.file_uploader(key="up_files").upload("titan.log", ("\n".join(lines) + "\n").encode()).run()
    assert not at.exception and not at.error
    assert {m.label: m.value for m in at.metric}["Format"] == "torchtitan"
    at.button(key="up_import").click().run()
    run = at.text_input(key="up_name").value
    np.testing.assert_allclose(store.read_series(run, "loss").values, [_loss(s) for s in range(1, 21)], rtol=1e-6)
    assert store.run_info(run).ranks == 4
    # a log no reader takes: the page names the closest format, in the page's words
    odd = [f"<<gpu {i % 8}>> " + line for i, line in enumerate(_megatron_lines(10))]
    at.file_uploader(key="up_files").upload("odd.log", ("\n".join(odd) + "\n").encode()).run()
    [error] = at.error
    assert "closest: megatron: 0 of 10 head lines matched its 'iteration N/ M" in error.value
    assert "choose the format in the Format box" in error.value and "--format" not in error.value
