"""A COCO evaluation's summary list in a JSON record (round 26 r26b, issue #31; docs/diagnosis.md, "Import: metrics
files").

DETR and the trainers built on it (Deformable/Conditional/DAB-DETR) write ``test_coco_eval_bbox`` (and
``test_coco_eval_masks``) into every epoch's record of ``log.txt`` as a JSON list: pycocotools' ``COCOeval.stats``,
12 numbers for boxes and masks (AP, AP50, AP75, AP small/medium/large, AR1, AR10, AR100, AR small/medium/large), 10
for keypoints (AP, AP50, AP75, AP medium/large, then the ARs). A list is no series a user can chart, so the reader
dropped it and with it the one score of the detector's quality the file holds. The rule, for any key named
``coco_eval...`` holding such a list: its first two numbers, the headline COCO AP (AP@[.5:.95]) and AP50, are stored
as ``<key>_ap`` and ``<key>_ap50`` (fractions 0-1, as the list holds them); the other ten are sizes and recalls, kept
out of the series (the list itself is no metric).
"""

from __future__ import annotations

import math
import re
from typing import Any, Final

import pyarrow as pa

_COCO_KEY: Final = re.compile(r"(?:^|[_/])coco_eval(?:$|[_/])", re.IGNORECASE)
STATS_LENGTHS: Final = frozenset({10, 12})
"""The lengths of ``COCOeval.stats``: 12 for ``bbox``/``segm``, 10 for ``keypoints``."""
HEADLINE: Final = (("ap", 0), ("ap50", 1))
"""The stored names' suffixes and the list positions they take: AP@[.5:.95] and AP@.5."""


def _number(x: Any) -> float | None:
    return float(x) if isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) else None


def with_coco_headline(table: pa.Table) -> pa.Table:
    """``table`` with each ``coco_eval`` list column (module docstring) replaced by its AP and AP50 columns;
    unchanged when it has none. A record whose list is not a COCO summary (another length, a text) gets no value."""
    lists = [
        n
        for n in table.column_names
        if _COCO_KEY.search(n) and (pa.types.is_list(table[n].type) or pa.types.is_large_list(table[n].type))
    ]
    for name in lists:
        rows = table[name].to_pylist()
        for suffix, at in HEADLINE:
            values = [_number(r[at]) if isinstance(r, list) and len(r) in STATS_LENGTHS else None for r in rows]
            if f"{name}_{suffix}" not in table.column_names and any(v is not None for v in values):
                table = table.append_column(f"{name}_{suffix}", pa.array(values, pa.float64()))
        table = table.drop_columns([name])
    return table
