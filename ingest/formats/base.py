"""The reader interface every format module implements, and its shared plumbing."""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

from ingest.errors import StabScopeError
from ingest.formats._common import LogBuilder, ParsedLog, Progress
from ingest.formats.model_experts import note_num_experts
from ingest.formats.raw_text import read_head
from ingest.formats.stated_precision import note_precision


class Reader:
    """One log format: ``sniff`` rates how well a file's head fits (0-1), ``read`` parses files.

    Subclasses set ``name``/``description`` and implement ``sniff`` and ``fill``.
    ``accepts_directories`` readers (TensorBoard, MLflow, DeepSpeed csv_monitor) take a folder.
    """

    name: str = ""
    description: str = ""
    accepts_directories: bool = False
    directory_files: tuple[str, ...] = ()
    """File names this reader looks for when given a folder (``metrics.csv`` in a Lightning
    ``version_N`` folder); the last in natural order wins (``checkpoint-2800`` over ``-200``)."""

    def expand(self, path: Path) -> list[Path]:
        """The files to read for ``path``: itself, or the file a folder holds for this reader."""
        if not path.is_dir() or self.accepts_directories:
            return [path]
        found = [f for name in self.directory_files for f in path.rglob(name) if f.is_file()]
        return [max(found, key=_natural_key)] if found else []

    def sniff_path(self, path: Path, head: bytes) -> float:
        """``sniff`` for a file or folder (a folder is rated by the file it holds for this reader)."""
        if path.is_dir() and not self.accepts_directories:
            files = self.expand(path)
            return self.sniff(read_head(files[0]), files[0]) if files else 0.0
        return self.sniff(head, path)

    def sniff(self, head: bytes, path: Path) -> float:
        """Confidence (0-1) that ``path`` (whose first bytes are ``head``) is in this format."""
        raise NotImplementedError

    def fill(self, paths: Sequence[Path], builder: LogBuilder) -> None:
        """Parse ``paths`` into ``builder`` (rows, events, meta, skipped lines)."""
        raise NotImplementedError

    def read(self, paths: Sequence[Path], progress: Progress | None = None) -> ParsedLog:
        """Parse ``paths`` (one run) into a ``ParsedLog``."""
        files = [f for p in paths for f in self.expand(Path(p))]
        if not files:
            raise StabScopeError(
                f"no {' or '.join(self.directory_files) or 'input'} file found for {self.name}",
                path=str(paths[0]) if paths else None,
            )
        builder = LogBuilder(files, progress)
        self.fill(files, builder)
        note_num_experts(builder.meta, files)  # before finish: every segment of the file gets it
        note_precision(builder.meta, files)
        if builder.row_count == 0:
            raise _nothing_read(self, files, builder)
        if builder.account.read == 0:  # not counted line by line: a reader of records
            builder.account_records()
        return builder.finish(self.name)


def _nothing_read(reader: Reader, paths: list[Path], builder: LogBuilder) -> StabScopeError:
    """The error for input in which the reader found no metric at all."""
    if builder.skipped_examples:
        file, where, reason = builder.skipped_examples[0]
        return StabScopeError(
            f"no metrics found as {reader.name} ({reader.description}); first unreadable: {reason}",
            path=file,
            line=where,
        )
    return StabScopeError(
        f"no metrics found as {reader.name} ({reader.description})", path=str(paths[0]) if paths else None
    )


def _natural_key(path: Path) -> list[object]:
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", str(path))]
