"""Lightning's per-batch evaluation values in a ``CSVLogger`` ``metrics.csv`` (docs/diagnosis.md, "Import: metrics
files").

A validation or test key logged with ``on_step=True`` and ``on_epoch=True`` gives two columns,
``val_loss_step`` and ``val_loss_epoch``. Lightning writes the ``_step`` values of an evaluation batch
at its evaluation-batch counter (0, 1, 2 ... over every validation pass), not at the global training
step, and leaves the row's ``epoch`` cell empty: on the training axis those rows would read as a run
that starts again at step 0. Such rows (every value in an evaluation ``_step`` column) are dropped, and
the ``_epoch`` aggregate, written at the training step that ends the epoch, is the key's series. An
evaluation key without a ``val_``/``test_`` name is known by its rows: its ``_step`` values never share
a row with an epoch (:func:`epochless_batch_columns`; issue #31).
"""

from __future__ import annotations

import re
from collections.abc import Collection
from typing import Final

import numpy as np
import pyarrow as pa

from ingest.formats.aliases import KeyMap, canonical_name

_EVAL_KEY: Final = re.compile(r"^(?:val|valid|validation|eval|test)(?:_|/)", re.IGNORECASE)
_AXES: Final = frozenset({"epoch", "step"})


def is_eval_batch_column(column: str, names: Collection[str]) -> bool:
    """Whether ``column`` is an evaluation key's per-batch column: ``val_*_step`` beside ``val_*_epoch``."""
    if not column.endswith("_step") or not _EVAL_KEY.match(column):
        return False
    return column[: -len("_step")] + "_epoch" in names


def epochless_batch_columns(table: pa.Table) -> set[str]:
    """The ``X_step`` columns beside an ``X_epoch`` whose values all lie in rows with an empty ``epoch``
    cell, in a table whose other rows carry the epoch: an evaluation key that does not say so by its name
    (``pesq_step``, ``si_sdr_step`` of a speech model's validation). Lightning writes the epoch on every
    row of the training loop (a training step's, an epoch end's) and leaves it empty on an evaluation
    batch's row, whose ``step`` is the evaluation-batch counter: read as training steps, its 0, 1, ...
    after step 49 is a run starting again."""
    names = set(table.column_names)
    if "epoch" not in names:
        return set()
    has_epoch = np.asarray(table["epoch"].is_valid(), dtype=bool)
    if not has_epoch.any():
        return set()
    found = set()
    for column in table.column_names:
        if not column.endswith("_step") or column[: -len("_step")] + "_epoch" not in names:
            continue
        has = np.asarray(table[column].is_valid(), dtype=bool)
        if has.any() and not (has & has_epoch).any():
            found.add(column)
    return found


def without_eval_batch_rows(table: pa.Table, names: Collection[str], also: Collection[str] = ()) -> pa.Table:
    """``table`` without the rows whose values all lie in evaluation per-batch columns (none when the
    file has no such column); ``also``: more columns known to be such (:func:`epochless_batch_columns`)."""
    batch = [c for c in table.column_names if is_eval_batch_column(c, names) or c in also]
    if not batch:
        return table
    others = [c for c in table.column_names if c not in _AXES and c not in batch]
    in_batch = np.zeros(table.num_rows, dtype=bool)
    for column in batch:
        in_batch |= np.asarray(table[column].is_valid(), dtype=bool)
    elsewhere = np.zeros(table.num_rows, dtype=bool)
    for column in others:
        elsewhere |= np.asarray(table[column].is_valid(), dtype=bool)
    drop = in_batch & ~elsewhere
    return table.filter(pa.array(~drop)) if drop.any() else table


def eval_epoch_keymap(names: Collection[str], inner: KeyMap | None) -> KeyMap | None:
    """``inner`` (None: the alias table) with an evaluation key's per-batch column dropped and its
    ``_epoch`` aggregate read under the key's own name; ``inner`` itself for a file without such keys."""
    names = set(names)
    if not any(is_eval_batch_column(c, names) for c in names):
        return inner

    def keymap(column: str) -> tuple[str, str | None] | None:
        if is_eval_batch_column(column, names):
            return None
        if column.endswith("_epoch") and is_eval_batch_column(column[: -len("_epoch")] + "_step", names):
            column = column[: -len("_epoch")]
        return inner(column) if inner is not None else canonical_name(column)

    return keymap
