"""Known answers and invariants of gradient clipping: torch half (clip_grad_norm, ZClip) and numpy half."""

from __future__ import annotations

import gc
import json
import math
import re
import weakref
from dataclasses import astuple
from pathlib import Path

import numpy as np
import pytest
import torch

from ingest.training.torch_clipping import ZClip, _grads, clip_grad_norm, global_grad_norm
from stab_core.clipping import ClipRecord, NonFiniteGradientError, clip_coef, clipping_stats, zclip_update
from stab_core.metrics import CANONICAL_METRICS

REAL_LOGS = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "real_logs"


def _params_with_grads(*grads: list[float]) -> list[torch.nn.Parameter]:
    params = []
    for grad in grads:
        p = torch.nn.Parameter(torch.ones(len(grad)))
        p.grad = torch.tensor(grad)
        params.append(p)
    return params


# ---------------------------------------------------------------- the formula


def test_clip_coef_follows_torch() -> None:
    coef = clip_coef([5.0, 0.5, 1.0, 0.0, np.nan, np.inf], 1.0)
    np.testing.assert_allclose(coef[:4], [1 / (5 + 1e-6), 1.0, 1 / (1 + 1e-6), 1.0], rtol=1e-15)
    assert np.isnan(coef[4]) and coef[5] == 0.0


# ---------------------------------------------------------------- clip_grad_norm


def test_clip_grad_norm_known_answer() -> None:
    (p,) = _params_with_grads([3.0, 4.0])
    record = clip_grad_norm([p], 1.0)
    assert record.total_norm == 5.0
    assert p.grad is not None
    torch.testing.assert_close(p.grad, torch.tensor([0.6, 0.8]))
    assert record.clipped and not record.skipped
    assert record.clip_coef == pytest.approx(1 / (5 + 1e-6), rel=1e-15)
    assert record.post_norm == pytest.approx(1.0, abs=1e-6)


def test_below_max_norm_the_gradients_are_untouched() -> None:
    (p,) = _params_with_grads([0.3, 0.4])
    assert p.grad is not None
    before = p.grad.clone()
    record = clip_grad_norm(p, 1.0)
    assert record == ClipRecord(0.5, 0.5, 1.0, False, False, 1.0, record.z)
    assert p.grad is not None and torch.equal(p.grad, before)


@pytest.mark.parametrize("max_norm", [0.1, 1.0, 3.0, 100.0])
def test_clip_grad_norm_matches_torch_on_many_tensors(max_norm: float) -> None:
    generator = torch.Generator().manual_seed(7)
    shapes = [(16, 8), (8,), (4, 4, 3), (1,)]
    ours = [torch.nn.Parameter(torch.zeros(s)) for s in shapes]
    theirs = [torch.nn.Parameter(torch.zeros(s)) for s in shapes]
    for a, b in zip(ours, theirs, strict=True):
        a.grad = torch.randn(a.shape, generator=generator)
        b.grad = a.grad.clone()
    record = clip_grad_norm(ours, max_norm)
    reference = torch.nn.utils.clip_grad_norm_(theirs, max_norm)
    assert record.total_norm == pytest.approx(float(reference), rel=1e-6)
    for a, b in zip(ours, theirs, strict=True):
        assert a.grad is not None and b.grad is not None
        torch.testing.assert_close(a.grad, b.grad, rtol=1e-6, atol=1e-7)
    assert 0 < record.clip_coef <= 1
    assert global_grad_norm(ours) <= max_norm + 1e-5
    assert record.clip_coef == float(clip_coef(record.total_norm, max_norm))  # one formula


