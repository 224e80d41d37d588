"""A training loop's tqdm bar whose postfix carries the step's values (``pbar.set_postfix(Loss=...)``)::

    Training:   0%|          | 27/55000 [06:03<202:44:48, 13.28s/it, Loss=11.5316, Denoising=11.3564]

The counter ``n`` of ``n/total`` is the optimizer steps done, so the postfix drawn at ``n`` is step
``n``'s values; ``total`` is the planned step count. Off a terminal tqdm redraws the bar with carriage
returns, several redraws to a line: every redraw is read, and of the redraws at one counter the last
holds its step's values (tqdm redraws at ``n + 1`` with the old postfix before ``set_postfix`` sets
the new one). Keys take their canonical names (``Loss`` is ``loss``), the rest keep theirs. A bar over
an epoch's batches (``Epoch 3: 40%|...| 40/100``: its counter starts over each epoch) is the epoch
readers' (:mod:`ingest.formats.nemo`, :mod:`ingest.formats.epoch_steps`), and a bar without a postfix
holds no metric. Lines between bars (warnings such as ``NaN loss detected! Skipping batch.``, sample
previews) are no records.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import Final

from ingest.formats._common import LogBuilder
from ingest.formats.aliases import canonical_name
from ingest.formats.base import Reader
from ingest.formats.line_console import LineResult, Record, Row, read_console
from ingest.formats.numbers import NUMBER, parse_number
from ingest.formats.planned import note_planned_steps
from ingest.formats.raw_text import decode_head, looks_binary

_BAR: Final = re.compile(
    r"^(?P<desc>[^|\r\n]*?)[0-9]{1,3}%\|[^|\r\n]*\|[ \t]*(?P<n>[0-9]+)/(?P<total>[0-9]+)[ \t]*"
    r"\[(?P<inside>[^\]\r\n]*)\]"
)
_EPOCH_DESC: Final = re.compile(r"\bepoch\b", re.IGNORECASE)
_POSTFIX: Final = re.compile(r"(?:^|,)[ \t]*(?P<key>[A-Za-z_][A-Za-z0-9_/ .-]*?)=(?P<val>" + NUMBER + r")[ \t]*(?=,|$)")


def _bar_rows(redraw: str) -> tuple[int, int, list[tuple[str, float]]] | None:
    """``(counter, total, [(key, value)])`` of one redraw of a bar with a postfix; None for anything else."""
    m = _BAR.search(redraw)
    if m is None or _EPOCH_DESC.search(m["desc"]):
        return None
    pairs = [(p["key"].strip(), v) for p in _POSTFIX.finditer(m["inside"]) if (v := parse_number(p["val"])) is not None]
    return (int(m["n"]), int(m["total"]), pairs) if pairs else None


class TqdmPostfixReader(Reader):
    name = "tqdm_postfix"
    description = "tqdm bar with a postfix: 'Training: 0%|  | 27/55000 [06:03<202:44:48, 13.28s/it, Loss=11.53]'"

    def sniff(self, head: bytes, path: Path) -> float:
        if path.is_dir() or not head or looks_binary(head):
            return 0.0
        redraws = re.split(r"[\r\n]", decode_head(head))
        bars = sum(1 for text in redraws if _bar_rows(text) is not None)
        return 0.0 if bars < 3 else 0.9

    def fill(self, paths: Sequence[Path], builder: LogBuilder) -> None:
        totals: list[int] = []

        def line(text: str) -> LineResult:
            found: list[Row] = []
            for redraw in text.split("\r"):
                bar = _bar_rows(redraw)
                if bar is None:
                    continue
                step, total, pairs = bar
                totals.append(total)
                for key, value in pairs:
                    metric, unit = canonical_name(key)
                    found.append((metric, unit, step, value))
            return found, None

        def finish(records: list[Record]) -> list[Record]:
            # of the redraws at one counter the last is its step's: a record is dropped where the next
            # record of its metric is at the same step
            last: dict[tuple[str, str | None], int] = {}
            keep = [True] * len(records)
            for i, (metric, unit, step, _, _) in enumerate(records):
                j = last.get((metric, unit))
                if j is not None and records[j][2] == step:
                    keep[j] = False
                last[(metric, unit)] = i
            return [r for r, k in zip(records, keep, strict=True) if k]

        read_console(paths, builder, line, "a tqdm bar with a postfix", whole=True, finish=finish)
        if totals:
            builder.meta["total_steps"] = max(totals)
            note_planned_steps(builder.meta)
