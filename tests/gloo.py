"""Run a function on N real CPU processes joined by a gloo process group, for the distributed tests.

Why a harness: a rank that dies in C++ (gloo, OpenMP) prints its reason on file descriptor 2 and
exits by signal; torch's spawn then reports only "terminated with signal SIGABRT", and a CI log tail
loses the child's text. Here each rank writes fd 2 to a file and the failure message carries its
tail. Each rank also pins torch to one thread: on a many-core CI host, two processes with a thread
per core (plus gloo's own) can exhaust the container's thread limit, which aborts in C++. A rank that
finished its work exits without interpreter teardown (see ``_rank_entry``).
"""

from __future__ import annotations

import faulthandler
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch.multiprocessing.spawn import ProcessExitedException, ProcessRaisedException, spawn

from ingest.training.spawn import main_module_hidden

STDERR_TAIL_LINES = 25


def _rank_entry(rank: int, world: int, work_dir: str, worker: Callable[..., None], args: tuple[Any, ...]) -> None:
    log = open(Path(work_dir) / f"rank{rank}.stderr", "w", buffering=1)  # noqa: SIM115  # lives as long as the process
    os.dup2(log.fileno(), 2)  # C++ abort messages go to fd 2, not to sys.stderr
    sys.stderr = log
    faulthandler.enable(file=log)
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{work_dir}/rendezvous", rank=rank, world_size=world)
    try:
        worker(rank, *args)
        dist.barrier()  # nobody closes its sockets while a peer still talks to it
    finally:
        dist.destroy_process_group()
    # Done and saved: leave without interpreter teardown. After FSDP2 (DTensor, a device mesh), torch's
    # objects are destroyed in arbitrary order at exit and about 1 run in 20 aborts there with
    # "terminate called without an active exception" from a thread with no Python frame; that is
    # torch's shutdown, not the code under test. Errors above still propagate to spawn as before.
    sys.stdout.flush()
    log.flush()
    os._exit(0)


def run_on_gloo(worker: Callable[..., None], world: int, work_dir: Path, *args: Any) -> None:
    """Call ``worker(rank, *args)`` on ``world`` spawned processes inside an initialised gloo group.

    ``worker`` must be a module-level function (it is pickled). Raises AssertionError naming the rank
    that failed, with the tail of what each rank wrote to stderr.
    """
    work_dir.mkdir(parents=True, exist_ok=True)
    # Streamlit's AppTest.from_function leaves its temporary script as __main__, which a spawned child
    # would re-run first.
    try:
        with main_module_hidden():
            spawn(_rank_entry, args=(world, str(work_dir), worker, args), nprocs=world, join=True)  # type: ignore[no-untyped-call]
    except (ProcessExitedException, ProcessRaisedException) as error:
        raise AssertionError(f"{error}\n{_stderr_tails(work_dir, world)}") from None


def _stderr_tails(work_dir: Path, world: int) -> str:
    parts = []
    for rank in range(world):
        path = work_dir / f"rank{rank}.stderr"
        lines = path.read_text(errors="replace").splitlines() if path.exists() else ["(no stderr file)"]
        parts.append(f"--- rank {rank} stderr (last {STDERR_TAIL_LINES} lines) ---")
        parts.extend(lines[-STDERR_TAIL_LINES:])
    return "\n".join(parts)
