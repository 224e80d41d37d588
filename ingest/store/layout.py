"""Every file name of a run, in one place.

::

    <store>/runs/run=<name>/<kind>/g<gen:06d>.parquet   the files of generation <gen>, one per kind
    <store>/runs/run=<name>/derived/a<gen:06d>.parquet  analyses materialised for generation <gen>
    <store>/runs/run=<name>/staging/<prefix>-<n:05d>.parquet  batches read, not yet merged
    <store>/runs/run=<name>/rankb/u<gen:06d>.arrow      a one-pass merge's rank buckets, before sorting
    <store>/locks/run=<name>.lock                       the run's writer lock (``run_lock``)
    <store>/locks/demo-seeding.lock                     the store's demo seeding lock
    <store>/watch/run=<name>/                           the copy of a watched log (``ingest.live.log_spool``)

A file is written under a temporary name (``<final name>.<8 hex>.tmp``) and renamed once complete;
``final_path`` undoes ``tmp_target``.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Final

from ingest.store.run_info import RunInfo
from ingest.store.types import validate_run_name

LONG: Final = "long"
"""Every row: (rank, step, metric, value, wall_time) in blocks of one (metric, rank)."""
RUN_LEVEL: Final = "runlevel"
"""The rank -1 rows of the long file (what the overview reads)."""
ROLLUP: Final = "rollup"
"""Cross-rank count/mean/min/max/std/argmin/argmax per step."""
RANK_BUCKETS: Final = "rankb"
"""Per-rank step buckets for the rank x step heatmap (the folder keeps its name: stores on disk have it)."""
TAIL: Final = "tail"
"""A full generation's last rows of each (metric, rank >= 0), which a later delta part reads back."""
DERIVED: Final = "derived"
STAGING: Final = "staging"

GENERATION_KINDS: Final = (LONG, RUN_LEVEL, ROLLUP, RANK_BUCKETS, TAIL)
"""The files a generation may have, one of each kind."""


def run_folder(root: Path, name: str) -> Path:
    """The folder of run ``name`` (validated) in the store at ``root``."""
    return root / "runs" / f"run={validate_run_name(name)}"


SPOOL_FOLDER: Final = "watch"
"""The folder of the watched logs' copies (``ingest.live.log_spool``), beside ``runs``."""


def spool_folder(root: Path, name: str) -> Path:
    """Where ``stabscope watch`` keeps the copy of the log it follows into run ``name`` (validated)."""
    return root / SPOOL_FOLDER / f"run={validate_run_name(name)}"


LOCKS: Final = "locks"
"""The folder of the writer locks, beside ``runs`` (a run's lock outlives its folder while it is deleted)."""


def run_lock_file(root: Path, name: str) -> Path:
    """The writer lock file of run ``name`` (validated) in the store at ``root``."""
    return root / LOCKS / f"run={validate_run_name(name)}.lock"


def demo_seeding_lock_file(root: Path) -> Path:
    """The lock held while the demo runs are written into the store at ``root`` (runs' locks are named
    ``run=<name>.lock``, so this one is no run's)."""
    return root / LOCKS / "demo-seeding.lock"


def generation_name(gen: int) -> str:
    return f"g{gen:06d}.parquet"


def analysis_name(gen: int) -> str:
    return f"a{gen:06d}.parquet"


def tmp_target(path: Path) -> Path:
    """A temporary name next to ``path`` (its folder created) to write to before renaming it to ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    return path.with_name(path.name + f".{uuid.uuid4().hex[:8]}.tmp")


def final_path(tmp: Path) -> Path:
    """The name a ``tmp_target`` file is renamed to once complete."""
    return tmp.with_name(tmp.name.rsplit(".", 2)[0])


def same_generation(path: str | Path, kind: str) -> Path:
    """The ``kind`` file of the generation of file ``path`` (which may not exist)."""
    path = Path(path)
    return path.parent.parent / kind / path.name


class RunLayout:
    """The files of one run: ``folder`` is ``run_folder(root, name)``. ``fetch(path)``, given for a store
    on object storage (``remote.RemoteRuns.fetch``), brings a committed file the local cache lacks and
    says whether there was one; ``ranged(path)`` whether such a file can be read where it is, by ranges
    (``remote.RemoteRuns.ranged``), instead."""

    def __init__(
        self,
        folder: Path,
        fetch: Callable[[Path], bool] | None = None,
        ranged: Callable[[Path], bool] | None = None,
    ) -> None:
        self.folder = folder
        self.fetch = fetch
        self.ranged = ranged

    def file(self, kind: str, gen: int) -> Path:
        """Generation ``gen``'s file of ``kind`` (the analyses of ``gen`` for ``DERIVED``)."""
        return self.folder / kind / (analysis_name(gen) if kind == DERIVED else generation_name(gen))

    def existing(self, kind: str, gen: int) -> list[str]:
        """``[file(kind, gen)]`` when it exists, else ``[]``."""
        path = self.file(kind, gen)
        found = path.exists() or (self.fetch is not None and self.fetch(path))
        return [str(path)] if found else []

    def part_files(self, info: RunInfo, kind: str) -> list[str]:
        """The ``kind`` files of the current generation: its base's, then each delta part's, in order."""
        return [f for g in part_generations(info) for f in self.existing(kind, g)]

    def part_sources(self, info: RunInfo, kind: str) -> list[str]:
        """``part_files``, for a read of a few row ranges: a file the local cache of an object store lacks
        is named without being fetched when it can be read by ranges where it is."""
        ranged = self.ranged
        if ranged is None:
            return self.part_files(info, kind)
        paths = [self.file(kind, g) for g in part_generations(info)]
        return [str(p) for p in paths if p.exists() or ranged(p) or (self.fetch is not None and self.fetch(p))]

    def staging_file(self, prefix: str, index: int) -> Path:
        return self.folder / STAGING / f"{prefix}-{index:05d}.parquet"

    def unsorted_rank_buckets(self, gen: int) -> Path:
        return self.folder / RANK_BUCKETS / f"u{gen:06d}.arrow"

    def garbage(self, info: RunInfo, staged: set[str]) -> Iterator[Path]:
        """Files no committed state refers to: not of the current base or its delta parts, not the
        current analyses, not staged."""
        keep = {generation_name(g) for g in part_generations(info)} | {analysis_name(info.analysis_gen)}
        for kind in (*GENERATION_KINDS, DERIVED, STAGING):
            folder = self.folder / kind
            if folder.is_dir():
                yield from (p for p in folder.iterdir() if p.name not in keep and str(p) not in staged)


def part_generations(info: RunInfo) -> range:
    """The generations whose files make up the current one: its base, then each delta part, in order."""
    if info.gen == 0:
        return range(0)
    return range(min(info.base_gen, info.gen), info.gen + 1)