def test_no_gradients_means_norm_zero() -> None:
    p = torch.nn.Parameter(torch.ones(3))
    record = clip_grad_norm([p], 1.0)
    assert (record.total_norm, record.clip_coef, record.clipped, record.skipped) == (0.0, 1.0, False, False)
    assert global_grad_norm([p]) == 0.0


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_skip_policy_never_lets_a_nonfinite_step_touch_the_weights(bad: float) -> None:
    model = torch.nn.Linear(3, 2)
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.1, weight_decay=0.1)
    # one healthy step so AdamW has momentum that a zeroed gradient would still apply
    model(torch.ones(1, 3)).sum().backward()
    clip_grad_norm(model.parameters(), 1.0)
    optimizer.step()
    optimizer.zero_grad()
    weights = [p.detach().clone() for p in model.parameters()]
    state = {k: v.clone() for k, v in optimizer.state[model.weight].items()}

    (model(torch.ones(1, 3)) * bad).sum().backward()
    record = clip_grad_norm(model.parameters(), 1.0)
    optimizer.step()

    assert record.skipped and not record.clipped and record.clip_coef == 0.0 and record.post_norm == 0.0
    assert math.isnan(record.total_norm) or math.isinf(record.total_norm)
    for before, p in zip(weights, model.parameters(), strict=True):
        assert torch.equal(before, p.detach())
    for key, value in optimizer.state[model.weight].items():
        assert torch.equal(value, state[key])
    # and training carries on
    optimizer.zero_grad()
    model(torch.ones(1, 3)).sum().backward()
    assert not clip_grad_norm(model.parameters(), 1.0).skipped


def test_raise_policy_names_the_parameter() -> None:
    params = _params_with_grads([1.0, 2.0], [float("nan"), 0.0])
    with pytest.raises(NonFiniteGradientError, match=r"parameter #1 .*shape \(2,\)"):
        clip_grad_norm(params, 1.0, nonfinite="raise")


def test_clip_policy_does_what_torch_does() -> None:
    ours = _params_with_grads([1.0, float("inf")], [3.0, 4.0])
    theirs = _params_with_grads([1.0, float("inf")], [3.0, 4.0])
    record = clip_grad_norm(ours, 1.0, nonfinite="clip")
    torch.nn.utils.clip_grad_norm_(theirs, 1.0)
    assert record.total_norm == math.inf and record.clip_coef == 0.0 and not record.skipped
    for a, b in zip(ours, theirs, strict=True):
        assert a.grad is not None and b.grad is not None
        torch.testing.assert_close(a.grad, b.grad, equal_nan=True)


@pytest.mark.parametrize(("max_norm", "policy"), [(0.0, "skip"), (-1.0, "skip"), (math.inf, "skip"), (1.0, "ignore")])
def test_bad_settings_raise_value_error(max_norm: float, policy: str) -> None:
    with pytest.raises(ValueError, match=r"max_norm|nonfinite"):
        clip_grad_norm(_params_with_grads([1.0]), max_norm, nonfinite=policy)  # type: ignore[arg-type]


def test_record_speaks_the_canonical_metric_names() -> None:
    record = clip_grad_norm(_params_with_grads([3.0, 4.0]), 1.0)
    metrics = record.as_metrics()
    assert set(metrics) <= set(CANONICAL_METRICS)
    assert metrics["grad_norm"] == 5.0 and metrics["nonfinite_grads"] == 0.0


def _reference_clip(grads: list[torch.Tensor], max_norm: float) -> tuple[float, list[torch.Tensor]]:
    """The previous implementation: torch's get_total_norm, numpy's clip_coef, one mul_ per tensor."""
    total = float(torch.nn.utils.get_total_norm([g.clone() for g in grads], 2.0))
    coef = float(clip_coef(total, max_norm))
    scaled = [g.clone() for g in grads]
    if coef < 1.0 or math.isnan(coef):
        for g in scaled:
            g.mul_(coef)
    return total, scaled


