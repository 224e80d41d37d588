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
