"""Restarts in shards shown as rollbacks (issue #24): a plain ``ShardWriter`` job that resumes from a
checkpoint opens a new segment whose steps go back; compaction keeps the later rows and records one
``rollback`` event (``replayed_from``/``replayed_to``, as the log importer does), within one pass and
across two, but none for steps that only go forward or when the writer logged its own ``rollback``.
The Spark engine's events are compared with these in tests/test_spark_engine.py."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pyarrow as pa

from ingest.store import Store
from ingest.store.rewinds import SegmentSteps, rewind_events, step_extents
from ingest.store.shards import ShardWriter
from stab_core.runview import RunEvent

RUN = "job"


def write_job(
    shards: Path, steps: range, *, ranks: int = 2, loss_offset: float = 0.0, rollback_event: bool = False
) -> None:
    """One job (a new segment per rank) logging ``loss`` = step + ``loss_offset`` on every rank, and a
    run-level ``lr``; with ``rollback_event`` rank 0 logs a ``rollback`` at the first step (as the
    monitor does when a job resumes)."""
    for rank in range(ranks):
        with ShardWriter(shards, rank) as writer:
            if rollback_event and rank == 0:
                writer.event(steps.start, "rollback", "resumed from checkpoint", checkpoint_step=steps.start - 1)
            at = np.arange(steps.start, steps.stop)
            writer.write_columns(at, {"loss": at + loss_offset})
            if rank == 0:
                writer.write_columns(at, {"lr": np.full(at.size, 1e-3)}, rank=-1)
    time.sleep(0.002)  # segment names carry the time: a later job's segments sort after this one's


def rollbacks(store: Store) -> list[RunEvent]:
    return [e for e in store.events(RUN) if e.kind == "rollback"]


def loss_of_rank(store: Store, rank: int) -> dict[int, float]:
    rows = store.read_long(RUN).to_pandas()
    rows = rows[(rows.metric == "loss") & (rows["rank"] == rank)]
    assert not rows.duplicated("step").any()
    return dict(zip(rows.step.tolist(), rows.value.tolist(), strict=True))


def test_a_segment_rewinding_from_100_to_60_is_one_rollback_and_the_later_rows_win(tmp_path: Path) -> None:
    shards = tmp_path / "shards"
    write_job(shards, range(1, 101))
    write_job(shards, range(60, 151), loss_offset=1000.0)
    store = Store(tmp_path / "store")
    report = store.compact(RUN, shards)
    assert rollbacks(store) == [
        RunEvent(60, "rollback", "restart replayed steps 60-100", {"replayed_from": 60, "replayed_to": 100})
    ]
    assert report.events == 1
    loss = loss_of_rank(store, 1)
    assert sorted(loss) == list(range(1, 151))
    assert loss[59] == 59.0 and loss[60] == 1060.0 and loss[100] == 1100.0 and loss[150] == 1150.0
    store.compact(RUN, shards)  # nothing new: no second event
    assert len(rollbacks(store)) == 1


def test_a_rewind_across_two_compactions_is_found_in_the_second_generation(tmp_path: Path) -> None:
    shards = tmp_path / "shards"
    store = Store(tmp_path / "store")
    write_job(shards, range(0, 200))
    store.compact(RUN, shards)
    assert rollbacks(store) == []
    write_job(shards, range(150, 300), loss_offset=1000.0)
    store.compact(RUN, shards)
    assert store.run_info(RUN).gen == 2
    assert rollbacks(store) == [
        RunEvent(150, "rollback", "restart replayed steps 150-199", {"replayed_from": 150, "replayed_to": 199})
    ]
    loss = loss_of_rank(store, 0)
    assert loss[149] == 149.0 and loss[150] == 1150.0 and loss[299] == 1299.0 and len(loss) == 300


def test_a_restart_segment_finished_in_a_later_compaction_is_one_rewind(tmp_path: Path) -> None:
    """The restarted job's segment is read in two passes (its writer still logging): its rest, whose
    steps are still below what the first job stored, continues that segment and is no new restart."""
    shards = tmp_path / "shards"
    store = Store(tmp_path / "store")
    write_job(shards, range(0, 100), ranks=1)
    with ShardWriter(shards, 0) as writer:
        writer.write_columns(np.arange(60, 80), {"loss": np.arange(1060, 1080.0)})
        writer.flush()
        store.compact(RUN, shards)
        writer.write_columns(np.arange(80, 150), {"loss": np.arange(1080, 1150.0)})
    store.compact(RUN, shards)
    assert store.run_info(RUN).gen == 2
    assert [(e.step, e.detail) for e in rollbacks(store)] == [(60, {"replayed_from": 60, "replayed_to": 99})]
    loss = loss_of_rank(store, 0)
    assert sorted(loss) == list(range(150)) and loss[59] == 59.0 and loss[99] == 1099.0


def test_monotonic_segments_give_no_rollback(tmp_path: Path) -> None:
    shards = tmp_path / "shards"
    write_job(shards, range(0, 100))
    write_job(shards, range(100, 200))  # a restart that lost nothing: steps go on
    store = Store(tmp_path / "store")
    store.compact(RUN, shards)
    assert rollbacks(store) == []


def test_a_rollback_the_writer_logged_is_not_doubled(tmp_path: Path) -> None:
    shards = tmp_path / "shards"
    write_job(shards, range(1, 101))
    write_job(shards, range(60, 151), loss_offset=1000.0, rollback_event=True)
    store = Store(tmp_path / "store")
    store.compact(RUN, shards)
    assert [(e.step, e.label, e.detail) for e in rollbacks(store)] == [
        (60, "resumed from checkpoint", {"checkpoint_step": 59})
    ]


def test_rewind_events_merge_ranks_and_keep_separate_restarts_apart() -> None:
    job = [SegmentSteps("rank-0", False, {0: (0, 99), -1: (0, 99)}), SegmentSteps("rank-1", False, {1: (0, 99)})]
    first_restart = [SegmentSteps("rank-0", False, {0: (60, 150)}), SegmentSteps("rank-1", False, {1: (60, 150)})]
    second_restart = [SegmentSteps("rank-0", False, {0: (120, 200)}), SegmentSteps("rank-1", False, {1: (125, 200)})]
    events = rewind_events([*job, *first_restart, *second_restart], {})
    assert [(e["step"], e["label"], e["detail"]) for e in events] == [
        (60, "restart replayed steps 60-99", {"replayed_from": 60, "replayed_to": 99}),
        (120, "restart replayed steps 120-150", {"replayed_from": 120, "replayed_to": 150}),
    ]
    # Against what an earlier pass stored; a continued segment is never compared.
    assert rewind_events([SegmentSteps("rank-0", True, {0: (10, 20)})], {0: 99}) == []
    assert [e["step"] for e in rewind_events([SegmentSteps("rank-0", False, {0: (10, 20)})], {0: 99})] == [10]
    # The monitor's own rollback at the first replayed step: nothing added.
    carried = [{"step": 60, "kind": "rollback", "label": "", "detail": {}}]
    assert rewind_events([*job, *first_restart], {}, carried) == []
    # Run-level rows (rank -1) from a second writer at the same steps: no rewind.
    assert rewind_events([*job, SegmentSteps("rank-1", False, {-1: (0, 99)})], {}) == []


def test_run_level_rows_from_two_writers_at_the_same_steps_are_no_rollback(tmp_path: Path) -> None:
    shards = tmp_path / "shards"
    for rank, metric in ((0, "loss"), (1, "lr")):
        with ShardWriter(shards, rank) as writer:
            writer.write_columns(np.arange(100), {metric: np.ones(100)}, rank=-1)
    store = Store(tmp_path / "store")
    store.compact(RUN, shards)
    assert rollbacks(store) == [] and store.run_info(RUN).n_steps == 100


def test_step_extents_take_each_ranks_first_step_in_arrival_order_and_its_largest() -> None:
    tables = [
        pa.table({"rank": pa.array([0, 0, 1], pa.int32()), "step": [5, 9, 3]}),
        pa.table({"rank": pa.array([0, 1], pa.int32()), "step": [7, 2]}),
    ]
    assert step_extents(tables) == {0: (5, 9), 1: (3, 3)}
    assert step_extents([]) == {}


def test_replayed_ranges_merge_into_one_per_restart() -> None:
    """One restart seen through several metrics gives overlapping ranges: they merge (sorted by first
    step); ranges that only touch at a step merge too, disjoint ones stay apart."""
    from stab_core.replay_spans import merge_spans

    assert merge_spans([(50, 90), (10, 30), (20, 40), (90, 120), (200, 210)]) == [(10, 40), (50, 120), (200, 210)]
    assert merge_spans([(5, 9), (6, 7)]) == [(5, 9)]  # one inside another
    assert merge_spans([]) == []
