"""The experiment's corpus: the Python source files of the running interpreter's standard library.

Every machine that runs StabScope has them (tens of MB of real code), so the experiment needs no
download. Files are listed sorted, split into training and validation by a hash of their path
relative to the library root (the same split on every machine with the same Python), and each split
is one byte array (files joined by a NUL byte). The arrays are cached as ``.npy`` files so parallel
runs map the same pages instead of reading the library again.

Batches are a function of (seed, step) alone: a seed sees the same data in the same order in every
arm, which is what makes the arms' runs of one seed a paired comparison.
"""

from __future__ import annotations

import os
import sysconfig
import zlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt

from ingest.errors import StabScopeError

VALIDATION_SHARE = 10
"""One file in this many (by path hash) is held out for validation."""
TEMPLATE = (
    b"# Licensed to the Python Software Foundation (PSF) under one or more contributor license\n"
    b"# agreements. See the NOTICE file distributed with this work for additional information.\n"
    b"# THIS SOFTWARE IS PROVIDED BY THE AUTHOR ``AS IS'' AND ANY EXPRESS OR IMPLIED WARRANTIES.\n"
)
"""The boilerplate of mechanism B's outlier batches: a licence header, repeated to fill every row."""


def stdlib_root() -> Path:
    return Path(sysconfig.get_paths()["stdlib"])


def source_files(root: Path) -> list[Path]:
    """The ``*.py`` files under ``root``, sorted by relative path (site-packages left out: it differs
    between machines)."""
    found = [p for p in root.rglob("*.py") if "site-packages" not in p.parts and "dist-packages" not in p.parts]
    return sorted(found, key=lambda p: p.relative_to(root).as_posix())


def is_validation(relative: str) -> bool:
    return zlib.crc32(relative.encode("utf-8")) % VALIDATION_SHARE == 0


@dataclass(frozen=True)
class Corpus:
    """Training and validation bytes (uint8 arrays), and how many files each holds.

    ``train_phase2_start``: the offset in ``train`` where the test-suite files begin (files under a
    ``test``/``tests`` folder are put last): mechanism C's data switch moves from library code to
    test code there.
    """

    train: npt.NDArray[np.uint8]
    validation: npt.NDArray[np.uint8]
    train_files: int
    validation_files: int
    train_phase2_start: int


def _is_test(relative: str) -> bool:
    parts = relative.split("/")
    return any(p in ("test", "tests") for p in parts[:-1])


def build_corpus(root: Path) -> Corpus:
    files = source_files(root)
    if not files:
        raise StabScopeError(
            f"no *.py files under {root} (the interpreter's standard library): the experiment trains on "
            "them; run it with a Python whose standard library is installed as source"
        )
    train: list[bytes] = []
    train_tests: list[bytes] = []
    validation: list[bytes] = []
    for path in files:
        relative = path.relative_to(root).as_posix()
        try:
            data = path.read_bytes() + b"\0"
        except OSError:
            continue  # an unreadable file is simply not part of the corpus
        if is_validation(relative):
            validation.append(data)
        elif _is_test(relative):
            train_tests.append(data)
        else:
            train.append(data)
    if not train or not validation or not train_tests:
        raise StabScopeError(f"the standard library at {root} is too small to split into training and validation")
    phase1 = b"".join(train)
    return Corpus(
        train=np.frombuffer(phase1 + b"".join(train_tests), dtype=np.uint8),
        validation=np.frombuffer(b"".join(validation), dtype=np.uint8),
        train_files=len(train) + len(train_tests),
        validation_files=len(validation),
        train_phase2_start=len(phase1),
    )


def cached_corpus(cache_dir: Path, root: Path | None = None) -> Corpus:
    """The corpus of ``root`` (default: this interpreter's library), cached under ``cache_dir`` and
    memory-mapped from there (written atomically, so parallel callers never read a torn file)."""
    root = root or stdlib_root()
    key = f"{zlib.crc32(str(root).encode()):08x}"
    paths = {name: cache_dir / f"corpus-{key}-{name}.npy" for name in ("train", "validation", "counts")}
    if not all(p.is_file() for p in paths.values()):
        corpus = build_corpus(root)
        cache_dir.mkdir(parents=True, exist_ok=True)
        counts = np.array([corpus.train_files, corpus.validation_files, corpus.train_phase2_start], np.int64)
        for name, array in (("train", corpus.train), ("validation", corpus.validation), ("counts", counts)):
            tmp = paths[name].with_suffix(f".{os.getpid()}.tmp.npy")
            np.save(tmp, array)
            os.replace(tmp, paths[name])
        return corpus
    counts = np.load(paths["counts"])
    return Corpus(
        train=np.load(paths["train"], mmap_mode="r"),
        validation=np.load(paths["validation"], mmap_mode="r"),
        train_files=int(counts[0]),
        validation_files=int(counts[1]),
        train_phase2_start=int(counts[2]),
    )


def window_batch(
    data: npt.NDArray[np.uint8], rng: np.random.Generator, batch: int, length: int, lo: int = 0, hi: int | None = None
) -> npt.NDArray[np.int64]:
    """``batch`` windows of ``length`` bytes starting at random offsets in ``data[lo:hi]``."""
    hi = data.size if hi is None else hi
    starts = rng.integers(lo, hi - length, size=batch)
    return np.stack([np.asarray(data[s : s + length], dtype=np.int64) for s in starts])


def template_batch(batch: int, length: int) -> npt.NDArray[np.int64]:
    """Mechanism B's outlier batch: the licence header repeated, the same window in every row."""
    repeats = length // len(TEMPLATE) + 1
    row = np.frombuffer(TEMPLATE * repeats, dtype=np.uint8)[:length].astype(np.int64)
    return np.tile(row, (batch, 1))


def validation_batches(corpus: Corpus, batches: int, batch: int, length: int) -> list[npt.NDArray[np.int64]]:
    """The fixed validation set: the same windows for every run (seeded by nothing but their count)."""
    rng = np.random.default_rng([batches, batch, length, 4099])
    return [window_batch(corpus.validation, rng, batch, length) for _ in range(batches)]
