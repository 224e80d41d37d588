"""Generic JSON Lines: one object per logged step, ``{"step": 100, "loss": 2.31, "lr": 3e-4, ...}``.

The step comes from ``step``/``global_step``/``iteration``/``_step``...; without one, the line
index (0-based) is the step. A counter that restarts while another keeps rising (a per-epoch ``step`` beside
``global_step``) gives way to the one that keeps rising (:mod:`ingest.formats.restarting_steps`). Nested objects
become ``parent/child`` metrics; strings such as ``"nan"`` are parsed; other strings, lists and booleans are not
metrics and are ignored (a true/false clipped flag beside the grad norm gives the run's ``max_norm`` instead:
:mod:`ingest.formats.clip_flags`).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from ingest.formats._common import LogBuilder
from ingest.formats._tabular import STEP_COLUMNS, WALL_COLUMNS, add_wide, find_column, iter_jsonl
from ingest.formats.aliases import KeyMap
from ingest.formats.base import Reader
from ingest.formats.clip_flags import clip_threshold
from ingest.formats.coco_stats import with_coco_headline
from ingest.formats.json_document import document_tables, looks_like_document, step_records
from ingest.formats.jsonl_events import split_kinds
from ingest.formats.jsonl_roles import (
    EPOCH_END_STEP,
    epoch_axis,
    record_keymap,
    split_epoch_records,
    with_clock_step_time,
    without_eval_runtime,
)
from ingest.formats.raw_text import decode_head
from ingest.formats.restarting_steps import monotone_step
from ingest.formats.run_loss import add_run_loss
from ingest.formats.run_totals import SUMMARY_KEYS
from ingest.formats.stat_records import progress_step, unwrap_stats
from ingest.formats.table_runs import TableRuns


def first_object(head: bytes) -> dict[str, object] | None:
    """The first JSON object of a JSON Lines head that holds a key (None when the first line is no
    object); empty objects before it (mmcv's ``log.json`` opens with ``{}`` lines) are passed over."""
    for line in decode_head(head).splitlines()[:5]:
        if not line.strip() or line.strip() == "{}":
            continue
        try:
            obj = json.loads(line)
        except (ValueError, RecursionError):  # RecursionError: a line nested too deeply is no step's object
            return None
        return obj if isinstance(obj, dict) else None
    return None


def read_jsonl(
    paths: Sequence[Path],
    builder: LogBuilder,
    *,
    step_candidates: Sequence[str] = STEP_COLUMNS,
    keymap: KeyMap | None = None,
    ignore: Sequence[str] = (),
    wall_candidates: Sequence[str] = WALL_COLUMNS,
    record_roles: bool = False,
) -> None:
    """Read JSON Lines files (one stream, in the order given) into ``builder``."""
    row_index = 0
    monotone: str | None = None  # a counter chosen over a restarting one keeps the axis in later chunks
    runs = TableRuns(builder, at_lowest=False)  # one stream (continuation files follow); APPENDED_HISTORY_RULE
    for path in paths:
        builder.source(path)
        records = step_records(path) if looks_like_document(_head(path)) else None
        tables = document_tables(path, records, builder) if records else iter_jsonl(path, builder)
        for table, line in tables:
            table = _drop_state_dumps(_drop_empty(table, path, line, builder), path, line, builder)
            table = progress_step(unwrap_stats(table), step_candidates)  # ingest.formats.stat_records
            table = with_coco_headline(table)  # ingest.formats.coco_stats: DETR's COCO summary list
            table = _progress_steps(table, step_candidates, builder)
            if table.num_rows == 0:
                continue
            step_col = find_column(table.column_names, step_candidates)
            if step_col is None and record_roles:
                step_col = epoch_axis(table)
            if step_col is None:
                steps = pa.array(np.arange(row_index, row_index + table.num_rows, dtype=np.float64))
                table = table.append_column("__row_step", steps)
                step_col = "__row_step"
            else:
                # ingest.formats.restarting_steps: a per-epoch step beside a run-wide counter
                if monotone is not None and monotone in table.column_names:
                    step_col = monotone
                elif (chosen := monotone_step(table, step_col, step_candidates))[1] is not None:
                    step_col = monotone = chosen[0]
                    builder.meta.setdefault("step_source", chosen[1])
                table = _coalesce_steps(table, step_col, step_candidates)
                if record_roles:  # ingest.formats.jsonl_events: train, eval and checkpoint records apart
                    table = split_kinds(table, step_col, builder)
            row_index += table.num_rows
            parts: list[tuple[pa.Table, str]] = [(table, step_col)]
            if record_roles and step_col != "__row_step":  # ingest.formats.jsonl_roles
                table, off_axis = split_epoch_records(table, step_col, step_candidates)
                parts = [(table, step_col)] + ([(off_axis, EPOCH_END_STEP)] if off_axis is not None else [])
            for whole, part_step in parts:
                # ingest.formats.table_runs: a relaunch appended to the file (its step back at the first
                # value) is another run; a line written again is one record
                # (a JSON document's records come cut already: ingest.formats.json_document)
                runs_of = records is None and part_step == step_col and step_col != "__row_step"
                for part in runs.split(whole, part_step, (path, line)) if runs_of else [whole]:
                    _add_part(
                        builder,
                        part,
                        part_step,
                        step_candidates,
                        keymap,
                        ignore,
                        wall_candidates,
                        record_roles,
                        (path, line),
                    )


def _add_part(
    builder: LogBuilder,
    part: pa.Table,
    part_step: str,
    step_candidates: Sequence[str],
    keymap: KeyMap | None,
    ignore: Sequence[str],
    wall_candidates: Sequence[str],
    record_roles: bool,
    where: tuple[Path, int],
) -> None:
    """One run's records of one table into ``builder``: their roles judged on these records."""
    part = without_eval_runtime(part, part_step)  # ingest.formats.jsonl_roles: an evaluation placed at its step
    wall_col, table_keymap = find_column(part.column_names, wall_candidates), keymap
    if record_roles and keymap is None:
        if part_step in step_candidates:
            part = with_clock_step_time(part, part_step)
        table_keymap, wall_col = record_keymap(part, step_col=part_step, wall_col=wall_col)
    first_seq = add_wide(
        builder,
        part,
        step_col=part_step,
        wall_col=wall_col,
        ignore=[c for c in part.column_names if c in ignore or c in step_candidates],
        keymap=table_keymap,
        where=where,
        # a JSON record's epoch is kept: LLaMA-Factory's end-of-training line holds only the
        # epoch, and its step says the run went on past the last loss row
        counters_are_axes=False,
    )
    add_run_loss(builder, part, part_step, table_keymap, first_seq)  # a GAN's generator loss
    if (threshold := clip_threshold(part)) is not None:  # ingest.formats.clip_flags: a clipped flag's max_norm
        builder.meta.setdefault("max_norm", threshold[0])
        builder.meta.setdefault("max_norm_source", f"the {threshold[1]!r} flags beside the grad norm")


def _head(path: Path) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read(64)
    except OSError:
        return b""


def _drop_empty(table: pa.Table, path: Path, line: int, builder: LogBuilder) -> pa.Table:
    """``table`` without the empty objects (``{}``: mmcv's ``log.json`` opens with them): no record, and
    a key every record carries (the record's kind) must not be missing on them."""
    if table.num_columns == 0:
        return table
    import pyarrow.compute as pc

    empty = pc.is_null(table.column(0))
    for name in table.column_names[1:]:
        empty = pc.and_(empty, pc.is_null(table[name]))
    rows = np.flatnonzero(empty.to_numpy(zero_copy_only=False))
    if rows.shape[0] == 0:
        return table
    for row in rows:
        builder.skip(path, line + int(row), "empty object (no keys)")
    return table.filter(pc.invert(empty))


def _drop_state_dumps(table: pa.Table, path: Path, line: int, builder: LogBuilder) -> pa.Table:
    """Lines holding a ``log_history`` list are a trainer-state dump (ms-swift ends
    ``logging.jsonl`` with one) that repeats the records already read line by line: skipped, so
    their keys (``global_step``) cannot pick the step axis for every other line."""
    import pyarrow.compute as pc

    cols = table.column_names
    if "log_history" in cols:
        dump = pc.is_valid(table["log_history"])
        for row in np.flatnonzero(dump.to_numpy(zero_copy_only=False)):
            builder.skip(path, line + int(row), "trainer-state dump (log_history repeats the logged records)")
    else:
        dump = pa.array(np.zeros(table.num_rows, dtype=bool))
    # a summary key on every record of several is that log's own per-record field (DETR's per-epoch
    # train_loss), not the one end-of-training summary; so is one on more than two records (a training
    # call writes one summary): an event-typed log's train_loss on its train records (docs/diagnosis.md, "Import:
    # metrics files")
    summary_keys = [c for c in cols if c in SUMMARY_KEYS and (table.num_rows < 2 or _summary_like(table[c]))]
    if summary_keys:
        # The HF summary object (train_runtime, total_flos...) without a loss describes the run, not a step.
        has_summary = pc.is_valid(table[summary_keys[0]])
        for key in summary_keys[1:]:
            has_summary = pc.or_(has_summary, pc.is_valid(table[key]))
        for key in ("loss", "eval_loss"):
            if key in cols:
                has_summary = pc.and_(has_summary, pc.is_null(table[key]))
        for row in np.flatnonzero(has_summary.to_numpy(zero_copy_only=False)):
            summary = {k: v for k, v in table.slice(int(row), 1).to_pylist()[0].items() if k in SUMMARY_KEYS}
            builder.meta.setdefault("train_summary", summary)
        dump = pc.or_(dump, has_summary)
    if not pc.any(dump).as_py():
        return table
    kept = table.filter(pc.invert(dump))
    return kept.select([c for c in kept.column_names if kept[c].null_count < kept.num_rows])


def _summary_like(column: pa.ChunkedArray[Any]) -> bool:
    return column.null_count > 0 and len(column) - column.null_count <= 2


def _progress_steps(table: pa.Table, candidates: Sequence[str], builder: LogBuilder) -> pa.Table:
    """A ``"<step key>/max_steps": "N/M"`` progress string (ms-swift's ``global_step/max_steps``)
    is the step axis when no plain step key is logged: step N, planned steps M."""
    if find_column(table.column_names, candidates) is not None:
        return table
    import pyarrow.compute as pc

    for name in table.column_names:
        head, _, _ = name.partition("/")
        if head not in candidates or not pa.types.is_string(table[name].type):
            continue
        parts = pc.extract_regex(table[name], r"^\s*(?P<n>\d+)\s*/\s*(?P<m>\d+)\s*$")
        if parts.null_count == len(parts) or parts.null_count > table[name].null_count:
            continue
        steps = pc.cast(pc.struct_field(parts, "n"), pa.float64())
        planned = pc.max(pc.cast(pc.struct_field(parts, "m"), pa.int64())).as_py()
        if planned is not None:
            builder.meta.setdefault("total_steps", planned)
        return table.drop_columns([name]).append_column(head, steps)
    return table


def _coalesce_steps(table: pa.Table, step_col: str, candidates: Sequence[str]) -> pa.Table:
    """Rows missing the preferred step key take the next candidate present (W&B's ``_step``)."""
    col = table[step_col]
    if col.null_count == 0:
        return table
    import pyarrow.compute as pc

    for other in candidates:
        if other != step_col and other in table.column_names:
            col = pc.coalesce(col, table[other].cast(col.type))
    return table.set_column(table.column_names.index(step_col), step_col, col)


class JsonlReader(Reader):
    name = "jsonl"
    description = "JSON Lines, one object per step: {'step': N, 'loss': x, ...}"

    def sniff(self, head: bytes, path: Path) -> float:
        # a JSON document holding a list of per-step objects is read like JSON Lines (below a
        # reader that knows the document's layout, as the HF trainer state)
        records = step_records(path) if looks_like_document(head) and path.is_file() else None
        if records:
            return 0.45 if find_column(records[0], STEP_COLUMNS) else 0.4
        obj = first_object(head)
        if obj is None:
            return 0.0
        numeric = [v for v in obj.values() if isinstance(v, (int, float)) and not isinstance(v, bool)]
        if not numeric:
            return 0.0
        return 0.55 if find_column(obj, STEP_COLUMNS) else 0.35

    def fill(self, paths: Sequence[Path], builder: LogBuilder) -> None:
        read_jsonl(paths, builder, record_roles=True)
