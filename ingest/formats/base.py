"""The reader interface every format module implements, and its shared plumbing."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from ingest.errors import StabScopeError
from ingest.formats._common import LogBuilder, ParsedLog, Progress


class Reader:
    """One log format: ``sniff`` rates how well a file's head fits (0-1), ``read`` parses files.

    Subclasses set ``name``/``description`` and implement ``sniff`` and ``fill``.
    ``accepts_directories`` readers (TensorBoard, MLflow, DeepSpeed csv_monitor) take a folder.
    """

    name: str = ""
    description: str = ""
    accepts_directories: bool = False

    def sniff(self, head: bytes, path: Path) -> float:
        """Confidence (0-1) that ``path`` (whose first bytes are ``head``) is in this format."""
        raise NotImplementedError

    def fill(self, paths: Sequence[Path], builder: LogBuilder) -> None:
        """Parse ``paths`` into ``builder`` (rows, events, meta, skipped lines)."""
        raise NotImplementedError

    def read(self, paths: Sequence[Path], progress: Progress | None = None) -> ParsedLog:
        """Parse ``paths`` (one run) into a ``ParsedLog``."""
        builder = LogBuilder(paths, progress)
        self.fill([Path(p) for p in paths], builder)
        if builder.row_count == 0:
            raise _nothing_read(self, [Path(p) for p in paths], builder)
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