@pytest.mark.parametrize(
    "dtypes", [(torch.float32,), (torch.float64,), (torch.bfloat16,), (torch.float32, torch.float64)]
)
@pytest.mark.parametrize("seed", range(6))
def test_fast_path_is_bit_identical_to_the_reference(dtypes: tuple[torch.dtype, ...], seed: int) -> None:
    """One _foreach_norm / _foreach_mul_ (and the mixed-dtype fallback) give exactly the norm and
    gradients of get_total_norm + per-tensor mul_, clipped or not, over varied shapes and scales."""
    generator = torch.Generator().manual_seed(seed)
    count = int(torch.randint(1, 40, (1,), generator=generator))
    params = []
    for i in range(count):
        shape = tuple(
            int(d)
            for d in torch.randint(1, 9, (int(torch.randint(1, 4, (1,), generator=generator)),), generator=generator)
        )
        scale = 10.0 ** float(torch.empty(1).uniform_(-4, 3, generator=generator))
        p = torch.nn.Parameter(torch.zeros(shape, dtype=dtypes[i % len(dtypes)]))
        p.grad = (torch.randn(shape, generator=generator, dtype=torch.float64) * scale).to(p.dtype)
        params.append(p)
    params.insert(count // 2, torch.nn.Parameter(torch.zeros(3)))  # no gradient: left out
    grads = [p.grad for p in params if p.grad is not None]
    for max_norm in (1e-3, 1.0, 1e6):
        expected_norm, expected_grads = _reference_clip(grads, max_norm)
        ours = [g.clone() for g in grads]
        for p, g in zip((p for p in params if p.grad is not None), ours, strict=True):
            p.grad = g
        record = clip_grad_norm(params, max_norm)
        assert record.total_norm == expected_norm
        assert record.clip_coef == float(clip_coef(expected_norm, max_norm))
        assert record.clipped == (record.clip_coef < 1.0)
        for got, want in zip(ours, expected_grads, strict=True):
            assert torch.equal(got, want)


# ---------------------------------------------------------------- gradients that tile flat buffers

FLAT_SHAPES = [(64, 32), (32,), (7, 5, 3), (1,), (300,), (17, 40), (40,)]


def _flat_layout(values: list[torch.Tensor], order: list[int]) -> tuple[list[torch.nn.Parameter], torch.Tensor]:
    """Parameters whose gradients are views of one flat buffer, laid out in ``order`` (as DDP's
    ``gradient_as_bucket_view`` buckets are, first in parameter order, then in the order the
    gradients became ready)."""
    buffer = torch.empty(sum(v.numel() for v in values))
    offsets, at = {}, 0
    for index in order:
        offsets[index], at = at, at + values[index].numel()
    params = []
    for index, value in enumerate(values):
        p = torch.nn.Parameter(torch.zeros(value.shape))
        view = buffer[offsets[index] : offsets[index] + value.numel()].view(value.shape)
        view.copy_(value)
        p.grad = view
        params.append(p)
    return params, buffer


def _flat_values(seed: int) -> list[torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    return [torch.randn(shape, generator=generator) * 0.3 for shape in FLAT_SHAPES]


@pytest.mark.parametrize("max_norm", [1e-3, 1.0, 1e6])
def test_flat_buffer_path_gives_the_rounded_exact_norm_and_torchs_multiply(max_norm: float) -> None:
    values = _flat_values(0)
    params, buffer = _flat_layout(values, list(range(len(values))))
    assert _grads(params).flat is not None
    record = clip_grad_norm(params, max_norm)
    exact = torch.cat([v.double().flatten() for v in values]).norm()
    assert record.total_norm == float(exact.to(torch.float32))  # float64 sum, rounded once
    assert record.clip_coef == float(clip_coef(record.total_norm, max_norm))
    assert record.clipped == (max_norm < 1e6)
    for p, value in zip(params, values, strict=True):
        want = value.clone()
        if record.clipped:
            want.mul_(record.clip_coef)
        assert torch.equal(p.grad, want)
    assert buffer.data_ptr() == params[0].grad.data_ptr()  # scaled in place, still DDP's bucket


def test_flat_norm_is_the_same_in_every_layout() -> None:
    """DDP lays its bucket out anew after the first step, so a resumed run meets another layout at its
    first step than the uninterrupted run did; the norm and ZClip's state must not notice. A float32
    sum over the buffer does notice: the check has teeth."""
    values = _flat_values(1)
    in_order = list(range(len(values)))
    orders = [in_order, in_order[::-1], [3, 0, 6, 2, 5, 1, 4], [6, 4, 2, 0, 1, 3, 5]]
    norms, float32_sums, states = set(), set(), set()
    for order in orders:
        clipper = ZClip(warmup_steps=2)
        for _ in range(4):
            params, buffer = _flat_layout(values, order)
            record = clipper.clip(params)
        norms.add(record.total_norm)
        float32_sums.add(float(buffer.square().sum()))
        states.add(json.dumps(clipper.state_dict()))
    assert len(norms) == 1 and len(states) == 1
    assert len(float32_sums) > 1


def test_a_subset_of_a_shared_buffer_is_clipped_alone() -> None:
    """Clipping some of the gradients in a buffer must scale those and leave the rest untouched."""
    values = _flat_values(2)
    params, _ = _flat_layout(values, list(range(len(values))))
    kept = [p.grad.clone() for p in params[4:]]
    assert _grads(params[:4]).flat is None
    record = clip_grad_norm(params[:4], 1e-3)
    assert record.total_norm == pytest.approx(float(torch.cat([v.flatten() for v in values[:4]]).norm()), rel=1e-6)
    for p, value in zip(params[:4], values[:4], strict=True):
        assert torch.equal(p.grad, value * record.clip_coef)
    for p, before in zip(params[4:], kept, strict=True):
        assert torch.equal(p.grad, before)


@pytest.mark.parametrize("layout", ["gap", "strided", "own tensors"])
def test_gradients_that_do_not_tile_a_buffer_take_the_per_tensor_path(layout: str) -> None:
    values = _flat_values(3)
    if layout == "own tensors":
        params = _params_with_grads(*[v.flatten().tolist() for v in values])
    else:
        params, buffer = _flat_layout(values, list(range(len(values))))
        if layout == "gap":  # the last gradient moves one element along: the buffer is not tiled
            buffer2 = torch.zeros(buffer.numel() + 1)
            buffer2[: buffer.numel()] = buffer
            last = values[-1].numel()
            params[-1].grad = buffer2[buffer.numel() - last + 1 :].view(values[-1].shape)
            values[-1] = params[-1].grad.clone()
        else:
            params[2].grad = torch.randn(5, 7, 3).transpose(0, 1)  # (7, 5, 3), not contiguous
            values[2] = params[2].grad.clone()
    assert _grads(params).flat is None
    record = clip_grad_norm(params, 1e-3)
    assert record.total_norm == pytest.approx(float(torch.cat([v.double().flatten() for v in values]).norm()), rel=1e-6)
    for p, value in zip(params, values, strict=True):
        torch.testing.assert_close(p.grad.reshape(value.shape), value * record.clip_coef, rtol=0, atol=0)


def test_the_remembered_layout_follows_new_gradients_and_keeps_nothing_alive() -> None:
    values = _flat_values(4)
    first, _ = _flat_layout(values, list(range(len(values))))
    clip_grad_norm(first, 1e6)
    # the same parameters, new gradient tensors in another layout (DDP's rebuilt bucket)
    second, buffer = _flat_layout(values, list(reversed(range(len(values)))))
    for p, new in zip(first, second, strict=True):
        p.grad = new.grad
    record = clip_grad_norm(first, 1e-3)
    for p, value in zip(first, values, strict=True):
        assert torch.equal(p.grad, value * record.clip_coef)
    assert buffer.abs().sum() < torch.cat([v.flatten() for v in values]).abs().sum()  # the new buffer was scaled
    alive = weakref.ref(buffer)
    del first, second, buffer, p, new
    gc.collect()
    assert alive() is None


def test_scalar_coefficient_is_the_array_formula() -> None:
    from stab_core.clipping import scalar_clip_coef

    norms = [0.0, 1e-9, 0.5, 1.0 - 1e-6, 1.0, 1.0 + 1e-6, 3.0, 1e30, math.inf, math.nan]
    for max_norm in (1e-3, 1.0, 7.5, math.inf):
        for norm in norms:
            with np.errstate(invalid="ignore"):  # inf / inf
                want = float(clip_coef(norm, max_norm))
            got = scalar_clip_coef(norm, max_norm)
            assert got == want or (math.isnan(got) and math.isnan(want)), (norm, max_norm, got, want)


# ---------------------------------------------------------------- ZClip


def test_zclip_update_known_answer() -> None:
    update = zclip_update(1.0, 0.01, 2.0)
    assert update.z == pytest.approx(10.0, rel=1e-4)
    assert update.clipped
    assert update.threshold == pytest.approx(1.0625006, abs=1e-7)
    assert update.mean == pytest.approx(1.001875, abs=1e-7)
    assert update.var == pytest.approx(0.0098103, abs=1e-7)


def test_zclip_update_below_the_threshold_tracks_the_norm() -> None:
    update = zclip_update(1.0, 0.01, 1.1)
    assert not update.clipped and update.threshold == 1.1
    assert update.mean == pytest.approx(0.97 + 0.03 * 1.1)
    assert update.var == pytest.approx(0.97 * 0.01 + 0.03 * (1.1 - update.mean) ** 2)
    with pytest.raises(ValueError, match="grad_norm"):
        zclip_update(1.0, 0.01, math.nan)


def _grad_stream(steps: int, spike_at: tuple[int, ...] = ()) -> list[torch.Tensor]:
    generator = torch.Generator().manual_seed(3)
    grads = [
        torch.randn(6, generator=generator) * (1 + 0.05 * torch.randn(1, generator=generator)) for _ in range(steps)
    ]
    for step in spike_at:
        grads[step] = grads[step] * 20
    return grads


def _run(clipper: ZClip, grads: list[torch.Tensor]) -> list[tuple[object, ...]]:
    p = torch.nn.Parameter(torch.zeros(6))
    records = []
    for grad in grads:
        p.grad = grad.clone()
        records.append(astuple(clipper.clip([p])) + tuple(p.grad.tolist()))
    return records


def test_zclip_warms_up_then_clips_a_spike_to_its_adaptive_threshold() -> None:
    grads = _grad_stream(40, spike_at=(30,))
    clipper = ZClip(warmup_steps=25)
    p = torch.nn.Parameter(torch.zeros(6))
    norms = []
    for step, grad in enumerate(grads):
        p.grad = grad.clone()
        if step == 30:
            expected = zclip_update(clipper.mean or 0.0, clipper.var or 0.0, float(grad.norm()))
        record = clipper.clip([p])
        norms.append(record.total_norm)
        if step < 25:
            assert not record.clipped and math.isnan(record.z)
        if step == 24:
            assert clipper.mean == pytest.approx(np.mean(norms), rel=1e-12)
            assert clipper.var == pytest.approx(np.var(norms), rel=1e-12)
        if step == 30:
            assert record.clipped and record.z == pytest.approx(expected.z)
            assert record.max_norm == pytest.approx(expected.threshold)
            assert record.post_norm == pytest.approx(expected.threshold, rel=1e-5)
            assert float(p.grad.norm()) == pytest.approx(expected.threshold, rel=1e-5)
            assert clipper.mean == expected.mean


def test_zclip_fixed_cap_applies_during_warmup() -> None:
    (p,) = _params_with_grads([3.0, 4.0])
    record = ZClip(max_norm=1.0).clip([p])
    assert record.clipped and record.max_norm == 1.0
    assert p.grad is not None
    torch.testing.assert_close(p.grad, torch.tensor([0.6, 0.8]))


def test_zclip_skips_nonfinite_steps_without_touching_its_statistics() -> None:
    clipper = ZClip(warmup_steps=2)
    for grad in ([1.0], [1.2], [0.9]):
        clipper.clip(_params_with_grads(grad))
    state = clipper.state_dict()
    params = _params_with_grads([float("nan")])
    record = clipper.clip(params)
    assert record.skipped and params[0].grad is None
    assert clipper.state_dict() == state


@pytest.mark.parametrize("stop_at", [0, 10, 25, 29, 31, 45])
def test_zclip_resumed_from_state_continues_identically(stop_at: int) -> None:
    grads = _grad_stream(60, spike_at=(30, 44))
    uninterrupted = _run(ZClip(), grads)
    first = ZClip()
    head = _run(first, grads[:stop_at])
    saved = json.loads(json.dumps(first.state_dict()))  # survives a checkpoint written as JSON
    resumed = ZClip(alpha=0.5)  # its own settings are replaced by the saved ones
    resumed.load_state_dict(saved)
    tail = _run(resumed, grads[stop_at:])
    np.testing.assert_array_equal(np.array(head + tail, dtype=float), np.array(uninterrupted, dtype=float))
    assert sum(bool(row[3]) for row in uninterrupted[25:]) >= 2, "the stream must contain clipped steps"


def test_zclip_bad_settings_and_state() -> None:
    with pytest.raises(ValueError, match="alpha"):
        ZClip(alpha=1.0)
    with pytest.raises(ValueError, match="warmup_steps"):
        ZClip(warmup_steps=0)
    with pytest.raises(ValueError, match="missing keys"):
        ZClip().load_state_dict({"alpha": 0.9})


# ---------------------------------------------------------------- clipping_stats (numpy half)


def test_clipping_stats_known_answer() -> None:
    stats = clipping_stats(np.array([0.5, 2.0, np.nan, 0.8, 4.0]), 1.0, window=2, saturation=0.5)
    np.testing.assert_array_equal(stats.clipped, [False, True, False, False, True])
    np.testing.assert_array_equal(stats.nonfinite, [False, False, True, False, False])
    np.testing.assert_allclose(stats.coef, [1.0, 1 / (2 + 1e-6), np.nan, 1.0, 1 / (4 + 1e-6)], rtol=1e-15)
    np.testing.assert_allclose(stats.post_norm, [0.5, 1.0, np.nan, 0.8, 1.0], rtol=1e-6)
    np.testing.assert_allclose(stats.clip_ratio, [0.0, 0.5, 1.0, 0.0, 0.5])
    np.testing.assert_allclose(stats.mean_coef, [1.0, (1 + 0.5) / 2, 0.5, 1.0, (1 + 0.25) / 2], rtol=1e-6)
    np.testing.assert_array_equal(stats.saturated, [False, True, True, False, True])
    assert stats.overall_clip_ratio == 0.5


def test_clipping_stats_invariants_on_random_norms() -> None:
    norms = np.random.default_rng(0).lognormal(0.0, 1.0, 5000)
    stats = clipping_stats(norms, 1.5, window=50)
    assert np.all((stats.coef > 0) & (stats.coef <= 1))
    assert np.all(stats.post_norm[stats.clipped] <= 1.5 + 1e-6)
    np.testing.assert_array_equal(stats.post_norm[~stats.clipped], norms[~stats.clipped])
    assert stats.overall_clip_ratio == pytest.approx(np.mean(norms > 1.5 - 1e-6))
    assert np.all((stats.clip_ratio >= 0) & (stats.clip_ratio <= 1))
    assert not stats.saturated[:49].any()


def test_clipping_stats_prefers_the_logged_coefficient() -> None:
    logged = np.array([1.0, 0.25, np.nan, 1.7])  # NaN: not logged; 1.7: an unclamped max_norm/norm
    stats = clipping_stats(np.array([0.5, 4.0, 3.0, 0.6]), 1.0, clip_coef=logged)
    np.testing.assert_allclose(stats.coef, [1.0, 0.25, 1 / (3 + 1e-6), 1.0], rtol=1e-15)
    np.testing.assert_array_equal(stats.clipped, [False, True, True, False])


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"max_norm": 0.0}, "max_norm"),
        ({"window": 0}, "window"),
        ({"saturation": 1.5}, "saturation"),
        ({"clip_coef": np.array([0.5])}, "shape"),
        ({"clip_coef": np.array([0.5, -0.1])}, "entry 1"),
    ],
)
def test_clipping_stats_rejects_bad_input(kwargs: dict[str, object], message: str) -> None:
    arguments: dict[str, object] = {"grad_norm": np.array([1.0, 2.0]), "max_norm": 1.0} | kwargs
    with pytest.raises(ValueError, match=message):
        clipping_stats(**arguments)  # type: ignore[arg-type]


