"""TensorBoard's CSV download: ``Wall time,Step,Value`` for one tag per file. The tag comes from the
file name TensorBoard gives it (``run-<run>-tag-<tag>.csv``; ``/`` in tags was written as ``_``) or the
file's stem; several files (one per tag) make one run."""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

from ingest.formats._common import LogBuilder
from ingest.formats._tabular import add_wide, csv_header, iter_csv
from ingest.formats.base import Reader
from ingest.formats.table_runs import TableRuns

HEADER = ["Wall time", "Step", "Value"]
_NAME = re.compile(r"^run[-_](?P<run>.*?)[-_]tag[-_](?P<tag>.+)$")


def tag_of(path: Path) -> str:
    """The TensorBoard tag a downloaded CSV holds, from its file name."""
    m = _NAME.match(path.stem)
    return m.group("tag") if m else path.stem


class TensorBoardCsvReader(Reader):
    name = "tensorboard_csv"
    description = "TensorBoard CSV download: 'Wall time,Step,Value', one tag per file"

    def sniff(self, head: bytes, path: Path) -> float:
        header = csv_header(head)
        return 0.95 if header == HEADER else 0.0

    def fill(self, paths: Sequence[Path], builder: LogBuilder) -> None:
        for stream, path in enumerate(paths):
            builder.source(path)
            tag = tag_of(path)
            runs = TableRuns(builder, stream)  # ingest.formats.table_runs: a relaunch restarts the step
            for table, line in iter_csv(path, builder):
                for run in runs.split(table.rename_columns(["wall_time", "step", tag]), "step", (path, line)):
                    add_wide(
                        builder,
                        run,
                        step_col="step",
                        wall_col="wall_time",
                        stream=stream,
                        where=(path, line),
                        text_cells_are_errors=True,
                    )
