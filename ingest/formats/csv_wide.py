"""Wide CSV: a step column plus one column per metric (our own import format, and what most
spreadsheets and ad-hoc scripts write).

Columns: ``step`` (or ``Step``, ``iteration``, ``global_step`` ...), optional ``rank`` (-1 or absent =
run level), optional ``wall_time`` (seconds since the epoch), optional ``event`` (text: ``kind`` or
``kind: label``, e.g. ``schedule_transition: warmup -> stable`` or ``data_switch: recipe v2``; each
non-empty cell becomes a ``RunEvent`` at that row's step), and metric columns under canonical or
foreign names (mapped through the alias table). Empty cells are "not logged"; ``nan`` is kept.

With no step column, an ``epoch`` column is the step axis (Keras ``CSVLogger``: ``epoch,loss,...``, one
row per epoch). With both, a step column that restarts when the epoch grows counts batches within
the epoch: the step is then global, ``(epoch - base) * period + step``
(:class:`~ingest.formats.epoch_steps.EpochSteps`).

Without a plain step column, pandas' index (the first column, its header cell empty, whole numbers rising on
every row) is the step (``meta['step_source']`` says so), and a step-like counter (``total timesteps``,
``total/steps``: see :mod:`ingest.formats.csv_counters`) is the step; with no counter at all (a Keras history saved as
``loss,val_loss``), a table of numbers is read one row per step, the 0-based row number the step.
Columns that count the run (``total/epochs``, ``Progress``) are no metrics, a clock (``total/duration``,
fastai's ``time``) gives ``step_time_s`` (:mod:`ingest.formats.csv_clocks`), and a total-loss column is
proposed as ``loss`` when no column is the loss.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pyarrow as pa

from ingest.formats._common import LogBuilder, ParsedLog, Progress
from ingest.formats._tabular import (
    STEP_COLUMNS,
    WALL_COLUMNS,
    add_wide,
    csv_delimiter,
    csv_header,
    find_column,
    iter_csv,
    to_float,
)
from ingest.formats.base import Reader
from ingest.formats.column_roles import column_keymap
from ingest.formats.csv_clocks import add_clock_step_time
from ingest.formats.csv_comments import (
    MONITOR_CLOCK,
    comment_settings,
    is_monitor,
    monitor_column,
    monitor_wall_clock,
    without_comments,
)
from ingest.formats.csv_counters import (
    episode_column,
    is_run_clock,
    proposed_loss,
    step_like_column,
)
from ingest.formats.csv_headers import launches
from ingest.formats.epoch_steps import EpochSteps
from ingest.formats.field_roles import SETTINGS_KEY
from ingest.formats.label_blocks import LabelBlocks
from ingest.formats.labelled_runs import run_labels, run_table
from ingest.formats.lightning_eval import eval_epoch_keymap, without_eval_batch_rows
from ingest.formats.long_table import pivoted_blocks
from ingest.formats.raw_text import read_head
from ingest.formats.run_loss import add_run_loss
from ingest.formats.run_totals import summary_rows
from ingest.formats.table_axes import BATCH_IN_EPOCH
from ingest.formats.table_runs import TableRuns
from ingest.formats.value_column import name_value_column

EVENT_COLUMN = "event"
ROW_COLUMN = "__row__"
"""The step column added to a table without one: its 0-based data-row number."""
EPOCH_COLUMNS = ("epoch",)
_PARAM_COUNT = re.compile(r"(?:num_?|n_|total_|trainable_)?param(?:eter)?s?(?:_count)?", re.IGNORECASE)
"""A column of the model's parameter count (``num_params``): a property of the model, not a metric."""


