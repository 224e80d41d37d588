"""Running a function on several local training processes (``torch.multiprocessing.spawn``), as the demo
trainer and the overhead benchmark (``bench.training``) do, and the distributed tests' harness needs
(:func:`main_module_hidden`).

torch is imported inside :func:`spawn_ranks`, so ``stabscope`` commands that import the demo trainer's
CLI without training pay nothing for it.
"""

from __future__ import annotations

import contextlib
import os
import sys
import types
from collections.abc import Callable, Iterator
from typing import Any

from ingest.errors import StabScopeError


@contextlib.contextmanager
def single_threaded_children() -> Iterator[None]:
    """Spawned ranks inherit OMP/MKL settings at start-up: one thread each, or 2 ranks on 2 cores
    oversubscribe and every step waits on the slowest thread."""
    keys = ("OMP_NUM_THREADS", "MKL_NUM_THREADS")
    saved = {k: os.environ.get(k) for k in keys}
    os.environ.update({k: "1" for k in keys})
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


@contextlib.contextmanager
def main_module_hidden() -> Iterator[None]:
    """Spawned processes first re-run the parent's ``__main__`` file: a notebook's, a script's without
    an ``if __name__ == "__main__"`` guard, Streamlit's ``AppTest`` temporary script. The ranks need
    nothing from it, so while this is open the children see an empty ``__main__``."""
    main = sys.modules["__main__"]
    sys.modules["__main__"] = types.ModuleType("__main__")
    try:
        yield
    finally:
        sys.modules["__main__"] = main


def exit_rank() -> None:
    """Leave a spawned rank whose work is saved without interpreter teardown. Now and then torch's
    objects are destroyed in an order that aborts ("terminate called without an active exception",
    SIGABRT) after all the work is saved, and spawn would report the run as failed. An error before
    this call still propagates to spawn."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def spawn_ranks(entry: Callable[..., None], args: tuple[Any, ...], ranks: int) -> None:
    """Run ``entry(rank, *args)`` on ``ranks`` spawned processes (one thread each, the caller's
    ``__main__`` hidden); raises StabScopeError with the failing rank's error. ``entry`` must be a
    module-level function (it is pickled), and spawn passes ``args`` positionally."""
    from torch.multiprocessing.spawn import ProcessExitedException, ProcessRaisedException, spawn

    with single_threaded_children(), main_module_hidden():
        try:
            spawn(entry, args=args, nprocs=ranks, join=True)  # type: ignore[no-untyped-call]
        except ProcessRaisedException as exc:
            last = str(exc).strip().splitlines()[-1] if str(exc).strip() else repr(exc)
            raise StabScopeError(f"a training rank failed: {last}") from exc
        except ProcessExitedException as exc:
            raise StabScopeError(f"a training rank exited abnormally: {exc}") from exc
