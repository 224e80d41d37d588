"""PyTorch Lightning ``CSVLogger`` ``metrics.csv``: a wide, sparse table whose header is the union of
all logged keys (sorted), with ``epoch`` and ``step`` columns; a training row fills the per-step
columns, a validation row the ``val_*`` ones, an epoch row the ``*_epoch`` aggregates.

A key logged with ``on_step`` and ``on_epoch`` appears twice (``train_loss_step``/``train_loss_epoch``):
the ``_step`` one is the per-step series and is stored under the base name (``train_loss`` -> ``loss``);
the ``_epoch`` aggregate keeps its name. An evaluation key's ``_step`` values are on Lightning's
evaluation-batch counter, not the training step (:mod:`ingest.formats.lightning_eval`): dropped, and its
``_epoch`` aggregate is the series (``val_loss_epoch`` -> ``val_loss``). ``hparams.yaml`` next to the
file goes to ``meta``.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from ingest.errors import StabScopeError
from ingest.formats._common import LogBuilder
from ingest.formats._tabular import add_wide, csv_header, iter_csv
from ingest.formats.aliases import canonical_name
from ingest.formats.base import Reader
from ingest.formats.lightning_eval import epochless_batch_columns, is_eval_batch_column, without_eval_batch_rows
from ingest.formats.run_loss import add_run_loss
from ingest.formats.run_totals import is_eval_counter, summary_rows
from ingest.formats.table_runs import TableRuns

_HPARAM_META = {
    "lr": "peak_lr",
    "learning_rate": "peak_lr",
    "max_seq_len": "seq_len",
    "batch_size": "per_rank_batch_size",
}


class LightningCsvReader(Reader):
    name = "lightning_csv"
    description = "PyTorch Lightning CSVLogger metrics.csv (sparse rows; epoch and step columns)"
    directory_files = ("metrics.csv",)

    def sniff(self, head: bytes, path: Path) -> float:
        header = csv_header(head)
        if not header or "step" not in header or "epoch" not in header:
            return 0.0
        suffixed = any(c.endswith(("_step", "_epoch")) for c in header)
        lines = head.split(b"\n")[1:20]
        sparse = any(b",," in ln or ln.rstrip(b"\r").endswith(b",") for ln in lines)
        if suffixed or sparse:
            return 0.9
        # dense rows and plain keys: CSVLogger's file name with its two counters still says whose file
        # it is, clear of csv_wide's 0.5 (which reads it the same way: a near-tie is no reason to refuse);
        # any other name with no sign of CSVLogger is a plain wide CSV
        return 0.75 if path.name == "metrics.csv" else 0.35

    def fill(self, paths: Sequence[Path], builder: LogBuilder) -> None:
        for path in paths:
            builder.source(path)
            _hparams(path.parent / "hparams.yaml", builder)
            runs = TableRuns(builder)
            epochless: set[str] = set()
            for read, line in iter_csv(path, builder):
                table, summary = summary_rows(read)  # ingest.formats.run_totals: the run's totals, no step
                if summary:
                    builder.meta.setdefault("train_summary", summary)
                names = set(table.column_names)
                if "step" not in names:
                    shown = ", ".join(list(table.column_names)[:8])
                    raise StabScopeError(
                        f"expected a header with a 'step' column (CSVLogger's 'epoch,step,...'); found: {shown}",
                        path=str(path),
                        line=1,
                    )

                # ingest.formats.lightning_eval: once an evaluation key, in every later chunk too
                epochless |= epochless_batch_columns(table)
                table = without_eval_batch_rows(table, names, epochless)

                def batch(column: str, names: set[str] = names, epochless: set[str] = epochless) -> bool:
                    return is_eval_batch_column(column, names) or column in epochless

                def keymap(column: str, names: set[str] = names) -> tuple[str, str | None] | None:
                    if batch(column):
                        return None  # on the evaluation-batch counter, not the training step
                    if column.endswith("_epoch") and batch(column[: -len("_epoch")] + "_step"):
                        column = column[: -len("_epoch")]  # the evaluation's own series: val_loss_epoch -> val_loss
                    if column.endswith("_step") and column[: -len("_step")] + "_epoch" in names:
                        column = column[: -len("_step")]
                    return None if is_eval_counter(column) else canonical_name(column)

                for run in runs.split(
                    table, "step", (path, line)
                ):  # ingest.formats.table_runs: a step back at its first value
                    where = (path, line)
                    first = add_wide(
                        builder, run, step_col="step", keymap=keymap, where=where, text_cells_are_errors=True
                    )
                    add_run_loss(builder, run, "step", keymap, first)  # a mean_loss over loss terms (run_loss)


def _hparams(path: Path, builder: LogBuilder) -> None:
    if not path.is_file():
        return
    try:
        data: Any = yaml.safe_load(path.read_text(encoding="utf-8", errors="replace"))
    except (OSError, yaml.YAMLError):
        return
    if isinstance(data, dict):
        builder.meta["hparams"] = data
        for key, meta_key in _HPARAM_META.items():
            if key in data and meta_key not in builder.meta:
                builder.meta[meta_key] = data[key]
