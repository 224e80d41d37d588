"""ingest.formats.metric_columns: values gathered line by line, stored once per metric, in read order."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ingest.formats._common import LogBuilder
from ingest.formats.metric_columns import MetricColumns


def test_values_are_stored_per_metric_in_read_order(tmp_path: Path) -> None:
    rows = MetricColumns()
    rows.put("loss", 10, 2.5, 0)
    rows.put("lr", 10, 1e-3, 0)
    rows.put("loss", 20, 2.25, 1)
    assert rows.steps_of("loss") == [10, 20] and rows.steps_of("grad_norm") == []
    builder = LogBuilder([tmp_path / "train.log"])
    rows.add_to(builder)
    steps, values, seqs = builder.rows_of("loss")
    assert list(steps) == [10, 20] and list(seqs) == [0, 1]
    np.testing.assert_array_equal(values, [2.5, 2.25])
    assert list(builder.rows_of("lr")[1]) == [1e-3]
