"""CLI output read by a pipe that closes early (``stabscope spikes RUN | head``): every subcommand that
prints ends quietly, with status 0 and nothing on stderr, instead of a BrokenPipeError traceback."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from ingest.store import Store
from tests.conftest import GRAD_SPIKE_STEP, REPO_ROOT, SMALL_RUN

COMMANDS = [
    ("runs",),
    ("runs", "--json"),
    ("show", SMALL_RUN),
    ("spikes", SMALL_RUN),
    ("spikes", SMALL_RUN, "--json"),
    ("diagnose", SMALL_RUN, "--step", str(GRAD_SPIKE_STEP)),
    ("meta", SMALL_RUN),
    ("check", "--json"),
    ("export", SMALL_RUN, "-o", "-"),  # without --json a clean store's one line goes to stderr
]


def run_into_closed_pipe(store: Path, *args: str) -> subprocess.CompletedProcess[bytes]:
    """``stabscope ARGS`` writing to a pipe whose reader has already gone, as after ``| head -0``:
    the child's first write to stdout meets a closed pipe (EPIPE)."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        return subprocess.run(
            [sys.executable, "-m", "ingest", *args, "--store", str(store)],
            stdout=write_end,
            stderr=subprocess.PIPE,
            env={**os.environ, "PYTHONPATH": str(REPO_ROOT), "STABSCOPE_NO_DEMO": "1"},
            cwd=REPO_ROOT,
            timeout=120,
            check=False,
        )
    finally:
        os.close(write_end)


@pytest.mark.parametrize("args", COMMANDS, ids=lambda a: " ".join(a))
def test_output_closed_early_exits_quietly(module_store: Store, args: tuple[str, ...]) -> None:
    proc = run_into_closed_pipe(module_store.root, *args)
    assert proc.stderr.decode() == ""
    assert proc.returncode == 0


def test_the_same_commands_print_when_read(module_store: Store) -> None:
    """The control: with a reader, each of those commands has output to lose, so the test above
    exercises a real write to the closed pipe."""
    for args in COMMANDS:
        proc = subprocess.run(
            [sys.executable, "-m", "ingest", *args, "--store", str(module_store.root)],
            capture_output=True,
            env={**os.environ, "PYTHONPATH": str(REPO_ROOT), "STABSCOPE_NO_DEMO": "1"},
            cwd=REPO_ROOT,
            timeout=120,
            check=False,
        )
        assert proc.returncode == 0, (args, proc.stderr)
        assert proc.stdout.strip(), args
