"""Text-log readers on small logs written from each format's definition (tests/fixtures/logs/)."""

from __future__ import annotations

import itertools
import math
from pathlib import Path

import numpy as np
import pytest

from ingest.errors import StabScopeError
from ingest.formats import FORMATS, detect, read_log
from ingest.formats.llmc import LlmcMainLogReader
from ingest.formats.megatron import MegatronReader

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "logs"


def _value(parsed, metric: str, step: int, rank: int = -1) -> float:
    steps, values = parsed.series(metric, rank)
    hit = values[steps == step]
    assert hit.shape == (1,), f"{metric}@{step} rank {rank}: {hit}"
    return float(hit[0])


def test_megatron_lm_log_with_restart_rollback_later_segment_wins() -> None:
    path = FIXTURES / "megatron_lm_restart.log"
    assert detect([path])[0][0] == "megatron"
    parsed = read_log([path])
    assert parsed.format == "megatron"
    # the restart at 30 (after 40 was logged) replays 30..40: the second segment's values win
    assert _value(parsed, "loss", 30) == pytest.approx(7.7)
    assert _value(parsed, "loss", 40) == pytest.approx(7.6)
    assert _value(parsed, "loss", 20) == pytest.approx(8.0)  # before the replayed range: kept
    steps, _ = parsed.series("loss")
    assert steps.tolist() == [10, 20, 30, 40, 50]
    rollbacks = [e for e in parsed.events if e.kind == "rollback"]
    assert len(rollbacks) == 1
    # the replaced attempt's loss is kept on the event (issue #31), NaN as null
    assert rollbacks[0].detail == {
        "replayed_from": 30,
        "replayed_to": 40,
        "abandoned": {"loss": [[[30.0, 40.0], [12.345, None]]]},
    }
    # units and names
    assert _value(parsed, "step_time_s", 10) == pytest.approx(1.5)
    assert _value(parsed, "lr", 20) == pytest.approx(2e-5)
    assert _value(parsed, "tflops_per_gpu", 10) == pytest.approx(300.5)
    assert _value(parsed, "val_loss", 30) == pytest.approx(7.9)
    assert _value(parsed, "val_ppl", 30) == pytest.approx(2697.282)
    assert _value(parsed, "gpu_mem_gb", 10, rank=6) == pytest.approx(20.0)
    assert _value(parsed, "gpu_mem_max_reserved_gb", 10, rank=6) == pytest.approx(32.0)
    # the wall clock of the 2nd segment, read as UTC
    steps, _ = parsed.series("loss")
    table = parsed.table.to_pydict()
    wall = {
        (m, s): w
        for m, s, w, r in zip(table["metric"], table["step"], table["wall_time"], table["rank"], strict=True)
        if r == -1
    }
    assert wall[("loss", 30)] == pytest.approx(1718362810.0)  # 2024-06-14 11:00:10 UTC
    assert parsed.meta["global_batch_size"] == 256
    assert parsed.meta["max_norm"] == 1.0
    assert parsed.meta["seq_len"] == 4096
    assert parsed.meta["world_size"] == 8
    assert parsed.meta["total_steps"] == 500
    assert "24 layers" in parsed.meta["model"]
    # banners, arguments, the traceback and separators are skipped and counted
    assert parsed.skipped >= 20
    assert parsed.skipped_examples[0][1] == 1


def test_megatron_first_segment_values_nan_inf(tmp_path: Path) -> None:
    text = (FIXTURES / "megatron_lm_restart.log").read_text().split(" loading checkpoint")[0]
    path = tmp_path / "first_segment.log"
    path.write_text(text)
    parsed = read_log([path])
    assert math.isinf(_value(parsed, "grad_norm", 30))
    assert math.isnan(_value(parsed, "loss", 40))
    assert math.isnan(_value(parsed, "grad_norm", 40))
    assert _value(parsed, "skipped_iterations", 30) == 1.0
    assert _value(parsed, "nan_iterations", 40) == 1.0
    assert not [e for e in parsed.events if e.kind == "rollback"]


def test_megatron_deepspeed_console() -> None:
    path = FIXTURES / "megatron_deepspeed.log"
    candidates = detect([path])
    assert candidates[0][0] == "megatron_deepspeed"
    assert candidates[0][1] - candidates[1][1] > 0.1
    parsed = read_log([path])
    assert _value(parsed, "loss", 2) == pytest.approx(10.5)
    assert _value(parsed, "tokens", 3) == 3145728
    assert _value(parsed, "step_time_s", 1) == pytest.approx(2.3456)  # the iteration line wins
    assert _value(parsed, "samples_per_s", 3) == pytest.approx(221.645)
    assert _value(parsed, "ds_skipped_steps_total", 3) == 1.0
    assert _value(parsed, "loss_scale", 3) == 2048.0
    assert parsed.meta["global_batch_size"] == 512


