"""The training console of Ultralytics YOLO (``BaseTrainer``'s progress bar and the validator's table)::

          Epoch    GPU_mem   box_loss   cls_loss   dfl_loss  Instances       Size
           3/35      2.61G      1.234      2.345      1.123         37        640: 100%|██████| 8/8 [00:01<...]
                     Class     Images  Instances      Box(P          R      mAP50  mAP50-95): 100%|███| 1/1
                       all          4         17      0.601      0.801      0.851      0.601

The header names the columns of the bar's description below it. The step is the epoch (``3/35``: epoch 3
of 35; the bar is redrawn as the epoch runs and its last redraw, ``\\r``-separated, is the epoch's line).
Each ``*_loss`` column is the epoch's running mean of one part of the loss; the optimizer steps on their
sum (times the batch size), so ``loss`` is the sum of the parts, which keep their names. ``GPU_mem`` is
reserved memory in GB (``G``); ``Instances`` and ``Size`` (labels in the last batch, image size) are not
metrics. The validator's ``all`` row under a ``Class Images Instances`` header gives ``val_<group>_<column>``
(``val_box_map50``, ``val_mask_p``...) at that epoch.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import Final

from ingest.formats._common import LogBuilder
from ingest.formats.base import Reader
from ingest.formats.line_console import LineResult, Row, read_console
from ingest.formats.numbers import parse_number
from ingest.formats.raw_text import decode_head, looks_binary
from ingest.formats.run_loss import DETECTION_LOSS_PARTS, note_loss_source, summed_loss_parts

_HEADER: Final = re.compile(r"^[ \t]*Epoch[ \t]+(?:GPU_mem|gpu_mem)(?:[ \t]+\S+)+[ \t]*$")
_ROW: Final = re.compile(r"^[ \t]*(?P<epoch>[0-9]+)/(?P<total>[0-9]+)[ \t]+(?P<rest>[^:|]*)")
_VAL_HEADER: Final = re.compile(
    r"^[ \t]*Class[ \t]+Images[ \t]+(?:Instances|Labels|Targets)[ \t]+(?P<cols>.*?)[ \t]*(?::[ \t]+[0-9]+%|:?[ \t]*$)"
)
_VAL_ROW: Final = re.compile(r"^[ \t]*all[ \t]+[0-9]+[ \t]+[0-9]+[ \t]+(?P<vals>[-+0-9.eE \t]+?)[ \t]*$")


_IOU: Final = re.compile(r"@0?\.([0-9]+)(?::0?\.([0-9]+))?")


def _iou(m: re.Match[str]) -> str:
    """``@.5`` -> ``50``, ``@.5:.95`` -> ``50_95`` (YOLOv5's ``mAP@.5:.95`` is YOLOv8's ``mAP50-95``)."""
    return (m[1] + "0")[:2] + ("_" + (m[2] + "0")[:2] if m[2] else "")


def _val_names(cols: str) -> list[str]:
    """``Box(P R mAP50 mAP50-95) Mask(P ...)`` -> ``val_box_p``, ``val_box_r``, ... ``val_mask_p``;
    ``P R mAP@.5 mAP@.5:.95`` -> ``val_p``, ``val_r``, ``val_map50``, ``val_map50_95``."""
    names, group = [], ""
    for token in cols.split():
        if "(" in token:
            group, token = token.split("(", 1)
            group = group.lower() + "_"
        names.append("val_" + group + _IOU.sub(_iou, token.strip(")").lower()).replace("-", "_"))
    return names


def _loss_column(name: str) -> str | None:
    """The stored name of a loss column (``box_loss``; YOLOv5's ``box`` too), ``loss`` for its ``total``."""
    if name.endswith("_loss"):
        return name
    if name in DETECTION_LOSS_PARTS:
        return name + "_loss"
    return "loss" if name == "total" else None


class UltralyticsReader(Reader):
    name = "ultralytics"
    description = "Ultralytics YOLO console: 'Epoch GPU_mem box_loss ...' header, then '3/35  2.61G  1.234 ...' rows"

    def sniff(self, head: bytes, path: Path) -> float:
        if path.is_dir() or not head or looks_binary(head):
            return 0.0
        lines = [line.split("\r")[-1] for line in decode_head(head).splitlines()]
        headers = sum(1 for line in lines if _HEADER.match(line))
        rows = sum(1 for line in lines if _ROW.match(line))
        return 0.0 if not (headers and rows) else 0.95 if rows >= 2 else 0.8

    def fill(self, paths: Sequence[Path], builder: LogBuilder) -> None:
        columns: list[str] = []
        val_columns: list[str] = []
        epoch: int | None = None
        validated = False

        def line(text: str) -> LineResult:
            nonlocal columns, val_columns, epoch, validated
            if _HEADER.match(text):
                columns = text.split()
                return [], "column header"
            if (v := _VAL_HEADER.match(text)) is not None:
                val_columns = _val_names(v["cols"])
                return [], "column header"
            found: list[Row] = []
            if (m := _ROW.match(text)) is not None and columns:
                epoch, validated = int(m["epoch"]), False
                builder.meta.setdefault("total_steps", int(m["total"]))
                parts, losses = summed_loss_parts(columns[1:]), []  # ingest.formats.run_loss
                for name, cell in zip(columns[1:], m["rest"].split(), strict=False):
                    loss_name = _loss_column(name)
                    if name.lower() == "gpu_mem":
                        if (mem := parse_number(cell.rstrip("G"))) is not None:
                            found.append(("gpu_mem_gb", "GB", epoch, mem))
                    elif loss_name is not None and (value := parse_number(cell)) is not None:
                        if name in parts:
                            losses.append(value)
                        found.append((loss_name, None, epoch, value))
                if parts and len(losses) == len(parts):
                    found.append(("loss", None, epoch, float(sum(losses))))
                    note_loss_source(builder, parts)
            elif (r := _VAL_ROW.match(text)) is not None and val_columns and not validated:
                # one validation per epoch: the best checkpoint's after the last epoch is no epoch's
                validated = True
                for name, cell in zip(val_columns, r["vals"].split(), strict=False):
                    if epoch is not None and (value := parse_number(cell)) is not None:
                        found.append((name, None, epoch, value))
            elif _VAL_ROW.match(text) is not None:
                return [], "validation after training"
            return found, None

        read_console(paths, builder, line, "an Ultralytics training row", quote_redraw=True)