class WideCsvReader(Reader):
    name = "csv_wide"
    description = "CSV with a step column and one column per metric (optional rank, wall_time, event)"

    def sniff(self, head: bytes, path: Path) -> float:
        header, head = csv_header(head), without_comments(head)
        if not header or len(header) < 2:
            return 0.0
        counter = find_column(header, STEP_COLUMNS) or step_like_column(header)
        if (counter or find_column(header, EPOCH_COLUMNS)) is None:
            return 0.4 if _numbers_only(head, header) else 0.0
        return 0.6 if EVENT_COLUMN in header or "rank" in header else 0.5

    def read(self, paths: Sequence[Path], progress: Progress | None = None) -> ParsedLog:
        """One run per run label the columns carry (:mod:`ingest.formats.labelled_runs`), else one."""
        files = [f for p in paths for f in self.expand(Path(p))]
        header = csv_header(read_head(files[0])) if files and files[0].is_file() else None
        labels = run_labels(header, _axes(header)) if header else []
        if len(labels) < 2:
            return self._read_label(paths, progress, labels[0] if labels else None)
        logs = [self._read_label(paths, progress, label) for label in labels]
        logs[0].segments = [*logs[0].segments, *(s for log in logs[1:] for s in (log, *log.segments))]
        for log in logs[1:]:
            log.segments = []
        return logs[0]

    def _read_label(self, paths: Sequence[Path], progress: Progress | None, label: str | None) -> ParsedLog:
        if label is None:
            return super().read(paths, progress)
        reader = WideCsvReader()  # its own instance: the registered one is shared
        reader._label = label
        parsed = Reader.read(reader, paths, progress)
        parsed.meta["run_label"] = label
        return parsed

    _label: str | None = None
    """The run label whose columns this instance reads (None: every column)."""

    def fill(self, paths: Sequence[Path], builder: LogBuilder) -> None:
        for path in paths:
            builder.source(path)
            epochs = EpochSteps()
            runs = TableRuns(builder)  # ingest.formats.table_runs: an axis back at its first value
            blocks = LabelBlocks(runs, ignore=(EVENT_COLUMN,))  # a phase column's blocks: ingest.formats.label_blocks
            rows = 0
            if settings := comment_settings(read_head(path, 64 * 1024)):  # ingest.formats.csv_comments
                builder.meta.setdefault(SETTINGS_KEY, {}).update(settings)
            chunks = iter_csv(path, builder, text_columns=(EVENT_COLUMN,))
            if self._label is not None:  # one run of several in the table: ingest.formats.labelled_runs
                chunks = ((run_table(table, self._label), line) for table, line in chunks)
            # a launch that wrote the header again (ingest.formats.csv_headers) starts a run
            for table, line, launched in launches(pivoted_blocks(chunks), path, builder):
                if launched and rows:
                    runs.fresh_run()
                table = name_value_column(table, path)  # a one-series export: ingest.formats.value_column
                table, summary = summary_rows(table)  # the Trainer's totals row, no step: ingest.formats.run_totals
                table = without_eval_batch_rows(table, table.column_names)  # Lightning's: .lightning_eval
                if summary:
                    builder.meta.setdefault("train_summary", summary)
                monitor = is_monitor(table.column_names)
                if loss := proposed_loss(table.column_names):
                    builder.meta.setdefault("proposed_map", {}).update(loss)
                step_col = find_column(table.column_names, STEP_COLUMNS) or step_like_column(table.column_names)
                epoch_col = find_column(table.column_names, EPOCH_COLUMNS)
                if step_col is None and (index := _row_index(table)) is not None:
                    step_col = index  # pandas' to_csv index, its header cell empty: the row counter
                    builder.meta.setdefault("step_source", INDEX_STEP_SOURCE)
                if step_col is None and epoch_col is not None and _repeats(table, epoch_col):
                    # a batch index within an epoch that spans rows (.table_axes); one row per epoch keeps the epoch
                    # as its axis, whatever a 'batch' column holds (a batch size)
                    step_col = _batch_in_epoch(table)
                if step_col is None and epoch_col is not None and _whole(table, epoch_col):
                    step_col = epoch_col  # one row per epoch: the epoch is the step axis
                elif step_col is not None and epoch_col is not None:
                    table = epochs.global_steps(table, step_col, epoch_col)
                episode = episode_column(table.column_names) if step_col is None and epoch_col is None else None
                if episode is not None and _whole(table, episode) and _rising(table, episode):
                    step_col = episode  # logged per episode: the index is the axis (csv_counters)
                if step_col is None and epoch_col is None:  # no counter: one row per step
                    table = table.append_column(ROW_COLUMN, pa.array(np.arange(rows, rows + table.num_rows)))
                    step_col = ROW_COLUMN
                rows += table.num_rows
                if step_col is None:
                    from ingest.errors import StabScopeError

                    raise StabScopeError(
                        f"expected a step column (one of {', '.join(STEP_COLUMNS + EPOCH_COLUMNS)})",
                        path=str(path),
                        line=1,
                    )
                if "rank" in table.column_names:
                    _add_rows(builder, table, step_col, (path, line), add_loss=not loss, monitor=monitor)
                    continue
                for block in blocks.split(table, step_col):
                    for run in runs.split(block, step_col, (path, line)):
                        _add_rows(builder, run, step_col, (path, line), add_loss=not loss, monitor=monitor)


def _axes(header: Sequence[str]) -> list[str | None]:
    """The step, epoch and clock columns of ``header``."""
    return [find_column(header, STEP_COLUMNS), find_column(header, EPOCH_COLUMNS), find_column(header, WALL_COLUMNS)]


