"""The distributed tests' harness must say why a rank died, even when it dies in C++."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.gloo import run_on_gloo

pytestmark = pytest.mark.slow  # spawns two torch processes


def _abort_on_rank_one(rank: int) -> None:
    if rank == 1:
        os.write(2, b"terminate called after throwing an instance of 'gloo::IoException'\n")
        os.abort()


def test_a_rank_aborting_in_cpp_is_reported_with_its_stderr(tmp_path: Path) -> None:
    with pytest.raises(AssertionError) as failure:
        run_on_gloo(_abort_on_rank_one, 2, tmp_path)
    message = str(failure.value)
    assert "process 1 terminated with signal SIGABRT" in message
    assert "--- rank 1 stderr" in message
    assert "gloo::IoException" in message  # the C++ reason, written to fd 2, reaches the failure
    assert "_abort_on_rank_one" in message  # faulthandler's Python stack of the dying rank


def _write_rank(rank: int, out: str) -> None:
    Path(out, f"rank{rank}.done").write_text(str(rank))


def test_ranks_start_after_an_apptest_from_function_ran_in_this_process(tmp_path: Path) -> None:
    """AppTest.from_function leaves its temporary script as __main__; spawned ranks re-run __main__
    first and failed on it (NameError: __args) when a page test had run earlier in the session."""
    from streamlit.testing.v1 import AppTest

    def script() -> None:
        import streamlit as st

        st.write("hi")

    assert AppTest.from_function(script).run().markdown[0].value == "hi"
    run_on_gloo(_write_rank, 2, tmp_path / "gloo", str(tmp_path))
    assert sorted(p.read_text() for p in tmp_path.glob("rank*.done")) == ["0", "1"]
