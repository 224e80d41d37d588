"""Fields of a Hugging Face Trainer log that count or sum up the run, never measure a step (issue #31;
docs/diagnosis.md, "Import: settings and counters"). The rules, for any export of the Trainer's ``log_history``
(``trainer_state.json``, a console of printed dicts, the history flattened to a CSV):

- the end-of-training summary entry (``train_runtime``, ``train_samples_per_second``, ``total_flos``,
  ``train_loss``: the mean training loss) is the run's totals, not a step: a table's row that holds one
  of those keys and no ``loss``/``eval_loss`` is kept in ``meta['train_summary']``, not stored as a row;
- a token counter read at an evaluation (``eval_num_tokens``, ``eval_num_input_tokens_seen``) is the
  cumulative count of the training tokens, the ``num_tokens`` already stored, never a metric of the eval.
"""

from __future__ import annotations

from typing import Any, Final

import numpy as np
import pyarrow as pa

from ingest.formats.aliases import canonical_name

SUMMARY_KEYS: Final = frozenset(
    {"train_runtime", "train_samples_per_second", "train_steps_per_second", "total_flos", "train_loss"}
)
"""The keys of the Trainer's end-of-training summary entry (one row, no step's own values)."""
_EVAL_PREFIXES: Final = ("eval_", "eval/", "val_", "test_")


def is_eval_counter(key: str) -> bool:
    """Whether ``key`` is a token counter printed with an evaluation's values (``eval_num_tokens``)."""
    low = key.strip().lower()
    for prefix in _EVAL_PREFIXES:
        if low.startswith(prefix):
            return canonical_name(low[len(prefix) :])[0] == "tokens"
    return False


def summary_rows(table: pa.Table) -> tuple[pa.Table, dict[str, Any]]:
    """``table`` without its summary rows (at most two rows that hold a :data:`SUMMARY_KEYS` key and no
    ``loss``/``eval_loss``) and the first such row's summary values; ``table`` unchanged without one."""
    keys = [c for c in table.column_names if c in SUMMARY_KEYS]
    steps = [c for c in ("loss", "eval_loss") if c in table.column_names]
    if not keys or not steps or table.num_rows < 2:  # no HF history's step rows beside it: not its shape
        return table, {}
    valid = np.zeros(table.num_rows, dtype=bool)
    for key in keys:
        valid |= np.asarray(table[key].is_valid(), dtype=bool)
    for key in steps:
        valid &= ~np.asarray(table[key].is_valid(), dtype=bool)
    if not valid.any() or valid.sum() > 2:  # a key on many rows is that log's own per-row field
        return table, {}
    row = table.slice(int(np.flatnonzero(valid)[0]), 1).to_pylist()[0]
    summary = {k: v for k, v in row.items() if k in SUMMARY_KEYS and v not in (None, "")}
    kept = table.filter(pa.array(~valid))
    return kept.drop_columns([k for k in keys if kept[k].null_count == kept.num_rows]), summary