def _add_rows(
    builder: LogBuilder, table: pa.Table, step_col: str, where: tuple[Path, int], add_loss: bool, monitor: bool
) -> None:
    """One run's rows of a table: its clock's step time, events, metric columns and stand-in loss (a
    Monitor file's ``t`` is a clock with no step time: :mod:`ingest.formats.csv_comments`)."""
    clock = None if monitor else add_clock_step_time(builder, table, step_col)  # ingest.formats.csv_clocks
    if monitor:  # its clock is each episode's wall-clock time (ingest.formats.csv_comments)
        table = monitor_wall_clock(table, builder.meta.get(SETTINGS_KEY) or {})
    event_col = EVENT_COLUMN if EVENT_COLUMN in table.column_names else None
    if event_col is not None:
        _events(builder, table, step_col, event_col)
    first_seq = add_wide(
        builder,
        table,
        step_col=step_col,
        rank_col="rank" if "rank" in table.column_names else None,
        wall_col=MONITOR_CLOCK if monitor else find_column([c for c in table.column_names if c != clock], WALL_COLUMNS),
        ignore=(
            *((event_col,) if event_col else ()),
            *(c for c in table.column_names if _PARAM_COUNT.fullmatch(c) or is_run_clock(c)),
            *((clock,) if clock else ()),
            *((table.column_names[0],) if table.column_names[0] != step_col and _row_index(table) is not None else ()),
        ),
        where=where,
        text_cells_are_errors=True,
        keymap=monitor_column if monitor else eval_epoch_keymap(table.column_names, column_keymap(table.column_names)),
    )
    if add_loss:  # a YOLO results.csv's loss parts, a baselines progress.csv's critic loss
        add_run_loss(builder, table, step_col, first_seq=first_seq)


INDEX_STEP_SOURCE = "the unnamed first column (a row index of whole numbers that rises on every row)"
"""``meta['step_source']`` where the step is the index column pandas' ``to_csv`` writes (empty header cell)."""
_UNNAMED_INDEX = re.compile(r"(?:Unnamed: ?0)?")
"""The header of pandas' index column: empty as ``to_csv`` writes it, ``Unnamed: 0`` once read back and saved."""


def _row_index(table: pa.Table) -> str | None:
    """The first column when its header is empty (or pandas' ``Unnamed: 0``) and it holds whole numbers on
    every row, each above the one before (pandas' ``to_csv`` index: a Trainer's ``log_history`` saved
    as a DataFrame numbers its logged steps 0, 1, 2 ... there): the table's row counter, its step axis
    when no column names a step (#31). A column of values that repeat or go back is no index."""
    if table.num_columns < 2 or not _UNNAMED_INDEX.fullmatch(table.column_names[0].strip()):
        return None
    col = table.column_names[0]
    values, has = to_float(table[col])
    if not (np.all(has) and np.all(np.isfinite(values)) and np.all(values == np.round(values))):
        return None
    return col if bool(np.all(np.diff(values) > 0)) else None


def _numbers_only(head: bytes, header: list[str]) -> bool:
    """Whether a CSV without any counter column is a table of numbers: a header of names (none a
    number, not a sweep's ``lr_0.1,lr_0.3``) over a first row whose every cell is a number or empty."""
    from ingest.formats.csv_sweep import sweep_setting

    if any(not c or _is_number(c) for c in header) or sweep_setting(header):
        return False
    lines = head.decode("utf-8-sig", errors="replace").splitlines()
    if len(lines) < 2:
        return False
    cells = [c.strip() for c in lines[1].split(csv_delimiter(head))]
    return len(cells) == len(header) and all(not c or _is_number(c) for c in cells) and any(cells)


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _batch_in_epoch(table: pa.Table) -> str | None:
    """The column of whole numbers that names a batch's index within the epoch (``Batch``), if any."""
    col = find_column(table.column_names, BATCH_IN_EPOCH)
    return col if col is not None and _whole(table, col) else None


def _whole(table: pa.Table, col: str) -> bool:
    """Whether every value of ``col`` is a whole number: an epoch column is a step axis only so (a
    fractional epoch, ``0.25``, is the share of the data seen, rows within an epoch, not one per epoch)."""
    values, has = to_float(table[col])
    shown = values[has & np.isfinite(values)]
    return bool(np.all(shown == np.round(shown)))


def _repeats(table: pa.Table, col: str) -> bool:
    """Whether some value of ``col`` repeats on consecutive rows (an epoch column logged per batch)."""
    values, has = to_float(table[col])
    shown = values[has & np.isfinite(values)]
    return bool(shown.shape[0] > 1 and np.any(np.diff(shown) == 0))


def _rising(table: pa.Table, col: str) -> bool:
    """Whether ``col`` is present on every row and rises strictly (an index, not a per-row count)."""
    values, has = to_float(table[col])
    return bool(np.all(has) and np.all(np.isfinite(values)) and np.all(np.diff(values) > 0))


def _events(builder: LogBuilder, table: pa.Table, step_col: str, event_col: str) -> None:
    steps, has_step = to_float(table[step_col])
    for i, text in enumerate(table[event_col].to_pylist()):
        if not text or not has_step[i]:
            continue
        kind, _, label = str(text).partition(":")
        builder.event(int(steps[i]), kind.strip().replace(" ", "_") or "event", label.strip())
