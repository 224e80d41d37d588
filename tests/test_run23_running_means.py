"""A loss printed as the running mean of the epoch so far (issue #32; docs/diagnosis.md, "Spike detector"): recognised
from the values alone and judged in per-batch terms (stab_core.running_means)."""

from __future__ import annotations

import numpy as np

from stab_core.analysis import analyze_run
from stab_core.running_means import epoch_starts, per_batch_series, per_batch_view
from stab_core.runview import RunView, Series

BATCHES = 400  # batches per epoch
EVERY = 10  # a row every 10 batches, the first at the epoch's batch 0


def _running_means(batches: np.ndarray) -> Series:
    """Rows ``Iter:[i]`` for i = 0, 10, ... of each epoch: the mean of the epoch's batches 0..i."""
    steps, values = [], []
    for epoch in range(batches.size // BATCHES):
        chunk = batches[epoch * BATCHES : (epoch + 1) * BATCHES]
        means = np.cumsum(chunk) / np.arange(1, BATCHES + 1)
        for i in range(0, BATCHES, EVERY):
            steps.append(epoch * BATCHES + i)
            values.append(float(means[i]))
    return Series(np.asarray(steps, dtype=np.int64), np.asarray(values))


def _batches(epochs: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    n = epochs * BATCHES
    trend = 1.6 - 0.3 * np.arange(n) / n  # a slow healthy fall
    return trend * (1 + 0.2 * rng.standard_normal(n))  # one batch of a segmentation loss varies this much


def test_healthy_running_means_over_several_epochs_get_no_incident() -> None:
    for seed in (1, 2, 3):
        loss = _running_means(_batches(12, seed))
        analysis = analyze_run(RunView(name="healthy", series={"loss": loss}))
        assert [item.spike.peak for item in analysis.spikes if item.spike.metric == "loss"] == [], seed


def test_a_per_batch_spike_inside_an_epoch_is_found_with_its_per_batch_ratio() -> None:
    batches = _batches(12, 4)
    at = 7 * BATCHES + 250  # epoch 7, batches 250..259 (one logged block) at 3x
    batches[at : at + EVERY] *= 3.0
    loss = _running_means(batches)
    spikes = [item.spike for item in analyze_run(RunView(name="spiky", series={"loss": loss})).spikes]
    found = [s for s in spikes if s.metric == "loss" and abs(s.peak - (at + EVERY - 1)) <= EVERY + 1]
    assert found, spikes
    # the running mean rose only ~1.07x at that row (diluted by 250 batches); the block is ~3x
    assert 2.3 <= found[0].ratio <= 3.7, found[0].ratio
    assert len([s for s in spikes if s.metric == "loss"]) == 1, spikes


def test_recognition_says_nothing_of_per_batch_noise_or_a_moving_average() -> None:
    rng = np.random.default_rng(5)
    batches = _batches(12, 6)
    rows = np.arange(0, batches.size, EVERY)
    per_batch = Series(rows.astype(np.int64), batches[rows])
    assert epoch_starts(per_batch.values) is None
    ema = np.empty(batches.size)
    ema[0] = batches[0]
    for i in range(1, batches.size):
        ema[i] = 0.98 * ema[i - 1] + 0.02 * batches[i]
    assert epoch_starts(ema[rows]) is None
    # a per-batch loss that drops at each epoch start (memorisation), noise constant within the epoch
    drops = batches[rows] * (1 - 0.1 * ((rows % BATCHES) < EVERY)) + 0.0 * rng.standard_normal(rows.size)
    assert epoch_starts(drops) is None


def test_recognised_series_restarts_at_each_epoch_and_reads_back_per_batch_blocks() -> None:
    batches = _batches(6, 7)
    loss = _running_means(batches)
    starts = epoch_starts(loss.values)
    assert starts is not None
    assert list(loss.steps[starts]) == [e * BATCHES for e in range(6)]
    blocks = per_batch_series(loss)
    assert blocks is not None
    assert not np.isin(blocks.steps, np.arange(6) * BATCHES).any()  # the epochs' first rows left out
    # the block at rows 10 -> 20 of epoch 2 is the mean of batches 11..20 of that epoch
    i = int(np.searchsorted(blocks.steps, 2 * BATCHES + 20))
    assert np.isclose(blocks.values[i], batches[2 * BATCHES + 11 : 2 * BATCHES + 21].mean())
    view = per_batch_view(RunView(name="r", series={"loss": loss}))
    assert view.meta.get("loss_running_mean") is True


def test_a_rounded_running_mean_is_judged_on_blocks_rounding_cannot_move() -> None:
    # a mean printed to three digits late in a long epoch: the single-row block (k m_k - (k-1) m_{k-1})
    # would multiply the rounding by k / 10 (up to 0.04 on a level of 0.15), which reads as spikes
    for seed in (1, 2, 3):
        batches = 0.1 * _batches(12, seed)
        loss = _running_means(batches)
        rounded = Series(loss.steps, np.round(loss.values, 3))
        blocks = per_batch_series(rounded)
        assert blocks is not None and blocks.values.size < loss.values.size // 2
        analysis = analyze_run(RunView(name="rounded", series={"loss": rounded}))
        assert [item.spike.peak for item in analysis.spikes if item.spike.metric == "loss"] == [], seed
