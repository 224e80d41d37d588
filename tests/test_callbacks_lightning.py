"""The Lightning callback, run by the real Lightning Trainer on a tiny LightningModule (CPU), in one
process and in two DDP processes over gloo: its shards, compacted into a store, hold the losses the
module computed, the LRs its schedule gives and the pre-clipping norms Lightning's own ``grad_norm``
utility measured."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("lightning")

from ingest.services.run_analyses import open_analysed_store

REPO = Path(__file__).resolve().parents[1]
STEPS = 16
BASE_LR = 0.05

TRAIN = """
import json, sys
import torch
import lightning as L
from lightning.pytorch.utilities import grad_norm
from ingest.training.lightning_callback import StabScopeLightningCallback

shard_dir, out_path, steps, devices = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])


class Tiny(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))
        self.seen = {"loss": [], "grad_norm": []}

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = torch.nn.functional.mse_loss(self.net(x), y)
        mean = self.all_gather(loss.detach()).mean()  # the cross-rank mean the run-level loss should be
        self.seen["loss"].append(float(mean))
        return loss

    def on_before_optimizer_step(self, optimizer):
        self.seen["grad_norm"].append(float(grad_norm(self, norm_type=2)["grad_2.0_norm_total"]))

    def configure_optimizers(self):
        opt = torch.optim.SGD(self.parameters(), lr=BASE_LR)
        sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda k: 1.0 / (1 + k))
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}


torch.manual_seed(0)
x = torch.randn(512, 8) * 4
data = torch.utils.data.TensorDataset(x, x.sum(dim=1, keepdim=True))
loader = torch.utils.data.DataLoader(data, batch_size=8, shuffle=False)
module = Tiny()
callback = StabScopeLightningCallback(shard_dir, seq_len=1, meta={"tags": ["tiny"]}, flush_interval_s=0.5)
trainer = L.Trainer(
    max_steps=steps, accelerator="cpu", devices=devices, strategy="ddp" if devices > 1 else "auto",
    gradient_clip_val=2.0, callbacks=[callback], logger=False, enable_checkpointing=False,
    enable_progress_bar=False, enable_model_summary=False,
)
trainer.fit(module, loader)
if trainer.global_rank == 0:
    with open(out_path, "w") as f:
        json.dump(module.seen, f)
""".replace("BASE_LR", repr(BASE_LR))


def _train(tmp_path: Path, devices: int) -> tuple[Path, dict[str, Any]]:
    shard_dir, out_path = tmp_path / "shards", tmp_path / "seen.json"
    script = tmp_path / "train.py"
    script.write_text(TRAIN)
    env = {**os.environ, "PYTHONPATH": str(REPO), "CUDA_VISIBLE_DEVICES": "", "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(
        [sys.executable, str(script), str(shard_dir), str(out_path), str(STEPS), str(devices)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    return shard_dir, json.loads(out_path.read_text())


def _check(tmp_path: Path, shard_dir: Path, seen: dict[str, Any], ranks: int) -> None:
    store = open_analysed_store(tmp_path / "store")
    store.compact("pl", shard_dir)
    steps = list(range(1, STEPS + 1))
    loss, norm = store.read_series("pl", "loss"), store.read_series("pl", "grad_norm")
    lr, coef = store.read_series("pl", "lr"), store.read_series("pl", "clip_coef")
    assert list(loss.steps) == list(norm.steps) == list(lr.steps) == list(coef.steps) == steps
    assert len(seen["loss"]) == len(seen["grad_norm"]) == STEPS
    for i in range(STEPS):
        assert loss.values[i] == pytest.approx(seen["loss"][i], rel=1e-6)
        assert norm.values[i] == pytest.approx(seen["grad_norm"][i], rel=1e-5)
        assert lr.values[i] == pytest.approx(BASE_LR / (1 + i), rel=1e-12)  # LambdaLR 1/(1+k) at step k
        assert coef.values[i] == pytest.approx(min(1.0, 2.0 / (seen["grad_norm"][i] + 1e-6)), rel=1e-5)
    assert min(coef.values) < 1.0  # the regression's first norms exceed 2: clipping acted
    meta = store.run_info("pl").meta
    settings = {"max_norm": 2.0, "precision": "fp32", "world_size": ranks, "planned_steps": STEPS}
    settings |= {"per_rank_batch_size": 8, "global_batch_size": 8 * ranks, "tokens_per_step": 8 * ranks}
    assert {key: meta[key] for key in settings} == settings
    assert meta["tags"] == ["tiny"]
    for rank in range(ranks):
        assert len(store.read_series("pl", "loss", rank=rank).steps) == STEPS
        step_time = store.read_series("pl", "step_time_s", rank=rank)
        assert len(step_time.steps) == STEPS - 1 and min(step_time.values) > 0  # none before the first step


@pytest.mark.slow
@pytest.mark.system
def test_the_lightning_callback_records_the_modules_values(tmp_path: Path) -> None:
    shard_dir, seen = _train(tmp_path, 1)
    _check(tmp_path, shard_dir, seen, ranks=1)


@pytest.mark.slow
@pytest.mark.system
def test_two_ddp_processes_on_gloo(tmp_path: Path) -> None:
    shard_dir, seen = _train(tmp_path, 2)
    _check(tmp_path, shard_dir, seen, ranks=2)