def test_llmc_console_steps_match_main_log_numbering() -> None:
    path = FIXTURES / "llmc_console.log"
    assert detect([path])[0][0] == "llmc_console"
    parsed = read_log([path])
    # printed "step 1/4" is step 0 (as main.log's s:0): both files of one run agree
    assert _value(parsed, "loss", 0) == pytest.approx(11.009430)
    assert _value(parsed, "loss", 3) == pytest.approx(10.7)
    assert _value(parsed, "val_loss", 0) == pytest.approx(11.009171)
    assert _value(parsed, "val_loss", 3) == pytest.approx(10.7)  # printed before "step 4/4"
    assert _value(parsed, "val_loss", 4) == pytest.approx(10.5)  # after the last step
    assert _value(parsed, "hellaswag_acc", 3) == pytest.approx(0.248954)
    assert _value(parsed, "step_time_s", 1) == pytest.approx(0.21263)
    assert _value(parsed, "throughput_tok_s", 1) == 2465772
    assert _value(parsed, "mfu", 1) == pytest.approx(0.452)
    mfu_steps, _ = parsed.series("mfu")
    assert 0 not in mfu_steps.tolist()  # -100 % means "not measured": dropped
    assert parsed.meta["total_steps"] == 4
    assert parsed.skipped == 7  # the config table and the allocation line


def test_nanogpt_console() -> None:
    path = FIXTURES / "nanogpt.log"
    assert detect([path])[0][0] == "nanogpt"
    parsed = read_log([path])
    assert _value(parsed, "loss", 3) == pytest.approx(3.4987)
    assert _value(parsed, "step_time_s", 1) == pytest.approx(0.10111)
    assert _value(parsed, "val_loss", 5) == pytest.approx(3.2)
    assert _value(parsed, "eval_train_loss", 0) == pytest.approx(4.2874)
    mfu_steps, mfu = parsed.series("mfu")
    assert mfu_steps.tolist() == [5]
    assert mfu[0] == pytest.approx(0.3681)
    assert parsed.meta["tokens_per_step"] == 16384
    assert parsed.meta["config_overrides"] == {"max_iters": "3"}


def test_torchtitan_colour_codes_two_ranks() -> None:
    path = FIXTURES / "torchtitan_color_2ranks.log"
    assert detect([path])[0][0] == "torchtitan"
    parsed = read_log([path])
    assert _value(parsed, "loss", 2) == pytest.approx(8.0)
    assert _value(parsed, "mfu", 3) == pytest.approx(0.103)
    assert _value(parsed, "gpu_mem_gb", 2, rank=1) == pytest.approx(21.5)
    assert _value(parsed, "gpu_mem_pct", 2, rank=1) == pytest.approx(26.0)
    assert _value(parsed, "throughput_tok_s", 3, rank=0) == 1203
    assert _value(parsed, "throughput_tok_s", 3, rank=1) == 1213
    # rank 1 re-prints steps 1..3 after rank 0: not a restart
    assert not [e for e in parsed.events if e.kind == "rollback"]
    assert parsed.meta["global_batch_size"] == 16
    assert parsed.meta["total_steps"] == 3


def test_chunk_boundaries_do_not_change_the_result(tmp_path: Path) -> None:
    path = FIXTURES / "megatron_lm_restart.log"
    whole = MegatronReader().read([path])
    small = MegatronReader()
    small.chunk_bytes = 97  # lines are split across reads
    pieces = small.read([path])
    assert pieces.table.equals(whole.table)
    assert pieces.skipped == whole.skipped
    assert [e.detail for e in pieces.events] == [e.detail for e in whole.events]


def test_new_layout_midway_is_learned(tmp_path: Path) -> None:
    lines = [f"s:{i} trl:{3 + 1 / (i + 1):.4f} lr:0.0006 norm:{0.5 + i % 3:.2f}" for i in range(300)]
    lines.insert(150, "s:150 tel:3.2100")
    lines.append("s:300 trl:2.0000 lr:0.0001 norm:0.25 extra:7")
    path = tmp_path / "main.log"
    path.write_text("\n".join(lines) + "\n")
    reader = LlmcMainLogReader()
    reader.chunk_bytes = 1024
    parsed = reader.read([path])
    steps, loss = parsed.series("loss")
    assert steps.tolist() == list(range(301))
    assert loss[10] == pytest.approx(3 + 1 / 11, abs=1e-4)
    assert _value(parsed, "val_loss", 150) == pytest.approx(3.21)
    assert _value(parsed, "extra", 300) == 7.0
    assert parsed.skipped == 0


def test_restart_across_two_files_is_one_stream(tmp_path: Path) -> None:
    a = tmp_path / "job1.log"
    b = tmp_path / "job2.log"
    a.write_text("".join(f"s:{i} trl:{5.0 - 0.01 * i:.4f}\n" for i in range(0, 120)))
    b.write_text("".join(f"s:{i} trl:{9.0:.4f}\n" for i in range(100, 150)))
    parsed = read_log([a, b], format="llmc_main")
    steps, loss = parsed.series("loss")
    assert steps.tolist() == list(range(150))
    assert loss[99] == pytest.approx(5.0 - 0.99)
    assert np.all(loss[100:] == 9.0)  # the later segment wins on the replayed 100..119
    (event,) = [e for e in parsed.events if e.kind == "rollback"]
    assert event.step == 100
    assert _span(event.detail) == {"replayed_from": 100, "replayed_to": 119}
    assert parsed.source_files == [str(a), str(b)]


