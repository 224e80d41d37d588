"""detectron2's training console (``CommonMetricPrinter`` writing through the ``d2.utils.events`` logger)::

    [12/06 05:00:11 d2.utils.events]:  eta: 1:02:03  iter: 19  total_loss: 2.135  loss_cls: 0.91
        loss_box_reg: 0.52  time: 0.5012  last_time: 0.4901  data_time: 0.0123  last_data_time: 0.0101
        lr: 0.0002  max_mem: 1234M

The step is ``iter`` (the iteration just finished, counted from 0). ``total_loss`` is the sum of the
``loss_*`` parts the optimizer stepped on: it is the run's ``loss``; the parts keep their names. ``time``
and ``data_time`` are medians over the printer's window, in seconds: the step time and its data wait;
``last_time``/``last_data_time`` are one iteration's (the same quantities, left out); ``eta`` is a clock
reading; ``max_mem`` is the peak CUDA memory allocated, in MB (its ``M`` suffix). ``fvcore``'s
``Saving checkpoint to .../model_0004999.pth`` is a checkpoint event at the iteration its file name
counts (at the last step for ``model_final.pth``).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import Final

from ingest.formats._common import LogBuilder
from ingest.formats.aliases import canonical_name
from ingest.formats.base import Reader
from ingest.formats.line_console import LineResult, Row, read_console
from ingest.formats.numbers import NUMBER, parse_number
from ingest.formats.raw_text import decode_head, looks_binary

_LINE: Final = re.compile(r"(?:^|[ \t\]:])(?:eta:[ \t]*\S+[ \t]+)?iter:[ \t]*(?P<step>[0-9]+)(?=[ \t])")
_PAIR: Final = re.compile(
    r"(?<![^ \t])(?P<key>[A-Za-z_][A-Za-z0-9_/.\-]*):[ \t]*(?P<val>" + NUMBER + r")(?P<mb>M)?(?=[ \t]|$)"
)
_SAVE: Final = re.compile(r"Saving checkpoint to \S*?(?:model_(?P<it>[0-9]+)|model_final)\.pth")
_KEYS: Final = {
    "total_loss": ("loss", None),
    "time": ("step_time_s", None),
    "data_time": ("data_time_s", None),
    "max_mem": ("gpu_mem_max_gb", "MB"),
}
_LEFT_OUT: Final = frozenset({"iter", "eta", "last_time", "last_data_time"})


def _is_d2_line(line: str) -> re.Match[str] | None:
    m = _LINE.search(line)
    return m if m and ("d2.utils.events" in line or "total_loss:" in line) else None


class Detectron2Reader(Reader):
    name = "detectron2"
    description = "detectron2 console: 'd2.utils.events]:  eta: x  iter: 19  total_loss: x  time: x  lr: x'"

    def sniff(self, head: bytes, path: Path) -> float:
        if path.is_dir() or not head or looks_binary(head):
            return 0.0
        n = sum(1 for line in decode_head(head).splitlines() if _is_d2_line(line))
        return 0.0 if n == 0 else 0.95 if n >= 2 else 0.8

    def fill(self, paths: Sequence[Path], builder: LogBuilder) -> None:
        last: list[int] = []

        def line(text: str) -> LineResult:
            if m := _is_d2_line(text):
                step = int(m["step"])
                last[:] = [step]
                rows: list[Row] = []
                for pair in _PAIR.finditer(text, m.end()):
                    value = parse_number(pair["val"])
                    if pair["key"] in _LEFT_OUT or value is None:
                        continue
                    metric, unit = _KEYS.get(pair["key"]) or canonical_name(pair["key"])
                    rows.append((metric, "MB" if pair["mb"] else unit, step, value))
                return rows, None
            if (s := _SAVE.search(text)) and (s["it"] or last):
                at = int(s["it"]) if s["it"] else last[0]
                builder.event(at, "checkpoint", "checkpoint saved")
                return [], "checkpoint line"
            return [], None

        read_console(paths, builder, line, "a d2.utils.events line")
