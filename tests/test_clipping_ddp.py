"""Clipping under real multi-process data parallelism: 2 CPU processes on gloo, DDP and FSDP2.

The clipped gradients of every rank must equal a single-process computation on the whole batch, and
every rank must take the same decision (clip, skip) because the norm is global.
"""

from __future__ import annotations

import math
from dataclasses import astuple
from pathlib import Path
from typing import Any

import pytest
import torch

from ingest.training.torch_clipping import ZClip, _grads, clip_grad_norm
from stab_core.clipping import clip_coef
from tests.gloo import run_on_gloo

pytestmark = pytest.mark.slow  # spawns groups of two torch processes

WORLD = 2
MAX_NORM = 0.05
BATCH = 8


def _model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2))


def _batch() -> torch.Tensor:
    return torch.randn(BATCH, 4, generator=torch.Generator().manual_seed(1))


def _backward(loss: torch.Tensor) -> None:
    loss.backward()  # type: ignore[no-untyped-call]  # torch leaves Tensor.backward unannotated


def _rank_slice(batch: torch.Tensor, rank: int) -> torch.Tensor:
    share = BATCH // WORLD
    return batch[rank * share : (rank + 1) * share]


def _loss(model: torch.nn.Module, inputs: torch.Tensor) -> torch.Tensor:
    output: torch.Tensor = model(inputs)
    return output.pow(2).mean()


def _ddp_clip(rank: int, bucket_view: bool = False) -> dict[str, Any]:
    model = torch.nn.parallel.DistributedDataParallel(_model(), gradient_as_bucket_view=bucket_view)
    _backward(_loss(model, _rank_slice(_batch(), rank)))
    flat = _grads(model.parameters()).flat
    record = clip_grad_norm(model.parameters(), MAX_NORM)
    return {
        "record": astuple(record),
        "grads": [p.grad.clone() for p in model.parameters() if p.grad is not None],
        "flat_buffers": None if flat is None else len(flat),
    }


def _ddp_nan_skip(rank: int) -> dict[str, Any]:
    model = torch.nn.parallel.DistributedDataParallel(_model())
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.1, weight_decay=0.1)
    inputs = _rank_slice(_batch(), rank).clone()
    if rank == 1:
        inputs[0, 0] = math.nan  # one poisoned sample on one rank; the all-reduce spreads it
    before = [p.detach().clone() for p in model.parameters()]
    _backward(_loss(model, inputs))
    record = clip_grad_norm(model.parameters(), MAX_NORM)
    optimizer.step()
    unchanged = all(torch.equal(b, p.detach()) for b, p in zip(before, model.parameters(), strict=True))
    return {"record": astuple(record), "unchanged": unchanged}


def _fsdp2_clip(rank: int) -> dict[str, Any]:
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.tensor import DTensor

    model = _model()
    fully_shard(model, mesh=init_device_mesh("cpu", (WORLD,)))
    _backward(_loss(model, _rank_slice(_batch(), rank)))
    record = clip_grad_norm(model.parameters(), MAX_NORM)
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    assert all(isinstance(g, DTensor) for g in grads)
    return {"record": astuple(record), "grads": [g.full_tensor() for g in grads if isinstance(g, DTensor)]}


def _ddp_zclip(rank: int) -> dict[str, Any]:
    model = torch.nn.parallel.DistributedDataParallel(_model())
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    clipper = ZClip(warmup_steps=5)
    generator = torch.Generator().manual_seed(100 + rank)  # each rank sees different data
    records = []
    for step in range(12):
        spike = 50.0 if step == 9 and rank == 0 else 1.0  # an outlier batch on one rank only
        optimizer.zero_grad()
        _backward(spike * _loss(model, torch.randn(4, 4, generator=generator)))
        records.append(astuple(clipper.clip(model.parameters())))
        optimizer.step()
    return {"records": records, "state": clipper.state_dict()}


