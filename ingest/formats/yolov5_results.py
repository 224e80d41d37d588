"""YOLOv5's (v3-v5) ``runs/train/exp*/results.txt``: no header, one whitespace-aligned row per epoch::

     3/49   2.1G  0.0412  0.0231  0.0107  0.075   28   640  0.612  0.548  0.571  0.322  0.0398  0.0215  0.0094

The 15 columns are those YOLOv5's ``train.py`` writes and its ``plot_results`` reads back, in that order:
``epoch/last_epoch``, reserved GPU memory (``G``: GB), the epoch's running mean box, objectness and class
loss and their ``total`` (the loss the optimizer steps on, stored as ``loss``), the targets in the last
batch and the image size (not metrics), then the validation P, R, mAP@.5, mAP@.5:.95 and the validation
box, objectness and class loss. The step is the epoch (``0/99``: epoch 0 of 0-99, so 100 planned).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import Final

from ingest.formats._common import LogBuilder
from ingest.formats.base import Reader
from ingest.formats.line_console import LineResult, Row, read_console
from ingest.formats.numbers import NUMBER, parse_number
from ingest.formats.raw_text import decode_head, looks_binary

_CELL: Final = r"[ \t]+(" + NUMBER + ")"
_ROW: Final = re.compile(
    r"^[ \t]*(?P<epoch>[0-9]+)/(?P<last>[0-9]+)[ \t]+(?P<mem>" + NUMBER + r")G?" + _CELL * 13 + r"[ \t]*$"
)
_COLUMNS: Final[tuple[str | None, ...]] = (
    "box_loss",
    "obj_loss",
    "cls_loss",
    "loss",
    None,  # targets in the last batch
    None,  # image size
    "val_p",
    "val_r",
    "val_map50",
    "val_map50_95",
    "val_box_loss",
    "val_obj_loss",
    "val_cls_loss",
)


class Yolov5ResultsReader(Reader):
    name = "yolov5_results"
    description = "YOLOv5 results.txt: headerless rows '0/99  3.15G  box obj cls total targets img P R mAP ...'"

    def sniff(self, head: bytes, path: Path) -> float:
        if path.is_dir() or not head or looks_binary(head):
            return 0.0
        lines = [line for line in decode_head(head).splitlines() if line.strip()]
        rows = sum(1 for line in lines if _ROW.match(line))
        # every line a row (the head may end inside one): a file of these rows only
        return 0.0 if rows < 2 or rows < len(lines) - 1 else 0.9

    def fill(self, paths: Sequence[Path], builder: LogBuilder) -> None:
        def line(text: str) -> LineResult:
            if (m := _ROW.match(text)) is None:
                return [], None
            epoch = int(m["epoch"])
            builder.meta.setdefault("planned_steps", int(m["last"]) + 1)  # epochs 0..last
            found: list[Row] = []
            if (mem := parse_number(m["mem"])) is not None:
                found.append(("gpu_mem_gb", "GB", epoch, mem))
            for name, cell in zip(_COLUMNS, m.groups()[3:], strict=True):
                if name is not None and (value := parse_number(cell)) is not None:
                    found.append((name, None, epoch, value))
            return found, None

        read_console(paths, builder, line, "a YOLOv5 results.txt row")
