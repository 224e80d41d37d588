"""The long table: one row per (rank, step, metric), the form every producer ends in (shards, log readers,
the analyses) and the store keeps. Defined once here, below the shards, the formats and the store, with
the variants derived from it.
"""

from __future__ import annotations

from typing import Final

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