def test_clipping_stats_on_a_real_llmc_run() -> None:
    log = REAL_LOGS / "mng_llmc_gpt2_124m" / "main.log"
    if not log.exists():
        pytest.skip(f"../shared absent: {log}")
    rows = re.findall(r"s:(\d+) trl:\S+ lr:\S+ norm:(\S+)", log.read_text())
    steps = np.array([int(step) for step, _ in rows])
    norms = np.array([float(norm) for _, norm in rows])
    stats = clipping_stats(norms, 1.0, window=100)  # llm.c clips at 1.0 (PROVENANCE)
    at = {int(step): index for index, step in enumerate(steps)}
    # PROVENANCE: step 9025 norm 2.02 and step 7435 norm 1.44 were clipped; step 9954 (0.95) was not
    assert stats.clipped[at[9025]] and stats.coef[at[9025]] == pytest.approx(1 / 2.02, rel=1e-5)
    assert stats.clipped[at[7435]] and not stats.clipped[at[9954]]
    assert stats.overall_clip_ratio == pytest.approx(np.mean(norms >= 1.0))
    # the first 100 steps (norm 15 -> ~2) clip every step: saturated; late training is not
    assert stats.saturated[at[99]] and not stats.saturated[at[19000] :].any()


def _clipping_stats_reference(
    norms: np.ndarray, max_norm: float, logged: np.ndarray | None, window: int
) -> dict[str, np.ndarray]:
    """Whole-series computation, written plainly (the shape of the code before it worked in blocks)."""
    nonfinite = ~np.isfinite(norms)
    coef = np.minimum(1.0, max_norm / (norms + 1e-6))
    if logged is not None:
        logged = np.minimum(logged, 1.0)
        coef = np.where(np.isfinite(logged), logged, coef)
    coef = np.where(nonfinite, np.nan, coef)
    finite = ~nonfinite
    clipped = finite & (coef < 1.0)
    ratio, mean = np.full(norms.size, np.nan), np.full(norms.size, np.nan)
    for i in range(norms.size):
        lo = max(0, i - window + 1)
        n_finite = finite[lo : i + 1].sum()
        if n_finite:
            ratio[i] = clipped[lo : i + 1].sum() / n_finite
            mean[i] = coef[lo : i + 1][finite[lo : i + 1]].sum() / n_finite
    post = np.where(finite, norms * coef, np.nan)
    return {
        "coef": coef,
        "clipped": clipped,
        "nonfinite": nonfinite,
        "clip_ratio": ratio,
        "mean_coef": mean,
        "post_norm": post,
    }


