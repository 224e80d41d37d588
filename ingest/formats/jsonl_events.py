"""Event-typed JSON records (issue #31; docs/diagnosis.md, "Import: metrics files"): a log whose every record names its
kind in a text field (``"event": "train_step" | "validation" | "checkpoint"``, ``"type": "train" | "eval"``,
``"split": "val"``) holds several kinds of record in one stream; each kind is kept apart:

- a checkpoint record (its kind names a checkpoint or a save) is a run event at its step, never a
  metric record: its ``bytes``, ``size`` or ``path`` describe the file written;
- an evaluation record (its kind names validation, evaluation, test or dev) whose keys do not already
  say so has them read as validation metrics: ``loss`` there is ``val_loss``, not the training loss;
- an evaluation record whose step key holds one value on every evaluation record while the training
  records' step rises past it (mmcv's ``TextLoggerHook`` JSON: ``"mode": "val", "iter": 64``, the count
  of validation images) has no step of its own: it is placed at the step of the training record before
  it, the step it evaluated (docs/diagnosis.md, "Import: metrics files"; read as a step it was a resume to step 64 at
  every evaluation);
- every other kind (training steps, a last ``stop`` record) is read as it is.
"""

from __future__ import annotations

import re
from typing import Final

import numpy as np
import pyarrow as pa

from ingest.formats._common import LogBuilder
from ingest.formats._tabular import to_float

KIND_KEYS: Final = ("event", "type", "kind", "split", "phase", "mode", "stage", "record_type")
"""Keys that name a record's kind, most specific first."""
MAX_KINDS: Final = 12
"""A text field with more distinct values than this is data (a path, a message), not a record kind."""
_CHECKPOINT = re.compile(r"checkpoint|ckpt|\bsav(e|ed|ing)\b|^save", re.IGNORECASE)
_EVAL = re.compile(r"^(val|valid|validation|eval|evaluation|test|dev)(_|$)", re.IGNORECASE)
_QUALITY = re.compile(r"loss|acc|perplexity|ppl|bpb|bleu|wer|f1", re.IGNORECASE)
_EVAL_NAMED = re.compile(r"(^|[/_ ])(val|valid|validation|eval|evaluation|test|dev)([/_ ]|$)", re.IGNORECASE)


def kind_column(table: pa.Table) -> str | None:
    """The text key naming each record's kind: present on every record, few distinct values."""
    for key in KIND_KEYS:
        if key not in table.column_names:
            continue
        column = table[key]
        if not pa.types.is_string(column.type) or column.null_count:
            continue
        kinds = set(column.to_pylist())
        if 2 <= len(kinds) <= MAX_KINDS or (len(kinds) == 1 and table.num_rows == 1):
            return key
    return None


def split_kinds(table: pa.Table, step_col: str, builder: LogBuilder) -> pa.Table:
    """``table`` with checkpoint records made run events and evaluation records' keys named as
    validation metrics (the rules above); unchanged when no key names the records' kind."""
    key = kind_column(table)
    if key is None:
        return table
    kinds = np.asarray(table[key].to_pylist(), dtype=object)
    checkpoint = np.array([bool(_CHECKPOINT.search(k)) for k in kinds])
    evaluation = np.array([bool(_EVAL.match(k)) for k in kinds]) & ~checkpoint
    if checkpoint.any():
        steps, has_step = to_float(table[step_col])
        for step in steps[checkpoint & has_step]:
            builder.event(int(step), "checkpoint", "checkpoint saved")
    if evaluation.any():
        table = _eval_named(table, evaluation, step_col, key)
        table = _eval_placed(table, evaluation & ~checkpoint, step_col)
    return table.filter(pa.array(~checkpoint)) if checkpoint.any() else table


def _eval_placed(table: pa.Table, evaluation: np.ndarray, step_col: str) -> pa.Table:
    """Evaluation records whose step key is one constant (see the module) at the step of the training
    record before each; ``table`` unchanged otherwise."""
    steps, has = to_float(table[step_col])
    on_eval, training = evaluation & has, ~evaluation & has
    if on_eval.sum() < 2 or training.sum() < 2 or np.unique(steps[on_eval]).shape[0] != 1:
        return table
    trained = steps[training]
    if np.any(np.diff(trained) < 0) or trained[-1] <= steps[on_eval][0]:
        return table
    before = np.maximum.accumulate(np.where(training, np.arange(table.num_rows), -1))
    placed = np.where(on_eval, np.where(before >= 0, steps[np.maximum(before, 0)], np.nan), steps)
    valid = (has & ~on_eval) | (on_eval & (before >= 0))
    column = pa.array(placed, type=pa.float64(), mask=~valid)
    return table.set_column(table.column_names.index(step_col), step_col, column)


def _eval_named(table: pa.Table, evaluation: np.ndarray, step_col: str, key: str) -> pa.Table:
    """Move the evaluation records' values of quality keys (a loss, an accuracy, a perplexity) not named
    for evaluation to ``val_<key>`` columns; counters (tokens, flops) they share stay as they are."""
    for name in list(table.column_names):
        if name in (step_col, key) or _EVAL_NAMED.search(name) or not _QUALITY.search(name):
            continue
        column = table[name]
        if not (pa.types.is_floating(column.type) or pa.types.is_integer(column.type)):
            continue
        values, valid = to_float(column)
        on_eval = valid & evaluation
        new = f"val_{name}"
        if not on_eval.any() or new in table.column_names:
            continue
        kept = pa.array(values, mask=~(valid & ~evaluation))
        moved = pa.array(values, mask=~on_eval)
        table = table.set_column(table.column_names.index(name), name, kept).append_column(new, moved)
    return table
