"""Issue #32 (docs/diagnosis.md, "Causes"): a cause is said as "consistent with" only
where the log can show its signature. Each rule on a small synthetic input of its shape."""

from __future__ import annotations

import numpy as np

from stab_core.analysis import analyze_run
from stab_core.cause_candidates import BAD_BATCH_MAX_STEPS_PER_SAMPLE, bad_batch_shape, steps_per_sample
from stab_core.runview import RunView, Series
from stab_core.spikes import SpikeEvent
from tests.test_batch8_shapes import MEMORISING_SPIKES, memorising_run


def _spike(**over: object) -> SpikeEvent:
    fields: dict[str, object] = dict(
        metric="loss",
        start=9400,
        peak=9400,
        end=9500,
        peak_value=6.0,
        baseline=1.0,
        ratio=6.0,
        z=20.0,
        duration=200,
        recovered=True,
        recovery_step=9600,
        diverged=False,
        nonfinite=False,
        steps_lost=200,
        n_samples=2,
    )
    fields.update(over)
    return SpikeEvent(**fields)  # type: ignore[arg-type]


def test_a_one_sample_jump_in_a_sparse_log_has_no_bad_batch_shape() -> None:
    """An HF Trainer loss logged every 100 steps (each value the mean of 100 batches) jumps 6x for one value
    and is back two values later: one batch is diluted 100-fold in such a mean, so the jump is a burst over
    the span as much as one batch; "consistent with a bad batch" would claim what the log cannot show."""
    assert steps_per_sample(_spike()) == 100.0
    assert bad_batch_shape(_spike()) is None
    # the same jump where the log prints every 10 steps keeps its bad batch's shape
    dense = _spike(end=9410, recovery_step=9420, duration=20)
    assert steps_per_sample(dense) == 10.0 <= BAD_BATCH_MAX_STEPS_PER_SAMPLE
    found = bad_batch_shape(dense)
    assert found is not None and found.evidence["steps_per_sample"] == 10.0
    # a console every 10 iterations across an epoch's end (47 iterations: a gap of 17) is still dense
    assert bad_batch_shape(_spike(start=416, peak=416, end=416, recovery_step=433, n_samples=1)) is not None


def _cause_text(view: RunView, step: int) -> str:
    for item in analyze_run(view).spike_dicts():
        if item["start"] <= step <= item["until"]:
            return str(next(c for c in item["claims"] if c["kind"] == "cause")["text"])
    raise AssertionError(f"no incident covers step {step}")


def test_a_sparse_logs_one_value_jump_is_said_as_cause_unknown() -> None:
    """The memorising run's shape with its steps stretched x10 (one value per 100 steps): the same jumps,
    but no longer one batch's shape; the cause is said as unknown, with what to log."""
    steps, loss = memorising_run(MEMORISING_SPIKES)
    dense = RunView(name="dense", series={"loss": Series(steps, loss)}, meta={})
    sparse = RunView(name="sparse", series={"loss": Series(steps * 10, loss)}, meta={})
    assert _cause_text(dense, 660).startswith("Cause not confirmed: consistent with a bad batch")
    text = _cause_text(sparse, 6600)
    assert text.startswith("Cause unknown"), text
    assert np.array_equal(sparse.series["loss"].values, dense.series["loss"].values)
