"""DeepSpeed ``csv_monitor`` output: a folder ``<output_path>/<job_name>/`` with one CSV per event,
``step,<name>`` (``Train_Samples_train_loss.csv`` holds ``step,train_loss``).

DeepSpeed's engine logs its ``Train/Samples/*`` events against the number of *samples* seen, not the
optimizer step: the x value is stored as the step as written and ``meta['step_unit']`` says
``samples``; divide by the global batch size to get optimizer steps.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from ingest.errors import StabScopeError
from ingest.formats._common import LogBuilder
from ingest.formats._tabular import add_wide, csv_header, iter_csv
from ingest.formats.base import Reader
from ingest.formats.raw_text import read_head


def _metric_files(folder: Path) -> list[Path]:
    out = []
    for f in sorted(folder.rglob("*.csv")):
        header = csv_header(read_head(f, 4096))
        if header and len(header) == 2 and header[0] == "step":
            out.append(f)
    return out


class DeepSpeedCsvReader(Reader):
    name = "deepspeed_csv"
    description = "DeepSpeed csv_monitor folder: one 'step,<metric>' CSV per metric"
    accepts_directories = True

    def sniff(self, head: bytes, path: Path) -> float:
        if path.is_dir():
            files = _metric_files(path)
            if not files:
                return 0.0
            return 0.92 if any(f.name.startswith(("Train_", "Eval_")) for f in files) else 0.7
        header = csv_header(head)
        if header and len(header) == 2 and header[0] == "step" and path.name.startswith(("Train_", "Eval_")):
            return 0.75
        return 0.0

    def fill(self, paths: Sequence[Path], builder: LogBuilder) -> None:
        files: list[Path] = []
        for p in paths:
            files.extend(_metric_files(p) if p.is_dir() else [p])
            if p.is_dir():  # a CSV of the folder that is not a metric file: said, not silently left out
                for other in sorted(set(p.rglob("*.csv")) - set(files)):
                    first = read_head(other, 200).split(b"\n", 1)[0].decode("utf-8", "replace")
                    builder.skip(other, 1, f"not read: its header {first[:60]!r} is not 'step,<metric>'")
        if not files:
            raise StabScopeError("expected CSV files with a 'step,<metric>' header", path=str(paths[0]))
        for stream, path in enumerate(files):
            builder.source(path)
            if path.name.startswith("Train_Samples_"):
                builder.meta["step_unit"] = "samples"
            for table, line in iter_csv(path, builder):
                add_wide(builder, table, step_col="step", stream=stream, where=(path, line), text_cells_are_errors=True)