@pytest.mark.parametrize("block", [7, 64, 1 << 18])
def test_clipping_stats_in_blocks_matches_a_plain_loop(block: int, monkeypatch: pytest.MonkeyPatch) -> None:
    import stab_core.clipping as clipping

    monkeypatch.setattr(clipping, "_STATS_BLOCK", block)
    rng = np.random.default_rng(block)
    for trial in range(12):
        n = int(rng.integers(1, 700))
        norms = np.abs(rng.standard_normal(n)) * rng.choice([0.5, 2.0, 20.0])
        norms[rng.random(n) < 0.05] = np.nan
        norms[rng.random(n) < 0.02] = np.inf
        logged = None
        if trial % 2:
            logged = np.where(rng.random(n) < 0.3, np.nan, rng.random(n) * 1.5)
        window = int(rng.choice([1, 3, 10, 100]))
        got = clipping_stats(norms, 1.0, logged, window=window, saturation=0.5)
        want = _clipping_stats_reference(norms, 1.0, logged, window)
        for field in ("clipped", "nonfinite"):
            assert np.array_equal(getattr(got, field), want[field]), field
        for field in ("coef", "post_norm", "clip_ratio"):
            np.testing.assert_array_equal(getattr(got, field), want[field], err_msg=field)
        # running-sum differences cancel: absolute error ~ eps x the prefix sum (coefficients are in [0, 1])
        np.testing.assert_allclose(got.mean_coef, want["mean_coef"], rtol=0, atol=1e-12)
        full = np.arange(n) >= window - 1
        assert np.array_equal(got.saturated, full & (np.nan_to_num(want["clip_ratio"]) >= 0.5))
