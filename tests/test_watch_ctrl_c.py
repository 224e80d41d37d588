"""A watcher stopped by Ctrl-C while DuckDB runs a query stops cleanly (CI failure of 2026-12-06: DuckDB
turned the SIGINT into ``RuntimeError('Query interrupted')`` and ``stabscope watch`` exited 2)."""

from __future__ import annotations

from pathlib import Path

import pytest

from ingest.live.watch import ctrl_c_in_query, run_passes
from ingest.store import Store


def _passes(store: Store, error: BaseException) -> tuple[int, list[str]]:
    finished: list[str] = []

    def one_pass(status: str) -> str | None:
        raise error

    passes = run_passes(
        store,
        "live",
        one_pass,
        lambda: finished.append("finished"),
        interval_s=0.01,
        once=False,
        on_alert=None,
        log=lambda _line: None,
        stop=None,
    )
    return passes, finished


def test_a_query_interrupted_by_ctrl_c_ends_the_watch_and_marks_the_run(tmp_path: Path) -> None:
    passes, finished = _passes(Store(tmp_path / "store"), RuntimeError("Query interrupted"))
    assert passes == 0 and finished == ["finished"]


def test_any_other_runtime_error_is_still_an_error(tmp_path: Path) -> None:
    with pytest.raises(RuntimeError, match="disk full"):
        _passes(Store(tmp_path / "store"), RuntimeError("disk full"))


def test_only_duckdbs_interrupt_message_counts_as_ctrl_c() -> None:
    assert ctrl_c_in_query(RuntimeError("Query interrupted"))
    assert not ctrl_c_in_query(RuntimeError("Query interrupted by a bug"))
    assert not ctrl_c_in_query(ValueError("Query interrupted"))
