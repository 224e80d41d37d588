"""The long table: one row per (rank, step, metric), the form every producer ends in (shards, log readers,
the analyses) and the store keeps. Defined once here, below the shards, the formats and the store, with
the variants derived from it.
"""

from __future__ import annotations

from typing import Any, Final

import numpy as np
import pyarrow as pa

_FIELDS: Final[dict[str, pa.DataType]] = {
    "rank": pa.int32(),
    "step": pa.int64(),
    "metric": pa.string(),
    "value": pa.float64(),
    "wall_time": pa.float64(),
}
LONG_SCHEMA: Final[pa.Schema] = pa.schema(_FIELDS)
"""The canonical long form: ``rank`` (-1 = run level), ``step``, ``metric`` name, ``value`` (NaN/Inf kept),
``wall_time`` (seconds since the epoch, null when unknown)."""

_METRIC = LONG_SCHEMA.get_field_index("metric")

LONG_SCHEMA_DICT: Final[pa.Schema] = LONG_SCHEMA.set(
    _METRIC, pa.field("metric", pa.dictionary(pa.int32(), pa.string()))
)
"""``LONG_SCHEMA`` with the metric names dictionary-encoded: as log readers build tables and the store
writes files (read back as strings)."""

PART_SCHEMA: Final[pa.Schema] = LONG_SCHEMA.remove(_METRIC)
"""One metric's rows of a long table (``LONG_SCHEMA`` less the ``metric`` column)."""


def null_floats(n: int) -> Any:
    """An all-null float64 column of ``n`` rows. ``pa.nulls`` fills its 8 bytes a row, the largest
    single cost of building a text log's table (see the benchmark); calloc'd zeros are pages the
    kernel maps on first touch, and nothing reads the values under a null."""
    bitmap: Any = np.zeros((n + 7) // 8, dtype=np.uint8)  # numpy arrays are buffers
    data: Any = np.zeros(n)
    return pa.Array.from_buffers(pa.float64(), n, [pa.py_buffer(bitmap), pa.py_buffer(data)], null_count=n)
