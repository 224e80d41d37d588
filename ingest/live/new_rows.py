"""Which rows of a log read again are not in the run yet: new keys, or keys whose value changed.

``stabscope watch`` on a log reads the whole log again each pass (``ingest.live.watch_logs``) and stores
only these rows. A row is (metric, rank, step, value); the value is compared by its bits, so a NaN
matches the same NaN. The usual path packs (metric, rank, step) into one int64 (12 bits of metric
id, 20 of rank + 1, 31 of step) and looks each row up in the held rows sorted by it: on a
1.08M-row log this is several times quicker than a hash join. Keys that do not pack (a step past
2**31, more than 4,096 metrics or 2**20 ranks) take pyarrow's anti-join instead.
"""

from __future__ import annotations

from typing import Any, Final

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

I64 = npt.NDArray[np.int64]

_METRIC_BITS: Final = 12
_RANK_BITS: Final = 20
_STEP_BITS: Final = 31


def rows_table(table: pa.Table) -> pa.Table:
    """``table``'s (metric as text, rank, step, value): what is kept of the rows a run holds."""
    metric = table.column("metric")
    if pa.types.is_dictionary(metric.type):
        metric = pc.cast(metric, pa.string())
    return pa.table(
        {
            "metric": metric,
            "rank": pc.cast(table.column("rank"), pa.int64()),
            "step": pc.cast(table.column("step"), pa.int64()),
            "value": pc.cast(table.column("value"), pa.float64()),
        }
    )


def new_or_changed(new: pa.Table, held: pa.Table) -> I64:
    """Indices of ``new``'s rows (in order) that ``held`` does not hold with the same value."""
    if held.num_rows == 0:
        return np.arange(new.num_rows, dtype=np.int64)
    ids: dict[str, int] = {}
    packed_new, packed_held = _packed(new, ids), _packed(held, ids)
    if packed_new is None or packed_held is None:
        return _by_join(new, held)
    (keys, values), (held_keys, held_values) = packed_new, packed_held
    order = np.argsort(held_keys, kind="stable")
    held_keys, held_values = held_keys[order], held_values[order]
    lo = np.searchsorted(held_keys, keys, "left")
    hi = np.searchsorted(held_keys, keys, "right")
    count = hi - lo
    fresh = count == 0
    one = count == 1
    fresh[one] = held_values[lo[one]] != values[one]
    for i in np.nonzero(count > 1)[0]:  # a key held more than once (a log that repeats a step): rare
        fresh[i] = not np.any(held_values[lo[i] : hi[i]] == values[i])
    out: I64 = np.nonzero(fresh)[0].astype(np.int64)
    return out


def _bits(table: pa.Table) -> I64:
    values = np.ascontiguousarray(table.column("value").to_numpy(zero_copy_only=False), dtype=np.float64)
    bits: I64 = values.view(np.int64)
    return bits


def _packed(table: pa.Table, ids: dict[str, int]) -> tuple[I64, I64] | None:
    """(packed keys, value bits) of ``table``'s rows, or None when a key does not fit the packing;
    ``ids`` gives each metric name its id (grown here)."""
    if table.num_rows == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    encoded: Any = pc.dictionary_encode(table.column("metric")).combine_chunks()  # a DictionaryArray
    names = encoded.dictionary.to_pylist()
    lut = np.array([ids.setdefault(str(n), len(ids)) for n in names], dtype=np.int64)
    if len(ids) >= 1 << _METRIC_BITS:
        return None
    codes = encoded.indices.to_numpy(zero_copy_only=False).astype(np.int64)
    rank = table.column("rank").to_numpy().astype(np.int64) + 1
    step = table.column("step").to_numpy().astype(np.int64)
    if rank.min() < 0 or rank.max() >= 1 << _RANK_BITS or step.min() < 0 or step.max() >= 1 << _STEP_BITS:
        return None
    keys: I64 = (lut[codes] << (_RANK_BITS + _STEP_BITS)) | (rank << _STEP_BITS) | step
    return keys, _bits(table)


def _by_join(new: pa.Table, held: pa.Table) -> I64:
    def keyed(table: pa.Table, with_row: bool) -> pa.Table:
        columns: dict[str, Any] = {
            "metric": table.column("metric"),
            "rank": table.column("rank"),
            "step": table.column("step"),
            "value_bits": pa.array(_bits(table)),
        }
        if with_row:
            columns["row"] = pa.array(np.arange(table.num_rows, dtype=np.int64))
        return pa.table(columns)

    joined = keyed(new, True).join(
        keyed(held, False), keys=["metric", "rank", "step", "value_bits"], join_type="left anti"
    )
    out: I64 = np.sort(joined.column("row").to_numpy())
    return out