def _ddp_worker(rank: int, out_dir: str) -> None:
    results = {
        "ddp_clip": _ddp_clip(rank),
        "ddp_bucket_view_clip": _ddp_clip(rank, bucket_view=True),
        "ddp_nan_skip": _ddp_nan_skip(rank),
        "ddp_zclip": _ddp_zclip(rank),
    }
    torch.save(results, Path(out_dir) / f"ddp-rank{rank}.pt")


def _fsdp2_worker(rank: int, out_dir: str) -> None:
    torch.save({"fsdp2_clip": _fsdp2_clip(rank)}, Path(out_dir) / f"fsdp2-rank{rank}.pt")


def _results(tmp_path_factory: pytest.TempPathFactory, worker: Any, name: str) -> list[dict[str, Any]]:
    out_dir = tmp_path_factory.mktemp(name)
    run_on_gloo(worker, WORLD, out_dir, str(out_dir))
    return [torch.load(out_dir / f"{name}-rank{rank}.pt", weights_only=False) for rank in range(WORLD)]


# Two process groups, not one: a failure in the FSDP2 (DTensor) path must not hide the DDP results.
@pytest.fixture(scope="module")
def ddp_results(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    return _results(tmp_path_factory, _ddp_worker, "ddp")


@pytest.fixture(scope="module")
def fsdp2_results(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    return _results(tmp_path_factory, _fsdp2_worker, "fsdp2")


def _single_process_reference() -> tuple[float, list[torch.Tensor]]:
    """Norm and clipped gradients of the whole batch in one process, by hand."""
    model = _model()
    _backward(_loss(model, _batch()))
    grads = [p.grad.clone() for p in model.parameters() if p.grad is not None]
    norm = math.sqrt(sum(float(g.double().pow(2).sum()) for g in grads))
    coef = float(clip_coef(norm, MAX_NORM))
    return norm, [g * coef for g in grads]


@pytest.mark.parametrize("scenario", ["ddp_clip", "ddp_bucket_view_clip", "fsdp2_clip"])
def test_clipped_gradients_match_a_single_process(request: pytest.FixtureRequest, scenario: str) -> None:
    rank_results = request.getfixturevalue("fsdp2_results" if scenario == "fsdp2_clip" else "ddp_results")
    norm, expected = _single_process_reference()
    assert norm > MAX_NORM, "the test must exercise clipping"
    for result in rank_results:
        total_norm, post_norm, coef, clipped, skipped, *_ = result[scenario]["record"]
        assert total_norm == pytest.approx(norm, rel=1e-5)
        assert clipped and not skipped and 0 < coef < 1
        assert post_norm == pytest.approx(MAX_NORM, rel=1e-4)
        for got, want in zip(result[scenario]["grads"], expected, strict=True):
            torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-8)


def test_bucket_view_gradients_are_clipped_as_one_flat_buffer(ddp_results: list[dict[str, Any]]) -> None:
    """With gradient_as_bucket_view the gradients tile DDP's bucket: the clipper takes the flat path
    (one norm and one multiply per bucket); DDP's own per-tensor gradients do not tile anything."""
    for result in ddp_results:
        assert result["ddp_bucket_view_clip"]["flat_buffers"] == 1
        assert result["ddp_clip"]["flat_buffers"] is None


def test_a_nan_on_one_rank_is_skipped_on_every_rank(ddp_results: list[dict[str, Any]]) -> None:
    for result in ddp_results:
        total_norm, _, coef, clipped, skipped, *_ = result["ddp_nan_skip"]["record"]
        assert math.isnan(total_norm) and skipped and not clipped and coef == 0.0
        assert result["ddp_nan_skip"]["unchanged"], "AdamW moved the weights after a skipped step"


def test_zclip_takes_the_same_decisions_on_every_rank(ddp_results: list[dict[str, Any]]) -> None:
    first, second = (result["ddp_zclip"] for result in ddp_results)
    # repr, because NaN z-scores (warm-up steps) never compare equal
    assert repr(first["records"]) == repr(second["records"])
    assert first["state"] == second["state"]
    assert first["records"][9][3], "the outlier batch at step 9 must be clipped"
    assert not any(record[3] for record in first["records"][:9])