def test_progress_reports_bytes(tmp_path: Path) -> None:
    path = tmp_path / "main.log"
    path.write_text("".join(f"s:{i} trl:1.0\n" for i in range(5000)))
    calls: list[tuple[int, int]] = []
    reader = LlmcMainLogReader()
    reader.chunk_bytes = 4096
    reader.read([path], progress=lambda done, total: calls.append((done, total)))
    size = path.stat().st_size
    assert len(calls) > 5
    assert calls[-1] == (size, size)
    assert all(a[0] <= b[0] for a, b in itertools.pairwise(calls))


def test_garbage_is_refused_with_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "notes.txt"
    path.write_text("shopping list\n- eggs\n- milk\n")
    with pytest.raises(StabScopeError, match=r"line 1: format not recognised: .shopping list. is not a line") as err:
        read_log([path])
    assert str(path) in str(err.value)
    assert "--format" in str(err.value)
    with pytest.raises(StabScopeError, match=r"line 1") as forced:
        read_log([path], format="megatron")
    assert str(path) in str(forced.value)
    assert "not a metric line: shopping list" in str(forced.value)


def test_ambiguous_input_is_refused_with_candidates(tmp_path: Path) -> None:
    path = tmp_path / "mixed.log"
    lines = []
    for i in range(20):
        lines.append(f"iter {i}: loss {4 - i * 0.1:.4f}, time 100.00ms, mfu 30.00%")
        lines.append(f"step:{i}/20 train_loss:{4 - i * 0.1:.4f} train_time:{i * 100}ms step_avg:100.00ms")
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(StabScopeError, match="ambiguous") as err:
        read_log([path])
    message = str(err.value)
    assert "nanogpt" in message and "modded_nanogpt" in message
    assert "--format NAME" in message
    forced = read_log([path], format="nanogpt")
    assert forced.skipped == 20  # the other format's lines


def test_unknown_forced_format_lists_known_ones(tmp_path: Path) -> None:
    path = tmp_path / "x.log"
    path.write_text("s:1 trl:1.0\n")
    with pytest.raises(StabScopeError, match=r"unknown format 'nope'.*llmc_main"):
        read_log([path], format="nope")
    with pytest.raises(StabScopeError, match="no such file"):
        read_log([tmp_path / "missing.log"])


def test_registry_readers_have_names_and_descriptions() -> None:
    assert len(FORMATS) >= 20
    for name, reader in FORMATS.items():
        assert reader.name == name
        assert len(reader.description) > 10


def test_echoed_source_code_and_nvidia_smi_are_skipped(tmp_path: Path) -> None:
    source = [
        "import os",
        "def print0(s):",
        "    print(s)",
        "for step in range(train_steps + 1):",
        '    print0(f"step:{step}/{train_steps} val_loss:{val_loss:.4f} train_time:{t:.0f}ms")',
        '    print0(f"step:{step+1}/{train_steps} train_loss:{loss.item():.4f}")',
        "=" * 100,
        "+-----------------------------------------------------------------------------+",
        "| NVIDIA-SMI 550.90.12              Driver Version: 550.90.12      CUDA Version: 12.6 |",
        "|   0  NVIDIA H100 80GB HBM3          On  |   00000000:61:00.0 Off |    0 |",
    ]
    metrics = [
        f"step:{i}/5 train_loss:{4.0 - i * 0.1:.4f} train_time:{i * 400}ms step_avg:400.00ms" for i in range(1, 6)
    ]
    path = tmp_path / "record.txt"
    path.write_text("\n".join(source + metrics) + "\n")
    assert detect([path])[0][0] == "modded_nanogpt"
    parsed = read_log([path])
    assert parsed.series("loss")[0].tolist() == [1, 2, 3, 4, 5]
    assert parsed.skipped == len(source)
    assert [ex[1] for ex in parsed.skipped_examples] == [1, 2, 3, 4, 5]
    assert parsed.meta["gpus"] == 1


def test_files_of_different_formats_are_refused_with_each_format(tmp_path: Path) -> None:
    a = tmp_path / "a.log"
    b = tmp_path / "b.log"
    a.write_text("s:1 trl:1.0\ns:2 trl:0.9\n")
    b.write_text("iter 1: loss 2.0, time 1.00ms\niter 2: loss 1.9, time 1.00ms\n")
    with pytest.raises(StabScopeError, match=r"different formats \(a\.log: llmc_main; b\.log: nanogpt\)"):
        read_log([a, b])


def _span(detail: dict) -> dict:
    """A rollback's replayed span (its ``abandoned`` rows are tests/test_abandoned_attempts.py's)."""
    return {k: v for k, v in detail.items() if k != "abandoned"}
