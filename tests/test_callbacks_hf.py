"""The Hugging Face Trainer callback, run by the real Trainer on a tiny GPT-2 built from a config (CPU,
no download): its shards, compacted into a store, hold the values the Trainer itself logged."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("transformers")
pytest.importorskip("accelerate")

from ingest.services.run_analyses import open_analysed_store

REPO = Path(__file__).resolve().parents[1]
STEPS = 12

TRAIN = """
import json, sys
import torch
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments
from ingest.training.hf_callback import StabScopeCallback

shard_dir, out_dir, steps = sys.argv[1], sys.argv[2], int(sys.argv[3])
torch.manual_seed(0)
model = GPT2LMHeadModel(GPT2Config(n_layer=1, n_embd=32, n_head=2, vocab_size=64, n_positions=16))
tokens = torch.randint(0, 64, (256, 16), generator=torch.Generator().manual_seed(1))
data = [{"input_ids": row, "labels": row} for row in tokens]
args = TrainingArguments(
    output_dir=out_dir, max_steps=steps, per_device_train_batch_size=4, learning_rate=3e-3,
    warmup_steps=3, lr_scheduler_type="cosine", max_grad_norm=0.5, logging_steps=1, save_strategy="no",
    report_to=[], use_cpu=True, dataloader_num_workers=0, disable_tqdm=True, seed=0,
    include_num_input_tokens_seen="all",
)
callback = StabScopeCallback(shard_dir, seq_len=16, meta={"tags": ["tiny"]}, flush_interval_s=0.5)
trainer = Trainer(model=model, args=args, train_dataset=data, callbacks=[callback])
trainer.train()
if trainer.is_world_process_zero():
    with open(out_dir + "/log_history.json", "w") as f:
        json.dump(trainer.state.log_history, f)
"""


def _train(tmp_path: Path, processes: int) -> tuple[Path, list[dict[str, Any]]]:
    shard_dir, out_dir = tmp_path / "shards", tmp_path / "out"
    out_dir.mkdir()
    script = tmp_path / "train.py"
    script.write_text(TRAIN)
    env = {**os.environ, "PYTHONPATH": str(REPO), "CUDA_VISIBLE_DEVICES": "", "OMP_NUM_THREADS": "1"}
    env.pop("WORLD_SIZE", None)
    if processes == 1:
        cmd = [sys.executable, str(script)]
    else:
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", str(processes)]
        cmd += [str(script)]
    proc = subprocess.run(
        [*cmd, str(shard_dir), str(out_dir), str(STEPS)], env=env, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    return shard_dir, json.loads((out_dir / "log_history.json").read_text())


def _check_against_the_trainers_log(tmp_path: Path, shard_dir: Path, history: list[dict[str, Any]], ranks: int) -> None:
    store = open_analysed_store(tmp_path / "store")
    store.compact("hf", shard_dir)
    logged = [entry for entry in history if "loss" in entry]
    assert [entry["step"] for entry in logged] == list(range(1, STEPS + 1))
    loss, norm = store.read_series("hf", "loss"), store.read_series("hf", "grad_norm")
    lr, coef = store.read_series("hf", "lr"), store.read_series("hf", "clip_coef")
    assert list(loss.steps) == list(norm.steps) == list(lr.steps) == list(range(1, STEPS + 1))
    for i, entry in enumerate(logged):
        assert loss.values[i] == pytest.approx(entry["loss"], rel=1e-6)
        assert norm.values[i] == pytest.approx(entry["grad_norm"], rel=1e-6)
        assert lr.values[i] == pytest.approx(entry["learning_rate"], rel=1e-9)
        assert coef.values[i] == pytest.approx(min(1.0, 0.5 / (entry["grad_norm"] + 1e-6)), rel=1e-9)
    # the tiny model's first norms are above 0.5: clipping was on and acted
    assert min(coef.values) < 1.0
    info = store.run_info("hf")
    meta = info.meta
    settings = {"max_norm": 0.5, "precision": "fp32", "world_size": ranks, "planned_steps": STEPS}
    settings |= {"per_rank_batch_size": 4, "global_batch_size": 4 * ranks, "tokens_per_step": 64 * ranks}
    assert {key: meta[key] for key in settings} == settings
    assert meta["tags"] == ["tiny"] and meta["lr_decay_style"] == "cosine" and meta["warmup_steps"] == 3
    tokens = store.read_series("hf", "tokens")
    assert tokens.values[-1] == STEPS * 4 * 16 * ranks
    for rank in range(ranks):
        step_time = store.read_series("hf", "step_time_s", rank=rank)
        assert len(step_time.steps) == STEPS and min(step_time.values) > 0


@pytest.mark.slow
@pytest.mark.system
def test_the_trainer_callback_records_what_the_trainer_logged(tmp_path: Path) -> None:
    shard_dir, history = _train(tmp_path, 1)
    _check_against_the_trainers_log(tmp_path, shard_dir, history, ranks=1)


@pytest.mark.slow
@pytest.mark.system
def test_two_torchrun_processes_on_gloo(tmp_path: Path) -> None:
    shard_dir, history = _train(tmp_path, 2)
    _check_against_the_trainers_log(tmp_path, shard_dir, history, ranks=2)
